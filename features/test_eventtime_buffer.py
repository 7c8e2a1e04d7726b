"""Event-time reorder buffer (veloFlux): features/eventtime_buffer.feature on every engine.

The shared steps come from harness.steps (installed by features/conftest.py).
This module adds the area's own nouns: the two watermark stages as Given
steps, the output stream compared in the order of VELO-R17's sort key (the
shared table step compares rows as a multiset), and the steps of the registry API used by the
``@oracle-only`` scenarios (VELO-R6: parsers given as code have no stream
meaning, TR-10).
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
    expect_table,
    parse_json_cell,
    parse_time,
    project,
    side_by_side,
)
from reference.eventtime_buffer import (
    DuplicateEventtimeType,
    EventtimeParseError,
    EventtimeTypeRegistry,
    UnknownEventtimeType,
)
from strategies.eventtime_buffer import emitted_order

scenarios("eventtime_buffer.feature")

AREA = "eventtime_buffer"


@LIBRARY.given(
    r"an event-time watermark stage reading column (?P<column>\S+) as (?P<type_name>\S+)"
    r" with a late tolerance of (?P<tolerance>.+?) ms"
)
def eventtime_stage(state: ScenarioState, column: str, type_name: str, tolerance: str) -> None:
    """VELO-R1, R7: the input stream declares ``column`` with ``type_name``; event time is on."""
    state.start(AREA)
    state.config.update(
        columns=["id", column], eventtime_column=column, eventtime_type=type_name,
        eventtime_enabled=True, late_tolerance=parse_time(tolerance),
    )  # fmt: skip


@LIBRARY.given(r"a processing-time watermark stage")
def processing_time_stage(state: ScenarioState) -> None:
    """VELO-R8, R9: event time is off."""
    state.start(AREA)
    state.config.update(columns=["id"], eventtime_enabled=False)


_SCOPE = r"(?: in (?P<scope>the last batch|batch (?P<n>\d+)))?"


@LIBRARY.then(rf"the output stream{_SCOPE} is:")
def output_stream_is(
    state: ScenarioState, scope: str | None, n: str | None, datatable: DataTable | None = None
) -> None:
    """| kind | key | event_time | value | watermark | reason | arrival_batch | arrival_seq | (any subset,
    plus batch): the ``emitted`` rows sorted by VELO-R17's key, compared in that order (R17, R23)."""
    __tracebackhide__ = True
    columns, rows = state.table("emitted")
    header, expected = expect_table(state, datatable, "the output stream is:", columns)
    if scope is not None:
        b = state.last_batch if n is None else int(n)
        rows = [r for r in rows if r[0] == b]
    actual = project(columns, emitted_order(rows), header)
    if expected != actual:
        pytest.fail(
            f"Then the output stream{' in ' + scope if scope else ''} is (engine {state.engine_name}): "
            f"expected and actual differ, in order\n{side_by_side(header, expected, actual)}\n\n"
            f"trace:\n{state.trace().describe()}",
            pytrace=False,
        )


# ---- the registry API (oracle-only, VELO-R3, R6) ------------------------------------


class _RegistryView:
    area = AREA

    def __init__(self) -> None:
        self.registry = EventtimeTypeRegistry()
        self.result: tuple[str, Any] = ("none", None)


def _registry(state: ScenarioState) -> _RegistryView:
    view = state.scratch.get("registry")
    if not isinstance(view, _RegistryView):
        raise StepUsageError("start with 'Given a new EventtimeTypeRegistry'")
    return view


def _ten_ms_ticks(cell: Any) -> int:
    """A user parser: a number of 10 ms ticks; text is refused with the user's own reason."""
    if not isinstance(cell, int) or isinstance(cell, bool):
        raise EventtimeParseError("not_a_tick_count", cell)
    return cell * 10


@LIBRARY.given(r"a new EventtimeTypeRegistry")
def new_registry(state: ScenarioState) -> None:
    """An empty registry holding the built-in parsers (oracle-only, VELO-R3)."""
    state.scratch["registry"] = _RegistryView()


@LIBRARY.when(r"the user registers (?P<name>\S+) as a parser of 10 ms ticks")
def register_ticks(state: ScenarioState, name: str) -> None:
    """Registers a user parser under ``name`` that reads a number of 10 ms ticks (VELO-R6);
    a refusal is kept for the Then steps."""
    view = _registry(state)
    try:
        view.registry.register(name, _ten_ms_ticks)
        view.result = ("returned", None)
    except DuplicateEventtimeType as e:
        view.result = ("raised", e)


@LIBRARY.then(r"the registry lists (?P<names>.+)")
def registry_lists(state: ScenarioState, names: str) -> None:
    """The registry's parser names, in the order it lists them (comma-separated)."""
    expected = [n.strip() for n in names.split(",")]
    assert _registry(state).registry.list() == expected


@LIBRARY.then(r"the registration is refused with DuplicateEventtimeType")
def registration_refused(state: ScenarioState) -> None:
    """The last registration raised DuplicateEventtimeType (VELO-R6)."""
    kind, got = _registry(state).result
    assert kind == "raised" and isinstance(got, DuplicateEventtimeType), f"got {kind} {got!r}"


@LIBRARY.then(r"resolving (?P<name>\S+) raises UnknownEventtimeType naming (?P<names>.+)")
def resolve_unknown(state: ScenarioState, name: str, names: str) -> None:
    """Resolving an unregistered name raises UnknownEventtimeType whose message names each listed parser."""
    with pytest.raises(UnknownEventtimeType) as raised:
        _registry(state).registry.resolve(name)
    for n in names.split(","):
        assert n.strip() in str(raised.value)


@LIBRARY.then(r"(?P<name>\S+) parses these cells:")
def parses_cells(state: ScenarioState, name: str, datatable: DataTable | None = None) -> None:
    """| cell | event_time | reason |: the cell as JSON; the result in ms, or the failure's reason."""
    parser = _registry(state).registry.resolve(name)
    if not datatable or [h.strip() for h in datatable[0]] != ["cell", "event_time", "reason"]:
        raise StepUsageError("the table has columns | cell | event_time | reason |")
    for cell_text, time_text, reason in datatable[1:]:
        cell = parse_json_cell(cell_text.strip())
        try:
            got: tuple[Any, Any] = (parser(cell), None)
        except EventtimeParseError as e:
            got = (None, e.reason)
        want = (None if time_text.strip() in ("", "-") else parse_time(time_text), reason.strip() or None)
        assert got == want, f"cell {cell_text}: expected {want}, got {got}"


LIBRARY.bind(globals(), owner=__name__)
