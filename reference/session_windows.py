"""Session windows closed by the watermark, with persistent timers (F017E): the oracle of
spec/session_windows.md.

Deliberately simple: a list of open sessions per key, a set of timers, one
event at a time. Every rule names its clause id. Times are integer
milliseconds (Python integers, so comparisons are exact); a watermark is an
int or None ("no watermark yet").
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from harness.traces import I64_MAX, InvalidConfig, Item, Trace, saturating_add, saturating_sub
from reference.traces import Row, play

LAYOUT_VERSION = 1
SESSION_TIMER_PREFIX = "session"
TimerKey = tuple[Any, ...]


class EmitStrategy(enum.Enum):
    """F017E-R11: both emit a session once, when it closes; they differ in late events."""

    OnWindowClose = "OnWindowClose"
    Final = "Final"


# ---- aggregators (F017E-R4) -------------------------------------------------------------


class Aggregator(Protocol):
    """F017E-R4: a zero, adding one value, merging two partial results (sessions merge, R3)."""

    name: str

    def zero(self) -> Any: ...
    def add(self, acc: Any, value: int) -> Any: ...
    def merge(self, a: Any, b: Any) -> Any: ...


class CountAggregator:
    name = "count"

    def zero(self) -> int:
        return 0

    def add(self, acc: int, value: int) -> int:
        return acc + 1

    def merge(self, a: int, b: int) -> int:
        return a + b


class SumAggregator:
    name = "sum"

    def zero(self) -> int:
        return 0

    def add(self, acc: int, value: int) -> int:
        return acc + value

    def merge(self, a: int, b: int) -> int:
        return a + b


# ---- timers (F017E-R12, R13) -----------------------------------------------------------


@dataclass(frozen=True, order=True)
class Timer:
    timestamp: int
    key: TimerKey


def timer_key(key: str, session_id: int) -> TimerKey:
    """F017E-R13: the timer key carries the event key and the session id, never a hash."""
    return (SESSION_TIMER_PREFIX, key, session_id)


def parse_timer_key(tk: TimerKey) -> tuple[str, int] | None:
    if len(tk) != 3 or tk[0] != SESSION_TIMER_PREFIX:
        return None  # F017E-R13: not a session timer
    return tk[1], tk[2]


class TimerService:
    """F017E-R13: register, poll and list; no delete, so abandoned timers stay until they fire."""

    def __init__(self) -> None:
        self._timers: set[Timer] = set()

    def register_timer(self, timestamp: int, key: TimerKey) -> None:
        self._timers.add(Timer(timestamp, key))  # F017E-R13: the same timer twice is one timer

    def poll_timers(self, watermark: int) -> list[Timer]:
        due = sorted(t for t in self._timers if t.timestamp < watermark)  # F017E-R12: strictly passed
        self._timers.difference_update(due)
        return due

    def list_timers(self) -> list[Timer]:
        return sorted(self._timers)


# ---- the watermark (F017E-R5) -------------------------------------------------------------


class BoundedOutOfOrdernessGenerator:
    """F017E-R5: greatest event time seen minus the delay; None before the first event."""

    def __init__(self, delay: int, max_timestamp: int | None = None, ended: bool = False) -> None:
        self.delay = delay
        self.max_timestamp = max_timestamp
        self.ended = ended  # F017E-R23: after the end the watermark is the end of time

    def current_watermark(self) -> int | None:
        if self.ended:
            return I64_MAX
        if self.max_timestamp is None:
            return None
        return saturating_sub(self.max_timestamp, self.delay)

    def end(self) -> int:
        """F017E-R23: the input is complete: the watermark becomes the end of time."""
        self.ended = True
        return I64_MAX

    def on_event(self, timestamp: int) -> int | None:
        """The new watermark when this event advanced it, else None."""
        before = self.current_watermark()
        if self.max_timestamp is None or timestamp > self.max_timestamp:
            self.max_timestamp = timestamp
        after = self.current_watermark()
        return after if before is None or (after is not None and after > before) else None


@dataclass
class OperatorContext:
    """What an operator call may use besides its own state: timers and the watermark."""

    timers: TimerService
    watermark_generator: BoundedOutOfOrdernessGenerator


# ---- the operator --------------------------------------------------------------------------


@dataclass
class Event:
    key: str
    timestamp: int
    value: int = 0


@dataclass
class Session:
    session_id: int
    start: int
    last: int  # the latest event time; the end is last + gap (F017E-R2)
    accs: list[Any]


@dataclass(frozen=True)
class SessionResult:
    """F017E-R11: an emitted session: key, start, end, aggregates, and what closed it (R8)."""

    key: str
    start: int
    end: int
    aggregates: dict[str, Any]
    closed_by: str  # "timer" | "watermark"


@dataclass(frozen=True)
class LateEvent:
    """F017E-R10/R11: a late event, the watermark it was judged by, and its route."""

    key: str
    timestamp: int
    value: int
    watermark: int
    verdict: str  # "late_output" | "dropped"


@dataclass(frozen=True)
class OperatorState:
    """F017E-R15: a checkpoint: the operator id and the bytes of its state."""

    operator_id: str
    data: bytes


@dataclass
class SessionWindowMetrics:
    """F017E-R9."""

    open_sessions: int = 0
    pending_timers: int = 0
    sessions_closed_by_timer: int = 0
    sessions_closed_by_watermark: int = 0
    late_events: int = 0


def _require_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= I64_MAX:
        raise InvalidConfig(f"{name} must be an integer from {minimum} to {I64_MAX}, got {value!r}")
    return value


class SessionWindowOperator:
    """Session windows per key, closed by the watermark or their timers (F017E)."""

    def __init__(
        self,
        gap: int,
        aggregators: Sequence[Aggregator] | None = None,
        allowed_lateness: int = 0,
        operator_id: str = "session_window",
        emit_strategy: EmitStrategy | str = EmitStrategy.OnWindowClose,
    ) -> None:
        self.gap = _require_int("gap", gap, 1)  # F017E-R18
        self.allowed_lateness = _require_int("allowed_lateness", allowed_lateness, 0)
        names = [s.value for s in EmitStrategy]
        if not isinstance(emit_strategy, EmitStrategy):
            if emit_strategy not in names:
                raise InvalidConfig(f"emit_strategy must be one of {names}, got {emit_strategy!r}")
            emit_strategy = EmitStrategy(emit_strategy)
        self.emit_strategy = emit_strategy
        default: list[Aggregator] = [CountAggregator(), SumAggregator()]
        self.aggregators = list(aggregators) if aggregators is not None else default
        self.operator_id = operator_id
        self.sessions: dict[str, list[Session]] = {}  # F017E-R1: open sessions, per key
        self.pending_timers: dict[tuple[str, int], int] = {}  # F017E-R13: the truth about timers
        self.next_session_id = 1
        self.closed_by_timer = 0
        self.closed_by_watermark = 0
        self.late_events = 0
        self._late_output: list[LateEvent] = []

    # ---- session arithmetic

    def session_end(self, s: Session) -> int:
        return saturating_add(s.last, self.gap)  # F017E-R2: exclusive, saturating

    def trigger_time(self, s: Session) -> int:
        return saturating_add(self.session_end(s), self.allowed_lateness)  # F017E-R12

    def _passed(self, s: Session, watermark: int) -> bool:
        return self.trigger_time(s) < watermark  # F017E-R7: watermark > end + allowed_lateness

    # ---- calls

    def process(self, event: Event, ctx: OperatorContext) -> list[SessionResult | LateEvent]:
        out: list[SessionResult | LateEvent] = []
        advanced = ctx.watermark_generator.on_event(event.timestamp)  # F017E-R6: Option A
        if advanced is not None:
            out.extend(self.on_watermark_advance(advanced, ctx, key=event.key))  # F017E-R8
        watermark = ctx.watermark_generator.current_watermark()
        assert watermark is not None
        if event.timestamp + self.allowed_lateness < watermark:  # F017E-R10: strict, exact
            self.late_events += 1
            routed = self.emit_strategy is EmitStrategy.OnWindowClose  # F017E-R11
            late = LateEvent(event.key, event.timestamp, event.value, watermark,
                             "late_output" if routed else "dropped")  # fmt: skip
            if routed:
                self._late_output.append(late)
            out.append(late)
            return out
        self._assign(event, ctx)
        return out

    def _assign(self, event: Event, ctx: OperatorContext) -> None:
        t, key = event.timestamp, event.key
        open_sessions = self.sessions.setdefault(key, [])
        touching = [s for s in open_sessions if s.start - self.gap <= t <= self.session_end(s)]  # F017E-R3
        if not touching:
            accs = [a.add(a.zero(), event.value) for a in self.aggregators]
            s = Session(self.next_session_id, t, t, accs)
            self.next_session_id += 1
            open_sessions.append(s)
            self._set_timer(key, s, ctx)  # F017E-R12: one timer per open session
            return
        keep = min(touching, key=lambda x: x.session_id)  # F017E-R13: a merge keeps the smallest id
        for other in touching:
            if other is keep:
                continue
            keep.accs = [
                a.merge(x, y) for a, x, y in zip(self.aggregators, keep.accs, other.accs, strict=True)
            ]
            keep.start, keep.last = min(keep.start, other.start), max(keep.last, other.last)
            open_sessions.remove(other)
            del self.pending_timers[(key, other.session_id)]  # F017E-R12: its timer is abandoned
        keep.accs = [a.add(x, event.value) for a, x in zip(self.aggregators, keep.accs, strict=True)]
        keep.start, keep.last = min(keep.start, t), max(keep.last, t)
        if self.pending_timers[(key, keep.session_id)] != self.trigger_time(keep):
            self._set_timer(key, keep, ctx)  # F017E-R12: the timer moves with the end

    def _set_timer(self, key: str, s: Session, ctx: OperatorContext) -> None:
        when = self.trigger_time(s)
        self.pending_timers[(key, s.session_id)] = when
        ctx.timers.register_timer(when, timer_key(key, s.session_id))

    def on_watermark_advance(
        self, watermark: int, ctx: OperatorContext, key: str | None = None
    ) -> list[SessionResult]:
        """F017E-R8: the current key's passed sessions close by the watermark, then due timers fire."""
        out = []
        if key is not None:
            for s in sorted(self.sessions.get(key, []), key=lambda x: x.start):  # the order of R8
                if self._passed(s, watermark):
                    out.append(self._close(key, s, "watermark"))
        # F017E-R14: timers of every key fire here, so keys that stopped sending still close.
        for timer in ctx.timers.poll_timers(watermark):
            out.extend(self.on_timer(timer, ctx))
        return out

    def on_timer(self, timer: Timer, ctx: OperatorContext) -> list[SessionResult]:
        parsed = parse_timer_key(timer.key)
        if parsed is None:
            return []  # F017E-R13: not ours
        key, session_id = parsed
        if self.pending_timers.get((key, session_id)) != timer.timestamp:
            return []  # F017E-R13: stale (session closed, merged away, or its timer moved)
        s = next(x for x in self.sessions[key] if x.session_id == session_id)
        return [self._close(key, s, "timer")]

    def _close(self, key: str, s: Session, closed_by: str) -> SessionResult:
        self.sessions[key].remove(s)  # F017E-R7: a closed session is forgotten
        if not self.sessions[key]:
            del self.sessions[key]
        del self.pending_timers[(key, s.session_id)]
        if closed_by == "timer":
            self.closed_by_timer += 1  # F017E-R9
        else:
            self.closed_by_watermark += 1
        aggregates = {a.name: acc for a, acc in zip(self.aggregators, s.accs, strict=True)}
        return SessionResult(key, s.start, self.session_end(s), aggregates, closed_by)

    # ---- inspection

    def late_output(self) -> list[LateEvent]:
        """F017E-R11: the late side output (empty under Final)."""
        return list(self._late_output)

    def open_sessions(self) -> list[tuple[str, Session]]:
        return sorted(
            ((k, s) for k, ss in self.sessions.items() for s in ss), key=lambda x: (x[0], x[1].start)
        )

    def metrics(self) -> SessionWindowMetrics:
        return SessionWindowMetrics(
            open_sessions=sum(len(ss) for ss in self.sessions.values()),
            pending_timers=len(self.pending_timers),
            sessions_closed_by_timer=self.closed_by_timer,
            sessions_closed_by_watermark=self.closed_by_watermark,
            late_events=self.late_events,
        )

    # ---- checkpoint and restore (F017E-R15, R16)

    def checkpoint(self) -> OperatorState:
        data = {
            "layout_version": LAYOUT_VERSION,
            "sessions": [[k, s.session_id, s.start, s.last, s.accs] for k, s in self.open_sessions()],
            "pending_timers": sorted([k, sid, t] for (k, sid), t in self.pending_timers.items()),
            "next_session_id": self.next_session_id,
            "counters": [self.closed_by_timer, self.closed_by_watermark, self.late_events],
        }
        return OperatorState(self.operator_id, json.dumps(data).encode())

    def restore(self, state: OperatorState, ctx: OperatorContext) -> None:
        if state.operator_id != self.operator_id:
            raise ValueError(f"checkpoint of operator {state.operator_id!r}, not {self.operator_id!r}")
        data = json.loads(state.data)
        if data.get("layout_version") != LAYOUT_VERSION:
            raise ValueError(
                f"checkpoint layout version {data.get('layout_version')}; this release reads {LAYOUT_VERSION}"
            )  # F017E-R16
        self.sessions = {}
        for k, sid, start, last, accs in data["sessions"]:
            self.sessions.setdefault(k, []).append(Session(sid, start, last, list(accs)))
        self.pending_timers = {(k, sid): t for k, sid, t in data["pending_timers"]}
        self.next_session_id = data["next_session_id"]
        self.closed_by_timer, self.closed_by_watermark, self.late_events = data["counters"]
        for (k, sid), t in self.pending_timers.items():
            ctx.timers.register_timer(t, timer_key(k, sid))  # F017E-R16: re-register every pending timer


# ---- the stream (F017E-R18..R20) ------------------------------------------------------------

CONFIG_KEYS = ("gap", "allowed_lateness", "bounded_delay", "emit_strategy")


def config_from_trace(config: dict[str, Any]) -> dict[str, Any]:
    """F017E-R18: the trace's settings, refused with InvalidConfig before any item."""
    unknown = set(config) - set(CONFIG_KEYS)
    if unknown:
        raise InvalidConfig(f"unknown session_windows settings {sorted(unknown)}")
    if "gap" not in config:
        raise InvalidConfig("gap is required")
    _require_int("bounded_delay", config.get("bounded_delay", 0), 0)
    SessionWindowOperator(config["gap"], None, config.get("allowed_lateness", 0), "check",
                          config.get("emit_strategy", "OnWindowClose"))  # fmt: skip
    return {"bounded_delay": 0, "allowed_lateness": 0, "emit_strategy": "OnWindowClose", **config}


class SessionWindowStream:
    """Plays a session_windows trace batch by batch and collects its output tables; what another cut of
    the same items into batches may change: F017E-R24."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config_from_trace(config)
        self.operator = self._new_operator()
        self.ctx = OperatorContext(
            TimerService(), BoundedOutOfOrdernessGenerator(self.config["bounded_delay"])
        )
        self.out: dict[str, list[Row]] = {t: [] for t in ("sessions", "late", "timers", "progress", "errors")}
        self.ended = False

    def _new_operator(self) -> SessionWindowOperator:
        c = self.config
        return SessionWindowOperator(
            c["gap"], None, c["allowed_lateness"], "session_windows", c["emit_strategy"]
        )

    def run_batch(self, b: int, batch: Sequence[Item]) -> None:
        for seq, item in enumerate(batch):
            error = "after_end" if self.ended else _item_error(item)  # F017E-R20, R23
            if error is not None:
                self.out["errors"].append((b, seq, error))
                continue
            if item.kind == "end":
                self._end(b, seq)
                continue
            assert item.key is not None and item.event_time is not None
            self._record(
                b, seq, self.operator.process(Event(item.key, item.event_time, item.value), self.ctx)
            )
        op = self.operator
        m = op.metrics()  # F017E-R19: one progress row per batch
        self.out["progress"].append((
            b, self.ctx.watermark_generator.current_watermark(), m.open_sessions,
            m.sessions_closed_by_timer, m.sessions_closed_by_watermark, m.late_events,
        ))  # fmt: skip
        for key, s in op.open_sessions():
            self.out["timers"].append((b, key, s.start, op.pending_timers[(key, s.session_id)]))

    def _end(self, b: int, seq: int) -> None:
        """F017E-R23: the end of time passes every timer below it; they close by their timers."""
        self.ended = True
        watermark = self.ctx.watermark_generator.end()
        self._record(b, seq, self.operator.on_watermark_advance(watermark, self.ctx))

    def _record(self, b: int, seq: int, outputs: Iterable[SessionResult | LateEvent]) -> None:
        for o in outputs:
            if isinstance(o, SessionResult):
                row = (b, o.key, o.start, o.end, o.aggregates["count"], o.aggregates["sum"], o.closed_by)
                self.out["sessions"].append(row)
            else:
                self.out["late"].append((b, seq, o.key, o.timestamp, o.watermark, o.verdict))

    def checkpoint(self) -> dict[str, Any]:
        """F017E-R15: the operator's state and the watermark generator; no timer service."""
        return {
            "operator": self.operator.checkpoint(),
            "max_timestamp": self.ctx.watermark_generator.max_timestamp,
            "ended": self.ended,
        }

    def restore(self, snapshot: dict[str, Any]) -> None:
        self.operator = self._new_operator()
        self.ended = snapshot["ended"]
        generator = BoundedOutOfOrdernessGenerator(
            self.config["bounded_delay"], snapshot["max_timestamp"], self.ended
        )
        self.ctx = OperatorContext(TimerService(), generator)  # a new, empty timer service
        self.operator.restore(snapshot["operator"], self.ctx)  # F017E-R16


def _item_error(item: Item) -> str | None:
    """F017E-R20: malformed items become error rows and change nothing."""
    if item.kind == "end":
        return None
    if item.kind == "duplicate_seq":
        return "duplicate_seq"  # TR-15
    if item.kind != "event":
        return "unsupported_item"
    if item.key is None:
        return "missing_key"
    if item.event_time is None:
        return "missing_event_time"
    return None


def run_trace(trace: Trace) -> dict[str, list[Row]]:
    """Plays a session_windows trace and returns its observable output tables (F017E-R17: restarts)."""
    return play(trace, SessionWindowStream)


__all__ = [
    "Aggregator",
    "BoundedOutOfOrdernessGenerator",
    "CountAggregator",
    "EmitStrategy",
    "Event",
    "LateEvent",
    "OperatorContext",
    "OperatorState",
    "Session",
    "SessionResult",
    "SessionWindowMetrics",
    "SessionWindowOperator",
    "SessionWindowStream",
    "SumAggregator",
    "Timer",
    "TimerService",
    "parse_timer_key",
    "run_trace",
    "timer_key",
]
