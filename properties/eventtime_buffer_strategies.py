"""Hypothesis strategies for event-time buffer traces (spec/eventtime_buffer.md).

A trace is a disordered stream: a base time that advances batch by batch,
each event at the base minus a disorder drawn up to a bound (sometimes far
beyond it, so late drops happen), duplicates of earlier times (ties), cells
written in every form a parser meets (integers, integer strings, fractions,
nulls, junk, values out of range), sometimes tuples of several messages,
clock items, malformed items, empty batches and restart points. Tolerances
include 0 and the disorder bound itself, so the `<=` boundary of VELO-R14 is
hit often. Configurations cover both modes, the built-in and catalogue
parsers and joined streams; a few are invalid (VELO-R2, R7).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from harness.traces import I64_MAX, Item, Trace
from properties.strategies import restart_points

AREA = "eventtime_buffer"
KEYS = st.sampled_from(("a", "b", "c", None))
JOINED = {
    "orders": {"columns": ["ts"], "eventtime_column": "ts", "eventtime_type": "unixtimestamp_s"},
    "users": {"columns": ["name"]},
}
TYPES = ("unixtimestamp_ms", "unixtimestamp_ms", "unixtimestamp_s", "unixtimestamp", "unixtimestamp_us")
MS_PER_UNIT = {
    "unixtimestamp_ms": 1,
    "unixtimestamp_s": 1000,
    "unixtimestamp": 1000,
    "unixtimestamp_us": 0.001,
}


@st.composite
def eventtime_buffer_configs(draw: st.DrawFn) -> dict[str, Any]:
    """Valid settings (VELO-R1, R3, R7): mostly event time, with every parser and tolerance 0 often."""
    type_name = draw(st.sampled_from(TYPES))
    config: dict[str, Any] = {
        "columns": ["id", "ts"],
        "eventtime_column": "ts",
        "eventtime_type": type_name,
        "eventtime_enabled": draw(st.sampled_from((True, True, True, True, False))),
        "late_tolerance": draw(st.sampled_from((0, 0, 1, 10, 50, 100, 1000, I64_MAX))),
    }
    if type_name in ("unixtimestamp", "unixtimestamp_us"):
        config["register_parsers"] = [type_name]
    if draw(st.integers(0, 4)) == 0:
        config["joined_streams"] = JOINED
    return config


INVALID_CONFIGS: st.SearchStrategy[dict[str, Any]] = st.sampled_from((
    {"columns": ["id"], "eventtime_column": "ts", "eventtime_type": "unixtimestamp_ms"},
    {"columns": ["ts"], "eventtime_column": "ts", "eventtime_type": "unixtimestamp"},
    {"columns": ["ts"], "eventtime_column": "ts"},
    {"columns": ["ts"], "eventtime_enabled": True},
    {"columns": ["ts"], "eventtime_column": "ts", "eventtime_type": "unixtimestamp_s", "late_tolerance": -1},
    {"register_parsers": ["unixtimestamp_ms"]},
    {"joined_streams": {"input": {"columns": []}}},
    {"late_tolerance_ms": 5},
))  # fmt: skip


@st.composite
def _cell(draw: st.DrawFn, ms: int, type_name: str) -> Any:
    """The cell of a tuple at ``ms`` in the parser's unit and JSON form, or a cell that fails (VELO-R5)."""
    form = draw(st.integers(0, 19))
    unit = MS_PER_UNIT[type_name]
    exact = ms / unit if unit != 0.001 else ms * 1000
    whole = int(exact) if unit <= 1 else ms // unit
    if form < 10:
        return whole
    if form < 13:
        return str(whole)
    if form < 15:
        return round(exact + draw(st.sampled_from((0.0, 0.25, 0.5, 0.999))), 3)
    if form == 15:
        return None
    if form == 16:
        return draw(st.sampled_from(("", "1.5", "abc", " 7", "+3", "0x10")))
    if form == 17:
        return draw(st.sampled_from((2**63, -(2**63) - 1, 10**19, 9223372036854776, -9223372036854776)))
    if form == 18:
        return -whole
    return draw(st.sampled_from((2e3, 1e-3, -0.5, 123456789.125)))


@st.composite
def eventtime_buffer_traces(draw: st.DrawFn, invalid_config_rate: int = 0) -> Trace:
    """A disordered stream in 1..6 batches; ``invalid_config_rate`` percent get an invalid config."""
    config: dict[str, Any]
    if invalid_config_rate and draw(st.integers(0, 99)) < invalid_config_rate:
        config = draw(INVALID_CONFIGS)
    else:
        config = draw(eventtime_buffer_configs())
    type_name = config.get("eventtime_type", "unixtimestamp_ms")
    type_name = type_name if type_name in MS_PER_UNIT else "unixtimestamp_ms"
    bound = draw(st.sampled_from((0, 10, 100, 1000)))
    base, clock, value = draw(st.integers(0, 5000)), 0, 0
    seen: list[int] = []
    batches: list[tuple[Item, ...]] = []
    for _ in range(draw(st.integers(1, 6))):
        base += draw(st.sampled_from((0, 1, 10, 100, 500, 1000)))
        batch: list[Item] = []
        for _ in range(draw(st.integers(0, 8))):
            roll = draw(st.integers(0, 29))
            if roll < 22:
                value += 1
                if seen and roll < 4:
                    ms = draw(st.sampled_from(seen))  # a tie with an earlier tuple
                elif roll < 6:
                    ms = base - bound - draw(st.integers(0, 2000))  # beyond the bound: late
                else:
                    ms = base - draw(st.integers(0, bound))
                seen.append(ms)
                if "joined_streams" in config and roll in (7, 8):
                    messages: tuple[tuple[str, Any], ...] = (
                        (("users", "x"), ("orders", ms // 1000)) if roll == 7 else (("users", 1),)
                    )
                    batch.append(Item("event", key=draw(KEYS), value=value, messages=messages))
                else:
                    batch.append(Item("event", key=draw(KEYS), value=value, raw=draw(_cell(ms, type_name))))
            elif roll < 27:
                clock += draw(st.sampled_from((0, 1, 100, 1000)))
                batch.append(Item("clock", time=clock))
            elif roll == 27:
                batch.append(Item("clock", time=draw(st.sampled_from((None, max(0, clock - 1))))))
            elif roll == 28:
                batch.append(Item("idle", key="a"))
            else:
                value += 1  # every event's value grows with arrival, a cell-less one too
                batch.append(Item("event", key="z", value=value))  # no cell at all: a null cell
        batches.append(tuple(batch))
    return Trace(AREA, config, tuple(batches), draw(restart_points(len(batches))))


__all__ = ["AREA", "INVALID_CONFIGS", "eventtime_buffer_configs", "eventtime_buffer_traces"]
