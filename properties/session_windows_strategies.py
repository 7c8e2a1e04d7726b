"""Hypothesis strategies for F017E session-window traces (spec/session_windows.md).

Keyed, disordered streams cut into micro-batches: event times drift upwards with
a disorder bound drawn relative to the watermark delay and the gap (none,
within the delay, beyond it), keys skewed towards a few hot ones, empty
batches, a few malformed items, and restarts at random batch boundaries.
Times stay in a small positive range so that Spark's native comparison can use
the same traces.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from harness.traces import Item, Trace

AREA = "session_windows"
GAPS = (1, 10, 100, 250, 1000)
KEYS = ("a", "a", "a", "b", "b", "c", "d")  # skew: a is hot


@st.composite
def session_window_configs(draw: st.DrawFn) -> dict[str, Any]:
    """F017E-R18: valid settings; optional ones are sometimes left to their defaults."""
    config: dict[str, Any] = {"gap": draw(st.one_of(st.sampled_from(GAPS), st.integers(1, 2000)))}
    for name, values in (("bounded_delay", (0, 50, 300, 2000)), ("allowed_lateness", (0, 20, 400))):
        if draw(st.booleans()):
            config[name] = draw(st.sampled_from(values))
    if draw(st.booleans()):
        config["emit_strategy"] = draw(st.sampled_from(("OnWindowClose", "Final")))
    return config


@st.composite
def invalid_session_window_configs(draw: st.DrawFn) -> dict[str, Any]:
    """F017E-R18: one broken setting each."""
    config = draw(session_window_configs())
    broken = draw(
        st.sampled_from(("no_gap", "gap", "allowed_lateness", "bounded_delay", "emit_strategy", "extra"))
    )
    if broken == "no_gap":
        del config["gap"]
    elif broken == "emit_strategy":
        config["emit_strategy"] = draw(st.sampled_from(("OnUpdate", "final", 1)))
    elif broken == "extra":
        config["window_size"] = 10
    else:
        config[broken] = draw(st.sampled_from((-1, 0 if broken == "gap" else -5, "10", None, True)))
    return config


@st.composite
def session_window_traces(
    draw: st.DrawFn,
    *,
    max_batches: int = 6,
    max_items: int = 10,
    malformed: bool = True,
    restarts: bool = True,
    min_restarts: int = 0,
    invalid_config_rate: int = 0,
) -> Trace:
    """An out-of-order multi-key stream in micro-batches (F017E-R19), with restart points (R17)."""
    if invalid_config_rate and draw(st.integers(0, invalid_config_rate - 1)) == 0:
        config = draw(invalid_session_window_configs())
    else:
        config = draw(session_window_configs())
    # a refused configuration still needs a stream: its broken numbers do not shape it
    gap = config["gap"] if isinstance(config.get("gap"), int) and config["gap"] >= 1 else 100
    delay = config.get("bounded_delay", 0) if isinstance(config.get("bounded_delay"), int) else 0
    delay = max(0, delay)
    disorder = draw(st.sampled_from((0, delay // 2, delay, delay + gap, 3 * (delay + gap))))
    step = draw(st.sampled_from((1, gap // 2 + 1, gap, 2 * gap)))
    now = draw(st.integers(0, 3)) * 1000 + disorder
    n_batches = draw(st.integers(min_restarts + 1 if min_restarts else 1, max_batches))
    batches = []
    for _ in range(n_batches):
        batch = []
        for _ in range(draw(st.integers(0, max_items))):
            roll = draw(st.integers(0, 99)) if malformed else 0
            now += draw(st.integers(0, step))
            t = max(0, now - draw(st.integers(0, disorder)))
            if roll < 95:
                batch.append(Item("event", key=draw(st.sampled_from(KEYS)), event_time=t,
                                  value=draw(st.integers(-3, 9))))  # fmt: skip
            elif roll < 97:
                batch.append(Item("event", key=None, event_time=t))
            elif roll < 99:
                batch.append(Item("event", key=draw(st.sampled_from(KEYS))))
            else:
                batch.append(Item("remove_key", key="a"))
        batches.append(batch)
    boundaries = list(range(n_batches - 1))
    restart_after: frozenset[int] = frozenset()
    if restarts and boundaries:
        chosen = draw(st.lists(st.sampled_from(boundaries), min_size=min(min_restarts, len(boundaries)),
                               max_size=len(boundaries), unique=True))  # fmt: skip
        restart_after = frozenset(chosen)
    return Trace(AREA, config, batches, restart_after=restart_after)


__all__ = ["invalid_session_window_configs", "session_window_configs", "session_window_traces"]
