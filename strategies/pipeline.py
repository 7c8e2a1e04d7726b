"""Hypothesis strategies for oxirs pipeline traces (spec/pipeline.md).

A trace is two to four registered ingress streams (s0..s3) of mixed SLA classes, tight lag
budgets on some, an optional shedder, one of the three late-data policies, a tumbling join and
a session join whose sides are disjoint subsets of the streams (a stream may feed neither), and
the aggregator. Its items: events of the streams at their own rates around an advancing base
time with disorder (so some arrive behind their stream's watermark), now and then an event of
an unregistered stream, each event a message of its producer's channel with a few
re-deliveries (the same id again, often after a restart point); clock advances (some far
enough to break a lag budget); load reports; watermarks a stream reports itself, a few of them
regressing, and streams that go idle; rare malformed items of each reason of OXP-R14; empty
batches and restart points; about one trace in twelve has a configuration OXP-R13 refuses. Events sit
exactly at their stream's watermark now and then, where the session join finds them late (OXP-R7).
The oracle alone decides the answers.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from harness.traces import InvalidConfig, Item, Trace
from strategies.common import restart_points

AREA = "pipeline"
STREAMS = ("s0", "s1", "s2", "s3")
KEYS = ("a", "b", "c")
CLASSES = ("Bronze", "Silver", "Gold", "Platinum")


@st.composite
def pipeline_configs(draw: st.DrawFn) -> dict[str, Any]:
    streams = list(STREAMS[: draw(st.integers(2, 4))])
    sla = {}
    for name in streams:
        settings: dict[str, Any] = {"class": draw(st.sampled_from(CLASSES))}
        if draw(st.booleans()):
            settings["max_lag"] = draw(st.sampled_from((50, 200, 1000, 100_000)))
        sla[name] = settings
    admission: dict[str, Any] = {"streams": sla}
    if draw(st.integers(0, 2)) == 0:
        admission["shedder"] = {
            "threshold": draw(st.sampled_from((0, 500, 800))),
            "seed": draw(st.integers(0, 9)),
        }
        admission["policy"] = draw(st.sampled_from(("Strict", "PreferThrottle", "BypassShedder")))
    config: dict[str, Any] = {"admission": admission}
    config["watermarks"] = {
        "advance_threshold": draw(st.sampled_from((1, 1, 2, 3))),
        "max_out_of_order_ms": draw(st.sampled_from((0, 0, 5, 20, 100))),
    }
    # Reassign twice as often: a reassigned event sits exactly at its stream's watermark, where the
    # session join finds it late (OXP-R7)
    policy = draw(st.sampled_from(("Drop", "Reassign", "Reassign", "SideOutput")))
    late: dict[str, Any] = {"policy": policy}
    if policy == "Reassign":
        late["max_lateness"] = draw(st.sampled_from((0, 10, 50, 1000)))
    elif policy == "SideOutput":
        late["channel"] = "late"
    config["late"] = late
    for join, size_setting, sizes in (
        ("tumbling_join", "size_ms", (10, 50, 200)),
        ("session_join", "gap_ms", (5, 20)),
    ):
        if draw(st.integers(0, 4)) == 0:
            continue
        roles = draw(
            st.lists(st.sampled_from(("left", "right", "none")), min_size=len(streams), max_size=len(streams))
        )
        roles[0], roles[1] = "left", "right"  # both sides fed
        join_config: dict[str, Any] = {
            size_setting: draw(st.sampled_from(sizes)),
            "left": [s for s, r in zip(streams, roles, strict=True) if r == "left"],
            "right": [s for s, r in zip(streams, roles, strict=True) if r == "right"],
        }
        if draw(st.integers(0, 3)) == 0:
            join_config["allowed_lateness_ms"] = draw(st.sampled_from((1, 10)))
        config[join] = join_config
    config["aggregation"] = {
        "aggregate": draw(st.sampled_from(("sum", "count", "max"))),
        "dedup_window": draw(st.sampled_from((2, 8, 1024))),
    }
    return config


def _malformed(draw: st.DrawFn, stream: str, clock: int) -> Item:
    """One item of each reason of OXP-R14 (TR-7)."""
    message = {"producer": 9, "partition": 0, "sequence": 0}
    kind = draw(st.sampled_from(("no_stream", "no_time", "priority", "no_key", "no_id", "negative", "end",
                                 "wm_unknown", "wm_no_time", "clock_back", "load")))  # fmt: skip
    if kind == "no_stream":
        return Item("event", key="a", event_time=1, **message)
    if kind == "no_time":
        return Item("event", stream=stream, key="a", **message)
    if kind == "priority":
        return Item("event", stream=stream, key="a", event_time=1, priority=7, **message)
    if kind == "no_key":
        return Item("event", stream=stream, event_time=1, **message)
    if kind == "no_id":
        return Item("event", stream=stream, key="a", event_time=1, producer=9)
    if kind == "negative":
        return Item("event", stream=stream, key="a", event_time=1, producer=9, partition=0, sequence=-1)
    if kind == "end":
        return Item("end")
    if kind == "wm_unknown":
        return Item("watermark", stream="nowhere", time=1)
    if kind == "wm_no_time":
        return Item("watermark", stream=stream)
    if kind == "clock_back" and clock > 0:
        return Item("clock", time=clock - 1)
    return Item("load", metrics={"cpu": 101})


def _broken(draw: st.DrawFn, config: dict[str, Any]) -> dict[str, Any]:
    """The configuration with one setting OXP-R13 refuses."""
    broken = {**config}
    streams = list(config["admission"]["streams"])
    how = draw(
        st.sampled_from(
            ("unknown", "side", "both_sides", "window", "threshold", "window_size", "no_admission")
        )
    )
    if how == "unknown":
        broken["fusion"] = {"batch_size": 10}  # section 7's box has no setting (OXP-R4)
    elif how == "side":
        broken["tumbling_join"] = {"size_ms": 10, "left": [streams[0]], "right": ["nowhere"]}
    elif how == "both_sides":
        broken["session_join"] = {"gap_ms": 5, "left": [streams[0]], "right": [streams[0], streams[1]]}
    elif how == "window":
        broken["aggregation"] = {"dedup_window": 0}
    elif how == "threshold":
        broken["watermarks"] = {"advance_threshold": 0}
    elif how == "window_size":
        broken["late"] = {"policy": "Drop", "window_size": 10}
    else:
        del broken["admission"]
    return broken


@st.composite
def pipeline_traces(draw: st.DrawFn) -> Trace:
    config = draw(pipeline_configs())
    if draw(st.integers(0, 11)) == 0:  # about one trace in twelve is refused before any item
        config = _broken(draw, config)
    streams = list(config["admission"]["streams"]) if "admission" in config else ["s0", "s1"]
    idle = {s for s in streams[2:] if draw(st.booleans())}  # streams that send nothing after a while
    base, clock = draw(st.sampled_from((0, 1000))), 0
    shedder = "shedder" in config.get("admission", {})
    top = dict.fromkeys(streams, 0)  # per stream, the largest time sent so far
    sent: dict[str, list[Item]] = {s: [] for s in streams}
    sequence = dict.fromkeys(streams, 0)
    batches = []
    for b in range(draw(st.integers(1, 6))):
        batch: list[Item] = []
        for _ in range(draw(st.integers(0, 12))):
            roll = draw(st.integers(0, 99))
            stream = draw(st.sampled_from(streams))
            if roll < 60:
                if stream in idle and b >= 2:
                    continue
                base += draw(st.sampled_from((0, 1, 5, 20)))
                t = base - draw(st.sampled_from((0, 0, 0, 3, 25, 150)))
                if top[stream] and draw(st.integers(0, 9)) == 0:  # exactly at its stream's watermark
                    t = top[stream] - config.get("watermarks", {}).get("max_out_of_order_ms", 0)
                producer = streams.index(stream)
                key, value = draw(st.sampled_from(KEYS)), draw(st.integers(-5, 20))
                priority = draw(st.sampled_from((None, None, 0, 2, 3)))
                item = Item("event", stream=stream, key=key, event_time=t, value=value, priority=priority,
                            producer=producer, partition=0, sequence=sequence[stream])  # fmt: skip
                sequence[stream] += 1
                sent[stream].append(item)
                top[stream] = max(top[stream], t)
                batch.append(item)
            elif roll < 70 and sent[stream]:
                batch.append(draw(st.sampled_from(sent[stream])))  # a re-delivery: the same message
            elif roll < 78:
                clock += draw(st.sampled_from((1, 10, 100, 400)))
                batch.append(Item("clock", time=clock))
            elif roll < 86:
                time = top[stream] + draw(st.sampled_from((-30, 0, 10, 200)))  # below its watermark sometimes
                batch.append(Item("watermark", stream=stream, time=time))
            elif roll < (94 if shedder else 90):  # a shedder's trace reports its load more often
                batch.append(Item("load", metrics={"cpu": draw(st.sampled_from((0, 60, 90, 100)))}))
            elif roll < 93:
                batch.append(Item("event", stream="x", key="a", event_time=base, producer=7, partition=0,
                                  sequence=draw(st.integers(0, 3))))  # fmt: skip
            elif roll < 96:
                batch.append(_malformed(draw, stream, clock))
        batches.append(tuple(batch))
    final = draw(st.booleans())
    if final:  # the producers' closing watermarks, which release every held session
        batches.append(tuple(Item("watermark", stream=s, time=top[s] + 10_000) for s in streams))
    restarts = draw(restart_points(len(batches)))
    return Trace(AREA, config, tuple(batches), restarts, name="generated pipeline")


#: what a generated trace may reach, with the clauses it exercises (named in exported vectors)
CASES: dict[str, str] = {
    "rejected": "an event admission rejects, reaching no other operator (OXP-R5)",
    "shed_or_throttled": "an event the shedder drops or throttles, reaching no other operator (OXP-R5)",
    "late_dropped": "an admitted event late against its stream's watermark, dropped (OXP-R7)",
    "late_kept": "a late event reassigned or sent to the side output (OXP-R7)",
    "join_late": "an event at its stream's watermark that the session join finds late (OXP-R7)",
    "tumbling_pairs": "pairs of the tumbling join (OXP-R3, R6)",
    "session_pairs": "pairs of the session join, released by a watermark (OXP-R3, R6)",
    "duplicate": "a re-delivery the aggregator does not fold (OXP-R9)",
    "reported_watermark": "a watermark a stream reports itself (OXP-R8)",
    "restart": "a restart of the whole pipeline (OXP-R11)",
    "errors": "malformed items (OXP-R14)",
    "invalid_config": "a configuration refused (OXP-R13)",
}


def cases_reached(trace: Trace, output: Any) -> set[str]:
    """The CASES one trace reaches, read from the trace and the oracle's canonical output."""
    if isinstance(output, InvalidConfig):
        return {"invalid_config"}
    if not isinstance(output, dict):
        return set()
    decisions = {r[5] for r in output["ingress"]}
    verdicts = {r[7] for r in output["ingress"]}
    reached = {
        "rejected": "reject" in decisions,
        "shed_or_throttled": bool(decisions & {"shed", "throttle"}),
        "late_dropped": "dropped" in verdicts,
        "late_kept": bool(verdicts & {"reassigned", "side_output"}),
        "join_late": bool(output["join_late"]),
        "tumbling_pairs": any(r[2] == "tumbling_join" for r in output["pairs"]),
        "session_pairs": any(r[2] == "session_join" for r in output["pairs"]),
        "duplicate": any(r[-1] == "duplicate" for r in output["messages"]),
        "reported_watermark": any(i.kind == "watermark" for b in trace.batches for i in b),
        "restart": bool(trace.restart_after),
        "errors": bool(output["errors"]),
    }
    return {case for case, hit in reached.items() if hit}


#: cases that cannot reach the floor of generator_coverage, and why (none)
RARE: dict[str, str] = {}

#: the traces the vectors export draws for the area (strategies/common.py differential_traces)
DIFFERENTIAL = ((pipeline_traces(), 1.0),)

__all__ = ["AREA", "CASES", "RARE", "DIFFERENTIAL", "cases_reached", "pipeline_configs", "pipeline_traces"]
