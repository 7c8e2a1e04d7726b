"""Window joins (oxirs): the oracle of spec/window_joins.md.

Deliberately simple: dictionaries, lists and one loop over the items of a
batch. Every rule names its clause id. Times are integer milliseconds and
every sum that is compared with a watermark saturates at the i64 bounds
(TR-2); "no watermark yet" is None. Beside the incremental joins,
``brute_force`` states each join's pairs straight from the arrival sequence,
with no state kept between items.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.traces import I64_MAX, I64_MIN, InvalidConfig, Item, Trace, saturating_add, saturating_sub
from reference.traces import Row, play

SIDES = ("left", "right")  # OXJ-R1
ACCEPTED_KINDS = ("event", "watermark")  # OXJ-R19
JOIN_SETTINGS: dict[str, tuple[str, ...]] = {  # OXJ-R18: the required settings of each join
    "tumbling_tumbling": ("size_ms",),
    "tumbling_sliding": ("left_size_ms", "right_size_ms", "right_slide_ms"),
    "session_session": ("gap_ms",),
}
LATENESS_SETTING = "allowed_lateness_ms"
MAX_RIGHT_SIZE_IN_LEFT_PANES = 256  # OXJ-R18: a right event reaches at most 2 * 256 + 1 left panes


class WatermarkRegressed(ValueError):
    """OXJ-R2: a watermark below the current one; the join changes nothing."""


@dataclass(frozen=True)
class JoinEvent:
    """An event of either side; (batch, seq) is its identity (OXJ-R1, R10)."""

    key: str
    event_time: int
    value: int = 0
    batch: int = 0
    seq: int = 0


@dataclass(frozen=True)
class JoinPair:
    left: JoinEvent
    right: JoinEvent


@dataclass(frozen=True)
class JoinOutcome:
    """What one event did: dropped as late, or taken with the pairs it completed (OXJ-R6, R11)."""

    late: bool
    pairs: list[JoinPair]


@dataclass
class WindowJoinStats:
    """OXJ-R17: cumulative since the trace start, restarts included."""

    left_events: int = 0
    right_events: int = 0
    pairs_emitted: int = 0
    late_events_dropped: int = 0
    open_windows: int = 0


def _require_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= I64_MAX:
        raise InvalidConfig(f"{name} must be an integer from {minimum} to {I64_MAX}, got {value!r}")
    return value


def _pair(side: str, event: JoinEvent, other: JoinEvent) -> JoinPair:
    return JoinPair(event, other) if side == "left" else JoinPair(other, event)


def _other(side: str) -> str:
    return "right" if side == "left" else "left"


def tumbling_pane_closes_at(index: int, size: int, allowed_lateness: int) -> int:
    """OXJ-R4: the watermark that purges pane ``index``: pane_end + lateness, both sums saturating."""
    pane_end = min(I64_MAX, index * size + size)
    return saturating_add(pane_end, allowed_lateness)


def sliding_union(event_time: int, size: int, slide: int) -> tuple[int, int]:
    """OXJ-R8: [start, end) of the union of the sliding panes holding the time. Computed exactly
    (Python integers): a saturated ``t - size`` near i64 min would lose panes that hold ``t``."""
    k_hi = event_time // slide
    k_lo = (event_time - size) // slide + 1
    return k_lo * slide, k_hi * slide + size


def reached_left_panes(event_time: int, left_size: int, right_size: int, slide: int) -> range:
    """OXJ-R11: the left pane indices a right event reaches: those overlapping its union of
    sliding panes, within the representable times (a pane wholly outside holds no event)."""
    start, end = sliding_union(event_time, right_size, slide)
    start, last = max(I64_MIN, start), min(I64_MAX, end - 1)
    return range(start // left_size, last // left_size + 1)


# ---- the incremental joins -------------------------------------------------------------------


class _WindowJoin:
    """The watermark (OXJ-R2), the counters (OXJ-R17) and the restart copy (OXJ-R21)."""

    def __init__(self, allowed_lateness_ms: int) -> None:
        self.allowed_lateness_ms = _require_int(LATENESS_SETTING, allowed_lateness_ms, minimum=0)
        self.watermark: int | None = None
        self.counts = WindowJoinStats()

    def process_left(self, event: JoinEvent) -> JoinOutcome:
        return self._process("left", event)

    def process_right(self, event: JoinEvent) -> JoinOutcome:
        return self._process("right", event)

    def _process(self, side: str, event: JoinEvent) -> JoinOutcome:
        if self._is_late(side, event):
            self.counts.late_events_dropped += 1  # OXJ-R7, R11, R14: dropped and counted
            return JoinOutcome(True, [])
        pairs = self._take(side, event)
        if side == "left":
            self.counts.left_events += 1
        else:
            self.counts.right_events += 1
        self.counts.pairs_emitted += len(pairs)
        return JoinOutcome(False, pairs)

    def advance_watermark(self, watermark: int) -> list[JoinPair]:
        """OXJ-R2: a regression raises and changes nothing; an equal watermark changes nothing."""
        if self.watermark is not None and watermark < self.watermark:
            raise WatermarkRegressed(f"watermark {watermark} is below the current {self.watermark}")
        previous, self.watermark = self.watermark, watermark
        pairs = self._on_watermark(previous, watermark)
        self.counts.pairs_emitted += len(pairs)
        return pairs

    def stats(self) -> WindowJoinStats:
        c = self.counts
        return WindowJoinStats(
            c.left_events, c.right_events, c.pairs_emitted, c.late_events_dropped, self._open_windows()
        )

    def checkpoint(self) -> dict[str, Any]:
        """OXJ-R21: everything crosses a restart: the watermark, the held state, the counters."""
        return copy.deepcopy(self.__dict__)

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        self.__dict__.update(copy.deepcopy(dict(snapshot)))

    def _purged(self, closes_at: int) -> bool:
        return self.watermark is not None and self.watermark >= closes_at

    def _is_late(self, side: str, event: JoinEvent) -> bool:
        raise NotImplementedError

    def _take(self, side: str, event: JoinEvent) -> list[JoinPair]:
        raise NotImplementedError

    def _on_watermark(self, previous: int | None, watermark: int) -> list[JoinPair]:
        raise NotImplementedError

    def _open_windows(self) -> int:
        raise NotImplementedError


class _PaneJoin(_WindowJoin):
    """Panes per (key, left pane index), each holding its events of both sides (OXJ-R4, R11)."""

    def __init__(self, allowed_lateness_ms: int) -> None:
        super().__init__(allowed_lateness_ms)
        self.panes: dict[tuple[str, int], dict[str, list[JoinEvent]]] = {}

    def _closes_at(self, index: int) -> int:
        raise NotImplementedError

    def _store(self, side: str, event: JoinEvent, index: int) -> list[JoinPair]:
        """Keeps the event in an open pane and pairs it with that pane's other side (OXJ-R6, R11)."""
        pane = self.panes.setdefault((event.key, index), {"left": [], "right": []})
        pane[side].append(event)
        return [_pair(side, event, other) for other in pane[_other(side)]]

    def _on_watermark(self, previous: int | None, watermark: int) -> list[JoinPair]:
        for key, index in [p for p in self.panes if watermark >= self._closes_at(p[1])]:
            del self.panes[(key, index)]  # OXJ-R4, R7, R11: purged, nothing emitted
        return []

    def _open_windows(self) -> int:
        return len(self.panes)


class TumblingTumblingJoin(_PaneJoin):
    """OXJ-R5..R7: same key and same pane; a pair emitted when its second event arrives."""

    def __init__(self, size_ms: int, allowed_lateness_ms: int = 0) -> None:
        super().__init__(allowed_lateness_ms)
        self.size_ms = _require_int("size_ms", size_ms, minimum=1)

    def _closes_at(self, index: int) -> int:
        return tumbling_pane_closes_at(index, self.size_ms, self.allowed_lateness_ms)

    def _is_late(self, side: str, event: JoinEvent) -> bool:
        return self._purged(self._closes_at(event.event_time // self.size_ms))  # OXJ-R7

    def _take(self, side: str, event: JoinEvent) -> list[JoinPair]:
        return self._store(side, event, event.event_time // self.size_ms)


class TumblingSlidingJoin(_PaneJoin):
    """OXJ-R8..R11: a left tumbling pane joins a right event whose sliding panes overlap it."""

    def __init__(
        self, left_size_ms: int, right_size_ms: int, right_slide_ms: int, allowed_lateness_ms: int = 0
    ) -> None:
        super().__init__(allowed_lateness_ms)
        self.left_size_ms = _require_int("left_size_ms", left_size_ms, minimum=1)
        self.right_size_ms = _require_int("right_size_ms", right_size_ms, minimum=1)
        self.right_slide_ms = _require_int("right_slide_ms", right_slide_ms, minimum=1)
        if right_slide_ms > right_size_ms:
            raise InvalidConfig(
                f"right_slide_ms {right_slide_ms} is above right_size_ms {right_size_ms}: "
                "times between the panes would be in none"
            )
        if right_size_ms > MAX_RIGHT_SIZE_IN_LEFT_PANES * left_size_ms:
            raise InvalidConfig(
                f"right_size_ms {right_size_ms} is above {MAX_RIGHT_SIZE_IN_LEFT_PANES} * left_size_ms "
                f"({left_size_ms}): a right event would reach too many left panes"
            )

    def _closes_at(self, index: int) -> int:
        return tumbling_pane_closes_at(index, self.left_size_ms, self.allowed_lateness_ms)

    def _reached(self, event: JoinEvent) -> range:
        t = event.event_time
        return reached_left_panes(t, self.left_size_ms, self.right_size_ms, self.right_slide_ms)

    def _is_late(self, side: str, event: JoinEvent) -> bool:
        if side == "left":
            return self._purged(self._closes_at(event.event_time // self.left_size_ms))
        return self._purged(self._closes_at(self._reached(event)[-1]))  # OXJ-R11: every reached pane

    def _take(self, side: str, event: JoinEvent) -> list[JoinPair]:
        if side == "left":
            return self._store(side, event, event.event_time // self.left_size_ms)
        pairs = []
        for index in self._reached(event):
            if not self._purged(self._closes_at(index)):  # OXJ-R11: only the reached panes still open
                pairs += self._store(side, event, index)
        return pairs  # OXJ-R10: a left event lies in one pane, so each pair once


@dataclass
class Session:
    """OXJ-R12: min and max time of its events, and the events."""

    first: int
    last: int
    events: list[JoinEvent]


class SessionSessionJoin(_WindowJoin):
    """OXJ-R12..R16: sessions per key and side, pairs of overlapping closed sessions emitted
    at a watermark."""

    def __init__(self, gap_ms: int, allowed_lateness_ms: int = 0) -> None:
        super().__init__(allowed_lateness_ms)
        self.gap_ms = _require_int("gap_ms", gap_ms, minimum=1)
        self.sessions: dict[tuple[str, str], list[Session]] = {}  # (key, side) -> its sessions

    def _end(self, s: Session) -> int:
        return saturating_add(s.last, self.gap_ms)  # OXJ-R14

    def closed(self, s: Session, watermark: int | None) -> bool:
        """OXJ-R14: end + lateness <= watermark."""
        return watermark is not None and saturating_add(self._end(s), self.allowed_lateness_ms) <= watermark

    def overlap(self, a: Session, b: Session) -> bool:
        """OXJ-R13: [first, last + gap] of both intersect."""
        return a.first <= self._end(b) and b.first <= self._end(a)

    def _is_late(self, side: str, event: JoinEvent) -> bool:
        w = self.watermark  # OXJ-R14
        return w is not None and saturating_add(event.event_time, self.allowed_lateness_ms) <= w

    def _take(self, side: str, event: JoinEvent) -> list[JoinPair]:
        """OXJ-R12: the event merges every session it is within the gap of."""
        t = event.event_time
        sessions = self.sessions.setdefault((event.key, side), [])
        near = [s for s in sessions if saturating_sub(s.first, self.gap_ms) <= t <= self._end(s)]
        merged = Session(t, t, [event])
        for s in near:
            sessions.remove(s)
            merged = Session(min(merged.first, s.first), max(merged.last, s.last), s.events + merged.events)
        sessions.append(merged)
        return []  # OXJ-R15: sessions emit at a watermark only

    def _on_watermark(self, previous: int | None, watermark: int) -> list[JoinPair]:
        pairs: list[JoinPair] = []
        forgotten: list[tuple[tuple[str, str], Session]] = []
        for key in sorted({k for k, _ in self.sessions}):
            lefts = self.sessions.get((key, "left"), [])
            rights = self.sessions.get((key, "right"), [])
            for a in lefts:
                for b in rights:
                    now = self.closed(a, watermark) and self.closed(b, watermark)
                    before = self.closed(a, previous) and self.closed(b, previous)
                    if self.overlap(a, b) and now and not before:  # OXJ-R15: once, when both closed
                        pairs += [JoinPair(left, right) for left in a.events for right in b.events]
            for side, mine, others in (("left", lefts, rights), ("right", rights, lefts)):
                for s in mine:  # OXJ-R16: closed, and every overlapping partner closed too
                    partners = [o for o in others if self.overlap(s, o)]
                    if self.closed(s, watermark) and all(self.closed(o, watermark) for o in partners):
                        forgotten.append(((key, side), s))
        for where, s in forgotten:
            self.sessions[where].remove(s)
            if not self.sessions[where]:
                del self.sessions[where]
        return pairs

    def _open_windows(self) -> int:
        return sum(len(s) for s in self.sessions.values())


WindowJoin = TumblingTumblingJoin | TumblingSlidingJoin | SessionSessionJoin


# ---- configuration (OXJ-R18) -----------------------------------------------------------------


def join_from_config(config: Mapping[str, Any]) -> WindowJoin:
    """OXJ-R18: the trace's settings as a join, refused with InvalidConfig naming the setting."""
    if "join" not in config:
        raise InvalidConfig(f"the setting join is required: one of {list(JOIN_SETTINGS)}")
    name = config["join"]
    if not isinstance(name, str) or name not in JOIN_SETTINGS:
        raise InvalidConfig(f"join must be one of {list(JOIN_SETTINGS)}, got {name!r}")
    used = {"join", LATENESS_SETTING, *JOIN_SETTINGS[name]}
    everything = {"join", LATENESS_SETTING, *(s for ss in JOIN_SETTINGS.values() for s in ss)}
    unknown = sorted(set(config) - everything, key=str)
    if unknown:
        raise InvalidConfig(f"unknown window_joins settings {unknown}")
    unused = sorted(set(config) - used, key=str)
    if unused:
        raise InvalidConfig(f"settings {unused} are not used by the join {name}")
    for setting in JOIN_SETTINGS[name]:
        if setting not in config:
            raise InvalidConfig(f"the join {name} needs the setting {setting}")
    lateness = config.get(LATENESS_SETTING, 0)
    if name == "tumbling_tumbling":
        return TumblingTumblingJoin(config["size_ms"], lateness)
    if name == "tumbling_sliding":
        return TumblingSlidingJoin(
            config["left_size_ms"], config["right_size_ms"], config["right_slide_ms"], lateness
        )
    return SessionSessionJoin(config["gap_ms"], lateness)


def validate_config(config: Mapping[str, Any]) -> None:
    join_from_config(config)


# ---- the stream (OXJ-R19..R21) ---------------------------------------------------------------


def pair_row(b: int, seq: int, pair: JoinPair) -> Row:
    """OXJ-R3, R20: the row of a pair emitted by the item (b, seq)."""
    left, right = pair.left, pair.right
    return (b, seq, left.key, left.batch, left.seq, left.event_time, left.value, right.batch, right.seq,
            right.event_time, right.value)  # fmt: skip


def item_error(item: Item, watermark: int | None) -> str | None:
    """OXJ-R19: the reasons, in this order."""
    if item.kind == "duplicate_seq":
        return "duplicate_seq"  # TR-15
    if item.kind not in ACCEPTED_KINDS:
        return "unsupported_item"
    if item.kind == "event":
        if item.side is None:
            return "missing_side"
        if item.side not in SIDES:
            return "unknown_side"
        if item.key is None:
            return "missing_key"
        return "missing_event_time" if item.event_time is None else None
    if item.time is None:
        return "missing_time"
    return "watermark_regressed" if watermark is not None and item.time < watermark else None  # OXJ-R2


class WindowJoinStream:
    """Plays a window_joins trace batch by batch and collects its output tables; what another cut of
    the same items into batches may change: OXJ-R23."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.join = join_from_config(config)
        self.out: dict[str, list[Row]] = {t: [] for t in ("pairs", "late", "progress", "errors")}

    def run_batch(self, b: int, batch: Sequence[Item]) -> None:
        # OXJ-R23: item by item; nothing is read as it stood at the batch's start
        for seq, item in enumerate(batch):
            error = item_error(item, self.join.watermark)
            if error is not None:
                self.out["errors"].append((b, seq, error))  # OXJ-R19: changes nothing
            elif item.kind == "watermark":
                assert item.time is not None
                pairs = self.join.advance_watermark(item.time)
                self.out["pairs"] += [pair_row(b, seq, p) for p in pairs]
            else:
                self._event(b, seq, item)
        s = self.join.stats()
        self.out["progress"].append((b, self.join.watermark, s.left_events, s.right_events, s.pairs_emitted,
                                     s.late_events_dropped, s.open_windows))  # fmt: skip

    def _event(self, b: int, seq: int, item: Item) -> None:
        assert item.key is not None and item.event_time is not None
        event = JoinEvent(item.key, item.event_time, item.value, b, seq)
        outcome = self.join.process_left(event) if item.side == "left" else self.join.process_right(event)
        if outcome.late:
            self.out["late"].append((b, seq, item.side, item.key, item.event_time, self.join.watermark))
        self.out["pairs"] += [pair_row(b, seq, p) for p in outcome.pairs]  # OXJ-R6: the second event's

    def checkpoint(self) -> dict[str, Any]:
        return self.join.checkpoint()  # OXJ-R21

    def restore(self, snapshot: dict[str, Any]) -> None:
        self.join.restore(snapshot)


def run_trace(trace: Trace) -> dict[str, list[Row]]:
    """Plays a window_joins trace and returns its observable output tables."""
    return play(trace, WindowJoinStream)


# ---- brute force: each join's definition over the whole arrival sequence ---------------------


@dataclass(frozen=True)
class Arrival:
    """An accepted event with the watermark current when it arrived."""

    side: str
    event: JoinEvent
    watermark: int | None


def arrivals(trace: Trace) -> tuple[list[Arrival], list[tuple[int, int, int]]]:
    """The accepted events, and the accepted watermark items as (batch, seq, time) (OXJ-R2, R19)."""
    events: list[Arrival] = []
    watermarks: list[tuple[int, int, int]] = []
    current: int | None = None
    for b, batch in enumerate(trace.batches):
        for seq, item in enumerate(batch):
            if item.kind == "event" and item.side in SIDES and item.key is not None:
                if item.event_time is not None:
                    event = JoinEvent(item.key, item.event_time, item.value, b, seq)
                    events.append(Arrival(item.side, event, current))
            elif item.kind == "watermark" and item.time is not None:
                if current is None or item.time >= current:
                    current = item.time
                    watermarks.append((b, seq, item.time))
    return events, watermarks


def _open_at(closes_at: int, arrival: Arrival) -> bool:
    return arrival.watermark is None or arrival.watermark < closes_at


def _left_right(events: list[Arrival]) -> Iterator[tuple[Arrival, Arrival]]:
    for left in events:
        if left.side == "left":
            for right in events:
                if right.side == "right" and right.event.key == left.event.key:
                    yield left, right


def _later(left: Arrival, right: Arrival) -> tuple[int, int]:
    return max((left.event.batch, left.event.seq), (right.event.batch, right.event.seq))


def _session_runs(times: list[int], gap: int) -> list[tuple[int, int]]:
    """OXJ-R12: the gap-connected runs of sorted times as (first, last)."""
    runs: list[tuple[int, int]] = []
    for t in sorted(times):
        if runs and t - runs[-1][1] <= gap:
            runs[-1] = (runs[-1][0], t)
        else:
            runs.append((t, t))
    return runs


def brute_force(trace: Trace) -> set[Row]:
    """The pair rows of a trace whose config is valid, from the definitions of OXJ-R7, R11, R16."""
    config = trace.config
    lateness = config.get(LATENESS_SETTING, 0)
    events, watermarks = arrivals(trace)
    rows: set[Row] = set()
    if config["join"] == "tumbling_tumbling":
        size = config["size_ms"]
        for left, right in _left_right(events):
            pane = left.event.event_time // size
            closes_at = tumbling_pane_closes_at(pane, size, lateness)
            same_pane = right.event.event_time // size == pane
            if same_pane and _open_at(closes_at, left) and _open_at(closes_at, right):
                rows.add(pair_row(*_later(left, right), JoinPair(left.event, right.event)))
    elif config["join"] == "tumbling_sliding":
        left_size, right_size = config["left_size_ms"], config["right_size_ms"]
        slide = config["right_slide_ms"]
        for left, right in _left_right(events):
            pane = left.event.event_time // left_size
            pane_start, pane_end = pane * left_size, pane * left_size + left_size
            union_start, union_end = sliding_union(right.event.event_time, right_size, slide)
            closes_at = tumbling_pane_closes_at(pane, left_size, lateness)
            overlaps = max(pane_start, union_start) < min(pane_end, union_end)
            if overlaps and _open_at(closes_at, left) and _open_at(closes_at, right):
                rows.add(pair_row(*_later(left, right), JoinPair(left.event, right.event)))
    else:
        gap = config["gap_ms"]

        def on_time(a: Arrival) -> bool:
            return a.watermark is None or saturating_add(a.event.event_time, lateness) > a.watermark

        def run_closes_at(run: tuple[int, int]) -> int:
            return saturating_add(saturating_add(run[1], gap), lateness)

        times: dict[tuple[str, str], list[int]] = {}
        for arrival in filter(on_time, events):
            times.setdefault((arrival.side, arrival.event.key), []).append(arrival.event.event_time)
        runs = {where: _session_runs(ts, gap) for where, ts in times.items()}

        def run_of(a: Arrival) -> tuple[int, int]:
            return next(run for run in runs[(a.side, a.event.key)] if run[0] <= a.event.event_time <= run[1])

        for left, right in _left_right(events):
            if not (on_time(left) and on_time(right)):
                continue
            a, b = run_of(left), run_of(right)
            if not (a[0] <= saturating_add(b[1], gap) and b[0] <= saturating_add(a[1], gap)):
                continue  # OXJ-R13
            closes_at = max(run_closes_at(a), run_closes_at(b))
            both_closed = [(wb, ws) for wb, ws, w in watermarks if closes_at <= w]
            if both_closed:
                rows.add(pair_row(*both_closed[0], JoinPair(left.event, right.event)))
    return rows


def brute_force_late(trace: Trace) -> set[Row]:
    """The late rows of a trace whose config is valid, from the definitions of OXJ-R7, R11, R14."""
    config = trace.config
    lateness = config.get(LATENESS_SETTING, 0)
    rows: set[Row] = set()
    for a in arrivals(trace)[0]:
        t, w = a.event.event_time, a.watermark
        if w is None:
            continue
        if config["join"] == "tumbling_tumbling":
            late = w >= tumbling_pane_closes_at(t // config["size_ms"], config["size_ms"], lateness)
        elif config["join"] == "tumbling_sliding" and a.side == "left":
            late = w >= tumbling_pane_closes_at(t // config["left_size_ms"], config["left_size_ms"], lateness)
        elif config["join"] == "tumbling_sliding":
            left_size = config["left_size_ms"]
            panes = reached_left_panes(t, left_size, config["right_size_ms"], config["right_slide_ms"])
            late = all(w >= tumbling_pane_closes_at(p, left_size, lateness) for p in panes)
        else:
            late = saturating_add(t, lateness) <= w
        if late:
            rows.add((a.event.batch, a.event.seq, a.side, a.event.key, t, w))
    return rows


__all__ = [
    "JoinEvent",
    "JoinOutcome",
    "JoinPair",
    "Session",
    "SessionSessionJoin",
    "TumblingSlidingJoin",
    "TumblingTumblingJoin",
    "WatermarkRegressed",
    "WindowJoinStats",
    "WindowJoinStream",
    "arrivals",
    "brute_force",
    "brute_force_late",
    "join_from_config",
    "reached_left_panes",
    "run_trace",
    "sliding_union",
    "validate_config",
]
