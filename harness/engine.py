"""The engine protocol (spec/traces.md TR-9) and the ``--engine`` choice.

An engine turns traces into observable outputs. It receives many traces at
once so that an expensive engine (Spark) can run them as one multiplexed
query; it must answer each trace exactly as if it ran alone.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from harness.outputs import Output, canonical
from harness.traces import Trace

BUILTIN_ENGINES = {
    "reference": "harness.reference_engine:ReferenceEngine",
    "spark": "spark_impl.engine:SparkEngine",
    "spark-native": "spark_native.engine:SparkNativeEngine",
}

#: engines this project validates that run only as commands (spec/engine-protocol.md), with the
#: command: their expectation files are known files, not misspelt ones
COMMAND_ENGINES = {
    "flink": "python -m flink_engine (in its own environment: tox -e flink)",
    "beam": "python -m beam_engine (in its own environment: tox -e beam)",
    "bytewax": "python -m bytewax_engine (in its own environment: tox -e bytewax)",
}


class Unsupported(Exception):  # noqa: N818 - an answer, not an error: the engine declines the case
    """An engine's answer for a case it cannot express: it declines the case, saying why (a case
    answered so is counted as skipped, never as passed; spec/engine-protocol.md)."""


@runtime_checkable
class Engine(Protocol):
    """What a third-party adapter implements.

    ``name`` appears in the conformance summary. ``run`` returns one output
    per trace, in the order given: a mapping table name -> rows (see
    harness/outputs.py). A trace whose configuration breaks its area's rules
    is answered with an ``InvalidConfig`` instance in place of the output.
    ``areas`` lists the spec areas the engine implements. An ``Unsupported``
    instance in place of an output declines that one case. Optionally, a
    ``provenance`` attribute maps names to strings: the versions and settings the
    engine ran with, shown with its results in the reports.
    """

    name: str
    areas: frozenset[str]

    def run(self, traces: Sequence[Trace]) -> list[Output | Exception]: ...


def load_engine(spec: str) -> Engine:
    """``reference``, ``spark`` or ``package.module:attribute`` (a class or an instance)."""
    target = BUILTIN_ENGINES.get(spec, spec)
    if ":" not in target:
        raise ValueError(
            f"unknown engine {spec!r}: use one of {sorted(BUILTIN_ENGINES)} or 'module:attribute'"
        )
    module_name, attr = target.split(":", 1)
    obj = getattr(importlib.import_module(module_name), attr)
    engine = obj() if isinstance(obj, type) else obj
    if not isinstance(engine, Engine):
        raise TypeError(f"{spec!r} does not provide name, areas and run(traces)")
    return engine


def provenance_dict(given: object) -> dict[str, str]:
    """Provenance (an engine's attribute, an answers file's header) as names to strings; {} for
    anything that is not a mapping."""
    return {str(k): str(v) for k, v in given.items()} if isinstance(given, Mapping) else {}


def engine_provenance(engine: Engine) -> dict[str, str]:
    """What an engine says of itself (its optional ``provenance``)."""
    return provenance_dict(getattr(engine, "provenance", None))


def run_canonical(engine: Engine, traces: Sequence[Trace]) -> list[Output | Exception]:
    """Run and put every output in canonical order (exceptions pass through)."""
    results = engine.run(traces)
    if len(results) != len(traces):
        raise RuntimeError(f"engine {engine.name} answered {len(results)} of {len(traces)} traces")
    return [
        r if isinstance(r, Exception) else canonical(t.area, r)
        for t, r in zip(traces, results, strict=True)
    ]
