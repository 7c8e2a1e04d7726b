"""F064 per-partition watermarks: invariants of the oracle, and engine-vs-oracle differential tests.

Invariants run on the oracle (reference/partitioned_watermarks.py), through
its API (a Hypothesis state machine, with the oracle-only per-core objects
of F064-R18/R19) and through its stream (``run_trace``). The differential
test feeds every engine chosen with ``--engine`` (except the reference) a few
hundred generated traces in ONE ``run`` call and compares each output with
the oracle's; a difference is shrunk and printed as a scenario for
features/partitioned_watermarks.feature.

The batch-cut properties (F064-R25) run a trace and its re-cut twin, on the
oracle and on every engine, and compare what no cut changes; planted
batch-dependent trackers show that the comparison still convicts.

What "the combined watermark never exceeds an active partition's watermark"
means precisely, given that the combined is monotone (F064-R7):

* it cannot hold at every moment: a partition that comes back (an update
  reactivates it, ``active``, a fresh partition from add or re-registration)
  may sit below the combined, which does not go back;
* what holds is ``combined == max(previous combined, candidate)`` after every
  call, with the candidate of F064-R6. So whenever the combined ADVANCES, its
  new value is the candidate: at most every active partition's watermark
  (it is their minimum) when some partition is active, else the maximum
  over all partitions; and at every moment the combined is at least the
  current candidate (``combined_is_the_running_max_of_candidates``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from harness.reference_engine import ReferenceEngine
from harness.traces import I64_MAX, PARTITIONED_REQUIRED_FIELDS, InvalidConfig, Item, Trace, saturating_sub
from properties import batch_cuts
from properties.batch_cuts import batch_ends, draw_cuts, item_places, recut
from reference.partitioned_watermarks import (
    CoreWatermarkState,
    InvalidPartition,
    PartitionedWatermarkTracker,
    PartitionId,
    SourceNotFound,
    UnknownPartition,
    collect_watermarks,
    run_trace,
)
from strategies.common import (
    NEVER_SOURCE,
    PARTITION_MAX,
    check_generated,
    check_state_layouts,
    delays,
    i64_edge_times,
    invalid_partitioned_watermark_configs,
    partitioned_watermark_traces,
)
from strategies.partitioned_watermarks import DIFFERENTIAL

ALL_CLAUSES = tuple(f"F064-R{n}" for n in range(1, 25))
STREAM_CLAUSES = tuple(c for c in ALL_CLAUSES if c not in ("F064-R18", "F064-R19"))  # R18/R19: oracle-only

#: the no-op control item: removing a partition of a source never registered (F064-R13). Like an
#: error row it ends the current step (F064-R20/R22), and it changes nothing else.
NOOP = Item("remove_partition", source=NEVER_SOURCE, partition=0)


def _gt(after: int | None, before: int | None) -> bool:
    """Strictly greater, None below everything (F064-R16: an advance)."""
    return after is not None and (before is None or after > before)


def _ge(after: int | None, before: int | None) -> bool:
    return before is None or (after is not None and after >= before)


def candidate(states: Iterable[tuple[int | None, bool]]) -> int | None:
    """F064-R6, written again from the clause: (watermark, is_idle) pairs -> the allowed watermark."""
    states = list(states)
    active = [wm for wm, idle in states if not idle]
    if active:
        return None if None in active else min(w for w in active if w is not None)
    known = [wm for wm, _ in states if wm is not None]
    return max(known) if known else None


# ---- the tracker API as a state machine ------------------------------------------------

SOURCE_IDS = st.sampled_from((0, 1, 2))
PARTITION_NOS = st.integers(0, 4)
TIMES = st.one_of(st.integers(0, 20_000), st.integers(0, 20).map(lambda n: n * 1000))


class TrackerMachine(RuleBasedStateMachine):
    """Random calls of the F064 tracker API, checked call by call.

    The machine keeps only what the errors and counters need (registered
    sources, tracked partitions) and last-seen watermarks; the watermark
    rules are checked as properties, not by a second implementation.
    """

    @initialize(idle_timeout=delays(1000, 20_000))
    def setup(self, idle_timeout: int) -> None:
        self.now = 0
        self.idle_timeout = idle_timeout
        self.tracker = PartitionedWatermarkTracker.with_idle_timeout(idle_timeout, clock=lambda: self.now)
        self.sources: set[int] = set()
        self.tracked: set[PartitionId] = set()
        self.rebalances = 0
        self.seen: dict[PartitionId, tuple[object, int | None]] = {}  # state object, last watermark

    # -- helpers

    def _view(self) -> list[tuple[int | None, bool]]:
        return [(s.watermark, s.is_idle) for s in self.tracker.partitions.values()]

    def _expected_error(self, p: PartitionId) -> type[Exception] | None:
        """F064-R1, R4: the error of a call on one partition."""
        if not (0 <= p.source_id <= I64_MAX and 0 <= p.partition <= PARTITION_MAX):
            return InvalidPartition
        if p.source_id not in self.sources:
            return SourceNotFound
        if p not in self.tracked:
            return UnknownPartition
        return None

    def _call(self, p: PartitionId, f: Any, *args: Any) -> tuple[bool, Any]:
        """Calls f(*args); asserts the R4 error and that a refused call changes nothing."""
        error = self._expected_error(p)
        before = self.tracker.checkpoint()
        if error is not None:
            with pytest.raises(error):
                f(*args)
            assert self.tracker.checkpoint() == before  # a refused call changes nothing
            return False, None
        return True, f(*args)

    def _check_step(self, before_combined: int | None, before_adv: int, returned: Any = "n/a") -> None:
        """F064-R7, R16: one evaluation, at most one advance; an advance is to the candidate."""
        after = self.tracker.current_watermark()
        advanced = self.tracker.metrics().watermark_advances - before_adv
        assert advanced == (1 if _gt(after, before_combined) else 0)
        if advanced:
            assert after == candidate(self._view())  # the new value is the candidate (R6, R7)
        if returned != "n/a":
            assert returned == (after if advanced else None)  # the call returns the new combined

    def _partition(self, data: st.DataObject) -> PartitionId:
        """Mostly a tracked partition; sometimes an untracked, unknown or out-of-range one."""
        roll = data.draw(st.integers(0, 19))
        if roll == 0:
            return data.draw(st.sampled_from((PartitionId(-1, 0), PartitionId(0, PARTITION_MAX + 1))))
        if roll < 15 and self.tracked:
            return data.draw(st.sampled_from(sorted(self.tracked)))
        return data.draw(st.builds(PartitionId, SOURCE_IDS, PARTITION_NOS))

    # -- rules

    @rule(source=SOURCE_IDS, count=st.integers(0, 4))
    def register_source(self, source: int, count: int) -> None:
        tr = self.tracker
        before_c, adv = tr.current_watermark(), tr.metrics().watermark_advances
        survivors = {
            p: tr.partitions[p] for p in self.tracked if p.source_id == source and p.partition < count
        }
        old = {p for p in self.tracked if p.source_id == source}
        new = {PartitionId(source, n) for n in range(count)}
        tr.register_source(source, count)
        if source in self.sources:
            self.rebalances += len(old - new) + len(new - old)  # F064-R2: re-registration counts
        self.sources.add(source)
        self.tracked = (self.tracked - old) | new
        for p, s in survivors.items():
            assert tr.partitions[p] is s  # F064-R2: survivors keep their state
        for p in new - old:
            s = tr.partitions[p]
            assert (s.watermark, s.is_idle, s.assigned_core, s.last_activity) == (
                None,
                False,
                None,
                self.now,
            )  # R3
        self._check_step(before_c, adv)

    @rule(data=st.data())
    def add_partition(self, data: st.DataObject) -> None:
        p = self._partition(data)
        tr = self.tracker
        before = tr.checkpoint()
        ok_range = 0 <= p.source_id and 0 <= p.partition <= PARTITION_MAX
        if not ok_range or p in self.tracked:
            with pytest.raises(InvalidPartition):  # F064-R1, R12
                tr.add_partition(p)
        elif p.source_id not in self.sources:
            with pytest.raises(SourceNotFound):  # F064-R12
                tr.add_partition(p)
        else:
            tr.add_partition(p)
            self.tracked.add(p)
            self.rebalances += 1  # F064-R12
            s = tr.partitions[p]
            assert (s.watermark, s.is_idle, s.last_activity) == (None, False, self.now)  # F064-R3
            assert tr.current_watermark() == before["combined_watermark"]  # a fresh partition lowers nothing
            return
        assert tr.checkpoint() == before

    @rule(data=st.data())
    def remove_partition(self, data: st.DataObject) -> None:
        p = self._partition(data)
        tr = self.tracker
        before_c, adv = tr.current_watermark(), tr.metrics().watermark_advances
        was = tr.partitions.get(p)
        if self._expected_error(p) is InvalidPartition:
            before = tr.checkpoint()
            with pytest.raises(InvalidPartition):  # F064-R1: numbers out of range, even here
                tr.remove_partition(p)
            assert tr.checkpoint() == before
            return
        returned = tr.remove_partition(p)  # F064-R13: untracked or unknown source: None, no error
        assert returned is was
        if was is not None:
            self.tracked.discard(p)
            self.rebalances += 1
        assert p not in tr.partitions
        self._check_step(before_c, adv)

    @rule(data=st.data(), wm=st.one_of(TIMES, i64_edge_times()))
    def update_partition(self, data: st.DataObject, wm: int) -> None:
        p = self._partition(data)
        tr = self.tracker
        before_c, adv = tr.current_watermark(), tr.metrics().watermark_advances
        old = tr.partition_watermark(p)
        ok, returned = self._call(p, tr.update_partition, p, wm)
        if ok:
            s = tr.partitions[p]
            assert s.watermark == (wm if old is None else max(old, wm))  # F064-R4: max, never back
            assert s.last_activity == self.now and not s.is_idle  # F064-R4: activity, reactivated
            self._check_step(before_c, adv, returned)

    @rule(
        data=st.data(),
        t=st.one_of(TIMES, i64_edge_times()),
        lateness=st.one_of(delays(1000), st.just(I64_MAX)),
    )
    def update_partition_from_event(self, data: st.DataObject, t: int, lateness: int) -> None:
        p = self._partition(data)
        tr = self.tracker
        before_c, adv = tr.current_watermark(), tr.metrics().watermark_advances
        old = tr.partition_watermark(p)
        ok, returned = self._call(p, tr.update_partition_from_event, p, t, lateness)
        if ok:
            wm = saturating_sub(t, lateness)  # F064-R5, saturating (TR-2)
            assert tr.partitions[p].watermark == (wm if old is None else max(old, wm))
            assert tr.partitions[p].last_event_time == t
            self._check_step(before_c, adv, returned)

    @precondition(lambda self: self.tracked)
    @rule(data=st.data())
    def negative_lateness_is_refused(self, data: st.DataObject) -> None:
        p = data.draw(st.sampled_from(sorted(self.tracked)))
        before = self.tracker.checkpoint()
        with pytest.raises(InvalidConfig):  # F064-R5
            self.tracker.update_partition_from_event(p, 1000, -1)
        assert self.tracker.checkpoint() == before

    @rule(data=st.data())
    def update_partitions(self, data: st.DataObject) -> None:
        """F064-R20: several updates, applied in order, the combined evaluated once."""
        tr = self.tracker
        updates = [(self._partition(data), data.draw(TIMES)) for _ in range(data.draw(st.integers(0, 4)))]
        before_c, adv = tr.current_watermark(), tr.metrics().watermark_advances
        twin = PartitionedWatermarkTracker.restore(tr.checkpoint(), clock=lambda: self.now)
        errors = [e for p, _ in updates if (e := self._expected_error(p)) is not None]
        before = tr.checkpoint()
        if errors:
            with pytest.raises(errors[0]):  # all checked before any is applied
                tr.update_partitions(updates)
            assert tr.checkpoint() == before
            return
        returned = tr.update_partitions(updates)
        for p, wm in updates:
            twin.update_partition(p, wm)
        assert tr.partitions == twin.partitions  # the same partitions as one call per update
        assert _ge(twin.current_watermark(), tr.current_watermark())  # one evaluation sees less
        self._check_step(before_c, adv, returned)  # and counts one advance at most

    @rule(data=st.data())
    def mark_idle(self, data: st.DataObject) -> None:
        p = self._partition(data)
        tr = self.tracker
        before_c, adv = tr.current_watermark(), tr.metrics().watermark_advances
        ok, returned = self._call(p, tr.mark_partition_idle, p)
        if ok:
            assert tr.is_partition_idle(p)  # F064-R9
            self._check_step(before_c, adv, returned)

    @rule(data=st.data())
    def mark_active(self, data: st.DataObject) -> None:
        p = self._partition(data)
        tr = self.tracker
        before_c, adv = tr.current_watermark(), tr.metrics().watermark_advances
        ok, _ = self._call(p, tr.mark_partition_active, p)
        if ok:
            assert not tr.is_partition_idle(p) and tr.partitions[p].last_activity == self.now  # F064-R10
            assert tr.current_watermark() == before_c  # no evaluation, and never down (R7)
            assert tr.metrics().watermark_advances == adv

    @rule(gap=st.one_of(st.integers(0, 5000), st.sampled_from((0, 1, 1000, 5000, 20_000, 20_001, 60_000))))
    def check_idle(self, gap: int) -> None:
        tr = self.tracker
        self.now += gap
        was = {p: (s.is_idle, s.last_activity) for p, s in tr.partitions.items()}
        before_c, adv = tr.current_watermark(), tr.metrics().watermark_advances
        returned = tr.check_idle_partitions()
        for p, s in tr.partitions.items():
            # F064-R11: idle iff it was, or its silence is strictly longer than the timeout
            assert s.is_idle == (was[p][0] or self.now - was[p][1] > self.idle_timeout)
        self._check_step(before_c, adv, returned)

    @rule(data=st.data(), core=st.integers(-1, 3))
    def assign_core(self, data: st.DataObject, core: int) -> None:
        p = self._partition(data)
        tr = self.tracker
        before = tr.checkpoint()
        if core < 0 and self._expected_error(p) is not InvalidPartition:
            with pytest.raises(InvalidPartition):  # F064-R17
                tr.assign_partition_to_core(p, core)
            assert tr.checkpoint() == before
            return
        ok, _ = self._call(p, tr.assign_partition_to_core, p, core)
        if ok:
            assert tr.partition_core(p) == core  # F064-R17: metadata only
            after = tr.checkpoint()
            after["partitions"][p].assigned_core = before["partitions"][p].assigned_core
            assert after == before

    @rule(data=st.data())
    def queries_never_raise(self, data: st.DataObject) -> None:
        """F064-R14, R15: queries on anything, tracked or not, in range or not."""
        tr = self.tracker
        p = self._partition(data)
        before = tr.checkpoint()
        state = tr.partitions.get(p)
        assert tr.partition_watermark(p) == (None if state is None else state.watermark)
        assert tr.is_partition_idle(p) == (state is not None and state.is_idle)
        assert tr.partition_core(p) == (None if state is None else state.assigned_core)
        s = data.draw(st.sampled_from((0, 1, 2, NEVER_SOURCE, -1)))
        expected = (
            candidate((st_.watermark, st_.is_idle) for q, st_ in tr.partitions.items() if q.source_id == s)
            if s in self.sources
            else None
        )
        assert tr.source_watermark(s) == expected  # F064-R14: from current state, not monotone
        tr.active_partition_count(s)
        tr.metrics()
        tr.current_watermark()
        assert tr.checkpoint() == before

    @rule()
    def restart(self) -> None:
        """F064-R23: a restored tracker is the same tracker."""
        snapshot = self.tracker.checkpoint()
        self.tracker = PartitionedWatermarkTracker.restore(snapshot, clock=lambda: self.now)
        assert self.tracker.checkpoint() == snapshot

    # -- invariants

    @invariant()
    def combined_is_the_running_max_of_candidates(self) -> None:
        """F064-R6, R7: combined >= the current candidate (and exists when the candidate does)."""
        assert _ge(self.tracker.current_watermark(), candidate(self._view()))

    @invariant()
    def a_never_updated_active_partition_holds_the_candidate(self) -> None:
        """F064-R8: while an active partition has no watermark, no call can advance the combined."""
        if any(wm is None and not idle for wm, idle in self._view()):
            assert candidate(self._view()) is None

    @invariant()
    def partition_watermarks_never_go_back(self) -> None:
        """F064-R4, per partition while it stays tracked (a removed one starts afresh, R3)."""
        for p, s in self.tracker.partitions.items():
            prev = self.seen.get(p)
            if prev is not None and prev[0] is s:
                assert _ge(s.watermark, prev[1]), (p, prev[1], s.watermark)
            self.seen[p] = (s, s.watermark)
        for p in set(self.seen) - set(self.tracker.partitions):
            del self.seen[p]

    @invariant()
    def tracked_set_and_counters(self) -> None:
        """F064-R2, R12, R13, R16: which partitions are tracked, gauges, rebalances."""
        tr = self.tracker
        assert set(tr.partitions) == self.tracked and tr.sources == self.sources
        m = tr.metrics()
        idle = sum(1 for s in tr.partitions.values() if s.is_idle)
        assert (m.total_partitions, m.active_partitions, m.idle_partitions) == (
            len(self.tracked),
            len(self.tracked) - idle,
            idle,
        )
        assert m.rebalances == self.rebalances


TestTrackerMachine = pytest.mark.clauses(*ALL_CLAUSES[:17], "F064-R20", "F064-R23")(TrackerMachine.TestCase)
# three times the profile's examples: at about 10 ms each, a state machine is the cheap way to
# reach the rarer states (a reactivated partition, a removal of the minimum)
TestTrackerMachine.settings = settings(
    TrackerMachine.TestCase.settings, stateful_step_count=40, max_examples=3 * settings().max_examples
)


# ---- per-core aggregation (F064-R18, R19; oracle-only) --------------------------------------


@dataclass(frozen=True)
class CoreRun:
    """Partitions of one source, each on exactly one core, then updates and idle marks."""

    cores: tuple[int, ...]  # cores[n]: the core of partition n
    steps: tuple[tuple[str, int, int], ...]  # ("update", partition, watermark) or ("idle", partition, 0)


@st.composite
def core_runs(draw: st.DrawFn, idle: bool = False) -> CoreRun:
    n = draw(st.integers(1, 5))
    cores = tuple(draw(st.integers(0, 2)) for _ in range(n))
    step = st.tuples(st.just("update"), st.integers(0, n - 1), TIMES)
    if idle:
        step = st.one_of(
            step, st.tuples(st.sampled_from(("idle", "active")), st.integers(0, n - 1), st.just(0))
        )
    return CoreRun(cores, tuple(draw(st.lists(step, max_size=15))))


def _play_cores(run: CoreRun) -> list[tuple[int | None, int | None]]:
    """(flat combined, collect_watermarks over the cores) after every step."""
    tracker = PartitionedWatermarkTracker()
    tracker.register_source(0, len(run.cores))
    cores: dict[int, CoreWatermarkState] = {}
    for n, c in enumerate(run.cores):
        p = PartitionId(0, n)
        tracker.assign_partition_to_core(p, c)
        cores.setdefault(c, CoreWatermarkState(c)).assigned_partitions.append(p)
    out = []
    for kind, n, wm in run.steps:
        p = PartitionId(0, n)
        if kind == "update":
            tracker.update_partition(p, wm)
            core = cores[tracker.partition_core(p)]  # type: ignore[index]
            before = core.local_watermark()
            returned = core.update_partition(p, wm)
            assert returned == (core.local_watermark() if _gt(core.local_watermark(), before) else None)
        elif kind == "idle":
            tracker.mark_partition_idle(p)  # the cores know nothing of idleness (R18)
        else:
            tracker.mark_partition_active(p)
        out.append((tracker.current_watermark(), collect_watermarks(cores.values())))
    return out


@pytest.mark.clauses("F064-R6", "F064-R17", "F064-R18", "F064-R19")
@given(core_runs())
def test_per_core_aggregation_equals_the_flat_combined(run: CoreRun) -> None:
    """Every partition on exactly one core, none idle, no rebalance: the minimum of the cores'
    local minima is the flat tracker's combined watermark after every update (None until every
    partition has one, R8)."""
    for flat, collected in _play_cores(run):
        assert flat == collected


@pytest.mark.clauses("F064-R6", "F064-R7", "F064-R9", "F064-R18", "F064-R19")
@given(core_runs(idle=True))
def test_per_core_aggregation_with_idle_partitions_is_at_most_the_flat_combined(run: CoreRun) -> None:
    """The cores know nothing of idleness: with idle partitions they still take every partition's
    watermark, so (when both exist) they are at most the flat combined; while no partition has
    ever been idle the two are equal."""
    ever_idle = False
    for (kind, _, _), (flat, collected) in zip(run.steps, _play_cores(run), strict=True):
        ever_idle = ever_idle or kind == "idle"
        if collected is not None:
            assert flat is not None and collected <= flat
        if not ever_idle:
            assert flat == collected


@pytest.mark.clauses("F064-R18", "F064-R19")
def test_a_disagreement_between_cores_and_the_flat_tracker_follows_an_idle_partition() -> None:
    """A generated counterexample to "per-core equals flat", characterised: the first step where
    they differ comes after an idle mark, and there the flat tracker is ahead: it skips the idle
    partition (R6) while the cores take it (R18), so they answer a lower watermark, or None when
    the idle partition never had one. A core without partitions is another class: it blocks
    collect_watermarks for good."""
    run = find(
        core_runs(idle=True),
        lambda r: any(f != c for f, c in _play_cores(r)),
        settings=settings(database=None, max_examples=2000, suppress_health_check=list(HealthCheck)),
    )
    played = _play_cores(run)
    first = next(n for n, (f, c) in enumerate(played) if f != c)
    assert "idle" in [k for k, _, _ in run.steps[: first + 1]], run
    flat, collected = played[first]
    assert flat is not None and (collected is None or collected < flat), run
    # the two shapes, written out
    for steps, expected in (
        ((("update", 0, 5), ("idle", 1, 0)), (5, None)),  # the idle one never had a watermark
        ((("update", 0, 5), ("update", 1, 3), ("idle", 1, 0)), (5, 3)),  # the idle one is behind
    ):
        assert _play_cores(CoreRun((0, 1), steps))[-1] == expected
    # the other class: a core with no partitions never has a local watermark
    tracker = PartitionedWatermarkTracker()
    tracker.register_source(0, 1)
    tracker.update_partition(PartitionId(0, 0), 5)
    core = CoreWatermarkState(0, [PartitionId(0, 0)])
    core.update_partition(PartitionId(0, 0), 5)
    assert collect_watermarks([core]) == tracker.current_watermark() == 5
    assert collect_watermarks([core, CoreWatermarkState(1)]) is None
    assert collect_watermarks([]) is None


# ---- the stream (run_trace) ---------------------------------------------------------------


@dataclass
class _Part:
    watermark: int | None
    last_activity: int
    idle: bool = False
    core: int | None = None


@dataclass
class _Sim:
    """An independent model of what a trace does to each partition (F064-R2..R5, R9..R13, R17)
    and of which items are errors (F064-R22, in the order the clause lists them). It knows
    nothing of the combined watermark, which the properties check instead."""

    idle_timeout: int = 60_000
    max_lateness: int = 0
    sources: set[int] = field(default_factory=set)
    parts: dict[tuple[int, int], _Part] = field(default_factory=dict)
    clock: int = 0
    rebalances: int = 0

    def error(self, item: Item) -> str | None:
        for name in PARTITIONED_REQUIRED_FIELDS[item.kind]:
            if getattr(item, name) is None:
                return f"missing_{name}"
        if item.kind == "clock":
            return "clock_went_backwards" if item.time < self.clock else None  # type: ignore[operator]
        s, p = item.source, item.partition if item.partition is not None else 0
        assert s is not None
        if not (0 <= s <= I64_MAX and 0 <= p <= PARTITION_MAX):
            return "invalid_partition"
        if item.kind == "register_source":
            return None if 0 <= item.count <= PARTITION_MAX + 1 else "invalid_partition"  # type: ignore[operator]
        if item.kind == "assign_core" and item.core < 0:  # type: ignore[operator]
            return "invalid_partition"
        if s not in self.sources:
            return None if item.kind == "remove_partition" else "unknown_source"
        if item.kind == "add_partition" and (s, p) in self.parts:
            return "invalid_partition"
        if item.kind not in ("add_partition", "remove_partition") and (s, p) not in self.parts:
            return "unknown_partition"
        return None

    def apply(self, item: Item) -> None:
        """A well-formed item (``error`` said None): every field its kind needs is there."""
        if item.kind == "clock":
            assert item.time is not None
            self.clock = item.time
            for q in self.parts.values():
                q.idle = q.idle or self.clock - q.last_activity > self.idle_timeout  # R11, strict
            return
        assert item.source is not None
        s = item.source
        if item.kind == "register_source":
            assert item.count is not None
            old = {k for k in self.parts if k[0] == s}
            new = {(s, n) for n in range(item.count)}
            if s in self.sources:
                self.rebalances += len(old ^ new)  # R2
            self.sources.add(s)
            for k in old - new:
                del self.parts[k]
            for k in sorted(new - old):
                self.parts[k] = _Part(None, self.clock)  # R3
            return
        assert item.partition is not None
        key = (s, item.partition)
        if item.kind == "add_partition":
            self.parts[key] = _Part(None, self.clock)  # R3, R12
            self.rebalances += 1
            return
        if item.kind == "remove_partition":
            if self.parts.pop(key, None) is not None:  # R13
                self.rebalances += 1
            return
        part = self.parts[key]
        if item.kind in ("event", "watermark"):
            if item.kind == "event":
                assert item.event_time is not None
                wm = saturating_sub(item.event_time, self.max_lateness)  # R5
            else:
                assert item.time is not None
                wm = item.time
            part.watermark = wm if part.watermark is None else max(part.watermark, wm)  # R4
            part.last_activity, part.idle = self.clock, False  # R4
        elif item.kind == "idle":
            part.idle = True  # R9
        elif item.kind == "active":
            part.idle, part.last_activity = False, self.clock  # R10
        elif item.kind == "assign_core":
            part.core = item.core  # R17

    def view(self) -> dict[tuple[int, int], tuple[int | None, str, int | None]]:
        return {k: (q.watermark, "idle" if q.idle else "active", q.core) for k, q in self.parts.items()}


def _simulate(trace: Trace) -> tuple[list[tuple[int, int, str]], list[tuple[int, int, dict[Any, Any]]]]:
    """Expected error rows, and (total partitions, rebalances, partitions) after each batch."""
    sim = _Sim(trace.config.get("idle_timeout", 60_000), trace.config.get("max_lateness", 0))
    errors, after = [], []
    for b, batch in enumerate(trace.batches):
        for seq, item in enumerate(batch):
            reason = sim.error(item)
            if reason is None:
                sim.apply(item)
            else:
                errors.append((b, seq, reason))
        after.append((len(sim.parts), sim.rebalances, sim.view()))
    return errors, after


@pytest.mark.clauses("F064-R2", "F064-R12", "F064-R13", "F064-R16", "F064-R21", "F064-R22")
@given(partitioned_watermark_traces())
def test_one_progress_row_per_batch_and_error_rows_exactly_at_malformed_items(trace: Trace) -> None:
    out = run_trace(trace)
    errors, after = _simulate(trace)
    assert [r[0] for r in out["progress"]] == list(range(len(trace.batches)))  # empty batches too
    assert out["errors"] == errors  # F064-R22: position and reason
    for (n, rebal, _), row in zip(after, out["progress"], strict=True):
        _, _, total, active, idle, _, rebalances = row
        assert total == active + idle  # F064-R16
        assert (total, rebalances) == (n, rebal)  # F064-R2, R12, R13


@pytest.mark.clauses(
    "F064-R2",
    "F064-R3",
    "F064-R4",
    "F064-R5",
    "F064-R9",
    "F064-R10",
    "F064-R11",
    "F064-R12",
    "F064-R13",
    "F064-R17",
    "F064-R21",
)
@given(partitioned_watermark_traces())
def test_each_partition_follows_its_own_items(trace: Trace) -> None:
    """At every batch end, the partitions table (folded from its change rows) holds exactly the
    tracked partitions, each with the max of its event times minus max_lateness and its watermark
    items since it was (re)created, its idle state (marks, strict timeout from its last activity)
    and its core: what the independent model says."""
    out = run_trace(trace)
    _, after = _simulate(trace)
    for (b, parts, _), (_, _, expected) in zip(_replay_views(trace, out), after, strict=True):
        assert parts == expected, b


def _error_positions(trace: Trace) -> set[tuple[int, int]]:
    return {(b, s) for b, s, _ in run_trace(trace)["errors"]}


def _without_errors(out: dict[str, list[Any]]) -> dict[str, list[Any]]:
    return {k: v for k, v in out.items() if k != "errors"}


@pytest.mark.clauses("F064-R13", "F064-R20", "F064-R22")
@given(partitioned_watermark_traces())
def test_malformed_items_change_nothing_but_the_errors_table(trace: Trace) -> None:
    """An error row changes nothing and ends the current step (R22): the same as the no-op control
    item in its place, and the same as the trace without it where dropping it merges no steps."""
    bad = _error_positions(trace)
    out = run_trace(trace)
    as_noop = replace(
        trace,
        batches=tuple(
            tuple(NOOP if (b, s) in bad else item for s, item in enumerate(batch))
            for b, batch in enumerate(trace.batches)
        ),
    )
    clean = run_trace(as_noop)
    assert clean["errors"] == [] and len(out["errors"]) == len(bad)
    assert _without_errors(out) == _without_errors(clean)

    def merges(b: int, s: int) -> bool:
        """Dropping item s of batch b joins two update runs into one step (R20)?"""
        batch = trace.batches[b]

        def update(n: int) -> bool:
            return 0 <= n < len(batch) and batch[n].kind in ("event", "watermark") and (b, n) not in bad

        return update(s - 1) and update(s + 1)

    droppable = {(b, s) for b, s in bad if not merges(b, s)}
    if droppable:
        (b, s) = sorted(droppable)[0]
        minus = replace(
            trace,
            batches=tuple(
                tuple(i for n, i in enumerate(batch) if (k, n) != (b, s))
                for k, batch in enumerate(trace.batches)
            ),
        )
        assert _without_errors(run_trace(minus)) == _without_errors(out)


def _replay_views(
    trace: Trace, out: dict[str, list[Any]]
) -> Iterable[tuple[int, dict[Any, Any], dict[Any, Any]]]:
    """The partitions and sources at the end of each batch, rebuilt from the change rows (R21)."""
    parts: dict[tuple[int, int], tuple[int | None, str, int | None]] = {}
    sources: dict[int, tuple[int | None, int]] = {}
    for b in range(len(trace.batches)):
        for _, s, p, wm, state, core in (r for r in out["partitions"] if r[0] == b):
            if state == "removed":
                assert wm is None and core is None  # F064-R21
                assert (s, p) in parts
                del parts[(s, p)]
            else:
                assert state in ("active", "idle")
                assert parts.get((s, p)) != (wm, state, core)  # only changes are rows
                parts[(s, p)] = (wm, state, core)
        for _, s, wm, active in (r for r in out["sources"] if r[0] == b):
            assert sources.get(s) != (wm, active)
            sources[s] = (wm, active)
        yield b, dict(parts), dict(sources)


@pytest.mark.clauses("F064-R6", "F064-R7", "F064-R14", "F064-R16", "F064-R21")
@given(partitioned_watermark_traces())
def test_the_output_tables_agree_with_each_other(trace: Trace) -> None:
    """Rebuilt from the change rows, the partitions at each batch end explain the sources table
    (R14: the candidate of each source, from current state) and the progress row (gauges, and a
    combined at least the candidate over all partitions, R6/R7)."""
    out = run_trace(trace)
    for (b, parts, sources), row in zip(_replay_views(trace, out), out["progress"], strict=True):
        _, combined, total, active, idle, _, _ = row
        assert total == len(parts)
        assert active == sum(1 for _, st_, _ in parts.values() if st_ == "active")
        assert _ge(combined, candidate((wm, st_ == "idle") for wm, st_, _ in parts.values()))
        assert {s for s, _ in parts} <= set(sources)
        for s, (wm, n_active) in sources.items():
            mine = [(w, st_ == "idle") for (src, _), (w, st_, _) in parts.items() if src == s]
            assert wm == candidate(mine), (b, s)
            assert n_active == sum(1 for _, i in mine if not i)


@pytest.mark.clauses("F064-R7", "F064-R16", "F064-R20")
@given(partitioned_watermark_traces())
def test_the_combined_is_monotone_and_advances_at_most_once_per_step(trace: Trace) -> None:
    out = run_trace(trace)
    prev_c, prev_adv, prev_rebal = None, 0, 0
    errors = {(b, s) for b, s, _ in out["errors"]}
    for row, batch in zip(out["progress"], trace.batches, strict=True):
        b, combined, _, _, _, advances, rebalances = row
        assert _ge(combined, prev_c)  # F064-R7
        assert advances >= prev_adv and rebalances >= prev_rebal  # F064-R16: counters
        assert (advances > prev_adv) == _gt(combined, prev_c)  # every advance raises it (R7, R16)
        # F064-R20: a run of updates is one step; only steps and some control items evaluate
        steps, in_run = 0, False
        for s, item in enumerate(batch):
            is_update = item.kind in ("event", "watermark") and (b, s) not in errors
            if is_update and not in_run:
                steps += 1
            in_run = is_update
            if (b, s) not in errors and item.kind in ("clock", "idle", "register_source", "remove_partition"):
                steps += 1
        assert advances - prev_adv <= steps
        prev_c, prev_adv, prev_rebal = combined, advances, rebalances


def _partition_touched(batch: Sequence[Item], s: int, p: int) -> bool:
    """A removal of (s, p) in the batch: remove_partition of it or a re-registration of its source."""
    return any(
        (i.kind == "remove_partition" and (i.source, i.partition) == (s, p))
        or (i.kind == "register_source" and i.source == s)
        for i in batch
    )


@pytest.mark.clauses("F064-R3", "F064-R4", "F064-R21")
@given(partitioned_watermark_traces())
def test_a_partition_watermark_never_goes_back_while_tracked(trace: Trace) -> None:
    """Between batch ends a partition's watermark only rises, unless the partition was removed
    (remove_partition, or a re-registration of its source) in that batch and came back fresh."""
    out = run_trace(trace)
    last: dict[tuple[int, int], int | None] = {}
    for b, parts, _ in _replay_views(trace, out):
        for key, (wm, _, _) in parts.items():
            if key in last and not _ge(wm, last[key]):
                assert _partition_touched(trace.batches[b], *key), (b, key, last[key], wm)
        last = {k: v[0] for k, v in parts.items()}


@pytest.mark.clauses("F064-R3", "F064-R8", "F064-R11")
@given(partitioned_watermark_traces(rebalances=False, idle_marks=False, malformed=False))
def test_a_never_updated_partition_holds_the_combined(trace: Trace) -> None:
    """F064-R8: a partition registered at the start that never reports, is never marked idle and
    whose idle timeout (counted from registration at clock 0) never passes, holds the combined at
    None for the whole stream. The first clock item past the timeout releases it."""
    idle_timeout = trace.config.get("idle_timeout", 60_000)
    batches = [list(b) for b in trace.batches]
    batches[0].insert(0, Item("register_source", source=NEVER_SOURCE - 1, count=1))
    held = tuple(
        tuple(i for i in b if not (i.kind == "clock" and i.time > idle_timeout))
        for b in batches  # type: ignore[operator]
    )
    out = run_trace(replace(trace, batches=held))
    assert all(row[1] is None and row[5] == 0 for row in out["progress"])
    # released strictly past the timeout (R11): the witness goes idle and the combined jumps to
    # the candidate of the others, which the run without the witness may have passed already (R7)
    released = replace(trace, batches=(*held, (Item("clock", time=idle_timeout + 1),)))
    without = replace(
        released, batches=tuple(tuple(i for i in b if i.source != NEVER_SOURCE - 1) for b in released.batches)
    )
    a, w = run_trace(released), run_trace(without)
    *_, (_, parts, _) = _replay_views(without, w)
    final = candidate((wm, st_ == "idle") for wm, st_, _ in parts.values())
    assert a["progress"][-1][1] == final
    assert _ge(w["progress"][-1][1], final)


@pytest.mark.clauses("F064-R6", "F064-R7", "F064-R13", "F064-R16")
@given(st.lists(TIMES, min_size=2, max_size=5), st.data())
def test_removing_a_partition_re_evaluates_the_combined(wms: list[int], data: st.DataObject) -> None:
    """R13: removal re-evaluates at once; the combined rises to the minimum of the others when
    that is higher (one advance), and never goes down (R7)."""
    k = data.draw(st.integers(0, len(wms) - 1))
    trace = Trace(
        "partitioned_watermarks",
        {},
        (
            (Item("register_source", source=0, count=len(wms)),),
            tuple(Item("watermark", source=0, partition=n, time=w) for n, w in enumerate(wms)),
            (Item("remove_partition", source=0, partition=k),),
        ),
    )
    progress = run_trace(trace)["progress"]
    rest = min(w for n, w in enumerate(wms) if n != k)
    assert progress[1][1] == min(wms) and progress[1][5] == 1
    assert progress[2][1] == max(min(wms), rest)
    assert progress[2][5] == 1 + (rest > min(wms)) and progress[2][6] == 1


@pytest.mark.clauses("F064-R23")
@given(partitioned_watermark_traces(max_batches=7))
def test_restarts_do_not_change_the_output(trace: Trace) -> None:
    plain = run_trace(replace(trace, restart_after=frozenset()))
    assert run_trace(trace) == plain
    everywhere = frozenset(range(len(trace.batches) - 1))
    assert run_trace(replace(trace, restart_after=everywhere)) == plain


# ---- batch cuts (F064-R25) ---------------------------------------------------------------------


def _fold(out: dict[str, list[Any]], batches: int) -> list[tuple[dict[Any, Any], dict[Any, Any]]]:
    """The partitions and sources at the end of each batch, folded from the change rows (R21)
    without judging them (a planted bug's rows are folded too)."""
    parts: dict[Any, tuple[Any, ...]] = {}
    sources: dict[Any, tuple[Any, ...]] = {}
    views = []
    for b in range(batches):
        for _, s, p, wm, state, core in (r for r in out["partitions"] if r[0] == b):
            if state == "removed":
                parts.pop((s, p), None)
            else:
                parts[(s, p)] = (wm, state, core)
        sources.update({r[1]: r[2:] for r in out["sources"] if r[0] == b})
        views.append((dict(parts), dict(sources)))
    return views


def _views_at_ends(
    trace: Trace, out: dict[str, list[Any]]
) -> dict[int, tuple[dict[Any, Any], dict[Any, Any]]]:
    """``_fold`` keyed by how many items the trace had seen at the end of each batch."""
    return dict(zip(batch_ends(trace), _fold(out, len(trace.batches)), strict=True))


def _falls_inside_steps(trace: Trace) -> list[tuple[int, bool]]:
    """The place of each update after which the candidate (R6) is below the one after the update
    before it in the same run of updates, and whether it made an idle partition active again
    (R4). Only such a fall lets a cut move the combined watermark (R25): up to the first, every
    cut gives the same. Read from the trace cut after every item, whose rows show each change."""
    items = [item for batch in trace.batches for item in batch]
    single = recut(trace, list(range(1, len(items))))
    out = run_trace(single)
    refused = {b for b, _, _ in out["errors"]}
    views = [parts for parts, _ in _fold(out, len(single.batches))]
    falls, before, in_run = [], None, False
    for n, item in enumerate(items):
        if item.kind not in ("event", "watermark") or n in refused:
            in_run = False  # a call of its own or an error row ends the step (R20, R22)
            continue
        now = candidate((wm, state == "idle") for wm, state, _ in views[n].values())
        if in_run and _gt(before, now):
            was = views[n - 1].get((item.source, item.partition), (None, "active", None))
            falls.append((n, was[1] == "idle"))
        before, in_run = now, True
    return falls


def _what_a_cut_keeps(trace: Trace, out: dict[str, list[Any]]) -> dict[str, Any]:
    """What R25 says no cut changes: errors by their place in the whole trace; at each batch end,
    the gauges and rebalances of progress, the partitions and sources, the rows there, and the
    combined watermark, which a cut keeps up to the first fall of a step's candidate."""
    at, ends = item_places(trace), batch_ends(trace)
    rows: dict[int, dict[Any, tuple[Any, ...]]] = {}
    for r in out["partitions"]:
        rows.setdefault(ends[r[0]], {})[("partition", r[1], r[2])] = r[3:]
    for r in out["sources"]:
        rows.setdefault(ends[r[0]], {})[("source", r[1])] = r[2:]
    return {
        "errors": sorted((at[(r[0], r[1])], r[2]) for r in out["errors"]),
        "progress": {ends[r[0]]: (*r[2:5], r[6]) for r in out["progress"]},
        "combined": {ends[r[0]]: r[1] for r in out["progress"]},
        "views": _views_at_ends(trace, out),
        "rows": rows,
    }


def _recut_differences(trace: Trace, out: Any, twin: Trace, again: Any) -> list[str]:
    """Where the answers to a trace and to its re-cut twin differ in what R25 keeps: errors item
    for item; gauges, partitions and sources wherever both end a batch, and there the combined
    watermark too up to the first fall of a candidate inside a step."""
    one, other = _what_a_cut_keeps(trace, out), _what_a_cut_keeps(twin, again)
    problems = (
        [] if one["errors"] == other["errors"] else [f"errors: {one['errors']} against {other['errors']}"]
    )
    falls = _falls_inside_steps(trace)
    for end in sorted(set(batch_ends(trace)) & set(batch_ends(twin))):
        kept = not falls or end <= falls[0][0]
        for table in ("progress", "views", "combined") if kept else ("progress", "views"):
            if one[table][end] != other[table][end]:
                problems.append(f"{table} after {end} items: {one[table][end]} against {other[table][end]}")
        mine, theirs = one["rows"].get(end, {}), other["rows"].get(end, {})
        both = sorted(mine.keys() & theirs.keys())
        problems += [f"{what} row after {end} items: {mine[what]} against {theirs[what]}"
                     for what in both if mine[what] != theirs[what]]  # fmt: skip
    return problems


@pytest.mark.clauses("F064-R25", "F064-R6", "F064-R7", "F064-R16", "F064-R20", "F064-R21", "F064-R23")
@given(partitioned_watermark_traces(), st.data())
def test_batch_cuts_change_nothing_but_the_numbering_and_what_split_steps_evaluate(
    trace: Trace, data: st.DataObject
) -> None:
    """The same items cut into other batches (empty ones and restarts included): the same errors
    item for item; wherever both traces end a batch, the same gauges, partitions and sources, and
    the same combined watermark until a candidate falls inside a step, which only an update that
    reactivates an idle partition does; and the cut at both traces' batch ends has a combined
    watermark at or above either's at each of its ends."""
    assert all(reactivates for _, reactivates in _falls_inside_steps(trace))
    twin = draw_cuts(data, trace)
    out, again = run_trace(trace), run_trace(twin)
    assert not _recut_differences(trace, out, twin, again)
    finer = recut(trace, sorted(set(batch_ends(trace)[:-1]) | set(batch_ends(twin)[:-1])))
    fine = _what_a_cut_keeps(finer, run_trace(finer))["combined"]
    for coarse, answer in ((trace, out), (twin, again)):
        for end, combined in _what_a_cut_keeps(coarse, answer)["combined"].items():
            assert _ge(fine[end], combined), (end, fine[end], combined)


RECUT_TRACES = 8


def recut_pairs() -> list[tuple[Trace, Trace]]:
    """The differential run's traces (a few refused) and each one's re-cut twin."""
    return batch_cuts.recut_pairs(partitioned_watermark_traces(invalid_config_rate=10), RECUT_TRACES, salt=14)


def recut_traces() -> list[Trace]:
    return [t for pair in recut_pairs() for t in pair]


# the traces and their twins join the session's pre-run
@pytest.mark.prerun_traces.with_args(recut_traces)  # with_args: the one argument is a function
@pytest.mark.clauses("F064-R25", "F064-R6", "F064-R7", "F064-R16", "F064-R20", "F064-R21", "F064-R23")
def test_batch_cuts_change_nothing_but_the_numbering_and_what_split_steps_evaluate_on_the_engine(
    engine_under_test: Any,
) -> None:
    """The engine's answer to a trace and to its re-cut twin: the same errors item for item, and
    the same gauges, partitions, sources and (until a candidate falls inside a step) combined
    watermark wherever both traces end a batch."""
    pairs = recut_pairs()
    assert len(pairs) >= RECUT_TRACES - 2  # generate() may draw a duplicate it drops
    batch_cuts.check_twins_on_the_engine(engine_under_test, pairs, _recut_differences)


def _progress_read_before_the_batch(out: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """A tracker that writes each progress row from the figures it read at the start of the
    batch, before applying it (the combined watermark, gauges and counters of the batch before)."""
    progress, before = [], (None, 0, 0, 0, 0, 0)
    for r in sorted(out["progress"]):
        progress.append((r[0], *before))
        before = r[1:]
    return {**out, "progress": progress}


def _change_rows_from_the_batch_start(out: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """A tracker that writes a changed partition's row with the watermark it read at the start of
    the batch (its state before the batch was applied)."""
    start: dict[Any, Any] = {}
    rows = []
    for b in sorted({r[0] for r in out["progress"]}):
        now = dict(start)
        for _, s, p, wm, state, core in sorted(r for r in out["partitions"] if r[0] == b):
            stale = start.get((s, p), wm) if state != "removed" else wm
            rows.append((b, s, p, stale, state, core))
            if state == "removed":
                now.pop((s, p), None)
            else:
                now[(s, p)] = wm
        start = now
    return {**out, "partitions": rows}


@pytest.mark.clauses("F064-R25", "F064-R7", "F064-R16", "F064-R20", "F064-R21")
@pytest.mark.parametrize("planted", [_progress_read_before_the_batch, _change_rows_from_the_batch_start])
def test_the_batch_cut_comparison_convicts_a_tracker_that_depends_on_its_batches(planted: Any) -> None:
    """The comparison above numbers errors by their place, reads progress, partitions and sources
    only where both traces end a batch and lets the combined watermark differ once a candidate
    has fallen inside a step; it still catches a tracker whose answer depends on where its
    batches end."""
    caught = []
    for trace, twin in recut_pairs():
        try:
            out, again = run_trace(trace), run_trace(twin)
        except InvalidConfig:
            continue
        assert not _recut_differences(trace, out, twin, again)  # so a catch is the bug's own
        if _recut_differences(trace, planted(out), twin, planted(again)):
            caught.append(trace.name)
    assert caught, f"{planted.__name__}: no re-cut twin shows it"


@pytest.mark.clauses("F064-R24")
@given(invalid_partitioned_watermark_configs(), partitioned_watermark_traces(max_batches=2))
def test_invalid_configurations_are_refused(config: dict[str, Any], trace: Trace) -> None:
    """TR-6: refused before any item; the engine answers that trace with the error, the others run."""
    bad = replace(trace, config=config)
    with pytest.raises(InvalidConfig):
        run_trace(bad)
    results = ReferenceEngine().run([trace, bad, trace])
    assert isinstance(results[1], InvalidConfig)
    assert results[0] == results[2] == run_trace(trace)


# ---- engine versus oracle --------------------------------------------------------------


@pytest.mark.clauses(*STREAM_CLAUSES)
def test_engine_agrees_with_the_oracle(engine_under_test: Any) -> None:
    """All generated traces in ONE engine.run call; a difference is shrunk and printed as Gherkin."""
    if "partitioned_watermarks" not in engine_under_test.areas:
        pytest.skip(f"engine {engine_under_test.name} does not implement partitioned_watermarks")
    check_generated(engine_under_test, *DIFFERENTIAL)


# ---- the Spark operator: its options and its state ------------------------------------------


def _spark_output(batches: list[list[dict[str, Any]]], **options: Any) -> dict[str, list[tuple[Any, ...]]]:
    """``batches`` of rows (source, partition, event_time, and seq / arrival when given) through
    ``partitioned_watermarks`` in one query on the ``trace`` source; the tables without stream_id."""
    import os
    import shutil
    import tempfile

    import pyarrow as pa

    from spark_impl.partitioned_watermarks import TABLE_COLUMNS, partitioned_watermarks
    from spark_impl.session import get_spark
    from spark_impl.trace_source import SOURCE_NAME, write_trace_file

    spark = get_spark()
    names = sorted({k for batch in batches for row in batch for k in row})
    cols: dict[str, list[int]] = {"batch": [], **{n: [] for n in names}}
    for b, batch in enumerate(batches):
        for row in batch:
            cols["batch"].append(b)
            for n in names:
                cols[n].append(row[n])
    work = tempfile.mkdtemp(prefix="pw-spark-")
    try:
        path = os.path.join(work, "rows.parquet")
        write_trace_file(path, pa.table({k: pa.array(v, pa.int64()) for k, v in cols.items()}))
        df = (
            spark.readStream.format(SOURCE_NAME).option("path", path).option("num_batches", str(len(batches)))
            .load()
        )  # fmt: skip
        pw = partitioned_watermarks(
            df, source_col="source", partition_col="partition", event_time_col="event_time",
            batch_col="batch", **options,
        )  # fmt: skip
        sink = os.path.join(work, "sink")
        query = (
            pw.output.writeStream.format("parquet").option("path", sink)
            .option("checkpointLocation", os.path.join(work, "checkpoint")).trigger(availableNow=True).start()
        )  # fmt: skip
        query.awaitTermination()
        assert query.exception() is None, query.exception()
        rows = [r.asDict() for r in spark.read.parquet(sink).collect()]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        table: sorted(
            (tuple(r[c] for c in cols[1:]) for r in rows if r["output"] == table),
            key=lambda t: tuple((v is not None, v) for v in t),
        )
        for table, cols in TABLE_COLUMNS.items()
    }


@pytest.mark.clauses("F064-R2", "F064-R3", "F064-R11", "F064-R22")
def test_spark_auto_register_and_processing_time_from_the_data() -> None:
    """No registration rows and no clock rows: with ``auto_register`` an event of an unknown
    source registers it and adds its partition fresh (no rebalance), and with
    ``processing_time_col`` the processing clock is the latest arrival time of a
    micro-batch's rows, moved before its rows (F064-R11: a partition idles once a
    micro-batch starts more than the idle timeout after its latest update)."""
    out = _spark_output(
        [
            [
                {"seq": 0, "source": 3, "partition": 1, "event_time": 5000, "arrival": 100},
                {"seq": 1, "source": 3, "partition": 2, "event_time": 7000, "arrival": 100},
                {"seq": 2, "source": 3, "partition": 1, "event_time": 9000, "arrival": 100},
            ],
            [{"seq": 0, "source": 3, "partition": 1, "event_time": 12000, "arrival": 900}],
            [{"seq": 0, "source": 3, "partition": 1, "event_time": 13000, "arrival": 1200}],
        ],
        seq_col="seq", auto_register=True, processing_time_col="arrival", idle_timeout_ms=1000, buckets=2,
        block_partitions=1,
    )  # fmt: skip
    assert out["errors"] == []
    # Batch 0: both partitions found at clock 100 and updated in one step: combined 7000.
    # Batch 1, clock 900: nothing idles (900 - 100 is not over 1000); partition 2 holds it at 7000.
    # Batch 2, clock 1200: partition 2 idles (1200 - 100 > 1000), so the clock move advances the
    # combined to partition 1's 12000, and the step after it to 13000.
    assert out["progress"] == [
        (0, 7000, 2, 2, 0, 1, 0),
        (1, 7000, 2, 2, 0, 1, 0),
        (2, 13000, 2, 1, 1, 3, 0),
    ]
    assert out["partitions"] == [
        (0, 3, 1, 9000, "active", None), (0, 3, 2, 7000, "active", None),
        (1, 3, 1, 12000, "active", None),
        (2, 3, 1, 13000, "active", None), (2, 3, 2, 7000, "idle", None),
    ]  # fmt: skip
    assert out["sources"] == [(0, 3, 7000, 2), (2, 3, 13000, 1)]


@pytest.mark.clauses("F064-R23")
def test_spark_state_layout_is_versioned() -> None:
    """A checkpoint of another layout version, or of another bucket count, is refused with
    both values named, never misread; the tracked set and the sources cross a restart."""
    import numpy as np

    from spark_impl.partitioned_watermarks import LAYOUT_VERSION, BucketState, StreamState, Tracked

    tracked = Tracked()
    tracked.register(0, 8)
    tracked.remove(0, 3)
    tracked.add(0, 12)
    assert tracked.covers(0, 0, 2) and not tracked.covers(0, 2, 4) and tracked.covers(0, 12, 12)
    blocks = np.arange(9, dtype=np.int64).reshape(1, 9)
    bucket = BucketState(8, 4, clock=5, sources={0, 2}, tracked=tracked, blocks=blocks).to_tuple()
    stream = StreamState(8, combined=-(2**63), advances=2, rebalances=1).to_tuple()
    assert StreamState.from_tuple(stream, 8).combined == -(2**63)
    assert bucket[0] == stream[0] == LAYOUT_VERSION
    check_state_layouts(BucketState, bucket, StreamState, stream)
