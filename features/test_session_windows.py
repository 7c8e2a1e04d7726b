"""F017E session windows: features/session_windows.feature on every engine.

The shared steps come from harness.steps (installed by features/conftest.py).
This module adds the steps of the object API (``SessionWindowOperator``,
``TimerService``) used by the ``@oracle-only`` scenarios: calling ``on_timer``
by hand and listing a timer service have no streaming meaning (TR-10).
"""

from __future__ import annotations

from typing import Any

import pytest
from pytest_bdd import scenarios

from harness.steps import (
    LIBRARY,
    DataTable,
    ScenarioState,
    StepUsageError,
    assert_rows,
    expect_table,
    parse_key,
    parse_time,
)
from reference.session_windows import (
    BoundedOutOfOrdernessGenerator,
    Event,
    OperatorContext,
    SessionResult,
    SessionWindowOperator,
    Timer,
    TimerService,
    timer_key,
)

scenarios("session_windows.feature")

_KEY = r'(?P<key>"[^"]*"|\S+)'


class OperatorView:
    """The object-API scenario's operator and context (state.direct; no trace is built)."""

    area = "session_windows"

    def __init__(self, gap: int, delay: int) -> None:
        self.gap, self.delay = gap, delay
        self.ctx = OperatorContext(TimerService(), BoundedOutOfOrdernessGenerator(delay))
        self.operator = SessionWindowOperator(gap)
        self.emitted: list[Any] = []


def _view(state: ScenarioState) -> OperatorView:
    if not isinstance(state.direct, OperatorView):
        raise StepUsageError("start with 'Given a SessionWindowOperator with ...'")
    return state.direct


@LIBRARY.given(
    r"a SessionWindowOperator with a gap of (?P<gap>.+?) ms and a watermark delay of (?P<delay>.+?) ms"
)
def operator_with(state: ScenarioState, gap: str, delay: str) -> None:
    """A SessionWindowOperator with this gap and a bounded-out-of-orderness generator with this
    delay (oracle-only; no trace is built)."""
    state.direct = OperatorView(parse_time(gap), parse_time(delay))  # type: ignore[assignment]


@LIBRARY.when(rf"the operator processes an event of key {_KEY} at (?P<time>.+?) ms")
def operator_processes(state: ScenarioState, key: str, time: str) -> None:
    """``process(event)``: the operator's output of this call is kept for the Then steps."""
    v = _view(state)
    v.emitted = v.operator.process(Event(str(parse_key(key)), parse_time(time)), v.ctx)


@LIBRARY.when(r"the operator is checkpointed")
def operator_checkpointed(state: ScenarioState) -> None:
    """Takes ``checkpoint()`` and keeps the operator's context."""
    v = _view(state)
    state.scratch["checkpoint"] = v.operator.checkpoint()
    state.scratch["old_ctx"] = v.ctx


@LIBRARY.when(r"a new operator restores the checkpoint into (?P<which>a new|the same) timer service")
def operator_restored(state: ScenarioState, which: str) -> None:
    """A new operator restores the checkpoint into a new timer service (the generator keeps the
    old maximum event time) or into the old context (its timer service and generator)."""
    v = _view(state)
    old: OperatorContext = state.scratch["old_ctx"]
    if which == "a new":
        generator = BoundedOutOfOrdernessGenerator(v.delay, old.watermark_generator.max_timestamp)
        v.ctx = OperatorContext(TimerService(), generator)
    else:
        v.ctx = old
    v.operator = SessionWindowOperator(v.gap)
    v.operator.restore(state.scratch["checkpoint"], v.ctx)


@LIBRARY.when(rf"the operator is given the timer at (?P<time>.+?) ms of key {_KEY} and session (?P<sid>\d+)")
def operator_on_timer(state: ScenarioState, time: str, key: str, sid: str) -> None:
    """Calls ``on_timer`` with the timer of this key and session id, as the timer service would."""
    v = _view(state)
    v.emitted = v.operator.on_timer(Timer(parse_time(time), timer_key(str(parse_key(key)), int(sid))), v.ctx)


@LIBRARY.when(r"the operator is given a timer at (?P<time>.+?) ms with a foreign timer key")
def operator_foreign_timer(state: ScenarioState, time: str) -> None:
    """Calls ``on_timer`` with a timer key of another operator (not a session's)."""
    v = _view(state)
    v.emitted = v.operator.on_timer(Timer(parse_time(time), ("window", "a", 1)), v.ctx)


@LIBRARY.then(r"the registered timers are:")
def registered_timers(state: ScenarioState, datatable: DataTable | None = None) -> None:
    """| time | key | session_id |: every timer of the timer service, stale ones included."""
    columns = ("time", "key", "session_id")
    header, expected = expect_table(state, datatable, "the registered timers are:", columns)
    actual = [(t.timestamp, t.key[1], t.key[2]) for t in _view(state).ctx.timers.list_timers()]
    assert_rows("Then the registered timers are", list(columns), expected, actual, None)


@LIBRARY.then(r"the pending timers are:")
def pending_timers(state: ScenarioState, datatable: DataTable | None = None) -> None:
    """| key | session_id | time |: the operator's pending timer per open session."""
    columns = ("key", "session_id", "time")
    header, expected = expect_table(state, datatable, "the pending timers are:", columns)
    actual = [(k, sid, t) for (k, sid), t in sorted(_view(state).operator.pending_timers.items())]
    assert_rows("Then the pending timers are", list(columns), expected, actual, None)


@LIBRARY.then(r"the operator emitted nothing")
def emitted_nothing(state: ScenarioState) -> None:
    """The last call emitted no session."""
    assert_rows(
        "Then the operator emitted nothing", ["output"], [], [(o,) for o in _view(state).emitted], None
    )


@LIBRARY.then(r"the operator emitted:")
def emitted(state: ScenarioState, datatable: DataTable | None = None) -> None:
    """| key | session_start | session_end | count | sum | reason |: the last call's sessions."""
    columns = ("key", "session_start", "session_end", "count", "sum", "reason")
    header, expected = expect_table(state, datatable, "the operator emitted:", columns)
    actual = [
        (o.key, o.start, o.end, o.aggregates["count"], o.aggregates["sum"], o.closed_by)
        for o in _view(state).emitted
        if isinstance(o, SessionResult)
    ]
    assert_rows("Then the operator emitted", list(columns), expected, actual, None)


@LIBRARY.then(r"restoring the checkpoint into an operator with another id is refused")
def restore_refused(state: ScenarioState) -> None:
    """Restoring the checkpoint into an operator with another ``operator_id`` raises ValueError."""
    v = _view(state)
    other = SessionWindowOperator(v.gap, operator_id="another")
    with pytest.raises(ValueError, match="checkpoint of operator"):
        other.restore(state.scratch["checkpoint"], OperatorContext(TimerService(), v.ctx.watermark_generator))


LIBRARY.bind(globals(), owner=__name__)
