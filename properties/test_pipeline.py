"""The oxirs pipeline: properties of the oracle over generated multi-stream traces.

The pipeline's oracle (reference/pipeline.py) routes items between the other areas' oracles.
These properties check the routing against the areas themselves, each run on its own trace
derived from the pipeline's answers, and against the clauses' arithmetic:

* admission decides exactly as the SLA area does on the same items (OXP-R5, R14);
* the aggregator's messages and aggregates are the exactly-once area's over the events that
  stay in the main stream (OXP-R5, R9);
* each join's pairs and late rows are the window-joins area's over the events its streams send
  it and the join watermark the pipeline reports (OXP-R3, R6, R7);
* every node's watermark follows from the admitted events and reported watermarks by the
  generator and the minimum rule (OXP-R2, R8);
* restart points and batch cuts change nothing but batch numbers (OXP-R4, R11, R12).

The differential test feeds every engine chosen with ``--engine`` (except the reference) the
budget's generated traces in ONE ``run`` call and compares each output with the oracle's; a
difference is shrunk and printed as a scenario.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.outputs import TABLES, Output, canonical
from harness.pipeline_settings import JOINS
from harness.traces import I64_MIN, InvalidConfig, Item, Trace, saturating_sub
from properties.batch_cuts import draw_cuts, item_places
from reference import exactly_once_aggregation, pipeline, sla_admission, window_joins
from strategies.common import check_generated
from strategies.pipeline import AREA, DIFFERENTIAL, pipeline_traces

# the oracle's properties ask no engine, so they may run beside the Spark pre-run
ORACLE_ALONE = pytest.mark.oracle_alone

TRACES = pipeline_traces()
NO_ITEM = Item("end")  # an item every derived area answers with an error row that is not compared


def _run(trace: Trace) -> Output | None:
    try:
        return canonical(AREA, pipeline.run_trace(trace))
    except InvalidConfig:
        return None


def _dicts(out: Output, table: str) -> list[dict[str, Any]]:
    return [dict(zip(TABLES[AREA][table], r, strict=True)) for r in out[table]]


def _errors(out: Output) -> set[tuple[int, int]]:
    return {(r[0], r[1]) for r in out["errors"]}


def _kept(out: Output) -> dict[tuple[int, int], int]:
    """(batch, seq) of every event that stays in the main stream -> the time it continues with."""
    return {(r["batch"], r["seq"]): r["assigned_time"] for r in _dicts(out, "ingress")
            if r["assigned_time"] is not None}  # fmt: skip


def _derived(trace: Trace, area: str, config: dict[str, Any], item_of: Any) -> Trace:
    """A trace of another area with the pipeline's batches and restart points, each item mapped
    in place (NO_ITEM where it has none)."""
    batches = tuple(tuple(item_of(b, s, item) or NO_ITEM for s, item in enumerate(batch))
                    for b, batch in enumerate(trace.batches))  # fmt: skip
    return Trace(area, config, batches, trace.restart_after)


@ORACLE_ALONE
@pytest.mark.clauses("OXP-R5", "OXP-R14", "OXP-R10")
@given(TRACES)
def test_admission_decides_as_the_sla_area_does_on_the_same_items(trace: Trace) -> None:
    out = _run(trace)
    if out is None:
        return
    bad = _errors(out)

    def sla_item(b: int, s: int, item: Item) -> Item | None:
        if (b, s) in bad or item.kind == "watermark":
            return None  # a malformed item reaches no operator (OXP-R14)
        if item.kind == "event":
            return Item("event", key=item.stream, event_time=item.event_time, priority=item.priority)
        return item

    sla = sla_admission.run_trace(_derived(trace, "sla_admission", trace.config["admission"], sla_item))
    assert [r for r in sla["errors"] if r[2] != "unsupported_item"] == []
    decided = [(r[0], r[1], r[2], r[3], r[5], r[6]) for r in sla["decisions"]]
    assert [r[:7] for r in out["ingress"]] == sorted(
        (b, s, stream, trace.batches[b][s].key, t, d, why) for b, s, stream, t, d, why in decided
    )
    assert all((r["verdict"] is None) == (r["decision"] != "admit") for r in _dicts(out, "ingress"))


@ORACLE_ALONE
@pytest.mark.clauses("OXP-R5", "OXP-R9", "OXP-R11")
@given(TRACES)
def test_the_aggregator_is_the_exactly_once_area_over_the_main_stream(trace: Trace) -> None:
    out = _run(trace)
    if out is None:
        return
    kept = _kept(out)

    def message(b: int, s: int, item: Item) -> Item | None:
        if (b, s) not in kept:
            return None
        return Item("event", key=item.key, producer=item.producer, partition=item.partition,
                    sequence=item.sequence, amount=item.value)  # fmt: skip

    config = trace.config.get("aggregation", {})
    alone = exactly_once_aggregation.run_trace(_derived(trace, "exactly_once_aggregation", config, message))
    alone = canonical("exactly_once_aggregation", alone)
    assert out["messages"] == alone["messages"]
    assert out["aggregates"] == alone["aggregates"]
    folded = sum(r[-1] == "folded" for r in out["messages"])
    assert max(out["progress"])[TABLES[AREA]["progress"].index("folded")] == folded


def _join_trace(
    trace: Trace, out: Output, name: str, settings: dict[str, Any]
) -> tuple[Trace, list[list[int]]]:
    """The join's own trace: per pipeline item, the event it takes, then its new watermark (OXP-R6);
    with, per batch, the pipeline seq of every derived item."""
    kept = _kept(out)
    moves = {(r["batch"], r["seq"]): r["watermark"] for r in _dicts(out, "watermarks") if r["node"] == name}
    batches, places = [], []
    for b, batch in enumerate(trace.batches):
        items, seqs = [], []
        for s, item in enumerate(batch):
            side = (
                "left"
                if item.stream in settings["left"]
                else "right"
                if item.stream in settings["right"]
                else None
            )
            if (b, s) in kept and side is not None:
                items.append(
                    Item("event", side=side, key=item.key, event_time=kept[(b, s)], value=item.value)
                )
                seqs.append(s)
            if (b, s) in moves:
                items.append(Item("watermark", time=moves[(b, s)]))
                seqs.append(s)
        batches.append(tuple(items))
        places.append(seqs)
    kind = JOINS[name]
    own = {k: v for k, v in settings.items() if k not in ("left", "right")}
    return Trace("window_joins", {"join": kind, **own}, tuple(batches), trace.restart_after), places


@ORACLE_ALONE
@pytest.mark.clauses("OXP-R3", "OXP-R6", "OXP-R7")
@given(TRACES)
def test_each_join_is_the_window_joins_area_over_what_its_streams_send_it(trace: Trace) -> None:
    out = _run(trace)
    if out is None:
        return
    for name in JOINS:
        if name not in trace.config:
            assert not [r for r in out["pairs"] if r[2] == name]
            continue
        joined, places = _join_trace(trace, out, name, trace.config[name])
        alone = window_joins.run_trace(joined)
        assert alone["errors"] == []

        def at(b: int, s: int) -> int:
            return places[b][s]  # noqa: B023 - read in this iteration only

        pairs = sorted((b, at(b, s), name, key, lb, at(lb, ls), lt, lv, rb, at(rb, rs), rt, rv)
                       for b, s, key, lb, ls, lt, lv, rb, rs, rt, rv in alone["pairs"])  # fmt: skip
        assert [r for r in out["pairs"] if r[2] == name] == pairs
        late = sorted((b, at(b, s), name, side, key, t, w) for b, s, side, key, t, w in alone["late"])
        assert [r for r in out["join_late"] if r[2] == name] == late


@ORACLE_ALONE
@pytest.mark.clauses("OXP-R2", "OXP-R8", "OXP-R10")
@given(TRACES)
def test_every_watermark_follows_from_the_generators_the_reports_and_the_minimum_rule(trace: Trace) -> None:
    out = _run(trace)
    if out is None:
        return
    admitted = {(r["batch"], r["seq"]) for r in _dicts(out, "ingress") if r["decision"] == "admit"}
    bad = _errors(out)
    settings = trace.config.get("watermarks", {})
    threshold, delay = settings.get("advance_threshold", 1), settings.get("max_out_of_order_ms", 0)
    streams = list(trace.config["admission"]["streams"])
    upstreams = {name: [*trace.config[name]["left"], *trace.config[name]["right"]]
                 for name in JOINS if name in trace.config}  # fmt: skip
    upstreams[pipeline.AGGREGATOR] = streams
    count, top = dict.fromkeys(streams, 0), dict.fromkeys(streams, I64_MIN)
    value: dict[str, int | None] = dict.fromkeys([*streams, *upstreams], None)
    expected, progress = [], []
    for b, batch in enumerate(trace.batches):
        for s, item in enumerate(batch):
            offered = None
            if (b, s) in admitted:
                assert item.stream is not None and item.event_time is not None
                count[item.stream] += 1
                top[item.stream] = max(top[item.stream], item.event_time)
                if count[item.stream] % threshold == 0:
                    offered = saturating_sub(top[item.stream], delay)
            elif item.kind == "watermark" and (b, s) not in bad:
                offered = item.time
            if offered is None:
                continue
            assert item.stream is not None
            old = value[item.stream]
            value[item.stream] = offered if old is None else max(old, offered)
            for node, ups in upstreams.items():
                given_ = [value[u] for u in ups]
                value[node] = None if None in given_ else min(w for w in given_ if w is not None)
            changes = [(b, s, n, value[n]) for n in value if value[n] is not None]
            expected += changes
        sinks = [value[n] for n in upstreams]
        progress.append(None if None in sinks else min(w for w in sinks if w is not None))
    # keep only the changes: each node's value after each item, compared with its value before
    last: dict[str, int | None] = {}
    moves = []
    for b, s, node, w in expected:
        if last.get(node) != w:
            moves.append((b, s, node, w))
            last[node] = w
    assert out["watermarks"] == sorted(moves)
    assert [r[-1] for r in sorted(out["progress"])] == progress


@ORACLE_ALONE
@pytest.mark.clauses("OXP-R11")
@given(TRACES)
def test_restart_points_change_nothing(trace: Trace) -> None:
    out = _run(trace)
    if out is None:
        return
    assert _run(replace(trace, restart_after=frozenset())) == out


@ORACLE_ALONE
@pytest.mark.clauses("OXP-R12", "OXP-R4")
@given(TRACES, st.data())
def test_batch_cuts_change_no_row_but_its_batch(trace: Trace, data: st.DataObject) -> None:
    out = _run(trace)
    if out is None:
        return
    twin = draw_cuts(data, trace)
    again = _run(twin)
    assert again is not None

    def placed(t: Trace, o: Output) -> dict[str, Any]:
        place = item_places(t)
        seen: dict[str, Any] = {}
        for table in ("ingress", "watermarks", "join_late", "messages", "errors"):
            seen[table] = sorted((place[(r[0], r[1])], *r[2:]) for r in o[table])
        seen["pairs"] = sorted((place[(r[0], r[1])], r[2], r[3], place[(r[4], r[5])], r[6], r[7],
                                place[(r[8], r[9])], r[10], r[11]) for r in o["pairs"])  # fmt: skip
        seen["aggregates"] = {r[1]: r[2:] for r in sorted(o["aggregates"])}  # each key's last value
        seen["totals"] = max(o["progress"])[1:]
        return seen

    assert placed(trace, out) == placed(twin, again)


# ---- differential ----------------------------------------------------------------------------------


@pytest.mark.clauses(
    "OXP-R1", "OXP-R2", "OXP-R3", "OXP-R4", "OXP-R5", "OXP-R6", "OXP-R7", "OXP-R8", "OXP-R9", "OXP-R10",
    "OXP-R11", "OXP-R12", "OXP-R13", "OXP-R14",
)  # fmt: skip
def test_engine_agrees_with_the_oracle(engine_under_test: Any) -> None:
    """All generated pipeline traces in ONE engine.run call; a difference is shrunk and printed as
    Gherkin."""
    check_generated(engine_under_test, *DIFFERENTIAL)
