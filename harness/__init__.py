"""Conformance harness: trace model, engine protocol, outputs and summary."""

from harness.engine import Engine, load_engine, run_canonical
from harness.outputs import TABLES, Output, canonical, diff
from harness.traces import I64_MAX, I64_MIN, InvalidConfig, InvalidTrace, Item, Trace

__all__ = [
    "Engine",
    "I64_MAX",
    "I64_MIN",
    "InvalidConfig",
    "InvalidTrace",
    "Item",
    "Output",
    "TABLES",
    "Trace",
    "canonical",
    "diff",
    "load_engine",
    "run_canonical",
]
