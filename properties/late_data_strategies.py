"""Hypothesis strategies for late-data traces (spec/late_data.md).

Traces mix events of a few sources (the unnamed source included) with
watermark items that mostly rise and sometimes regress, clock items, and a
few malformed items; configurations cover every policy, with and without
windows, and some invalid ones. Times stay in a small positive range, so
verdicts, windows and budgets meet often; a few traces use the ends of the
i64 range.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from harness.traces import I64_MAX, Item, Trace
from properties.strategies import i64_edge_times, restart_points

AREA = "late_data"
SOURCES = st.sampled_from((None, None, 0, 1, 2))
TIMES = st.one_of(st.integers(0, 12_000), st.integers(0, 12).map(lambda n: n * 1000))


@st.composite
def late_data_configs(draw: st.DrawFn) -> dict[str, Any]:
    """Valid settings (OXL-R15)."""
    config: dict[str, Any] = {}
    policy = draw(st.sampled_from(("Drop", None, "Reassign", "Reassign", "SideOutput", "SideOutput")))
    if policy is not None:
        config["policy"] = policy
    if policy == "Reassign":
        config["max_lateness"] = draw(st.sampled_from((0, 1, 500, 2000, 5000, 10_000, I64_MAX)))
    if policy == "SideOutput":
        config["channel"] = draw(st.sampled_from(("late", "side channel")))
    if draw(st.booleans()):
        config["window_size"] = draw(st.sampled_from((1, 7, 1000, 2500, 5000)))
        if draw(st.booleans()):
            config["allowed_lateness"] = draw(st.sampled_from((0, 1, 500, 3000, I64_MAX)))
    return config


INVALID_CONFIGS = st.sampled_from((
    {"policy": "Later"},
    {"policy": "Reassign"},
    {"policy": "SideOutput"},
    {"policy": "Drop", "max_lateness": 5},
    {"policy": "Drop", "channel": "late"},
    {"policy": "SideOutput", "channel": ""},
    {"policy": "Reassign", "max_lateness": -1},
    {"window_size": 0},
    {"allowed_lateness": 5},
    {"window_size": 10, "allowed_lateness": -5},
    {"lateness": 5},
))  # fmt: skip


@st.composite
def _item(draw: st.DrawFn, times: st.SearchStrategy[int], malformed: bool, last: dict[Any, int]) -> Item:
    """One item; watermarks of a source mostly rise from ``last`` and sometimes regress (OXL-R3)."""
    kind = draw(st.sampled_from(("event",) * 6 + ("watermark",) * 3 + ("clock",)))
    if malformed and draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from((
            Item("event", source=draw(SOURCES)),
            Item("watermark", source=draw(SOURCES)),
            Item("clock"),
            Item("idle", key="a"),
        )))  # fmt: skip
    if kind == "clock":
        return Item("clock", time=draw(st.integers(0, 3)) * 1000)
    if kind == "watermark":
        source = draw(SOURCES)
        if source in last and draw(st.integers(0, 4)):
            step = draw(st.sampled_from((-700, 0, 1, 250, 1000, 2500)))
            time = min(I64_MAX, max(0, last[source] + step))
        else:
            time = draw(times)
        last[source] = max(time, last.get(source, time))
        return Item("watermark", source=source, time=time)
    return Item("event", source=draw(SOURCES), event_time=draw(times), key=draw(st.sampled_from((None, "k"))))


@st.composite
def late_data_traces(draw: st.DrawFn, invalid_config_rate: int = 0, edge_rate: int = 10) -> Trace:
    """A trace of 1..6 batches; ``invalid_config_rate`` and ``edge_rate`` are percentages."""
    if invalid_config_rate and draw(st.integers(0, 99)) < invalid_config_rate:
        config = draw(INVALID_CONFIGS)
    else:
        config = draw(late_data_configs())
    edges = edge_rate and draw(st.integers(0, 99)) < edge_rate
    times = st.one_of(TIMES, i64_edge_times()) if edges else TIMES
    malformed = draw(st.booleans())
    last: dict[Any, int] = {}
    n_batches = draw(st.integers(1, 6))
    batches = [draw(st.lists(_item(times, malformed, last), max_size=12)) for _ in range(n_batches)]
    return Trace(AREA, config, tuple(tuple(b) for b in batches), draw(restart_points(len(batches))))


__all__ = ["AREA", "INVALID_CONFIGS", "late_data_configs", "late_data_traces"]
