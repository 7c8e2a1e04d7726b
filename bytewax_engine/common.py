"""What every area's Bytewax dataflow shares: the clock, the observed run, time as datetimes.

One dataflow per case. Bytewax runs a dataflow in process (``bytewax.testing.run_main``: one worker)
in about 3 ms, so each case is a dataflow of its own and runs alone (TR-9) without sharing keys or
stretches of time with other cases. The source hands over one item at a time (``TestingSource`` with
``batch_size=1``), and the runtime gives each key's window logic one item per batch, which the observed
clock checks on every item: a run that grouped items, or in which an item met another item's
processing clock, stops with an error instead of answering.

Time. Bytewax's windowing works on aware UTC datetimes; the spec's integer milliseconds are the
datetimes ``EPOCH + t ms`` (a timedelta keeps microseconds, so milliseconds are exact both ways).
Cases whose times or durations reach beyond ``TIME_LIMIT`` are declined: datetimes stop at the years
1 and 9999, so the i64 ends of TR-2 are out of reach.

The clock. ``EventClock(ts_getter, wait_for_system_duration, now_getter, to_system_utc)`` documents
its watermark as "the largest timestamp seen thus far, minus the waiting duration, plus the system
time duration that has elapsed since that item was seen", and an item is late when its timestamp is
below it (``_WindowLogic.on_batch``: ``value_timestamp < watermark``). ``now_getter`` is its
documented injection point for the system time: the adapter hands it a ``TimeTestingGetter`` that
holds the trace's processing clock (TR-4: 0 at the start, moved by ``clock`` items where the area has
them), so nothing reads the wall clock. ``to_system_utc`` returns None, which its documentation says
makes "the runtime ... not wake up to close windows and ... depend on new items or EOF": Bytewax's
runtime schedules wake-ups by the real wall clock, which an injected clock cannot drive, so a window
closes at an item of its key or at the end of the input.

Bytewax instantiates a clock "for each key which is encountered" (``ClockLogic``'s docstring): every
key has its own watermark. ``ObservedClock`` is a ``Clock`` (the documented way to give a windowing
operator a sense of time) that builds Bytewax's own ``EventClock`` logic and records, without
changing anything, what the runtime asks of it and what it answers: the items each key's logic is
given and the end of the input. A window logic (``window``'s documented ``WindowLogic``) records
where each window closes. From that record the adapter learns which item's processing closed a
window, to name its batch; it never compares a time with a watermark itself.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MS = timedelta(milliseconds=1)
# ms (about 317 years): every time, and every time plus or minus a duration, is a datetime
TIME_LIMIT = 10**13


def to_datetime(ms: int) -> datetime:
    return EPOCH + ms * MS


def to_ms(moment: datetime) -> int:
    return (moment - EPOCH) // MS


def fits(*values: Any) -> bool:
    """True when every integer value is small enough for Bytewax's datetimes (module docstring)."""
    return all(not isinstance(v, int) or abs(v) < TIME_LIMIT for v in values)


def out_of_range(case_id: str) -> dict[str, Any]:
    return {
        "id": case_id,
        "unsupported": (
            f"times or durations of {TIME_LIMIT} ms or more: Bytewax's windowing works on datetimes "
            "(years 1 to 9999), so the i64 ends of TR-2 are out of reach"
        ),
    }


def log(message: str) -> None:
    print(f"[bytewax_engine] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Event:
    """One trace event as the dataflow carries it; ``now`` is the processing clock when it arrives."""

    batch: int
    seq: int
    key: str
    time: int
    value: int
    now: int = 0


@dataclass
class Record:
    """What the runtime asked of the clocks and window logics of one run, in the order it asked."""

    entries: list[tuple[Any, ...]] = field(default_factory=list)
    closes: int = 0


class Accumulate:
    """Bytewax's ``WindowLogic`` counting and summing a window's events; records its closing."""

    def __init__(self, record: Record) -> None:
        self.record = record
        self.count = 0
        self.sum = 0

    def on_value(self, value: Event) -> Iterable[Any]:
        self.count += 1
        self.sum += value.value
        return ()

    def on_merge(self, original: Accumulate) -> Iterable[Any]:
        self.count += original.count
        self.sum += original.sum
        return ()

    def on_close(self) -> Iterable[Any]:
        self.record.closes += 1
        serial = self.record.closes
        self.record.entries.append(("close", serial))
        return ((serial, self.count, self.sum),)

    def snapshot(self) -> tuple[int, int]:
        return (self.count, self.sum)


def observed_clock(record: Record, getter: Any, wait_ms: int) -> Any:
    """Bytewax's EventClock (wait ``wait_ms``, now from ``getter``), its answers recorded."""
    from bytewax.operators.windowing import Clock, ClockLogic, EventClock

    inner = EventClock(
        lambda e: to_datetime(e.time), wait_ms * MS, now_getter=getter.get, to_system_utc=lambda _t: None
    )

    class ObservedLogic(ClockLogic):  # type: ignore[misc]
        def __init__(self, logic: Any) -> None:
            self.logic = logic
            self.record = record
            self.items = 0

        def before_batch(self) -> None:
            self.items = 0
            self.logic.before_batch()

        def on_item(self, value: Event) -> tuple[datetime, datetime]:
            self.items += 1  # one item per batch: a close is then the effect of that item (module docstring)
            if self.items > 1 or to_datetime(value.now) != getter.now:
                raise RuntimeError(f"item {value} met the clock {getter.now}: the run is not item by item")
            stamp, watermark = self.logic.on_item(value)
            self.record.entries.append(("item", value, to_ms(watermark)))
            return stamp, watermark

        def on_notify(self) -> datetime:
            return self.logic.on_notify()

        def on_eof(self) -> datetime:
            self.record.entries.append(("eof",))
            return self.logic.on_eof()

        def to_system_utc(self, timestamp: datetime) -> datetime | None:
            return self.logic.to_system_utc(timestamp)

        def snapshot(self) -> Any:
            return self.logic.snapshot()

    class ObservedClock(Clock):  # type: ignore[misc]
        def build(self, resume_state: Any) -> Any:
            return ObservedLogic(inner.build(resume_state))

    return ObservedClock()


@dataclass
class Run:
    """The outputs of one windowed run: closed windows, late items, and the record of the run."""

    windows: list[dict[str, Any]]
    late: list[Event]
    record: Record


def run_windowed(items: list[Event | int], windower: Any, wait_ms: int) -> Run:
    """Runs ``items`` (events, and ints that move the processing clock) through Bytewax's ``window``
    operator keyed by the event's key; returns each closed window with the batch of the item whose
    processing closed it (None for the end of the input) and the late output."""
    import bytewax.operators as op
    import bytewax.operators.windowing as win
    from bytewax.dataflow import Dataflow
    from bytewax.testing import TestingSink, TestingSource, TimeTestingGetter, run_main

    record = Record()
    getter = TimeTestingGetter(EPOCH)
    stamped: list[Event] = []
    now = 0
    for item in items:
        if isinstance(item, int):
            now = max(now, item)  # TR-4: a clock item earlier than the clock moves nothing
        else:
            stamped.append(Event(item.batch, item.seq, item.key, item.time, item.value, now))

    def move_clock(e: Event) -> Event:
        getter.now = to_datetime(e.now)  # the trace's processing clock when this item arrives (TR-4)
        return e

    flow = Dataflow("case")
    source = op.input("trace", flow, TestingSource(stamped, batch_size=1))
    keyed = op.key_on("key", op.map("clock", source, move_clock), lambda e: e.key)
    out = win.window(
        "window", keyed, observed_clock(record, getter, wait_ms), windower, lambda _s: Accumulate(record)
    )
    down: list[Any] = []
    late: list[Any] = []
    meta: list[Any] = []
    op.output("down", out.down, TestingSink(down))
    op.output("late", out.late, TestingSink(late))
    op.output("meta", out.meta, TestingSink(meta))
    run_main(flow)

    closed_at: dict[int, int | None] = {}
    last: Event | None = None
    ended = False
    for entry in record.entries:
        if entry[0] == "item":
            last = entry[1]
        elif entry[0] == "eof":
            ended = True
        elif entry[0] == "close":
            closed_at[entry[1]] = None if ended or last is None else last.batch
    bounds = {(key, wid): m for key, (wid, m) in meta}
    windows = []
    for key, (wid, (serial, count, total)) in down:
        m = bounds[(key, wid)]
        windows.append(
            {
                "key": key,
                "batch": closed_at[serial],
                "open": to_ms(m.open_time),
                "close": to_ms(m.close_time),
                "count": count,
                "sum": total,
            }
        )
    return Run(windows, [e for _key, (_wid, e) in late], record)


def provenance() -> dict[str, str]:
    """Versions and settings of the run (the engine protocol's provenance line)."""
    from importlib.metadata import version

    return {
        "bytewax": version("bytewax"),
        "python": sys.version.split()[0],
        "workers": "1 (bytewax.testing.run_main)",
        "dataflows": "one per case",
        "clock": "EventClock, now_getter = the trace's processing clock, to_system_utc = None",
        "window ordered": "True (Bytewax's default)",
        "source batch_size": "1",
    }
