"""``eventtime-conformance pipeline``: the oxirs pipeline (spec/pipeline.md) over a sample it generates.

The sample is a trace of the pipeline area drawn from a seed with ``random`` (no Hypothesis): a few
minutes of events from a few hundred producers on four streams, one micro-batch per second of
processing time. Orders and payments of the same order id feed both joins; clicks come from many
users; sensors send little until a burst that their Bronze agreement cannot take, while the load
report rises and the shedder drops what the policy lets it. Events arrive out of order (some late
against their stream's watermark), about one in fifty is delivered again up to two seconds later, one
stream that nobody registered sends a little, and the run restarts from its checkpoint half way.
The producers' closing watermarks end it, so every session is released.

The run prints a progress bar, writes every output table as CSV and ends with a summary a person
reads. It runs on the oracle: the Spark pipeline is not built yet.
"""

from __future__ import annotations

import csv
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.outputs import TABLES, Output, canonical
from harness.traces import Item, Trace

AREA = "pipeline"
SECOND = 1000

#: the sample's agreements: the joins' streams are Gold, clicks Platinum, sensors Bronze (1 token/s)
SAMPLE_CONFIG: dict[str, Any] = {
    "admission": {
        "streams": {
            "orders": {"class": "Gold", "max_lag": 2000},
            "payments": {"class": "Gold", "max_lag": 2000},
            "clicks": {"class": "Platinum", "max_lag": 2000},
            "sensors": {"class": "Bronze"},
        },
        "shedder": {"threshold": 800, "seed": 0},
    },
    "watermarks": {"max_out_of_order_ms": 500},
    "late": {"policy": "Reassign", "max_lateness": 1000},
    "tumbling_join": {"size_ms": 1000, "left": ["orders"], "right": ["payments"]},
    "session_join": {"gap_ms": 500, "left": ["orders"], "right": ["payments"]},
    "aggregation": {"aggregate": "sum", "dedup_window": 64},
}


@dataclass(frozen=True)
class SampleShape:
    seconds: int = 120
    producers: int = 300
    seed: int = 0


class _Producers:
    """Message ids: each event gets the next sequence of one producer's channel (OXE-R1)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.next: Counter[tuple[int, int]] = Counter()

    def event(self, stream: str, key: str, t: int, value: int, priority: int, producers: range) -> Item:
        """An event of ``stream`` from one of ``producers``, on one of its four partitions."""
        producer, partition = self.rng.choice(producers), self.rng.randrange(4)
        sequence = self.next[(producer, partition)]
        self.next[(producer, partition)] += 1
        return Item("event", stream=stream, key=key, event_time=t, value=value, priority=priority,
                    producer=producer, partition=partition, sequence=sequence)  # fmt: skip


def sample_trace(shape: SampleShape) -> Trace:
    """The sample: ``shape.seconds`` batches of one second of arrivals each, then the closing
    watermarks; a restart after the middle batch."""
    if shape.seconds < 2 or shape.producers < 4:
        raise ValueError("a sample needs --seconds 2 or more and --producers 4 or more")
    rng = random.Random(shape.seed)
    ids = _Producers(rng)
    quarter = max(1, shape.producers // 4)  # each stream has a quarter of the producers
    orders, payments = range(0, quarter), range(quarter, 2 * quarter)
    clicks, sensors = range(2 * quarter, 3 * quarter), range(3 * quarter, shape.producers)
    arrivals: list[tuple[int, int, Item]] = []  # (arrival ms, order of drawing, item)
    order_id = 0
    burst = range(shape.seconds // 2, shape.seconds // 2 + max(1, shape.seconds // 12))

    def send(at: int, item: Item) -> None:
        arrivals.append((at, len(arrivals), item))
        if rng.random() < 0.02:  # a re-delivery of the same message, up to two seconds later
            arrivals.append((at + rng.randrange(100, 2000), len(arrivals), item))

    def delay() -> int:  # from the event to its arrival: mostly short, now and then a stall
        return rng.randrange(0, 400) if rng.random() < 0.97 else rng.randrange(1500, 4000)

    for second in range(shape.seconds):
        start = second * SECOND
        for _ in range(rng.randrange(8, 14)):  # orders (high priority), and the payment of most
            t = start + rng.randrange(SECOND)
            key, order_id = f"order-{order_id}", order_id + 1
            amount = rng.randrange(5, 200)
            send(t + delay(), ids.event("orders", key, t, amount, 2, orders))
            if rng.random() < 0.8:
                paid = t + rng.randrange(0, 900)
                send(paid + delay(), ids.event("payments", key, paid, amount, 3, payments))  # critical
        for _ in range(rng.randrange(60, 90)):  # clicks of many users, low and normal priority
            t = start + rng.randrange(SECOND)
            user = f"user-{rng.randrange(500)}"
            send(t + delay(), ids.event("clicks", user, t, 1, rng.choice((0, 1)), clicks))
        for _ in range(25 if second in burst else rng.choice((0, 0, 1))):  # sensors, and their burst
            t = start + rng.randrange(SECOND)
            sensor = f"sensor-{rng.randrange(20)}"
            send(t + delay(), ids.event("sensors", sensor, t, rng.randrange(100), 1, sensors))
        if rng.random() < 0.05:  # a stream nobody registered
            t = start + rng.randrange(SECOND)
            send(t, ids.event("bots", "bot", t, 0, 1, range(10**6, 10**6 + 1)))
    batches: list[list[Item]] = [[] for _ in range(shape.seconds + 5)]
    for at, _, item in sorted(arrivals, key=lambda a: (a[0], a[1])):
        batches[min(at // SECOND, len(batches) - 1)].append(item)
    out = []
    for b, items in enumerate(batches):  # the clock at the batch's end, the load report, then its arrivals
        cpu = 95 if b in burst or b - 1 in burst else 40 + rng.randrange(20)
        out.append((Item("clock", time=(b + 1) * SECOND), Item("load", metrics=(("cpu", cpu),)), *items))
    end = len(batches) * SECOND + 10 * SECOND
    streams = SAMPLE_CONFIG["admission"]["streams"]
    out.append(tuple(Item("watermark", stream=s, time=end) for s in streams))  # the producers' last words
    return Trace(AREA, SAMPLE_CONFIG, tuple(out), frozenset({shape.seconds // 2}),
                 name=f"pipeline sample seed {shape.seed}")  # fmt: skip


class _Counted:
    """A pipeline stream that reports each batch it finishes (the progress bar)."""

    def __init__(self, stream: Any, tick: Callable[[int], None]) -> None:
        self.stream, self.tick = stream, tick

    @property
    def out(self) -> dict[str, list[tuple[Any, ...]]]:
        return self.stream.out  # type: ignore[no-any-return]

    @out.setter
    def out(self, tables: dict[str, list[tuple[Any, ...]]]) -> None:
        self.stream.out = tables

    def run_batch(self, b: int, batch: Any) -> None:
        self.stream.run_batch(b, batch)
        self.tick(len(batch))

    def checkpoint(self) -> dict[str, Any]:
        return self.stream.checkpoint()  # type: ignore[no-any-return]

    def restore(self, snapshot: dict[str, Any]) -> None:
        self.stream.restore(snapshot)


def run_on_the_oracle(trace: Trace, progress: bool = True) -> Output:
    """The oracle's answer, batch by batch behind a progress bar (on standard error)."""
    from tqdm import tqdm

    from reference.pipeline import PipelineStream
    from reference.traces import play

    items = sum(len(b) for b in trace.batches)
    with tqdm(
        total=items, unit="item", desc="pipeline (oracle)", disable=not progress, file=sys.stderr
    ) as bar:
        raw = play(trace, lambda config: _Counted(PipelineStream(config), bar.update))
    return canonical(AREA, raw)


def write_tables(output: Output, folder: Path) -> None:
    """One CSV file per output table, with its header; an empty cell is a null."""
    folder.mkdir(parents=True, exist_ok=True)
    for table, columns in TABLES[AREA].items():
        with (folder / f"{table}.csv").open("w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(columns)
            writer.writerows(["" if v is None else v for v in row] for row in output[table])


def summary(trace: Trace, output: Output, seconds: float, folder: Path) -> list[str]:
    """What happened, in a few lines: admission, shedding, lateness, joins, aggregates."""
    columns = TABLES[AREA]
    ingress = [dict(zip(columns["ingress"], r, strict=True)) for r in output["ingress"]]
    decisions = Counter(r["decision"] for r in ingress)
    reasons = Counter(r["reason"] for r in ingress if r["decision"] == "reject")
    verdicts = Counter(r["verdict"] for r in ingress if r["verdict"] is not None)
    joins = Counter(r[2] for r in output["pairs"])
    messages = Counter(r[-1] for r in output["messages"])
    last = dict(zip(columns["progress"], max(output["progress"]), strict=True))
    events = sum(1 for b in trace.batches for i in b if i.kind == "event")
    keys = {r[1] for r in output["aggregates"]}
    by_reason = ", ".join(f"{n} {why}" for why, n in sorted(reasons.items())) or "none"
    late = ", ".join(f"{n} {v}" for v, n in sorted(verdicts.items()) if v != "on_time") or "none"
    return [
        f"pipeline on the oracle: {events} events in {len(trace.batches)} micro-batches, "
        f"{len(trace.restart_after)} restart, {seconds:.1f} s ({events / max(seconds, 1e-9):,.0f} events/s)",
        f"  admitted {decisions['admit']}; rejected {decisions['reject']} ({by_reason}); "
        f"shed {decisions['shed']}; throttled {decisions['throttle']}",
        f"  late against their stream's watermark: {late}",
        f"  join pairs: {joins['tumbling_join']} tumbling, {joins['session_join']} session; "
        f"{len(output['join_late'])} dropped as late by the session join",
        f"  aggregates: {len(keys)} keys; {messages['folded']} messages folded, "
        f"{messages['duplicate']} re-deliveries not folded again, "
        f"{messages['outside_window']} outside the window",
        f"  watermark at the end: {last['watermark']}",
        f"  tables: {folder}/{{{','.join(columns)}}}.csv",
        f"  errors: {len(output['errors'])}",
    ]


def run(shape: SampleShape, folder: Path, progress: bool = True) -> list[str]:
    trace = sample_trace(shape)
    started = time.perf_counter()
    output = run_on_the_oracle(trace, progress)
    seconds = time.perf_counter() - started
    write_tables(output, folder)
    return summary(trace, output, seconds, folder)


__all__ = [
    "SAMPLE_CONFIG",
    "SampleShape",
    "run",
    "run_on_the_oracle",
    "sample_trace",
    "summary",
    "write_tables",
]
