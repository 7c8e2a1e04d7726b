"""Window joins (oxirs): invariants of the oracle, and the engine-vs-oracle differential test.

Invariants run on the oracle (reference/window_joins.py) over generated
two-sided traces of each join. They are derived from the clauses, with the
clauses' own arithmetic (strategies/window_joins.py), not from the
oracle's code:

* the pairs are the brute-force definition of each join over the events that
  were not late, each with its emission point (R3, R5..R16), and each
  (left, right) pair appears at most once (R10);
* the late rows are the events whose pane or session was closed at their
  arrival, the error rows follow R19's order, and every item is accounted for
  (R7, R11, R14, R19, TR-7);
* restart points and batch cuts change nothing but the numbering (R21);
* the progress rows follow the tables and the held panes or sessions (R17);
* invalid configurations are refused naming the setting (R18);
* the same at the i64 bounds, where every sum saturates (TR-2);
* the join classes' API: a checkpoint restored into a new join continues as
  if never stopped, a regressed watermark raises and changes nothing; and a
  few traces by hand.

The differential test feeds every engine chosen with ``--engine`` (except the
reference) the budget's generated traces in ONE ``run`` call and compares each
output with the oracle's; a difference is shrunk and printed as a scenario.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.outputs import TABLES, Row
from harness.traces import I64_MAX, InvalidConfig, Item, Trace
from properties import batch_cuts
from properties.batch_cuts import batch_ends, draw_cuts, item_places, kept_differences
from reference.window_joins import (
    JoinEvent,
    JoinPair,
    SessionSessionJoin,
    TumblingSlidingJoin,
    TumblingTumblingJoin,
    WatermarkRegressed,
    WindowJoinStats,
    brute_force,
    join_from_config,
    run_trace,
    validate_config,
)
from strategies.common import check_generated
from strategies.window_joins import (
    AREA,
    DIFFERENTIAL,
    EDGE_VALID_CONFIGS,
    INVALID_CONFIGS,
    JOINS,
    arrivals,
    expected_pairs,
    expected_progress,
    join_event,
    watermark,
    window_join_edge_traces,
    window_join_traces,
)

Output = dict[str, list[Row]]
EDGE_TRACES = window_join_edge_traces()


def _traces(join: str) -> st.SearchStrategy[Trace]:
    return window_join_traces(join=join, large_batch_rate=10)


def _rows(output: Output, table: str) -> list[dict[str, Any]]:
    return [dict(zip(TABLES[AREA][table], r, strict=True)) for r in output[table]]


def _expected_late(trace: Trace) -> list[Row]:
    return sorted(
        (a.batch, a.seq, a.item.side, a.item.key, a.item.event_time, a.watermark)
        for a in arrivals(trace)
        if a.error is None and a.late
    )


def _expected_errors(trace: Trace) -> list[Row]:
    return sorted((a.batch, a.seq, a.error) for a in arrivals(trace) if a.error is not None)


# ---- the pairs against the brute-force definitions (OXJ-R3, R5..R16) --------------------------


@pytest.mark.clauses(
    "OXJ-R3", "OXJ-R5", "OXJ-R6", "OXJ-R7", "OXJ-R8", "OXJ-R9", "OXJ-R11", "OXJ-R12", "OXJ-R13",
    "OXJ-R14", "OXJ-R15", "OXJ-R16",
)  # fmt: skip
@pytest.mark.parametrize("join", JOINS)
@given(st.data())
def test_the_pairs_are_the_brute_force_definition_with_their_emission_points(
    join: str, data: st.DataObject
) -> None:
    """Each join's pairs from the whole arrival sequence, with no state kept between items: same key,
    same pane (tumbling x tumbling), U_r meeting the left pane while it was open (tumbling x
    sliding), overlapping gap-connected runs both closed at a watermark item (session x session)."""
    trace = data.draw(_traces(join))
    out = run_trace(trace)
    expected = expected_pairs(trace)
    assert sorted(out["pairs"]) == expected
    assert set(expected) == brute_force(trace)  # the oracle's own definition says the same


@pytest.mark.clauses("OXJ-R3", "OXJ-R10", "OXJ-R1")
@given(st.one_of(*(_traces(join) for join in JOINS)))
def test_each_left_right_pair_appears_at_most_once_and_names_its_events(trace: Trace) -> None:
    """A pair row names a left and a right event of its key by (batch, seq), with their times and
    values, and is emitted at an item no earlier than either of them."""
    out = run_trace(trace)
    pairs = _rows(out, "pairs")
    ids = [(p["left_batch"], p["left_seq"], p["right_batch"], p["right_seq"]) for p in pairs]
    assert len(ids) == len(set(ids))
    for p in pairs:
        left = trace.batches[p["left_batch"]][p["left_seq"]]
        right = trace.batches[p["right_batch"]][p["right_seq"]]
        assert (left.side, right.side) == ("left", "right")
        assert left.key == right.key == p["key"]
        assert (left.event_time, left.value, right.event_time, right.value) == (
            p["left_time"], p["left_value"], p["right_time"], p["right_value"]
        )  # fmt: skip
        emitted = (p["batch"], p["seq"])
        assert emitted >= (p["left_batch"], p["left_seq"]) and emitted >= (p["right_batch"], p["right_seq"])
        if trace.config["join"] != "session_session":  # R6, R11: at the second of the two events
            assert emitted == max((p["left_batch"], p["left_seq"]), (p["right_batch"], p["right_seq"]))
        else:  # R15: at a watermark item
            assert trace.batches[p["batch"]][p["seq"]].kind == "watermark"


# ---- late events, error rows, nothing dropped silently (OXJ-R7, R11, R14, R19) -----------------


@pytest.mark.clauses("OXJ-R2", "OXJ-R7", "OXJ-R11", "OXJ-R14", "OXJ-R19", "TR-7")
@pytest.mark.parametrize("join", JOINS)
@given(st.data())
def test_late_events_are_those_whose_pane_or_session_was_closed_at_arrival(
    join: str, data: st.DataObject
) -> None:
    """Late: a watermark is present and reaches the event's pane end + lateness (for a right event
    of tumbling x sliding, the end of the last left pane it reaches), or for sessions t + lateness.
    Every item is exactly one of: an error row, a late row, a taken event, an accepted watermark."""
    trace = data.draw(_traces(join))
    out = run_trace(trace)
    assert sorted(out["late"]) == _expected_late(trace)
    assert sorted(out["errors"]) == _expected_errors(trace)
    last = _rows(out, "progress")[-1]
    accepted_watermarks = sum(1 for a in arrivals(trace) if a.sets_watermark)
    items = sum(len(batch) for batch in trace.batches)
    assert items == (
        len(out["errors"])
        + len(out["late"])
        + last["left_events"]
        + last["right_events"]
        + accepted_watermarks
    )
    assert last["late_events_dropped"] == len(out["late"])


# ---- restart points and batch cuts (OXJ-R21) ----------------------------------------------------


@pytest.mark.clauses("OXJ-R21", "TR-5")
@given(st.one_of(*(_traces(join) for join in JOINS)))
def test_restart_points_change_nothing(trace: Trace) -> None:
    everywhere = frozenset(range(len(trace.batches) - 1))
    outputs = [run_trace(replace(trace, restart_after=points)) for points in (frozenset(), everywhere)]
    assert run_trace(trace) == outputs[0] == outputs[1]


def _by_position(trace: Trace, out: Output) -> dict[str, Any]:
    """The tables with each (batch, seq) replaced by the item's place in the whole trace, and the
    progress rows keyed by how many items the trace had seen at the end of their batch."""
    at = item_places(trace)
    pairs = sorted((at[(r[0], r[1])], *r[2:3], at[(r[3], r[4])], *r[5:7], at[(r[7], r[8])], *r[9:])
                   for r in out["pairs"])  # fmt: skip
    late = sorted((at[(r[0], r[1])], *r[2:]) for r in out["late"])
    errors = sorted((at[(r[0], r[1])], r[2]) for r in out["errors"])
    ends = batch_ends(trace)
    progress = {ends[r[0]]: r[1:] for r in out["progress"]}
    return {"pairs": pairs, "late": late, "errors": errors, "progress": progress}


def _recut_differences(trace: Trace, out: Output, recut: Trace, again: Output) -> list[str]:
    """Where the two answers differ beyond the numbering: pairs, late and error rows item for
    item, and progress wherever both traces end a batch."""
    one, other = _by_position(trace, out), _by_position(recut, again)
    return kept_differences(one, other, ("pairs", "late", "errors"), ("progress",))


@pytest.mark.clauses("OXJ-R23", "OXJ-R3", "OXJ-R17", "OXJ-R21", "TR-5")
@given(st.one_of(*(_traces(join) for join in JOINS)), st.data())
def test_batch_cuts_change_nothing_but_the_numbering(trace: Trace, data: st.DataObject) -> None:
    """The same items cut into other batches (empty ones included): the same pairs, late rows and
    error rows item for item, and the same progress wherever both traces end a batch."""
    twin = draw_cuts(data, trace)
    assert not _recut_differences(trace, run_trace(trace), twin, run_trace(twin))


RECUT_TRACES = 16


def recut_pairs() -> list[tuple[Trace, Trace]]:
    """Generated traces of every join and each one's re-cut twin (properties.batch_cuts)."""
    return batch_cuts.recut_pairs(st.one_of(*(_traces(join) for join in JOINS)), RECUT_TRACES, salt=3)


def recut_traces() -> list[Trace]:
    return [t for pair in recut_pairs() for t in pair]


# the traces and their twins join the session's pre-run
@pytest.mark.prerun_traces.with_args(recut_traces)  # with_args: the one argument is a function
@pytest.mark.clauses("OXJ-R23", "OXJ-R3", "OXJ-R17", "OXJ-R21", "TR-5")
def test_batch_cuts_change_nothing_but_the_numbering_on_the_engine(engine_under_test: Any) -> None:
    """The engine's answer to a trace and to its re-cut twin: the same pairs, late rows and error
    rows item for item, and the same progress wherever both traces end a batch."""
    pairs = recut_pairs()
    assert len(pairs) >= 12
    batch_cuts.check_twins_on_the_engine(engine_under_test, pairs, _recut_differences)


def _first_items_pairs_lost(out: Output) -> Output:
    """A join that loses the pairs its batch's first item makes (state read late at a boundary)."""
    return {**out, "pairs": [r for r in out["pairs"] if r[1] != 0]}


def _pairs_counted_per_batch(out: Output) -> Output:
    """A join whose progress counts the pairs of its batch only (a counter not carried over)."""
    progress, before = [], 0
    for r in sorted(out["progress"]):
        progress.append((*r[:4], r[4] - before, *r[5:]))
        before = r[4]
    return {**out, "progress": progress}


@pytest.mark.clauses("OXJ-R23", "OXJ-R3", "OXJ-R17", "TR-5")
@pytest.mark.parametrize("planted", [_first_items_pairs_lost, _pairs_counted_per_batch])
def test_the_batch_cut_comparison_convicts_a_join_that_depends_on_its_batches(planted: Any) -> None:
    """The comparison above drops the numbering and reads progress only where both traces end a
    batch; it still catches a join whose answer depends on where its batches end."""
    caught = [
        trace.name for trace, recut in recut_pairs()
        if _recut_differences(trace, planted(run_trace(trace)), recut, planted(run_trace(recut)))
    ]  # fmt: skip
    assert caught, f"{planted.__name__}: no re-cut twin shows it"


# ---- progress (OXJ-R17) ----------------------------------------------------------------------------


@pytest.mark.clauses("OXJ-R17", "OXJ-R2", "OXJ-R4", "OXJ-R16")
@pytest.mark.parametrize("join", JOINS)
@given(st.data())
def test_progress_counters_follow_the_tables_and_what_the_join_holds(join: str, data: st.DataObject) -> None:
    """One row per batch, empty ones included: the watermark current at its end, the taken events
    of each side, the pair and late rows so far, and the (key, pane)s or sessions held."""
    trace = data.draw(_traces(join))
    out = run_trace(trace)
    progress = _rows(out, "progress")
    assert [p["batch"] for p in progress] == list(range(len(trace.batches)))
    seen = arrivals(trace)
    for p in progress:
        b = p["batch"]
        assert p["pairs_emitted"] == sum(1 for r in out["pairs"] if r[0] <= b)
        assert p["late_events_dropped"] == sum(1 for r in out["late"] if r[0] <= b)
        for side in ("left", "right"):
            taken = sum(1 for a in seen if a.batch <= b and a.taken and a.item.side == side)
            assert p[f"{side}_events"] == taken
        current = [a.watermark for a in seen if a.batch <= b and a.sets_watermark]
        assert p["watermark"] == (current[-1] if current else None)
    assert out["progress"] == expected_progress(trace)


# ---- configurations (OXJ-R18) ------------------------------------------------------------------

NOT_JSON_INVALID_CONFIGS: st.SearchStrategy[dict[Any, Any]] = st.sampled_from((
    {"join": "session_session", "gap_ms": math.nan},
    {"join": "tumbling_tumbling", "size_ms": math.inf},
    {"join": ["session_session"], "gap_ms": 5},
    {"join": "session_session", "gap_ms": 5, 7: 1},
))  # fmt: skip


@pytest.mark.clauses("OXJ-R18", "TR-6")
@given(st.one_of(INVALID_CONFIGS, NOT_JSON_INVALID_CONFIGS))
def test_invalid_configurations_are_refused(config: dict[Any, Any]) -> None:
    with pytest.raises(InvalidConfig):
        validate_config(config)
    with pytest.raises(InvalidConfig):
        run_trace(Trace(AREA, config, ((join_event("left", "a", 1),),)))


@pytest.mark.clauses("OXJ-R18", "TR-6")
def test_unknown_settings_of_several_types_are_refused() -> None:
    """Setting names that do not sort together (not JSON, so no failure file: a plain test)."""
    with pytest.raises(InvalidConfig, match="gap"):
        names: dict[Any, Any] = {"join": "session_session", "gap_ms": 5, 7: 1, "gap": 5}
        validate_config(names)


@pytest.mark.clauses("OXJ-R18", "TR-6")
@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({}, "join"),
        ({"join": "tumbling"}, "join"),
        ({"join": "tumbling_tumbling"}, "size_ms"),
        ({"join": "tumbling_tumbling", "size_ms": True}, "size_ms"),
        ({"join": "tumbling_tumbling", "size_ms": I64_MAX + 1}, "size_ms"),
        ({"join": "tumbling_tumbling", "size_ms": 10, "gap_ms": 5}, "gap_ms"),
        ({"join": "tumbling_tumbling", "size_ms": 10, "lateness_ms": 5}, "lateness_ms"),
        ({"join": "session_session", "gap_ms": 5, "allowed_lateness_ms": -1}, "allowed_lateness_ms"),
        ({"join": "tumbling_sliding", "left_size_ms": 10, "right_size_ms": 20, "right_slide_ms": 21},
         "right_slide_ms"),
        ({"join": "tumbling_sliding", "left_size_ms": 10, "right_size_ms": 2561, "right_slide_ms": 10},
         "right_size_ms"),
    ],
)  # fmt: skip
def test_a_refusal_names_the_setting(config: dict[str, Any], named: str) -> None:
    with pytest.raises(InvalidConfig, match=named):
        validate_config(config)


@pytest.mark.clauses("OXJ-R18")
def test_the_join_classes_refuse_what_the_configuration_refuses() -> None:
    refusals = (
        lambda: TumblingTumblingJoin(0),
        lambda: TumblingTumblingJoin(10, allowed_lateness_ms=-1),
        lambda: TumblingTumblingJoin(True),  # type: ignore[arg-type]
        lambda: TumblingSlidingJoin(10, 20, 21),
        lambda: TumblingSlidingJoin(10, 2561, 10),
        lambda: TumblingSlidingJoin(10, 20, 0),
        lambda: SessionSessionJoin(0),
        lambda: SessionSessionJoin(5, I64_MAX + 1),
    )
    for make in refusals:
        with pytest.raises(InvalidConfig):
            make()
    assert TumblingSlidingJoin(10, 2560, 2560).stats() == WindowJoinStats()


@pytest.mark.clauses("OXJ-R18")
@pytest.mark.parametrize("config", EDGE_VALID_CONFIGS)
def test_the_edges_of_the_limits_are_accepted(config: dict[str, Any]) -> None:
    trace = Trace(
        AREA, config, ((join_event("left", "a", 5), join_event("right", "a", 5), watermark(I64_MAX)),)
    )
    out = run_trace(trace)
    assert len(out["pairs"]) == 1


# ---- at the i64 bounds (TR-2) ------------------------------------------------------------------


@pytest.mark.clauses("TR-2", "OXJ-R4", "OXJ-R8", "OXJ-R11", "OXJ-R14", "OXJ-R17")
@given(EDGE_TRACES)
def test_at_the_i64_bounds_every_sum_saturates(trace: Trace) -> None:
    """Panes and gaps of up to i64 max, times and watermarks at both ends: the tables are the
    clauses' arithmetic with saturating sums (a watermark of i64 max closes everything)."""
    out = run_trace(trace)
    assert sorted(out["pairs"]) == expected_pairs(trace)
    assert set(out["pairs"]) == brute_force(trace)
    assert sorted(out["late"]) == _expected_late(trace)
    assert out["progress"] == expected_progress(trace)


@pytest.mark.clauses("TR-2", "OXJ-R4", "OXJ-R14")
def test_saturation_by_hand() -> None:
    """A pane ending beyond i64 max ends at i64 max, so only a watermark of i64 max purges it; a
    session of gap i64 max closes only there too."""
    tumbling = TumblingTumblingJoin(I64_MAX, allowed_lateness_ms=5)
    assert tumbling.process_left(JoinEvent("k", I64_MAX - 1, batch=0, seq=0)).late is False
    tumbling.advance_watermark(I64_MAX - 1)
    assert tumbling.process_right(JoinEvent("k", I64_MAX, batch=0, seq=1)).pairs == []  # pane 1
    assert len(tumbling.process_right(JoinEvent("k", 7, batch=0, seq=2)).pairs) == 1  # pane 0: still open
    tumbling.advance_watermark(I64_MAX)
    assert tumbling.process_left(JoinEvent("k", 0, batch=0, seq=3)).late is True
    assert tumbling.stats().open_windows == 0
    sessions = SessionSessionJoin(I64_MAX)
    sessions.process_left(JoinEvent("k", -5, batch=0, seq=0))
    sessions.process_right(JoinEvent("k", 10, batch=0, seq=1))
    assert sessions.advance_watermark(I64_MAX - 1) == []
    assert len(sessions.advance_watermark(I64_MAX)) == 1


# ---- the join classes (OXJ-R2, R17, R21) -------------------------------------------------------


def _calls(trace: Trace) -> list[tuple[str | None, Any]]:
    """The API calls a trace means: its well-formed events and watermark items, in order."""
    calls: list[tuple[str | None, Any]] = []
    for a in arrivals(trace):
        item = a.item
        if a.error is not None and a.error != "watermark_regressed":
            continue
        if item.kind == "watermark":
            calls.append(("watermark", item.time))
        else:
            event = JoinEvent(item.key, item.event_time, item.value, a.batch, a.seq)  # type: ignore[arg-type]
            calls.append((item.side, event))
    return calls


def _call(join: Any, call: tuple[str | None, Any]) -> tuple[Any, ...]:
    kind, arg = call
    if kind == "watermark":
        try:
            return ("pairs", tuple(join.advance_watermark(arg)))
        except WatermarkRegressed:
            return ("regressed",)
    outcome = join.process_left(arg) if kind == "left" else join.process_right(arg)
    return ("event", outcome.late, tuple(outcome.pairs))


@pytest.mark.clauses("OXJ-R21", "OXJ-R17", "OXJ-R2")
@given(st.one_of(*(_traces(join) for join in JOINS)), st.data())
def test_a_join_restored_from_a_checkpoint_continues_as_if_never_stopped(
    trace: Trace, data: st.DataObject
) -> None:
    """Checkpoint after call i, go on with the original, then restore the checkpoint into a NEW join
    and replay the calls after i: the same answers, stats and watermark; a regressed watermark
    raises WatermarkRegressed and changes nothing."""
    calls = _calls(trace)
    i = data.draw(st.integers(0, len(calls)))
    steady = join_from_config(trace.config)
    answers = []
    snapshot = None
    for n, call in enumerate(calls):
        if n == i:
            snapshot = steady.checkpoint()
        before = (steady.stats(), steady.watermark)
        answers.append(_call(steady, call))
        if answers[-1] == ("regressed",):
            assert (steady.stats(), steady.watermark) == before
    if snapshot is None:
        snapshot = steady.checkpoint()
    fresh = join_from_config(trace.config)
    fresh.restore(snapshot)
    assert [_call(fresh, call) for call in calls[i:]] == answers[i:]
    assert (fresh.stats(), fresh.watermark) == (steady.stats(), steady.watermark)
    assert fresh.stats() == WindowJoinStats(*run_trace(trace)["progress"][-1][2:])


@pytest.mark.clauses("OXJ-R2", "OXJ-R17")
def test_a_regressed_watermark_raises_and_changes_nothing() -> None:
    join = TumblingTumblingJoin(10)
    join.process_left(JoinEvent("k", 3, batch=0, seq=0))
    assert join.advance_watermark(5) == [] and join.watermark == 5
    before = join.stats()
    with pytest.raises(WatermarkRegressed):
        join.advance_watermark(4)
    assert join.watermark == 5 and join.stats() == before
    assert join.advance_watermark(5) == [] and join.watermark == 5  # equal: no change, no error
    assert join.process_right(JoinEvent("k", 4, batch=0, seq=1)).pairs == [
        JoinPair(JoinEvent("k", 3, batch=0, seq=0), JoinEvent("k", 4, batch=0, seq=1))
    ]


# ---- by hand -------------------------------------------------------------------------------------


@pytest.mark.clauses("OXJ-R5", "OXJ-R6", "OXJ-R7", "OXJ-R17")
def test_tumbling_x_tumbling_by_hand() -> None:
    """Panes of 10: 3 and 7 pair when 7 arrives; 12 and 15 pair when 15 arrives; the watermark 20
    purges panes 0 and 1 (ends 10 and 20), so 19 is late; 20 opens pane 2."""
    trace = Trace(AREA, {"join": "tumbling_tumbling", "size_ms": 10}, (
        (join_event("left", "a", 3, 1), join_event("right", "a", 7, 2), join_event("right", "a", 12, 3),
         join_event("right", "b", 15, 4)),
        (join_event("left", "a", 15, 5), watermark(20), join_event("left", "a", 19, 6),
         join_event("right", "a", 20, 7)),
    ))  # fmt: skip
    out = run_trace(trace)
    assert sorted(out["pairs"]) == [
        (0, 1, "a", 0, 0, 3, 1, 0, 1, 7, 2),
        (1, 0, "a", 1, 0, 15, 5, 0, 2, 12, 3),
    ]
    assert out["late"] == [(1, 2, "left", "a", 19, 20)]
    assert out["progress"] == [(0, None, 1, 3, 1, 0, 3), (1, 20, 2, 4, 2, 1, 1)]
    assert out["errors"] == []


@pytest.mark.clauses("OXJ-R8", "OXJ-R9", "OXJ-R10", "OXJ-R11")
def test_tumbling_x_sliding_by_hand() -> None:
    """Left panes of 10, right panes of 20 sliding by 10: a right event at 25 lies in [10, 30) and
    [20, 40), so it reaches left panes 1, 2 and 3 and pairs with a left event at 12 although 25 is
    not in [10, 20) (R9); two right events at 25 are two pairs (R10). The watermark 20 purges pane 1:
    a later right event at 25 is stored in panes 2 and 3 only, and a left event at 21 pairs with all
    three copies in pane 2; a right event at 5 reaches panes -1..1, all purged: late; one at 15
    reaches panes 0..2, and pane 2 is open: kept, and it pairs with 21."""
    config = {"join": "tumbling_sliding", "left_size_ms": 10, "right_size_ms": 20, "right_slide_ms": 10}
    trace = Trace(AREA, config, (
        (join_event("left", "a", 12), join_event("right", "a", 25), join_event("right", "a", 25, 9)),
        (watermark(20), join_event("right", "a", 25, 3), join_event("left", "a", 21),
         join_event("right", "a", 5), join_event("right", "a", 15)),
    ))  # fmt: skip
    out = run_trace(trace)
    assert sorted(out["pairs"]) == [
        (0, 1, "a", 0, 0, 12, 0, 0, 1, 25, 0),
        (0, 2, "a", 0, 0, 12, 0, 0, 2, 25, 9),
        (1, 2, "a", 1, 2, 21, 0, 0, 1, 25, 0),
        (1, 2, "a", 1, 2, 21, 0, 0, 2, 25, 9),
        (1, 2, "a", 1, 2, 21, 0, 1, 1, 25, 3),
        (1, 4, "a", 1, 2, 21, 0, 1, 4, 15, 0),
    ]
    assert out["late"] == [(1, 3, "right", "a", 5, 20)]
    # held: (a, 1..3) after batch 0; pane 1 purged at 20 leaves (a, 2) and (a, 3)
    assert out["progress"] == [(0, None, 1, 2, 2, 0, 3), (1, 20, 2, 4, 6, 1, 2)]


@pytest.mark.clauses("OXJ-R12", "OXJ-R13", "OXJ-R14", "OXJ-R15", "OXJ-R16", "OXJ-R2", "OXJ-R19")
def test_session_x_session_by_hand() -> None:
    """Gap 5: left sessions {10} and {20}, right {14}; left 15 merges 10 and 20 into [10, 20] (R12).
    The watermark 24 closes the right session (14 + 5 <= 24) but not the left (20 + 5 > 24): nothing
    is emitted; 25 closes it, and all three left events pair with 14 at that item (R15). 23 is then
    late (23 + 0 <= 25); a watermark of 24 is an error row; an end item is unsupported."""
    trace = Trace(AREA, {"join": "session_session", "gap_ms": 5}, (
        (join_event("left", "a", 10), join_event("left", "a", 20), join_event("right", "a", 14),
         join_event("left", "a", 15), watermark(24)),
        (watermark(25), join_event("right", "a", 23), watermark(24), Item("end")),
    ))  # fmt: skip
    out = run_trace(trace)
    assert sorted(out["pairs"]) == [
        (1, 0, "a", 0, 0, 10, 0, 0, 2, 14, 0),
        (1, 0, "a", 0, 1, 20, 0, 0, 2, 14, 0),
        (1, 0, "a", 0, 3, 15, 0, 0, 2, 14, 0),
    ]
    assert out["late"] == [(1, 1, "right", "a", 23, 25)]
    assert out["errors"] == [(1, 2, "watermark_regressed"), (1, 3, "unsupported_item")]
    assert out["progress"] == [(0, 24, 3, 1, 0, 0, 2), (1, 25, 3, 1, 3, 1, 0)]


@pytest.mark.clauses("OXJ-R15", "OXJ-R16", "OXJ-R17")
def test_session_pairs_do_not_wait_for_the_other_sessions_of_their_key() -> None:
    """Gap 5: left {0} and right {2} overlap and are both closed at the watermark 10, so their pair is
    emitted there although key a still holds the open left session {100} (R15); right b {3} has no
    partner and is forgotten once closed (R16), as are {0} and {2}: one session stays held."""
    trace = Trace(AREA, {"join": "session_session", "gap_ms": 5}, ((
        join_event("left", "a", 0), join_event("right", "a", 2), join_event("left", "a", 100),
        join_event("right", "b", 3), watermark(10),
    ),))  # fmt: skip
    out = run_trace(trace)
    assert out["pairs"] == [(0, 4, "a", 0, 0, 0, 0, 0, 1, 2, 0)]
    assert out["progress"] == [(0, 10, 2, 2, 1, 0, 1)]


@pytest.mark.clauses("OXJ-R19", "TR-7")
def test_an_item_with_several_faults_gets_the_first_reason_in_order() -> None:
    items = (
        Item("end"),
        Item("clock", time=5),
        join_event(None, None, None),
        join_event("up", None, None),
        join_event("left", None, None),
        join_event("left", "a", None),
        watermark(None),
        Item("watermark", time=5, key="a", side="left"),  # a watermark's other fields are ignored
        join_event("right", "", 5),  # the empty key is a key
        join_event("left", "", 5),
    )
    out = run_trace(Trace(AREA, {"join": "tumbling_tumbling", "size_ms": 10}, (items,)))
    reasons = ["unsupported_item", "unsupported_item", "missing_side", "unknown_side", "missing_key",
               "missing_event_time", "missing_time"]  # fmt: skip
    assert out["errors"] == [(0, s, r) for s, r in enumerate(reasons)]
    assert out["pairs"] == [(0, 9, "", 0, 9, 5, 0, 0, 8, 5, 0)]
    assert out["progress"] == [(0, 5, 1, 1, 1, 0, 1)]


# ---- differential ----------------------------------------------------------------------------------


@pytest.mark.clauses(
    "OXJ-R1", "OXJ-R2", "OXJ-R3", "OXJ-R4", "OXJ-R5", "OXJ-R6", "OXJ-R7", "OXJ-R8", "OXJ-R9", "OXJ-R10",
    "OXJ-R11", "OXJ-R12", "OXJ-R13", "OXJ-R14", "OXJ-R15", "OXJ-R16", "OXJ-R17", "OXJ-R18", "OXJ-R19",
    "OXJ-R20", "OXJ-R21",
)  # fmt: skip
def test_engine_agrees_with_the_oracle(engine_under_test: Any) -> None:
    """All generated traces of the three joins in ONE engine.run call; a difference is shrunk and
    printed as Gherkin."""
    check_generated(engine_under_test, *DIFFERENTIAL)
