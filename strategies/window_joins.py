"""Hypothesis strategies for window-join traces (spec/window_joins.md).

A trace is one join (tumbling x tumbling or tumbling x sliding a quarter of
the time each, session x session half of it: its cases need more traces) over
one to three keys on two sides: event times drift upwards on a grid of the
panes (or the gap) with bounded disorder, so events land on pane edges and
sessions touch, merge and overlap; right events of tumbling x sliding repeat
a recent time now and then; watermark items mostly rise, some sit exactly on
(or 1 ms below) a close threshold of a recent event, some repeat the current
one and some regress; events are aimed at the late boundary of the current
watermark. Some keys (in a few traces every key) send on one side only; a
third of the traces (two thirds of the session ones) end with a final
watermark that closes everything. Half of the traces carry malformed items of
every error reason; empty batches, restart points, a large batch with a run
of tied times and refused configurations come at the rates the differential
mix sets. Times stay in 0 .. 10**7 (Spark timestamps, TR-2);
``window_join_edge_traces`` reaches the i64 bounds for the oracle's
properties.

The clauses' arithmetic, shared by the tests and the case count, is here too,
written from the design without the oracle's state: ``JoinShape`` (panes,
reach, thresholds), ``arrivals`` (the watermark and each item's fate, OXJ-R2,
R7, R11, R14, R19), ``expected_pairs`` (the brute-force definitions of R7,
R11, R16 with their emission points), ``sessions_of`` (R12) and
``expected_open_windows`` (R17).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from harness.outputs import TABLES
from harness.traces import I64_MAX, I64_MIN, InvalidConfig, Item, Trace
from strategies.common import LARGE_BATCH, LONG_TIE_RUN, i64_edge_times, restart_points
from strategies.generator_coverage import batch_shape_cases

AREA = "window_joins"
JOINS = ("tumbling_tumbling", "tumbling_sliding", "session_session")
SIDES = ("left", "right")
KEYS = ("a", "b", "c")
I32_MIN, I32_MAX = -(2**31), 2**31 - 1
#: Spark keeps times as timestamps: generated times stay in this range (TR-2)
TIME_HIGH = 10**7
#: a watermark this high closes every pane and session a bounded trace holds
FINAL_WATERMARK = TIME_HIGH
#: error reasons of OXJ-R19 a trace can carry (value_out_of_range exists in tables only)
ERROR_REASONS = (
    "unsupported_item",
    "missing_side",
    "unknown_side",
    "missing_key",
    "missing_event_time",
    "missing_time",
    "watermark_regressed",
)
UNKNOWN_SIDES = ("middle", "LEFT", "", "right ")

PairRow = tuple[Any, ...]


# ---- the clauses' arithmetic ------------------------------------------------------------------


def sat(x: int) -> int:
    """TR-2: a sum saturates at the i64 bounds."""
    return max(I64_MIN, min(I64_MAX, x))


@dataclass(frozen=True)
class JoinShape:
    """A valid configuration (OXJ-R18) and the pane and session arithmetic of its join."""

    join: str
    lateness: int = 0
    size: int = 0  # tumbling x tumbling: the pane size; tumbling x sliding: the left pane size
    right_size: int = 0
    slide: int = 0
    gap: int = 0

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> JoinShape:
        join = config["join"]
        lateness = config.get("allowed_lateness_ms", 0)
        if join == "tumbling_tumbling":
            return cls(join, lateness, size=config["size_ms"])
        if join == "tumbling_sliding":
            return cls(
                join, lateness, config["left_size_ms"], config["right_size_ms"], config["right_slide_ms"]
            )
        return cls(join, lateness, gap=config["gap_ms"])

    def pane_end(self, index: int) -> int:
        """OXJ-R4: the end of a (left) tumbling pane, saturating."""
        return sat(index * self.size + self.size)

    def pane_of(self, t: int) -> int:
        return t // self.size

    def purged(self, index: int, watermark: int | None) -> bool:
        """OXJ-R4: a pane is purged once the watermark reaches its end + allowed lateness."""
        return watermark is not None and watermark >= sat(self.pane_end(index) + self.lateness)

    def right_union(self, t: int) -> tuple[int, int]:
        """OXJ-R8: the half-open union [start, end) of the sliding panes holding a right event."""
        k_hi = t // self.slide
        k_lo = (t - self.right_size) // self.slide + 1
        return k_lo * self.slide, k_hi * self.slide + self.right_size

    def reached(self, t: int) -> range:
        """OXJ-R11: the left panes a right event at ``t`` reaches (those overlapping its union),
        among the panes that hold an i64 time."""
        start, end = self.right_union(t)
        return range(max(start, I64_MIN) // self.size, (min(end, I64_MAX + 1) - 1) // self.size + 1)

    def late(self, side: str, t: int, watermark: int | None) -> bool:
        """OXJ-R7, R11, R14: is an event arriving at ``watermark`` late?"""
        if watermark is None:
            return False
        if self.join == "session_session":
            return sat(t + self.lateness) <= watermark
        if self.join == "tumbling_sliding" and side == "right":
            return self.purged(self.reached(t)[-1], watermark)
        return self.purged(self.pane_of(t), watermark)

    def late_threshold(self, side: str, t: int) -> int:
        """The lowest watermark at which an event at ``t`` is late."""
        if self.join == "session_session":
            return sat(t + self.lateness)
        last = self.reached(t)[-1] if self.join == "tumbling_sliding" and side == "right" else self.pane_of(t)
        return sat(self.pane_end(last) + self.lateness)

    def closed(self, last: int, watermark: int | None) -> bool:
        """OXJ-R14: a session whose latest event is at ``last`` is closed at ``watermark``."""
        return watermark is not None and sat(sat(last + self.gap) + self.lateness) <= watermark


def expected_error(item: Item) -> str | None:
    """OXJ-R19: the reason of an item answered by an error row, in the clause's order (a regressed
    watermark needs the current watermark: ``arrivals``)."""
    if item.kind == "duplicate_seq":
        return "duplicate_seq"
    if item.kind not in ("event", "watermark"):
        return "unsupported_item"
    if item.kind == "watermark":
        return "missing_time" if item.time is None else None
    if item.side is None:
        return "missing_side"
    if item.side not in SIDES:
        return "unknown_side"
    if item.key is None:
        return "missing_key"
    return "missing_event_time" if item.event_time is None else None


@dataclass(frozen=True)
class Arrival:
    """One item of a trace and what it meets: its error reason, or for an event whether it is late
    and the watermark current at its arrival, for a watermark item the watermark after it."""

    batch: int
    seq: int
    position: int  # the item's place in the whole trace
    item: Item
    error: str | None
    watermark: int | None
    late: bool = False

    @property
    def taken(self) -> bool:
        return self.error is None and self.item.kind == "event" and not self.late

    @property
    def sets_watermark(self) -> bool:
        return self.error is None and self.item.kind == "watermark"


def arrivals(trace: Trace) -> list[Arrival]:
    """OXJ-R2, R7, R11, R14, R19 in arrival order: the watermark (absent until the first watermark
    item, never lowered: a lower one is an error row) and each event's lateness against it."""
    shape = JoinShape.of(trace.config)
    watermark: int | None = None
    out: list[Arrival] = []
    for b, batch in enumerate(trace.batches):
        for s, item in enumerate(batch):
            error = expected_error(item)
            if error is None and item.kind == "watermark":
                assert item.time is not None
                if watermark is not None and item.time < watermark:
                    error = "watermark_regressed"
                else:
                    watermark = item.time
            late = False
            if error is None and item.kind == "event":
                assert item.side is not None and item.event_time is not None
                late = shape.late(item.side, item.event_time, watermark)
            out.append(Arrival(b, s, len(out), item, error, watermark, late))
    return out


def pair_row(at: Arrival, left: Arrival, right: Arrival) -> PairRow:
    """OXJ-R3: the pairs row of ``left`` x ``right`` emitted at the item ``at``."""
    return (at.batch, at.seq, left.item.key, left.batch, left.seq, left.item.event_time, left.item.value,
            right.batch, right.seq, right.item.event_time, right.item.value)  # fmt: skip


@dataclass(frozen=True)
class Session:
    """OXJ-R12: a gap-connected run of one key's and side's taken events."""

    key: str
    side: str
    events: tuple[Arrival, ...]

    @property
    def times(self) -> list[int]:
        return [e.item.event_time for e in self.events if e.item.event_time is not None]

    @property
    def first(self) -> int:
        return min(self.times)

    @property
    def last(self) -> int:
        return max(self.times)


def sessions_of(events: Iterable[Arrival], gap: int) -> list[Session]:
    """OXJ-R12: per key and side, the runs of taken events sorted by time whose consecutive times
    differ by at most the gap."""
    grouped: dict[tuple[str, str], list[Arrival]] = {}
    for e in events:
        grouped.setdefault((e.item.key, e.item.side), []).append(e)  # type: ignore[arg-type]
    out: list[Session] = []
    for (key, side), group in sorted(grouped.items()):
        group.sort(key=lambda e: (e.item.event_time, e.position))
        run = [group[0]]
        for e in group[1:]:
            if e.item.event_time - run[-1].item.event_time > gap:  # type: ignore[operator]
                out.append(Session(key, side, tuple(run)))
                run = []
            run.append(e)
        out.append(Session(key, side, tuple(run)))
    return out


def sessions_overlap(a: Session, b: Session, gap: int) -> bool:
    """OXJ-R13: [first, last + gap] of both intersect (closed, saturating)."""
    return a.key == b.key and a.first <= sat(b.last + gap) and b.first <= sat(a.last + gap)


def _taken(trace_arrivals: list[Arrival], side: str) -> list[Arrival]:
    return [a for a in trace_arrivals if a.taken and a.item.side == side]


def expected_pairs(trace: Trace, trace_arrivals: list[Arrival] | None = None) -> list[PairRow]:
    """The brute-force definitions (OXJ-R7, R11, R16) from the arrival sequence, each pair with its
    emission point (R6, R11: the later of the two events; R15: the first watermark item at which
    both sessions are closed), sorted."""
    shape = JoinShape.of(trace.config)
    seen = arrivals(trace) if trace_arrivals is None else trace_arrivals
    lefts, rights = _taken(seen, "left"), _taken(seen, "right")
    rows: list[PairRow] = []
    if shape.join == "tumbling_tumbling":
        for left in lefts:
            for right in rights:
                same_pane = shape.pane_of(left.item.event_time) == shape.pane_of(right.item.event_time)  # type: ignore[arg-type]
                if left.item.key == right.item.key and same_pane:
                    rows.append(pair_row(max(left, right, key=lambda a: a.position), left, right))
    elif shape.join == "tumbling_sliding":
        for left in lefts:
            pane = shape.pane_of(left.item.event_time)  # type: ignore[arg-type]
            for right in rights:
                reaches = pane in shape.reached(right.item.event_time)  # type: ignore[arg-type]
                open_then = not shape.purged(pane, right.watermark)  # left is taken: open at its arrival
                if left.item.key == right.item.key and reaches and open_then:
                    rows.append(pair_row(max(left, right, key=lambda a: a.position), left, right))
    else:
        watermarks = [a for a in seen if a.sets_watermark]
        sessions = sessions_of([*lefts, *rights], shape.gap)
        for a in (s for s in sessions if s.side == "left"):
            for b in (s for s in sessions if s.side == "right"):
                if not sessions_overlap(a, b, shape.gap):
                    continue
                at = next((w for w in watermarks if shape.closed(max(a.last, b.last), w.watermark)), None)
                if at is not None:
                    rows += [pair_row(at, left, right) for left in a.events for right in b.events]
    return sorted(rows)


def expected_open_windows(shape: JoinShape, taken: list[Arrival], watermark: int | None) -> int:
    """OXJ-R17: what the join holds once ``taken`` (the taken events so far) have arrived and the
    watermark is ``watermark``: (key, pane) or (key, left pane) not yet purged, or sessions not yet
    forgotten (R16: forgotten once it and every overlapping session of the other side are closed)."""
    if shape.join == "session_session":
        sessions = sessions_of(taken, shape.gap)
        held = 0
        for s in sessions:
            partners = [o for o in sessions if o.side != s.side and sessions_overlap(s, o, shape.gap)]
            if not all(shape.closed(x.last, watermark) for x in (s, *partners)):
                held += 1
        return held
    panes: set[tuple[str, int]] = set()
    for e in taken:
        t, key = e.item.event_time, e.item.key
        assert t is not None and key is not None
        if shape.join == "tumbling_sliding" and e.item.side == "right":
            panes |= {(key, p) for p in shape.reached(t) if not shape.purged(p, e.watermark)}
        else:
            panes.add((key, shape.pane_of(t)))
    return sum(1 for _, p in panes if not shape.purged(p, watermark))


def expected_progress(trace: Trace, trace_arrivals: list[Arrival] | None = None) -> list[tuple[Any, ...]]:
    """OXJ-R17: the progress row of every batch from the arrivals and the expected pairs."""
    shape = JoinShape.of(trace.config)
    seen = arrivals(trace) if trace_arrivals is None else trace_arrivals
    pairs_by_batch = Counter(row[0] for row in expected_pairs(trace, seen))
    rows = []
    watermark: int | None = None
    counts = {"left": 0, "right": 0, "pairs": 0, "late": 0}
    taken: list[Arrival] = []
    by_batch: dict[int, list[Arrival]] = {}
    for a in seen:
        by_batch.setdefault(a.batch, []).append(a)
    for b in range(len(trace.batches)):
        for a in by_batch.get(b, []):
            if a.sets_watermark:
                watermark = a.watermark
            elif a.taken:
                counts[a.item.side] += 1  # type: ignore[index]
                taken.append(a)
            elif a.error is None and a.late:
                counts["late"] += 1
        counts["pairs"] += pairs_by_batch[b]
        open_windows = expected_open_windows(shape, taken, watermark)
        rows.append(
            (b, watermark, counts["left"], counts["right"], counts["pairs"], counts["late"], open_windows)
        )
    return rows


# ---- configurations (OXJ-R18) -----------------------------------------------------------------


@st.composite
def window_join_configs(draw: st.DrawFn, join: str | None = None) -> dict[str, Any]:
    """Valid settings of small panes or gaps (so that pairs, purges and late events meet in short
    traces); allowed lateness is left out half of the time (its default, 0)."""
    # sessions twice: their cases (merges, pairs waiting for a partner) need more traces to reach
    join = join or draw(st.sampled_from((*JOINS, "session_session")))
    config: dict[str, Any] = {"join": join}
    if join == "tumbling_tumbling":
        config["size_ms"] = draw(st.sampled_from((1, 10, 10, 20, 100, 1000)))
        unit = config["size_ms"]
    elif join == "tumbling_sliding":
        left = draw(st.sampled_from((5, 10, 20, 100)))
        right = max(1, left * draw(st.sampled_from((1, 2, 2, 3, 4))) // draw(st.sampled_from((1, 1, 2))))
        config["left_size_ms"], config["right_size_ms"] = left, right
        config["right_slide_ms"] = max(1, right // draw(st.sampled_from((1, 2, 2, 3, 4))))
        unit = min(left, config["right_slide_ms"])
    else:
        config["gap_ms"] = draw(st.sampled_from((1, 5, 10, 10, 50)))
        unit = config["gap_ms"]
    roll = draw(st.integers(0, 9))
    if roll == 0:
        config["allowed_lateness_ms"] = 0
    elif roll >= 6:
        steps, extra = draw(st.sampled_from((1, 1, 2, 5))), draw(st.sampled_from((0, 0, 1)))
        config["allowed_lateness_ms"] = unit * steps + extra
    return config


#: one configuration per refusal rule of OXJ-R18, each JSON-safe
INVALID_CONFIGS: st.SearchStrategy[dict[str, Any]] = st.sampled_from((
    {},
    {"size_ms": 10},
    {"join": "tumbling"},
    {"join": "Session_Session", "gap_ms": 5},
    {"join": 1, "size_ms": 10},
    {"join": None, "gap_ms": 5},
    {"join": "tumbling_tumbling"},
    {"join": "tumbling_tumbling", "size_ms": 0},
    {"join": "tumbling_tumbling", "size_ms": -10},
    {"join": "tumbling_tumbling", "size_ms": 1.5},
    {"join": "tumbling_tumbling", "size_ms": 10.0},
    {"join": "tumbling_tumbling", "size_ms": True},
    {"join": "tumbling_tumbling", "size_ms": "10"},
    {"join": "tumbling_tumbling", "size_ms": None},
    {"join": "tumbling_tumbling", "size_ms": I64_MAX + 1},
    {"join": "tumbling_tumbling", "size_ms": 10, "gap_ms": 5},
    {"join": "tumbling_tumbling", "size_ms": 10, "left_size_ms": 10},
    {"join": "tumbling_tumbling", "size_ms": 10, "allowed_lateness_ms": -1},
    {"join": "tumbling_tumbling", "size_ms": 10, "allowed_lateness_ms": False},
    {"join": "tumbling_tumbling", "size_ms": 10, "allowed_lateness_ms": I64_MAX + 1},
    {"join": "tumbling_tumbling", "size_ms": 10, "lateness_ms": 5},
    {"join": "tumbling_sliding", "left_size_ms": 10, "right_size_ms": 20},
    {"join": "tumbling_sliding", "left_size_ms": 10, "right_slide_ms": 5},
    {"join": "tumbling_sliding", "right_size_ms": 20, "right_slide_ms": 5},
    {"join": "tumbling_sliding", "left_size_ms": 10, "right_size_ms": 20, "right_slide_ms": 21},
    {"join": "tumbling_sliding", "left_size_ms": 10, "right_size_ms": 2561, "right_slide_ms": 10},
    {"join": "tumbling_sliding", "left_size_ms": 0, "right_size_ms": 20, "right_slide_ms": 5},
    {"join": "tumbling_sliding", "left_size_ms": 10, "right_size_ms": 20, "right_slide_ms": 0},
    {"join": "tumbling_sliding", "left_size_ms": 10, "right_size_ms": 20, "right_slide_ms": 5, "size_ms": 10},
    {"join": "session_session"},
    {"join": "session_session", "gap_ms": 0},
    {"join": "session_session", "gap_ms": 2.5},
    {"join": "session_session", "gap_ms": 5, "size_ms": 10},
    {"join": "session_session", "gap_ms": 5, "allowed_lateness_ms": "0"},
))  # fmt: skip

#: configurations at the edges of OXJ-R18 that are accepted
EDGE_VALID_CONFIGS = (
    {"join": "tumbling_tumbling", "size_ms": 1},
    {"join": "tumbling_tumbling", "size_ms": I64_MAX, "allowed_lateness_ms": I64_MAX},
    {"join": "tumbling_sliding", "left_size_ms": 10, "right_size_ms": 2560, "right_slide_ms": 2560},
    {"join": "tumbling_sliding", "left_size_ms": 1, "right_size_ms": 1, "right_slide_ms": 1},
    {"join": "session_session", "gap_ms": I64_MAX, "allowed_lateness_ms": 0},
)


# ---- traces -----------------------------------------------------------------------------------


def join_event(side: str | None, key: str | None, t: int | None, value: int = 0) -> Item:
    """An event item of a window join (OXJ-R1)."""
    return Item("event", side=side, key=key, event_time=t, value=value)


def watermark(t: int | None) -> Item:
    """A watermark item: the join's input watermark (OXJ-R2)."""
    return Item("watermark", time=t)


@dataclass
class _Model:
    """What the generator knows: the join, its keys and sides, the drifting base time and the
    watermark it has sent, and the recent events whose thresholds a watermark may hit."""

    shape: JoinShape
    keys: tuple[str, ...]
    sides_of: dict[str, tuple[str, ...]]
    unit: int
    max_step: int
    disorder: int
    low: int
    high: int
    base: int
    watermark: int | None = None
    recent: list[tuple[str, str, int]] = field(default_factory=list)

    def clamp(self, t: int) -> int:
        return max(self.low, min(self.high, t))


def _unit(shape: JoinShape, draw: st.DrawFn) -> int:
    """The time grid of a trace: a fraction of the pane, slide or gap, now and then 1 ms."""
    whole = {"tumbling_tumbling": shape.size, "tumbling_sliding": min(shape.size, shape.slide)}.get(
        shape.join, shape.gap
    )
    return max(1, whole // draw(st.sampled_from((1, 2, 5, 5, whole))))


def _event_time(draw: st.DrawFn, model: _Model, side: str, key: str) -> int:
    """A time drifting up with disorder, or one on the late boundary of the current watermark."""
    shape = model.shape
    if model.watermark is not None and draw(st.integers(0, 4)) == 0:
        edge = model.watermark - shape.lateness
        if shape.join == "session_session":
            return model.clamp(edge + draw(st.sampled_from((0, 0, 1, 1, -model.unit))))  # t + L == w: late
        return model.clamp(edge + draw(st.sampled_from((-1, -1, 0, 0, -shape.size, model.unit))))
    own = sorted(t for s, k, t in model.recent if (s, k) == (side, key))
    roll = draw(st.integers(0, 9))
    if shape.join == "session_session" and own and roll < 5:
        t = _session_time(draw, model, own)
    elif shape.join == "tumbling_sliding" and side == "right" and own and roll < 2:
        t = draw(st.sampled_from(own))  # right events of one time: each its own pair (R10)
    else:
        model.base = model.clamp(model.base + draw(st.integers(0, model.max_step)) * model.unit)
        t = model.clamp(model.base - draw(st.integers(0, model.disorder)) * model.unit)
    model.recent = [*model.recent[-7:], (side, key, t)]
    return t


def _session_time(draw: st.DrawFn, model: _Model, own: list[int]) -> int:
    """A time just beyond the gap of a recent event of the side (a session of its own), or one
    within the gap of two such sessions (it merges them, OXJ-R12)."""
    gap = model.shape.gap
    apart = [(a, b) for a, b in zip(own, own[1:], strict=False) if gap < b - a <= 2 * gap]
    bridge = draw(st.integers(0, 3)) > 0
    if apart and bridge:
        a, b = draw(st.sampled_from(apart))
        return model.clamp(draw(st.integers(b - gap, a + gap)))
    nearby = draw(st.sampled_from(own)) + draw(st.sampled_from((1, -1))) * (gap + draw(st.integers(1, gap)))
    return model.clamp(nearby)


def _watermark_time(draw: st.DrawFn, model: _Model) -> int:
    """Mostly rising; some at a recent event's close threshold, some repeated, some regressed."""
    shape = model.shape
    roll = draw(st.integers(0, 99))
    current = model.watermark
    if roll < (50 if shape.join == "session_session" else 35) and model.recent:
        side, _, t = draw(st.sampled_from(model.recent))
        if shape.join == "session_session":
            above = [r for _, _, r in model.recent if not shape.closed(r, current)]
            lowest = draw(st.booleans())  # the lowest still open: one session closes, later ones stay open
            if above and lowest:
                t = min(above)
            time = sat(sat(t + shape.gap) + shape.lateness)  # closes a session whose last event is t
        elif shape.join == "tumbling_sliding" and side == "right" and draw(st.booleans()):
            reached = shape.reached(t)
            time = sat(shape.pane_end(reached[draw(st.integers(0, len(reached) - 1))]) + shape.lateness)
        else:
            time = shape.late_threshold("left", t)
        time += draw(st.sampled_from((0, 0, 0, -1)))
    elif roll < 45 and current is not None:
        time = current - draw(st.sampled_from((0, 0, 1, model.unit)))  # repeated or regressed (R2)
    else:
        time = model.base - draw(st.sampled_from((0, 1, 2, 5, 10))) * model.unit
    time = model.clamp(time)
    if current is None or time >= current:
        model.watermark = time
    return time


def _malformed(draw: st.DrawFn, model: _Model) -> Item:
    """One item of each error reason of OXJ-R19, sometimes with faults of later reasons too (the
    first in order wins)."""
    key: str | None = draw(st.sampled_from(model.keys))
    side: str | None = draw(st.sampled_from(SIDES))
    t: int | None = model.clamp(model.base - model.unit)
    reason = draw(st.sampled_from((*ERROR_REASONS[:-1], "missing_time")))  # the only watermark fault: twice
    if draw(st.integers(0, 2)) == 0:
        more_key, more_t = draw(st.sampled_from(((None, t), (key, None), (None, None))))
        t = more_t if reason != "missing_event_time" else t
        key = more_key if reason in ("missing_side", "unknown_side") else key
    if reason == "unsupported_item":
        return draw(st.sampled_from((Item("end"), Item("clock", time=5), Item("idle", key=key))))
    if reason == "missing_time":
        return Item("watermark", time=None)
    if reason == "missing_side":
        side = None
    elif reason == "unknown_side":
        side = draw(st.sampled_from(UNKNOWN_SIDES))
    elif reason == "missing_key":
        key = None
    else:
        t = None
    return join_event(side, key, t)


def _value(draw: st.DrawFn) -> int:
    roll = draw(st.integers(0, 19))
    if roll < 8:
        return 0
    return draw(st.sampled_from((I32_MIN, I32_MAX, -1))) if roll == 19 else draw(st.integers(1, 99))


def _event(draw: st.DrawFn, model: _Model) -> Item:
    key = model.keys[0] if draw(st.booleans()) else draw(st.sampled_from(model.keys))
    side = draw(st.sampled_from(model.sides_of[key]))
    return join_event(side, key, _event_time(draw, model, side, key), _value(draw))


def _batch(draw: st.DrawFn, model: _Model, malformed: bool) -> list[Item]:
    items: list[Item] = []
    for _ in range(draw(st.integers(0, 10))):
        roll = draw(st.integers(0, 99))
        first_events = model.watermark is None and len(items) < 3  # pairs before any watermark (R2)
        if malformed and roll < 12:
            items.append(_malformed(draw, model))
        elif roll < 72 or first_events:
            items.append(_event(draw, model))
        else:
            items.append(watermark(_watermark_time(draw, model)))
    return items


def _large_batch(draw: st.DrawFn, model: _Model) -> list[Item]:
    """LARGE_BATCH or more events, LONG_TIE_RUN or more of them at one time, a watermark among them."""
    items = [_event(draw, model) for _ in range(LARGE_BATCH - LONG_TIE_RUN + draw(st.integers(0, 4)))]
    tie = _event(draw, model)
    items += [join_event(draw(st.sampled_from(model.sides_of[tie.key or ""])), tie.key, tie.event_time,
                         _value(draw)) for _ in range(LONG_TIE_RUN + draw(st.integers(0, 2)))]  # fmt: skip
    items = list(draw(st.permutations(items)))
    items.insert(draw(st.integers(0, len(items))), watermark(_watermark_time(draw, model)))
    return items


def _sides(draw: st.DrawFn, keys: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """Both sides for most keys; one key in some traces, every key in a few, on one side only."""
    roll = draw(st.integers(0, 99))
    sides_of: dict[str, tuple[str, ...]] = {key: SIDES for key in keys}
    if roll < 8:
        silent = draw(st.sampled_from(SIDES))
        return {key: tuple(s for s in SIDES if s != silent) for key in keys}
    if roll < 35:
        sides_of[draw(st.sampled_from(keys))] = (draw(st.sampled_from(SIDES)),)
    return sides_of


def _model(draw: st.DrawFn, config: dict[str, Any], low: int, high: int, base: int) -> _Model:
    shape = JoinShape.of(config)
    keys = KEYS[: draw(st.integers(1, len(KEYS)))]
    unit = _unit(shape, draw)
    return _Model(
        shape, keys, _sides(draw, keys), unit,
        max_step=draw(st.sampled_from((0, 1, 2, 4))), disorder=draw(st.sampled_from((0, 2, 4, 10))),
        low=low, high=high, base=base,
    )  # fmt: skip


@st.composite
def window_join_traces(
    draw: st.DrawFn,
    join: str | None = None,
    invalid_config_rate: int = 0,
    large_batch_rate: int = 0,
    final_watermark_rate: int = 35,
) -> Trace:
    """A trace of 1..6 batches (see the module's docstring); the rates are percentages."""
    if invalid_config_rate and draw(st.integers(0, 99)) < invalid_config_rate:
        refused: dict[str, Any] = draw(INVALID_CONFIGS)
        # a varied item keeps equal refused configurations from collapsing when traces are deduplicated
        return Trace(AREA, refused, ((join_event("left", "a", draw(st.integers(0, 10**6))),),))
    config = draw(window_join_configs(join))
    model = _model(draw, config, 0, TIME_HIGH, draw(st.sampled_from((0, 0, 1000, 123_457))))
    malformed = draw(st.booleans())
    n_batches = draw(st.integers(1, 6))
    large = draw(st.integers(0, 99)) >= 100 - large_batch_rate
    large_at = draw(st.integers(0, n_batches - 1)) if large else None
    batches = []
    for b in range(n_batches):
        if b == large_at:
            batches.append(_large_batch(draw, model))
        elif draw(st.integers(0, 9)) == 0:
            batches.append([])
        else:
            batches.append(_batch(draw, model, malformed))
    sessions = model.shape.join == "session_session"
    if draw(st.integers(0, 99)) < final_watermark_rate * (2 if sessions else 1):
        if sessions and model.recent and draw(st.booleans()):
            # first the close threshold of one recent event: sessions close at two watermark items
            batches[-1].append(watermark(_watermark_time(draw, model)))
        batches[-1].append(watermark(FINAL_WATERMARK))
    return Trace(AREA, config, tuple(tuple(b) for b in batches), draw(restart_points(n_batches)))


@st.composite
def window_join_edge_traces(draw: st.DrawFn) -> Trace:
    """Oracle-only (TR-2): times, panes, gaps and lateness at the i64 bounds, where every sum
    saturates; watermarks up to I64_MAX, which closes everything."""
    join = draw(st.sampled_from(JOINS))
    big = st.sampled_from((1, 10, 2**40, 2**62, I64_MAX))
    config: dict[str, Any] = {"join": join}
    if join == "tumbling_tumbling":
        config["size_ms"] = draw(big)
    elif join == "tumbling_sliding":
        left = draw(st.sampled_from((1, 10, 2**40, 2**54)))
        right = left * draw(st.sampled_from((1, 3, 256)))
        config.update(
            left_size_ms=left,
            right_size_ms=right,
            right_slide_ms=max(1, right // draw(st.sampled_from((1, 2, 7)))),
        )
    else:
        config["gap_ms"] = draw(big)
    if draw(st.booleans()):
        config["allowed_lateness_ms"] = draw(st.sampled_from((0, 1, 2**62, I64_MAX)))
    low_end = draw(st.booleans())
    base = I64_MIN + 1000 if low_end else I64_MAX - 1000
    model = _model(draw, config, I64_MIN, I64_MAX, base)
    model.unit = draw(st.sampled_from((1, 7, 100)))
    batches: list[list[Item]] = []
    for _ in range(draw(st.integers(1, 3))):
        batch = _batch(draw, model, malformed=False)
        for _ in range(draw(st.integers(0, 2))):
            t = draw(i64_edge_times())
            if draw(st.booleans()):
                batch.append(_event(draw, model))
                batch[-1] = join_event(batch[-1].side, batch[-1].key, t, batch[-1].value)
            else:
                batch.append(watermark(t))
        batches.append(batch)
    if draw(st.booleans()):
        batches[-1].append(watermark(I64_MAX))
    return Trace(AREA, config, tuple(tuple(b) for b in batches), draw(restart_points(len(batches))))


# ---- the differential mix and the cases it must reach (spec/traces.md TR-13) ------------------

DIFFERENTIAL = ((window_join_traces(invalid_config_rate=16, large_batch_rate=12), 1.0),)

CASES: dict[str, str] = {
    **{f"pairs_{j}": f"a pair of a {j.replace('_', ' x ')} join (OXJ-R3, R5, R9, R13)" for j in JOINS},
    "late_left": "a late left event dropped (OXJ-R7, R11, R14)",
    "late_right": "a late right event dropped (OXJ-R7, R11, R14)",
    "late_at_threshold": "an event late with the watermark exactly at its threshold (OXJ-R7, R11, R14)",
    "kept_below_threshold": "an event kept with the watermark 1 ms below its threshold (OXJ-R7, R11, R14)",
    "kept_by_allowed_lateness": "an event behind the watermark kept by allowed lateness (OXJ-R4, R14)",
    "pane_purged": "a watermark purges a held pane (OXJ-R4, R7, R11)",
    "close_threshold": "a watermark exactly at a held pane's or session's end + lateness (OXJ-R4, R14)",
    "watermark_repeated": "a watermark equal to the current one: no change, no error (OXJ-R2)",
    "pair_before_any_watermark": "a pair of two events that arrived before the first watermark (OXJ-R2)",
    "ts_multi_pane_right": "a right event stored in two or more left panes (OXJ-R8, R11)",
    "ts_pair_outside_left_pane": "a pair whose right time lies outside the left pane (OXJ-R9)",
    "ts_equal_right_times": "two right events of one time paired with one left event (OXJ-R10)",
    "ts_right_partly_purged": "a right event kept while a left pane it reaches is purged (OXJ-R11)",
    "ss_merge": "an event that merges two or more sessions into one (OXJ-R12)",
    "ss_overlap_by_gap": "a pair of sessions that overlap only through the gap (OXJ-R13)",
    "ss_pair_waits_for_partner": "a closed session whose pairs wait for its partner to close (OXJ-R15)",
    "ss_session_forgotten": "a session forgotten at a watermark (OXJ-R16)",
    "one_sided_key": "a key whose taken events are all on one side (OXJ-R16, R17)",
    **{f"error_{r}": f"an item refused with {r} (OXJ-R19, R2, TR-7)" for r in ERROR_REASONS},
    "restart": "a restart point between batches (OXJ-R21, TR-5)",
    "empty_batch": "an empty batch still has its progress row (OXJ-R17, TR-5)",
    "large_batch": f">= {LARGE_BATCH} events in one batch (OXJ-R3, R17)",
    "long_tie_run": f">= {LONG_TIE_RUN} events of one time in a batch of >= {LARGE_BATCH} (OXJ-R3)",
    "invalid_config": "a refused configuration (OXJ-R18, TR-6)",
}

RARE: dict[str, str] = {}


def _rows(output: dict[str, Any], table: str) -> list[dict[str, Any]]:
    return [dict(zip(TABLES[AREA][table], r, strict=True)) for r in output[table]]


def _tumbling_cases(shape: JoinShape, seen: list[Arrival], pairs: list[dict[str, Any]]) -> set[str]:
    reached: set[str] = set()
    held: set[tuple[str, int]] = set()
    for a in seen:
        if a.sets_watermark:
            before = len(held)
            held = {(k, p) for k, p in held if not shape.purged(p, a.watermark)}
            if len(held) < before:
                reached.add("pane_purged")
        if not a.taken:
            continue
        t, key = a.item.event_time, a.item.key
        assert t is not None and key is not None
        if shape.join == "tumbling_sliding" and a.item.side == "right":
            reached_panes = shape.reached(t)
            kept = [p for p in reached_panes if not shape.purged(p, a.watermark)]
            if len(kept) >= 2:
                reached.add("ts_multi_pane_right")
            if len(kept) < len(reached_panes):
                reached.add("ts_right_partly_purged")
            held |= {(key, p) for p in kept}
        else:
            held.add((key, shape.pane_of(t)))
    if shape.join == "tumbling_sliding":
        by_left: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
        for p in pairs:
            pane_start = shape.pane_of(p["left_time"]) * shape.size
            if not pane_start <= p["right_time"] < pane_start + shape.size:
                reached.add("ts_pair_outside_left_pane")
            by_left.setdefault((p["left_batch"], p["left_seq"]), []).append(
                (p["right_time"], p["right_batch"], p["right_seq"])
            )
        for rights in by_left.values():
            if len(rights) > len({t for t, _, _ in rights}):
                reached.add("ts_equal_right_times")
    return reached


def _threshold_cases(shape: JoinShape, seen: list[Arrival]) -> set[str]:
    """Watermarks exactly at a close threshold of what is held (a pane's end + L, a session's
    end + L), from the taken events so far."""
    reached: set[str] = set()
    taken: list[Arrival] = []
    for a in seen:
        if a.taken:
            taken.append(a)
        if not a.sets_watermark or not taken:
            continue
        w = a.watermark
        if shape.join == "session_session":
            thresholds = {
                sat(sat(s.last + shape.gap) + shape.lateness) for s in sessions_of(taken, shape.gap)
            }
        else:
            thresholds = {
                shape.late_threshold("left", e.item.event_time)  # type: ignore[arg-type]
                for e in taken
                if not (shape.join == "tumbling_sliding" and e.item.side == "right")
            }
            for e in taken:
                if shape.join == "tumbling_sliding" and e.item.side == "right":
                    panes = shape.reached(e.item.event_time)  # type: ignore[arg-type]
                    thresholds |= {sat(shape.pane_end(p) + shape.lateness) for p in panes}
        if w in thresholds:
            reached.add("close_threshold")
    return reached


def _session_cases(shape: JoinShape, seen: list[Arrival]) -> set[str]:
    reached: set[str] = set()
    taken: list[Arrival] = []
    for a in seen:
        if not a.taken:
            continue
        t = a.item.event_time
        assert t is not None
        touching = [
            s for s in sessions_of(taken, shape.gap)
            if (s.key, s.side) == (a.item.key, a.item.side) and s.first - shape.gap <= t <= s.last + shape.gap
        ]  # fmt: skip
        if len(touching) >= 2:
            reached.add("ss_merge")
        taken.append(a)
    sessions = sessions_of(taken, shape.gap)
    watermarks = [a.watermark for a in seen if a.sets_watermark]
    for left in (s for s in sessions if s.side == "left"):
        for right in (s for s in sessions if s.side == "right"):
            if not sessions_overlap(left, right, shape.gap):
                continue
            if not (left.first <= right.last and right.first <= left.last):
                reached.add("ss_overlap_by_gap")
            closes = [next((i for i, w in enumerate(watermarks) if shape.closed(s.last, w)), None)
                      for s in (left, right)]  # fmt: skip
            if None not in closes and closes[0] != closes[1]:
                reached.add("ss_pair_waits_for_partner")
    return reached


def _forgotten(shape: JoinShape, seen: list[Arrival]) -> bool:
    """OXJ-R16: does a watermark item make the session join forget a session?"""
    taken: list[Arrival] = []
    watermark: int | None = None
    for a in seen:
        if a.taken:
            taken.append(a)
        elif a.sets_watermark:
            before = expected_open_windows(shape, taken, watermark)
            watermark = a.watermark
            if expected_open_windows(shape, taken, watermark) < before:
                return True
    return False


def cases_reached(trace: Trace, output: Any) -> set[str]:
    """The CASES one trace reaches, from the trace (the clauses' arithmetic above) and the oracle's
    canonical output."""
    if isinstance(output, InvalidConfig):
        return {"invalid_config"}
    if not isinstance(output, dict):
        return set()
    error_at = {(b, s) for b, s, _ in output["errors"]}
    reached = batch_shape_cases(trace, error_at) & {"restart", "empty_batch", "large_batch", "long_tie_run"}
    reached |= {f"error_{reason}" for _, _, reason in output["errors"] if reason in ERROR_REASONS}
    shape = JoinShape.of(trace.config)
    seen = arrivals(trace)
    pairs = _rows(output, "pairs")
    if pairs:
        reached.add(f"pairs_{shape.join}")
    position = {(a.batch, a.seq): a.position for a in seen}
    first_watermark = next((a.position for a in seen if a.sets_watermark), len(seen))
    if any(position[(p["batch"], p["seq"])] < first_watermark for p in pairs):
        reached.add("pair_before_any_watermark")
    current: int | None = None
    for a in seen:
        if a.sets_watermark:
            if a.watermark == current:
                reached.add("watermark_repeated")
            current = a.watermark
        if a.error is not None or a.item.kind != "event" or a.watermark is None:
            continue
        side, t = a.item.side, a.item.event_time
        assert side is not None and t is not None
        threshold = shape.late_threshold(side, t)
        if a.late:
            reached.add(f"late_{side}")
            if a.watermark == threshold:
                reached.add("late_at_threshold")
        else:
            if a.watermark == threshold - 1:
                reached.add("kept_below_threshold")
            behind_by = a.watermark - (t if shape.join == "session_session" else threshold - shape.lateness)
            if behind_by >= 0:
                reached.add("kept_by_allowed_lateness")
    reached |= _threshold_cases(shape, seen)
    if shape.join == "session_session":
        reached |= _session_cases(shape, seen)
        if _forgotten(shape, seen):
            reached.add("ss_session_forgotten")
    else:
        reached |= _tumbling_cases(shape, seen, pairs)
    sides: dict[str, set[str]] = {}
    for a in seen:
        if a.taken:
            sides.setdefault(a.item.key, set()).add(a.item.side)  # type: ignore[arg-type]
    if any(len(s) == 1 for s in sides.values()):
        reached.add("one_sided_key")
    return reached


__all__ = [
    "AREA",
    "CASES",
    "DIFFERENTIAL",
    "EDGE_VALID_CONFIGS",
    "ERROR_REASONS",
    "FINAL_WATERMARK",
    "INVALID_CONFIGS",
    "JOINS",
    "RARE",
    "TIME_HIGH",
    "Arrival",
    "JoinShape",
    "Session",
    "arrivals",
    "cases_reached",
    "expected_error",
    "expected_open_windows",
    "expected_pairs",
    "expected_progress",
    "join_event",
    "pair_row",
    "sat",
    "sessions_of",
    "sessions_overlap",
    "watermark",
    "window_join_configs",
    "window_join_edge_traces",
    "window_join_traces",
]
