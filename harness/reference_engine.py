"""The oracle as an engine: each area's ``run_trace`` applied trace by trace."""

from __future__ import annotations

import importlib
import platform
from collections.abc import Sequence

from harness.outputs import TABLES, Output
from harness.traces import InvalidConfig, Trace


class ReferenceEngine:
    name = "reference"
    areas = frozenset(TABLES)
    provenance = {"engine": "the oracle (reference/), trace by trace", "python": platform.python_version()}

    def run(self, traces: Sequence[Trace]) -> list[Output | Exception]:
        results: list[Output | Exception] = []
        for trace in traces:
            module = importlib.import_module(f"reference.{trace.area}")
            try:
                results.append(module.run_trace(trace))
            except InvalidConfig as error:
                results.append(error)
        return results
