"""SLA admission (oxirs): invariants of the oracle, and the engine-vs-oracle differential test.

Invariants run on the oracle's stream (reference/sla_admission.py ``run_trace``)
over generated traces. They are derived from the clauses, with the spec's own
integer arithmetic (strategies/sla_admission.py), not from the
oracle's code:

* each check in isolation: the lag (OXS-R6), the jitter reference (R7), the
  bucket level in exact nano-tokens (R3, R4, R8), and in the order of R5;
* the token bound of R8: what a stream's SLA admits over any span of T ms
  costs at most the capacity plus T ms of refill;
* the shedder's answer is the draw of R12 against the probability of R10,
  R11, and the policies of R13 only rename it;
* batch cuts, restarts, lag and rate rejections, unregistered streams and
  malformed items change no later answer (R5, R8, R9, R15, R18);
* nothing is lost (R15..R17), and invalid configurations are refused (R2, R3, R14).

The differential test feeds every engine chosen with ``--engine`` (except the
reference) the budget's generated traces in ONE ``run`` call and compares each
output with the oracle's; a difference is shrunk and printed as a scenario.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.outputs import TABLES, Row
from harness.traces import InvalidConfig, Item, Trace
from reference.sla_admission import (
    LoadSheddingConfig,
    LoadSheddingManager,
    SlaExceeded,
    StreamAdmissionController,
    StreamSlaConfig,
    run_trace,
)
from strategies.common import check_generated
from strategies.sla_admission import (
    AREA,
    DIFFERENTIAL,
    INVALID_CONFIGS,
    METRIC_NAMES,
    NANO,
    SHEDDER_DEFAULTS,
    SLA_ADMITTED,
    arrivals,
    drop_probability,
    figures,
    load_item,
    load_score,
    shedder_draw,
    shedder_settings,
    sla_admission_traces,
    stream_configs,
)

TRACES = sla_admission_traces(large_batch_rate=10)

Output = dict[str, list[Row]]


def _rows(output: Output, table: str) -> list[dict[str, Any]]:
    rows = [dict(zip(TABLES[AREA][table], r, strict=True)) for r in output[table]]
    if table in ("decisions", "errors"):
        rows.sort(key=lambda r: (r["batch"], r["seq"]))  # arrival order
    return rows


def _run(trace: Trace) -> Output | None:
    try:
        return run_trace(trace)
    except InvalidConfig:
        return None


def _error_at(output: Output) -> set[tuple[int, int]]:
    return {(b, s) for b, s, _ in output["errors"]}


def _by_stream(output: Output, trace: Trace) -> dict[str, list[dict[str, Any]]]:
    """The decisions of each registered stream, in arrival order."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in _rows(output, "decisions"):
        if r["stream"] in trace.config["streams"]:
            out[r["stream"]].append(r)
    return out


def _answers(output: Output) -> list[tuple[Any, ...]]:
    """Every decision without its batch and seq, in arrival order (both move when items do)."""
    return [tuple(v for k, v in r.items() if k not in ("batch", "seq")) for r in _rows(output, "decisions")]


def _sla_answers(output: Output) -> list[tuple[Any, ...]]:
    """``_answers`` with the shedder's part folded into ``admit``: the SLA's answer alone (OXS-R13)."""
    return [
        tuple(
            "admit" if k == "decision" and v in SLA_ADMITTED else v
            for k, v in r.items()
            if k not in ("batch", "seq")
        )
        for r in _rows(output, "decisions")
    ]


def _without(trace: Trace, batch: int, seq: int) -> Trace:
    return replace(
        trace,
        batches=tuple(
            tuple(i for s, i in enumerate(items) if (b, s) != (batch, seq))
            for b, items in enumerate(trace.batches)
        ),
    )


# ---- the three checks (OXS-R5..R9) -------------------------------------------------------


@pytest.mark.clauses("OXS-R6", "OXS-R9", "OXS-R17")
@given(TRACES)
def test_lag_is_how_far_the_event_is_behind_its_arrival_and_only_lag_above_max_lag_rejects(
    trace: Trace,
) -> None:
    out = _run(trace)
    if out is None:
        return
    streams = trace.config["streams"]
    for r in _rows(out, "decisions"):
        if r["stream"] not in streams:
            assert (r["decision"], r["reason"], r["tokens_left"], r["lag"]) == (
                "reject",
                "unregistered_stream",
                None,
                None,
            )
            continue
        assert r["lag"] == max(0, r["now"] - r["event_time"]), r
        assert (r["reason"] == "lag") == (r["lag"] > figures(streams[r["stream"]]).max_lag), r


@pytest.mark.clauses("OXS-R5", "OXS-R7")
@given(TRACES)
def test_the_jitter_reference_moves_on_admissions_and_jitter_rejections_only(trace: Trace) -> None:
    """A stream silent past its budget is never locked out: the event that finds the gap is
    rejected and becomes the reference, so the next one within the budget passes the check."""
    out = _run(trace)
    if out is None:
        return
    for name, rows in _by_stream(out, trace).items():
        budget = figures(trace.config["streams"][name]).jitter_budget
        reference: int | None = None
        after_rejection: int | None = None
        for r in rows:
            if r["reason"] == "lag":
                continue  # OXS-R5: never reaches the jitter check
            fails = budget is not None and reference is not None and r["now"] - reference > budget
            assert (r["reason"] == "jitter") == fails, (r, reference, budget)
            if after_rejection is not None and budget is not None and r["now"] - after_rejection <= budget:
                assert r["reason"] != "jitter", r  # not locked out
            after_rejection = r["now"] if r["reason"] == "jitter" else None
            if budget is not None and (r["reason"] == "jitter" or r["decision"] in SLA_ADMITTED):
                reference = r["now"]


@pytest.mark.clauses("OXS-R3", "OXS-R4", "OXS-R5", "OXS-R8", "OXS-R9", "OXS-R17")
@given(TRACES)
def test_the_bucket_refills_and_spends_exact_nano_tokens(trace: Trace) -> None:
    """Only events past the lag and jitter checks touch the bucket: a refill capped at the
    capacity, then a spend when the level holds the cost; tokens_left is that level."""
    out = _run(trace)
    if out is None:
        return
    for name, rows in _by_stream(out, trace).items():
        fig = figures(trace.config["streams"][name])
        level, last = fig.capacity_nano, None
        for r in rows:
            assert (r["tokens_left"] is not None) == (r["decision"] in SLA_ADMITTED), r
            if r["reason"] in ("lag", "jitter"):
                continue
            if last is not None and r["now"] > last:
                level = min(fig.capacity_nano, level + fig.refill_per_ms * (r["now"] - last))
            last = r["now"] if last is None else max(last, r["now"])
            assert (r["reason"] == "rate") == (level < fig.cost_nano), (r, level)
            if r["reason"] is None:
                level -= fig.cost_nano
                assert r["tokens_left"] == level / NANO, (r, level)


@pytest.mark.clauses("OXS-R3", "OXS-R8", "OXS-R17")
@given(TRACES)
def test_what_a_stream_admits_over_any_span_costs_at_most_the_capacity_and_its_refill(trace: Trace) -> None:
    """OXS-R8's consequence: SLA-admitted events (admitted, shed or throttled) with arrival times
    in any span of T ms cost at most capacity + refill_per_ms * T nano-tokens; no level is negative."""
    out = _run(trace)
    if out is None:
        return
    for name, rows in _by_stream(out, trace).items():
        fig = figures(trace.config["streams"][name])
        nows = [r["now"] for r in rows if r["decision"] in SLA_ADMITTED]
        assert nows == sorted(nows)
        for i, first in enumerate(nows):
            for j in range(i, len(nows)):
                spent = (j - i + 1) * fig.cost_nano
                assert spent <= fig.capacity_nano + fig.refill_per_ms * (nows[j] - first), (
                    name,
                    nows[i : j + 1],
                )
        assert all(
            0 <= r["tokens_left"] <= fig.capacity_nano / NANO for r in rows if r["tokens_left"] is not None
        )
    for s in _rows(out, "streams"):
        fig = figures(trace.config["streams"][s["stream"]])
        assert 0 <= s["tokens"] <= fig.capacity_nano / NANO, s


@pytest.mark.clauses("OXS-R5", "OXS-R8")
@given(TRACES, st.data())
def test_an_event_rejected_for_lag_or_rate_changes_no_later_sla_answer(
    trace: Trace, data: st.DataObject
) -> None:
    """A lag rejection spends no token and moves no reference; a rate rejection spends nothing
    and its refill is the one the next event would make: without the event, every other
    event gets the same SLA answer (the shedder's draws shift, OXS-R12, so they are left out)."""
    out = _run(trace)
    if out is None:
        return
    rejected = [r for r in _rows(out, "decisions") if r["reason"] in ("lag", "rate")]
    if not rejected:
        return
    victim = data.draw(st.sampled_from(rejected))
    reduced = _run(_without(trace, victim["batch"], victim["seq"]))
    assert reduced is not None
    expected = _sla_answers(out)
    expected.pop(_rows(out, "decisions").index(victim))
    assert _sla_answers(reduced) == expected


@pytest.mark.clauses("OXS-R9", "OXS-R12", "OXS-R15")
@given(TRACES, st.data())
def test_an_unregistered_stream_or_a_malformed_item_changes_nothing(
    trace: Trace, data: st.DataObject
) -> None:
    """Neither has a stream position (OXS-R12) nor changes state (TR-7): without it, every
    other event gets exactly the same decision, shed and throttled ones included."""
    out = _run(trace)
    if out is None:
        return
    streams = trace.config["streams"]
    decisions = _rows(out, "decisions")
    inert = [(r["batch"], r["seq"]) for r in decisions if r["stream"] not in streams] + sorted(_error_at(out))
    if not inert:
        return
    batch, seq = data.draw(st.sampled_from(inert))
    reduced = _run(_without(trace, batch, seq))
    assert reduced is not None
    expected = [
        a for a, r in zip(_answers(out), decisions, strict=True) if (r["batch"], r["seq"]) != (batch, seq)
    ]
    assert _answers(reduced) == expected


# ---- the shedder and the coordinator (OXS-R10..R13) -------------------------------------


@pytest.mark.clauses("OXS-R10", "OXS-R11", "OXS-R12", "OXS-R13")
@given(TRACES)
def test_the_shedder_drops_exactly_the_events_whose_draw_is_below_the_drop_probability(trace: Trace) -> None:
    out = _run(trace)
    if out is None:
        return
    shedder = shedder_settings(trace.config)
    policy = trace.config.get("policy", "Strict")
    decisions = {(r["batch"], r["seq"]): r for r in _rows(out, "decisions")}
    position: Counter[str] = Counter()  # OXS-R12: every event of a registered stream counts
    for b, s, item, _, metrics in arrivals(trace, _error_at(out)):
        if item.kind != "event":
            continue
        r = decisions[(b, s)]
        if r["stream"] not in trace.config["streams"]:
            continue
        n = position[r["stream"]]
        position[r["stream"]] += 1
        if r["decision"] not in SLA_ADMITTED:
            continue
        dropped = False
        if shedder is not None and policy != "BypassShedder":
            priority = 1 if item.priority is None else item.priority
            probability = drop_probability(load_score(metrics, shedder), priority, shedder)
            dropped = shedder_draw(shedder["seed"], r["stream"], n) < probability
        expected = ("throttle" if policy == "PreferThrottle" else "shed") if dropped else "admit"
        assert r["decision"] == expected, (r, n)


@pytest.mark.clauses("OXS-R10", "OXS-R11", "OXS-R12")
@given(
    st.integers(-(2**63), 2**63 - 1),
    st.text(max_size=8),
    st.integers(0, 2**40),
    st.integers(0, 100),
    st.sampled_from((0, 1, 2, 3)),
)
def test_the_shedder_drops_when_the_keyed_hash_of_stream_and_position_is_below_the_probability(
    seed: int, stream: str, position: int, cpu: int, priority: int
) -> None:
    """The shedder's API on any stream name (non-ASCII ones hash their UTF-8 bytes) and seed."""
    shedder = LoadSheddingManager(LoadSheddingConfig(seed=seed, threshold=500))
    shedder.report({"cpu": cpu})
    settings = {**SHEDDER_DEFAULTS, "seed": seed, "threshold": 500}
    probability = drop_probability(load_score({"cpu": cpu}, settings), priority, settings)
    expected = shedder_draw(seed, stream, position) < probability
    assert shedder.should_drop(stream, position, priority) == expected


@pytest.mark.clauses("OXS-R11", "OXS-R13")
@given(TRACES)
def test_prefer_throttle_throttles_exactly_what_strict_sheds_and_bypass_sheds_nothing(trace: Trace) -> None:
    """The policy only renames the shedder's answer: tokens stay spent either way (OXS-R13)."""
    if _run(trace) is None or "shedder" not in trace.config:
        return
    outs = {
        p: _run(replace(trace, config={**trace.config, "policy": p}))
        for p in ("Strict", "PreferThrottle", "BypassShedder")
    }
    strict, throttle, bypass = (_answers(o) for o in outs.values() if o is not None)
    at = TABLES[AREA]["decisions"].index("decision") - 2  # the answers leave out batch and seq

    def renamed(answers: list[tuple[Any, ...]], names: dict[str, str]) -> list[tuple[Any, ...]]:
        return [a[:at] + (names.get(a[at], a[at]),) + a[at + 1 :] for a in answers]

    assert renamed(strict, {"shed": "throttle"}) == throttle
    assert renamed(strict, {"shed": "admit"}) == bypass
    assert all(a[at] != "shed" for a in throttle) and all(a[at] in ("admit", "reject") for a in bypass)


# ---- nothing is lost (OXS-R15..R17) ------------------------------------------------------


def _expected_error(item: Item, clock: int) -> str | None:
    """OXS-R15: the reasons in their order."""
    if item.kind not in ("event", "clock", "load"):
        return "unsupported_item"
    if item.kind == "event":
        if item.key is None:
            return "missing_stream"
        if item.event_time is None:
            return "missing_event_time"
        if item.priority is not None and not 0 <= item.priority <= 3:
            return "invalid_priority"
        return None
    if item.kind == "clock":
        if item.time is None:
            return "missing_time"
        return "clock_went_backwards" if item.time < clock else None
    metrics = dict(item.metrics or ())
    percent_ok = all(0 <= metrics.get(n, 0) <= 100 for n in ("cpu", "memory"))
    counts_ok = all(metrics.get(n, 0) >= 0 for n in ("queue_depth", "latency"))
    known = set(metrics) <= set(METRIC_NAMES)
    return None if metrics and known and percent_ok and counts_ok else "invalid_load"


@pytest.mark.clauses("OXS-R9", "OXS-R10", "OXS-R15", "OXS-R16", "OXS-R17")
@given(TRACES)
def test_nothing_is_lost_every_event_has_one_decision_and_every_malformed_item_one_error(
    trace: Trace,
) -> None:
    out = _run(trace)
    if out is None:
        return
    clock = 0
    errors: dict[tuple[int, int], str] = {}
    events: dict[tuple[int, int], int] = {}  # an event's arrival instant
    for b, batch in enumerate(trace.batches):
        for s, item in enumerate(batch):
            reason = _expected_error(item, clock)
            if reason is not None:
                errors[(b, s)] = reason
            elif item.kind == "clock":
                assert item.time is not None
                clock = item.time
            elif item.kind == "event":
                events[(b, s)] = clock
    assert {(r["batch"], r["seq"]): r["reason"] for r in _rows(out, "errors")} == errors
    assert len(out["errors"]) == len(errors)
    decisions = _rows(out, "decisions")
    assert [(r["batch"], r["seq"]) for r in decisions] == sorted(events)  # one row each, none for the rest
    assert all(r["now"] == events[(r["batch"], r["seq"])] for r in decisions)  # OXS-R16

    shedder = shedder_settings(trace.config)
    score_at_end: dict[int, int] = {}
    for b, _, _, _, metrics in arrivals(trace, set(errors)):
        if shedder is not None:
            score_at_end[b] = load_score(metrics, shedder)
    progress = _rows(out, "progress")
    assert [p["batch"] for p in progress] == list(range(len(trace.batches)))
    streams = trace.config["streams"]
    stats: dict[str, Counter[str]] = defaultdict(Counter)
    stream_rows = {(s["batch"], s["stream"]): s for s in _rows(out, "streams")}
    for p in progress:
        mine = [r for r in decisions if r["batch"] == p["batch"]]
        totals = Counter(r["decision"] for r in decisions if r["batch"] <= p["batch"])
        assert (p["admitted"], p["rejected"], p["shed"], p["throttled"]) == (
            totals["admit"], totals["reject"], totals["shed"], totals["throttle"],
        ), p  # fmt: skip
        if shedder is None:
            assert p["load_score"] is None
        else:
            latest = [score_at_end[b] for b in sorted(score_at_end) if b <= p["batch"]]
            assert p["load_score"] == (latest[-1] if latest else 0), p  # all metrics are 0 until reported
        for r in mine:
            if r["stream"] not in streams:
                continue
            # OXS-R9: the controller counts what the SLA admits, the coordinator its sheds and throttles
            admitted = r["decision"] in SLA_ADMITTED
            stats[r["stream"]]["admitted" if admitted else f"rejected_{r['reason']}"] += 1
            if r["decision"] in ("shed", "throttle"):
                stats[r["stream"]]["shed" if r["decision"] == "shed" else "throttled"] += 1
        touched = {r["stream"] for r in mine if r["stream"] in streams}
        assert {k for b, k in stream_rows if b == p["batch"]} == touched
        for name in touched:
            row = stream_rows[(p["batch"], name)]
            for column in (
                "admitted",
                "rejected_lag",
                "rejected_jitter",
                "rejected_rate",
                "shed",
                "throttled",
            ):
                assert row[column] == stats[name][column], (row, column)


@pytest.mark.clauses("OXS-R10", "OXS-R15", "OXS-R17")
@given(st.dictionaries(st.sampled_from((*METRIC_NAMES, "disk")), st.integers(-3, 1500), max_size=5))
def test_a_load_report_is_refused_exactly_when_a_metric_is_unknown_or_out_of_range(
    metrics: dict[str, int],
) -> None:
    """A refused report keeps the earlier metrics; an accepted one sets the score of OXS-R10."""
    config = {"streams": {"orders": {"class": "Gold"}}, "shedder": {}}
    earlier = load_item({"cpu": 42})
    out = run_trace(Trace(AREA, config, ((earlier, load_item(metrics)),)))
    reason = _expected_error(load_item(metrics), 0)
    assert out["errors"] == ([(0, 1, reason)] if reason else [])
    shedder = shedder_settings(config)
    assert shedder is not None
    in_effect = {"cpu": 42} if reason else {"cpu": 42, **metrics}
    assert out["progress"][0][-1] == load_score(in_effect, shedder)


@pytest.mark.clauses("OXS-R18")
@given(TRACES, st.data())
def test_decisions_do_not_depend_on_where_batches_end(trace: Trace, data: st.DataObject) -> None:
    """The same items cut into other batches (empty ones included) give the same decisions,
    errors, final totals and final stream counters, item by item in arrival order."""
    out = _run(trace)
    if out is None:
        return
    flat = [item for batch in trace.batches for item in batch]
    cuts = sorted(data.draw(st.lists(st.integers(0, len(flat)), max_size=6)))
    bounds = list(zip([0, *cuts], [*cuts, len(flat)], strict=True))
    recut = Trace(AREA, trace.config, tuple(tuple(flat[a:z]) for a, z in bounds))
    again = _run(recut)
    assert again is not None

    def summary(o: Output) -> tuple[Any, ...]:
        last_of_stream = {s["stream"]: tuple(s.values())[2:] for s in _rows(o, "streams")}
        return (
            _answers(o),
            [r["reason"] for r in _rows(o, "errors")],
            tuple(_rows(o, "progress")[-1].values())[1:],
            sorted(last_of_stream.items()),
        )

    assert summary(again) == summary(out)


@pytest.mark.clauses("OXS-R18")
@given(TRACES)
def test_restart_points_change_nothing(trace: Trace) -> None:
    out = _run(trace)
    if out is None:
        return
    assert run_trace(replace(trace, restart_after=frozenset())) == out
    every = frozenset(range(len(trace.batches) - 1))
    assert run_trace(replace(trace, restart_after=every)) == out


# ---- configurations (OXS-R2, R3, R14) ----------------------------------------------------

#: refusals that JSON cannot carry, so the committed vectors never hold them
NOT_JSON_INVALID_CONFIGS = st.sampled_from((
    {"streams": {"orders": {"class": "Gold", "max_events_per_sec": float("nan")}}},
    {"streams": {"orders": {"class": "Gold", "max_events_per_sec": float("inf")}}},
    {"streams": {"orders": {"class": "Gold", "token_cost": float("nan")}}},
    {"streams": {"orders": {"class": "Gold", "token_cost": float("-inf")}}},
    {"streams": {7: {"class": "Gold"}}},
))  # fmt: skip


@pytest.mark.clauses("OXS-R1", "OXS-R2", "OXS-R3", "OXS-R14")
@given(st.one_of(INVALID_CONFIGS, NOT_JSON_INVALID_CONFIGS))
def test_invalid_configurations_are_refused(config: dict[str, Any]) -> None:
    with pytest.raises(InvalidConfig):
        run_trace(Trace(AREA, config, ((),)))


@pytest.mark.clauses("OXS-R2", "OXS-R5", "OXS-R7", "OXS-R8")
@given(
    stream_configs(), st.lists(st.tuples(st.integers(0, 3000), st.integers(0, 3000)), min_size=1, max_size=30)
)
def test_registering_a_stream_again_starts_it_afresh(
    settings: dict[str, Any], history: list[tuple[int, int]]
) -> None:
    """After any history, a stream registered again answers like a stream never seen: a full
    bucket and no jitter reference (OXS-R2)."""
    config = StreamSlaConfig.from_mapping(settings)
    used, fresh = StreamAdmissionController(), StreamAdmissionController()
    used.register("s", config)
    now = 0
    for gap, back in history:
        now += gap
        _answer(used, now - back, now)
    used.register("s", config)
    fresh.register("s", config)
    later = now + 1
    for gap, back in history:
        later += gap
        assert _answer(used, later - back, later) == _answer(fresh, later - back, later)


@pytest.mark.clauses("OXS-R8")
@given(stream_configs(), st.lists(st.integers(0, 20_000), min_size=1, max_size=40))
def test_arrivals_out_of_order_refill_only_what_the_latest_arrival_adds(
    settings: dict[str, Any], nows: list[int]
) -> None:
    """A pipeline's arrival times need not be in order; a ``now`` at or before the last refill
    refills nothing, so everything admitted costs at most the capacity plus the refill from the
    first arrival to the latest (OXS-R8)."""
    fig = figures(settings)
    controller = StreamAdmissionController()
    controller.register(
        "s", StreamSlaConfig.from_mapping({**settings, "max_lag": None, "jitter_budget_ms": None})
    )
    admitted = sum(1 for now in nows if _answer(controller, now, now)[0] == "admit")
    assert admitted * fig.cost_nano <= fig.capacity_nano + fig.refill_per_ms * (max(nows) - nows[0])


def _answer(controller: StreamAdmissionController, event_ts: int, now: int) -> tuple[Any, ...]:
    try:
        admit = controller.try_admit("s", event_ts, now)
    except SlaExceeded as rejected:
        return ("reject", rejected.check, rejected.lag_ms)
    return ("admit", admit.tokens_left, admit.lag_ms)


# ---- differential ---------------------------------------------------------------------------


@pytest.mark.clauses(
    "OXS-R1", "OXS-R2", "OXS-R3", "OXS-R4", "OXS-R5", "OXS-R6", "OXS-R7", "OXS-R8", "OXS-R9", "OXS-R10",
    "OXS-R11", "OXS-R12", "OXS-R13", "OXS-R14", "OXS-R15", "OXS-R16", "OXS-R17", "OXS-R18",
)  # fmt: skip
def test_engine_agrees_with_the_oracle(engine_under_test: Any) -> None:
    """All generated traces in ONE engine.run call; a difference is shrunk and printed as Gherkin."""
    check_generated(engine_under_test, *DIFFERENTIAL)
