"""The oracle as an engine: each area's ``run_trace`` applied trace by trace."""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from harness.outputs import TABLES, Output
from harness.traces import InvalidConfig, Trace


class ReferenceEngine:
    name = "reference"
    areas = frozenset(TABLES)

    def run(self, traces: Sequence[Trace]) -> list[Output | Exception]:
        results: list[Output | Exception] = []
        for trace in traces:
            module = importlib.import_module(f"reference.{trace.area}")
            try:
                results.append(module.run_trace(trace))
            except InvalidConfig as error:
                results.append(error)
        return results
