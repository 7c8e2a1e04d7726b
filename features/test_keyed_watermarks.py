"""F065 keyed watermarks: features/keyed_watermarks.feature on every engine.

The shared steps come from harness.steps (installed by features/conftest.py).
This module adds the steps of the object API (``KeyedWatermarkTracker``) used
by the ``@oracle-only`` scenarios: calls with no streaming meaning (TR-10),
run on the reference only.
"""

from __future__ import annotations

from typing import Any

from pytest_bdd import scenarios

from harness.steps import (
    LIBRARY,
    DataTable,
    ScenarioState,
    StepUsageError,
    assert_rows,
    parse_key,
    parse_settings,
    parse_time,
)
from reference.keyed_watermarks import KeyedWatermarkConfig, KeyedWatermarkTracker, MaxKeysReached

scenarios("keyed_watermarks.feature")


class _Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


class TrackerView:
    """The direct view Then steps read in object-API scenarios (harness.steps.DirectView)."""

    def __init__(self, tracker: KeyedWatermarkTracker) -> None:
        self.tracker = tracker

    def key_states(self) -> dict[str, tuple[int | None, str]]:
        return {
            str(k): (s.watermark, "idle" if s.is_idle else "active")
            for k, s in self.tracker.key_states.items()
        }

    def global_watermark(self) -> int | None:
        return self.tracker.global_watermark()

    def metrics(self) -> dict[str, int]:
        return dict(vars(self.tracker.metrics()))


def _tracker(state: ScenarioState) -> KeyedWatermarkTracker:
    if not isinstance(state.direct, TrackerView):
        raise StepUsageError("start with 'Given a KeyedWatermarkTracker with ...'")
    return state.direct.tracker


def _call(state: ScenarioState, fn: Any, *args: Any) -> None:
    try:
        state.scratch["result"] = ("returned", fn(*args))
    except MaxKeysReached as e:
        state.scratch["result"] = ("raised", e)


@LIBRARY.given(r"a KeyedWatermarkTracker with (?P<settings>.+)")
def tracker_with(state: ScenarioState, settings: str) -> None:
    """A KeyedWatermarkTracker (oracle-only) built from setting phrases, on a clock at 0."""
    config = parse_settings(settings)
    state.scratch["clock"] = clock = _Clock()
    state.direct = TrackerView(KeyedWatermarkTracker(KeyedWatermarkConfig(**config), clock))


@LIBRARY.when(r'the tracker updates key (?P<key>"[^"]*"|\S+) at (?P<time>.+?) ms')
def tracker_update(state: ScenarioState, key: str, time: str) -> None:
    """Calls ``update(key, time)``; the result or MaxKeysReached is kept for the Then steps."""
    _call(state, _tracker(state).update, parse_key(key), parse_time(time))


@LIBRARY.when(r"the tracker updates a batch:")
def tracker_update_batch(state: ScenarioState, datatable: DataTable | None = None) -> None:
    """| key | event_time |: calls ``update_batch`` with the rows as one batch."""
    if not datatable or [h.strip() for h in datatable[0]] != ["key", "event_time"]:
        raise StepUsageError("the batch table has columns | key | event_time |")
    events = [(parse_key(k), parse_time(t)) for k, t in datatable[1:]]
    _call(state, _tracker(state).update_batch, events)


@LIBRARY.when(r'the tracker marks key (?P<key>"[^"]*"|\S+) idle')
def tracker_mark_idle(state: ScenarioState, key: str) -> None:
    """Calls ``mark_idle(key)``."""
    _call(state, _tracker(state).mark_idle, parse_key(key))


@LIBRARY.when(r'the tracker removes key (?P<key>"[^"]*"|\S+)')
def tracker_remove(state: ScenarioState, key: str) -> None:
    """Calls ``remove_key(key)``."""
    _call(state, _tracker(state).remove_key, parse_key(key))


@LIBRARY.when(r"the tracker is cleared")
def tracker_clear(state: ScenarioState) -> None:
    """Calls ``clear()``: every key is forgotten."""
    _call(state, _tracker(state).clear)


@LIBRARY.when(r"recalculate_global is called")
def tracker_recalculate(state: ScenarioState) -> None:
    """Calls ``recalculate_global()``."""
    _call(state, _tracker(state).recalculate_global)


@LIBRARY.then(r"the call returns (?P<value>.+)")
def call_returns(state: ScenarioState, value: str) -> None:
    """The last tracker call returned this watermark (a number, or none)."""
    kind, got = state.scratch["result"]
    expected = None if value.strip().lower() == "none" else parse_time(value)
    actual = got if kind == "returned" else f"raised {got!r}"
    assert_rows("Then the call returns", ["result"], [(expected,)], [(actual,)], None)


@LIBRARY.then(r"the call raises MaxKeysReached for keys: (?P<keys>.+)")
def call_raises(state: ScenarioState, keys: str) -> None:
    """The last tracker call raised MaxKeysReached rejecting exactly these keys (comma-separated)."""
    kind, got = state.scratch["result"]
    expected = [parse_key(k) for k in keys.split(",")]
    actual = got.rejected if kind == "raised" else f"returned {got!r}"
    assert_rows("Then the call raises MaxKeysReached", ["rejected keys"], [(expected,)], [(actual,)], None)


LIBRARY.bind(globals(), owner=__name__)
