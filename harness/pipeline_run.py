"""``eventtime-conformance pipeline``: the oxirs pipeline (spec/pipeline.md) over a sample it generates.

The sample is a trace of the pipeline area drawn from a seed with ``random`` (no Hypothesis): a few
minutes of events from a few hundred producers on four streams, one micro-batch per second of
processing time (or per ``batch_seconds``). Orders and payments of the same order id feed both
joins; clicks come from many users; sensors send little until a burst that their Bronze agreement
cannot take, while the load report rises and the shedder drops what the policy lets it. Events
arrive out of order (some late against their stream's watermark), about one in fifty is delivered
again up to two seconds later, one stream that nobody registered sends a little, and the run
restarts from its checkpoint half way.
The producers' closing watermarks end it, so every session is released.

The run prints a progress bar, writes every output table as CSV and ends with a summary a person
reads. It runs on the oracle, or on the Spark engine (the pipeline as one streaming query, stopped
and continued from its checkpoint at the restart), where it runs the oracle on the same sample too
and says whether every table agrees.
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
    batch_seconds: int = 1  # processing seconds of arrivals per micro-batch


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
    """The sample: ``shape.seconds`` seconds of arrivals in batches of ``shape.batch_seconds``, then
    the closing watermarks; a restart after the batch that holds the middle second."""
    if shape.seconds < 2 or shape.producers < 4:
        raise ValueError("a sample needs --seconds 2 or more and --producers 4 or more")
    if shape.batch_seconds < 1:
        raise ValueError("a sample needs --batch-seconds 1 or more")
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
    per_second: list[list[Item]] = [[] for _ in range(shape.seconds + 5)]
    for at, _, item in sorted(arrivals, key=lambda a: (a[0], a[1])):
        per_second[min(at // SECOND, len(per_second) - 1)].append(item)
    out = []
    for first in range(0, len(per_second), shape.batch_seconds):
        # each second: the clock at its end, then its arrivals; the load report after the first clock
        seconds = range(first, min(first + shape.batch_seconds, len(per_second)))
        hot = any(s in burst or s - 1 in burst for s in seconds)
        cpu = 95 if hot else 40 + rng.randrange(20)
        batch: list[Item] = []
        for s in seconds:
            batch.append(Item("clock", time=(s + 1) * SECOND))
            if s == first:
                batch.append(Item("load", metrics=(("cpu", cpu),)))
            batch += per_second[s]
        out.append(tuple(batch))
    end = len(per_second) * SECOND + 10 * SECOND
    streams = SAMPLE_CONFIG["admission"]["streams"]
    out.append(tuple(Item("watermark", stream=s, time=end) for s in streams))  # the producers' last words
    middle = (shape.seconds // 2) // shape.batch_seconds
    return Trace(AREA, SAMPLE_CONFIG, tuple(out), frozenset({middle}),
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


def run_on_spark(trace: Trace, progress: bool = True) -> tuple[Output, float]:
    """The Spark engine's answer (the registry's ``spark``: one streaming query, stopped and continued
    from its checkpoint at the restart) and its seconds, the session's start left out. The progress
    bar counts the query's micro-batches, one per batch of the trace."""
    import threading

    from tqdm import tqdm

    from harness.engine import load_engine

    engine = load_engine("spark")
    spark = getattr(engine, "spark")  # noqa: B009 - the session starts here, before the clock
    done = threading.Event()
    with tqdm(
        total=len(trace.batches), unit="batch", desc="pipeline (spark)", disable=not progress, file=sys.stderr
    ) as bar:

        def watch() -> None:  # micro-batch ids go on across the restart: one checkpoint
            while not done.wait(0.5):
                for query in spark.streams.active:
                    last = query.lastProgress
                    if last and last["batchId"] + 1 > bar.n:
                        bar.update(last["batchId"] + 1 - bar.n)

        watcher = threading.Thread(target=watch, name="pipeline-progress", daemon=True)
        started = time.perf_counter()
        watcher.start()
        try:
            [answer] = engine.run([trace])
        finally:
            done.set()
            watcher.join()
        seconds = time.perf_counter() - started
        bar.update(bar.total - bar.n)
    if isinstance(answer, Exception):
        raise answer
    return canonical(AREA, answer), seconds


def differences(expected: Output, found: Output) -> list[str]:
    """Per table whose rows differ: how many rows each side has that the other lacks."""
    out = []
    for table in TABLES[AREA]:
        want, got = Counter(expected[table]), Counter(found[table])
        missing, extra = sum((want - got).values()), sum((got - want).values())
        if missing or extra:
            out.append(
                f"{table}: {missing} rows of the oracle missing, {extra} rows the oracle does not have"
            )
    return out


def write_tables(output: Output, folder: Path) -> None:
    """One CSV file per output table, with its header; an empty cell is a null."""
    folder.mkdir(parents=True, exist_ok=True)
    for table, columns in TABLES[AREA].items():
        with (folder / f"{table}.csv").open("w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(columns)
            writer.writerows(["" if v is None else v for v in row] for row in output[table])


def summary(trace: Trace, output: Output, seconds: float, folder: Path, engine: str = "oracle") -> list[str]:
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
        f"pipeline on {engine}: {events} events in {len(trace.batches)} micro-batches, "
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


ENGINES = ("reference", "spark")


def run(
    shape: SampleShape, folder: Path, progress: bool = True, engine: str = "reference"
) -> tuple[list[str], bool]:
    """(the summary's lines, whether the run agrees with the oracle): on Spark the oracle runs on
    the same sample too and every table is compared; the oracle alone agrees with itself."""
    if engine not in ENGINES:
        raise ValueError(f"engine {engine!r}: give one of {list(ENGINES)}")
    trace = sample_trace(shape)
    started = time.perf_counter()
    expected = run_on_the_oracle(trace, progress)
    oracle_seconds = time.perf_counter() - started
    if engine == "reference":
        write_tables(expected, folder)
        return summary(trace, expected, oracle_seconds, folder), True
    found, seconds = run_on_spark(trace, progress)
    write_tables(found, folder)
    lines = summary(trace, found, seconds, folder, "Spark")
    wrong = differences(expected, found)
    verdict = "every table agrees" if not wrong else "they differ: " + "; ".join(wrong)
    lines.append(f"  against the oracle on the same sample ({oracle_seconds:.1f} s): {verdict}")
    return lines, not wrong


__all__ = [
    "ENGINES",
    "SAMPLE_CONFIG",
    "SampleShape",
    "differences",
    "run",
    "run_on_spark",
    "run_on_the_oracle",
    "sample_trace",
    "summary",
    "write_tables",
]
