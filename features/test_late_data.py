"""Late data (oxirs): features/late_data.feature on every engine.

The shared steps come from harness.steps (installed by features/conftest.py).
This module adds the area's own nouns: source watermarks, the judged events
and side outputs (their ``channel`` column holds text, which the shared table
steps read as a number), and the object-API steps of the ``@oracle-only``
scenarios (``SideOutputRouter``, ``AllowedLatenessTracker``: calls with no
stream of their own, TR-10).
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
    parse_expected_cell,
    parse_key,
    parse_time,
    project,
)
from harness.traces import Item
from reference.late_data import AllowedLatenessTracker, SideOutputRouter

scenarios("late_data.feature")

_SAME = r"(?P<same> in the same batch)?"
_SCOPE = r"(?: in (?P<scope>the last batch|batch (?P<n>\d+)))?"


def _place(state: ScenarioState, item: Item, same: str | None) -> None:
    state.add([item], "in the same batch" if same else "in one batch")


@LIBRARY.when(rf"source (?P<source>-?\d+) reports watermark (?P<time>.+?) ms{_SAME}")
def source_reports(state: ScenarioState, source: str, time: str, same: str | None) -> None:
    """OXL-R3: a watermark item of a numbered source."""
    _place(state, Item("watermark", source=int(source), time=parse_time(time)), same)


@LIBRARY.when(rf"the watermark reaches (?P<time>.+?) ms{_SAME}")
def unnamed_source_reports(state: ScenarioState, time: str, same: str | None) -> None:
    """OXL-R2: a watermark item of the stream's unnamed source."""
    _place(state, Item("watermark", time=parse_time(time)), same)


def _cell(column: str, text: str) -> Any:
    if column == "channel":
        return parse_key(text) if text.strip().lower() not in ("-", "none", "null", "") else None
    return parse_expected_cell(column, text)


@LIBRARY.then(rf"the (?P<what>judged events|side outputs){_SCOPE} are:")
def late_table_is(
    state: ScenarioState, what: str, scope: str | None, n: str | None, datatable: DataTable | None = None
) -> None:
    """| batch | seq | ... | channel |: the events or side_outputs table (a subset of its columns)."""
    if state.require_area() != "late_data":
        raise StepUsageError(f"'the {what} are:' belongs to late_data, not {state.area}")
    table = "events" if what == "judged events" else "side_outputs"
    columns, rows = state.table(table)
    if not datatable:
        raise StepUsageError(f"'the {what} are:' needs a table")
    header = [h.strip() for h in datatable[0]]
    unknown = [h for h in header if h not in columns]
    if unknown:
        raise StepUsageError(f"the {what}: unknown columns {unknown}; allowed: {list(columns)}")
    expected = [tuple(_cell(c, v) for c, v in zip(header, r, strict=True)) for r in datatable[1:]]
    if scope is not None:
        b = state.last_batch if n is None else int(n)
        rows = [r for r in rows if r[0] == b]
    title = f"Then the {what} in {scope} are" if scope else f"Then the {what} are"
    assert_rows(title, header, expected, project(columns, rows, header), state)


# ---- the object API (oracle-only, TR-10) ---------------------------------------------


def _names(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _router(state: ScenarioState) -> SideOutputRouter:
    router = state.scratch.get("router")
    if not isinstance(router, SideOutputRouter):
        raise StepUsageError("start with 'Given a SideOutputRouter'")
    return router


@LIBRARY.given(r"a SideOutputRouter")
def new_router(state: ScenarioState) -> None:
    """A SideOutputRouter with no channels (oracle-only)."""
    state.scratch["router"] = SideOutputRouter()


@LIBRARY.when(r"the router routes these events:")
def router_routes(state: ScenarioState, datatable: DataTable | None = None) -> None:
    """| channel | event_time |: routes each row to its channel, in table order."""
    if not datatable or [h.strip() for h in datatable[0]] != ["channel", "event_time"]:
        raise StepUsageError("the routed events have columns | channel | event_time |")
    for channel, t in datatable[1:]:
        _router(state).route(channel.strip(), parse_time(t))


@LIBRARY.then(r"draining channel (?P<channel>\S+) gives (?P<events>.+)")
def draining_gives(state: ScenarioState, channel: str, events: str) -> None:
    """Draining the channel returns these event times in order (comma-separated), or nothing."""
    expected = [] if events.strip() == "nothing" else [parse_time(t) for t in _names(events)]
    got = _router(state).drain(channel)
    assert_rows(f"Then draining channel {channel} gives", ["drained"], [(expected,)], [(got,)], None)


@LIBRARY.then(r"channel (?P<channel>\S+) holds (?P<count>\d+) events?")
def channel_holds(state: ScenarioState, channel: str, count: str) -> None:
    """The channel holds this many events not drained yet."""
    got = _router(state).pending(channel)
    assert_rows(f"Then channel {channel} holds", ["pending"], [(int(count),)], [(got,)], None)


@LIBRARY.then(r"the router's channels are (?P<names>.+)")
def router_channels(state: ScenarioState, names: str) -> None:
    """The router's channels, in the order it lists them (comma-separated)."""
    got = _router(state).channels()
    assert_rows("Then the router's channels are", ["channels"], [(_names(names),)], [(got,)], None)


def _tracker(state: ScenarioState) -> AllowedLatenessTracker:
    tracker = state.scratch.get("lateness_tracker")
    if not isinstance(tracker, AllowedLatenessTracker):
        raise StepUsageError("start with 'Given an AllowedLatenessTracker with an allowed lateness of N ms'")
    return tracker


@LIBRARY.given(r"an AllowedLatenessTracker with an allowed lateness of (?P<ms>.+?) ms")
def new_tracker(state: ScenarioState, ms: str) -> None:
    """An AllowedLatenessTracker (oracle-only) with this allowed lateness."""
    state.scratch["lateness_tracker"] = AllowedLatenessTracker(parse_time(ms))


@LIBRARY.when(r"the tracker registers windows ending at (?P<ends>.+)")
def tracker_registers(state: ScenarioState, ends: str) -> None:
    """Registers one window per end time (comma-separated)."""
    for end in _names(ends):
        _tracker(state).register(f"window ending at {end}", parse_time(end))


@LIBRARY.then(r"closing at (?P<now>\S+) returns (?:the windows ending at (?P<ends>.+)|no window)")
def closing_returns(state: ScenarioState, now: str, ends: str | None) -> None:
    """``close_expired(now)`` returns the windows with these end times, or no window."""
    expected = [f"window ending at {e}" for e in _names(ends or "")]
    got = _tracker(state).close_expired(parse_time(now))
    assert_rows(f"Then closing at {now} returns", ["closed"], [(expected,)], [(got,)], None)


@LIBRARY.then(r"a window ending at (?P<end>\S+) is open at (?P<open_at>\S+) and closed at (?P<closed_at>\S+)")
def window_open_then_closed(state: ScenarioState, end: str, open_at: str, closed_at: str) -> None:
    """``is_open(end, ...)`` is true at the first time and false at the second."""
    tracker = _tracker(state)
    got = (
        tracker.is_open(parse_time(end), parse_time(open_at)),
        tracker.is_open(parse_time(end), parse_time(closed_at)),
    )
    assert_rows("Then the window is open, then closed", ["open", "open later"], [(True, False)], [got], None)


LIBRARY.bind(globals(), owner=__name__)
