"""Per-partition watermarks (F064): the oracle of spec/partitioned_watermarks.md.

Deliberately simple: a dictionary of partitions and loops over it. Every rule
names its clause id. Times are integer milliseconds; a watermark is an int or
None ("no watermark yet").
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.traces import I64_MAX, PARTITIONED_REQUIRED_FIELDS, InvalidConfig, Item, Trace, saturating_sub
from reference.traces import Row, TraceClock, play

Clock = Callable[[], int]
U32_MAX = 2**32 - 1
DEFAULT_IDLE_TIMEOUT = 60_000


class UnknownPartition(Exception):
    """F064-R4: the partition is not tracked (its source is registered)."""


class SourceNotFound(Exception):
    """F064-R4: the source was never registered."""


class InvalidPartition(ValueError):
    """F064-R1: a source or partition number out of range, or a partition added twice."""


@dataclass(frozen=True, order=True)
class PartitionId:
    """F064-R1: a partition of a source; numbers are checked where the tracker takes them."""

    source_id: int
    partition: int


def _check_partition_id(p: PartitionId) -> None:
    if not (isinstance(p.source_id, int) and 0 <= p.source_id <= I64_MAX):
        raise InvalidPartition(f"source_id must be an integer >= 0, got {p.source_id!r}")
    if not (isinstance(p.partition, int) and 0 <= p.partition <= U32_MAX):
        raise InvalidPartition(f"partition must be an integer from 0 to {U32_MAX}, got {p.partition!r}")


@dataclass
class PartitionWatermarkState:
    """F064-R3: what is kept per tracked partition."""

    watermark: int | None
    last_event_time: int | None
    last_activity: int
    is_idle: bool = False
    assigned_core: int | None = None


@dataclass
class PartitionedWatermarkMetrics:
    """F064-R16: gauges counted when read, two cumulative counters."""

    total_partitions: int = 0
    active_partitions: int = 0
    idle_partitions: int = 0
    watermark_advances: int = 0
    rebalances: int = 0


def _require_duration(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= I64_MAX:
        raise InvalidConfig(f"{name} must be an integer from 0 to {I64_MAX}, got {value!r}")


def _candidate(states: Iterable[PartitionWatermarkState]) -> int | None:
    """F064-R6: the watermark a set of partitions allows, or None when it allows none."""
    states = list(states)
    active = [s for s in states if not s.is_idle]
    if active:
        if any(s.watermark is None for s in active):
            return None  # F064-R8: an active partition without a watermark holds everything
        return min(s.watermark for s in active if s.watermark is not None)
    known = [s.watermark for s in states if s.watermark is not None]
    return max(known) if known else None  # F064-R6: all idle -> the highest watermark


class PartitionedWatermarkTracker:
    """Watermarks per partition of each source, and a combined watermark over all of them."""

    def __init__(self, clock: Clock | None = None, idle_timeout: int = DEFAULT_IDLE_TIMEOUT) -> None:
        _require_duration("idle_timeout", idle_timeout)  # F064-R24
        self.clock: Clock = clock if clock is not None else (lambda: 0)
        self.idle_timeout = idle_timeout
        self.partitions: dict[PartitionId, PartitionWatermarkState] = {}
        self.sources: set[int] = set()
        self.combined_watermark: int | None = None
        self._advances = 0
        self._rebalances = 0

    @classmethod
    def with_idle_timeout(cls, idle_timeout: int, clock: Clock | None = None) -> PartitionedWatermarkTracker:
        return cls(clock, idle_timeout)

    # ---- partitions and sources -------------------------------------------

    def register_source(self, source_id: int, num_partitions: int) -> None:
        _check_partition_id(PartitionId(source_id, 0))
        if isinstance(num_partitions, bool) or not isinstance(num_partitions, int) or not (
            0 <= num_partitions <= U32_MAX + 1
        ):
            raise InvalidPartition(f"num_partitions must be an integer from 0 to {U32_MAX + 1}")
        first = source_id not in self.sources
        self.sources.add(source_id)
        wanted = {PartitionId(source_id, n) for n in range(num_partitions)}
        current = {p for p in self.partitions if p.source_id == source_id}
        for p in sorted(current - wanted):  # F064-R2: re-registration resizes the source
            del self.partitions[p]
        for p in sorted(wanted - current):
            self.partitions[p] = self._fresh()
        if not first:
            self._rebalances += len(current - wanted) + len(wanted - current)  # F064-R2
        self._advance()

    def add_partition(self, partition: PartitionId) -> None:
        _check_partition_id(partition)
        if partition.source_id not in self.sources:
            raise SourceNotFound(f"source {partition.source_id} is not registered")  # F064-R12
        if partition in self.partitions:
            raise InvalidPartition(f"partition {partition} is already tracked")  # F064-R12
        self.partitions[partition] = self._fresh()
        self._rebalances += 1

    def remove_partition(self, partition: PartitionId) -> PartitionWatermarkState | None:
        _check_partition_id(partition)  # F064-R13: out of range is still an error (R1)
        state = self.partitions.pop(partition, None)  # F064-R13: untracked -> None, no error
        if state is not None:
            self._rebalances += 1
            self._advance()
        return state

    def _fresh(self) -> PartitionWatermarkState:
        return PartitionWatermarkState(None, None, self.clock())  # F064-R3

    def _state(self, partition: PartitionId) -> PartitionWatermarkState:
        """F064-R4: the errors of every call on one partition."""
        _check_partition_id(partition)
        if partition.source_id not in self.sources:
            raise SourceNotFound(f"source {partition.source_id} is not registered")
        state = self.partitions.get(partition)
        if state is None:
            raise UnknownPartition(f"partition {partition} is not tracked")
        return state

    # ---- updates ------------------------------------------------------------

    def update_partition(self, partition: PartitionId, watermark: int) -> int | None:
        return self.update_partitions([(partition, watermark)])

    def update_partition_from_event(
        self, partition: PartitionId, event_time: int, max_lateness: int
    ) -> int | None:
        _require_duration("max_lateness", max_lateness)  # F064-R5
        state = self._state(partition)
        state.last_event_time = event_time
        return self.update_partition(partition, saturating_sub(event_time, max_lateness))  # F064-R5

    def update_partitions(self, updates: Sequence[tuple[PartitionId, int]]) -> int | None:
        """F064-R20: several updates in order, the combined watermark evaluated once after them."""
        states = [self._state(p) for p, _ in updates]  # all checked before any is applied
        for state, (_, watermark) in zip(states, updates, strict=True):
            if state.watermark is None or watermark > state.watermark:
                state.watermark = watermark  # F064-R4: a partition's watermark never goes back
            state.last_activity = self.clock()  # F064-R4: any update is activity
            state.is_idle = False  # F064-R4: and reactivates an idle partition
        return self._advance()

    def mark_partition_idle(self, partition: PartitionId) -> int | None:
        self._state(partition).is_idle = True  # F064-R9
        return self._advance()

    def mark_partition_active(self, partition: PartitionId) -> None:
        state = self._state(partition)
        state.is_idle = False  # F064-R10
        state.last_activity = self.clock()  # else the next idle check would idle it again

    def check_idle_partitions(self) -> int | None:
        now = self.clock()
        for state in self.partitions.values():
            if not state.is_idle and now - state.last_activity > self.idle_timeout:  # F064-R11
                state.is_idle = True
        return self._advance()

    def _advance(self) -> int | None:
        """F064-R6, R7: the combined watermark only rises; returns it when it did."""
        candidate = _candidate(self.partitions.values())
        if candidate is not None and (self.combined_watermark is None or candidate > self.combined_watermark):
            self.combined_watermark = candidate
            self._advances += 1  # F064-R16
            return candidate
        return None

    # ---- queries ------------------------------------------------------------

    def current_watermark(self) -> int | None:
        return self.combined_watermark  # F064-R7

    def partition_watermark(self, partition: PartitionId) -> int | None:
        state = self.partitions.get(partition)
        return None if state is None else state.watermark  # F064-R15

    def source_watermark(self, source_id: int) -> int | None:
        if source_id not in self.sources:
            return None  # F064-R14
        return _candidate(s for p, s in self.partitions.items() if p.source_id == source_id)

    def is_partition_idle(self, partition: PartitionId) -> bool:
        state = self.partitions.get(partition)
        return state is not None and state.is_idle  # F064-R15

    def active_partition_count(self, source_id: int) -> int:
        return sum(1 for p, s in self.partitions.items() if p.source_id == source_id and not s.is_idle)

    def metrics(self) -> PartitionedWatermarkMetrics:
        active = sum(1 for s in self.partitions.values() if not s.is_idle)
        return PartitionedWatermarkMetrics(
            total_partitions=len(self.partitions),
            active_partitions=active,
            idle_partitions=len(self.partitions) - active,
            watermark_advances=self._advances,
            rebalances=self._rebalances,
        )

    # ---- cores (F064-R17) -----------------------------------------------------

    def assign_partition_to_core(self, partition: PartitionId, core_id: int) -> None:
        if isinstance(core_id, bool) or not isinstance(core_id, int) or core_id < 0:
            raise InvalidPartition(f"core_id must be an integer >= 0, got {core_id!r}")
        self._state(partition).assigned_core = core_id

    def partition_core(self, partition: PartitionId) -> int | None:
        state = self.partitions.get(partition)
        return None if state is None else state.assigned_core

    # ---- restart (F064-R23) ---------------------------------------------------

    def checkpoint(self) -> dict[str, Any]:
        return copy.deepcopy({k: v for k, v in vars(self).items() if k != "clock"})

    @classmethod
    def restore(cls, snapshot: dict[str, Any], clock: Clock) -> PartitionedWatermarkTracker:
        tracker = cls(clock, snapshot["idle_timeout"])
        for k, v in copy.deepcopy(snapshot).items():
            setattr(tracker, k, v)
        return tracker


@dataclass
class CoreWatermarkState:
    """F064-R18: one core's partitions and their minimum; it knows nothing of idleness."""

    core_id: int
    assigned_partitions: list[PartitionId] = field(default_factory=list)
    watermarks: dict[PartitionId, int] = field(default_factory=dict)

    def update_partition(self, partition: PartitionId, watermark: int) -> int | None:
        if partition not in self.assigned_partitions:
            raise UnknownPartition(f"partition {partition} is not assigned to core {self.core_id}")
        before = self.local_watermark()
        if partition not in self.watermarks or watermark > self.watermarks[partition]:
            self.watermarks[partition] = watermark
        after = self.local_watermark()
        if after is not None and (before is None or after > before):
            return after
        return None

    def local_watermark(self) -> int | None:
        """Minimum over the assigned partitions; None while one of them has no watermark."""
        if not self.assigned_partitions or any(p not in self.watermarks for p in self.assigned_partitions):
            return None
        return min(self.watermarks[p] for p in self.assigned_partitions)


def collect_watermarks(cores: Iterable[CoreWatermarkState]) -> int | None:
    """F064-R18: the global watermark over cores: the minimum of their local watermarks.

    It equals the tracker's combined watermark only under F064-R19's conditions.
    """
    local = [c.local_watermark() for c in cores]
    if not local or any(w is None for w in local):
        return None
    return min(w for w in local if w is not None)


# ---- the stream (F064-R20..R23) ---------------------------------------------

CONFIG_KEYS = {"idle_timeout", "max_lateness"}
UPDATE_KINDS = ("event", "watermark")


def config_from_trace(config: dict[str, Any]) -> tuple[int, int]:
    """F064-R24: the trace's settings, refused with InvalidConfig before any item."""
    unknown = set(config) - CONFIG_KEYS
    if unknown:
        raise InvalidConfig(f"unknown partitioned_watermarks settings {sorted(unknown)}")
    idle_timeout = config.get("idle_timeout", DEFAULT_IDLE_TIMEOUT)
    max_lateness = config.get("max_lateness", 0)
    _require_duration("idle_timeout", idle_timeout)
    _require_duration("max_lateness", max_lateness)
    return idle_timeout, max_lateness




class PartitionedWatermarkStream:
    """Plays a partitioned_watermarks trace batch by batch and collects its output tables; what another cut of
    the same items into batches may change: F064-R25."""

    def __init__(self, config: dict[str, Any]) -> None:
        idle_timeout, self.max_lateness = config_from_trace(config)
        self.clock = TraceClock()
        self.tracker = PartitionedWatermarkTracker.with_idle_timeout(idle_timeout, self.clock)
        self.out: dict[str, list[Row]] = {t: [] for t in ("progress", "partitions", "sources", "errors")}

    def run_batch(self, b: int, batch: Sequence[Item]) -> None:
        start_parts, start_sources = self._partition_view(), self._source_view()
        segment: list[Item] = []
        for seq, item in enumerate(batch):
            error = self._item_error(item, segment)  # F064-R22
            if error is None and item.kind in UPDATE_KINDS:
                segment.append(item)  # F064-R20: consecutive updates form one step
                continue
            self._apply_segment(segment)
            segment = []
            if error is not None:
                self.out["errors"].append((b, seq, error))
            else:
                self._apply_control(item)
        self._apply_segment(segment)

        m = self.tracker.metrics()  # F064-R21: one progress row per batch
        self.out["progress"].append((
            b, self.tracker.current_watermark(), m.total_partitions, m.active_partitions,
            m.idle_partitions, m.watermark_advances, m.rebalances,
        ))
        end_parts, end_sources = self._partition_view(), self._source_view()
        for p in sorted(set(start_parts) | set(end_parts)):
            if start_parts.get(p) != end_parts.get(p):
                wm, state, core = end_parts.get(p, (None, "removed", None))
                self.out["partitions"].append((b, p.source_id, p.partition, wm, state, core))
        for s in sorted(set(start_sources) | set(end_sources)):
            if start_sources.get(s) != end_sources.get(s):
                self.out["sources"].append((b, s, *end_sources[s]))

    def _apply_segment(self, segment: list[Item]) -> None:
        if not segment:
            return
        updates = []
        for item in segment:
            p = PartitionId(item.source, item.partition)  # type: ignore[arg-type]
            if item.kind == "event":
                assert item.event_time is not None
                self.tracker.partitions[p].last_event_time = item.event_time
                updates.append((p, saturating_sub(item.event_time, self.max_lateness)))  # F064-R5
            else:
                assert item.time is not None
                updates.append((p, item.time))
        self.tracker.update_partitions(updates)

    def _apply_control(self, item: Item) -> None:
        t = self.tracker
        p = PartitionId(item.source, item.partition)  # type: ignore[arg-type]
        if item.kind == "clock":
            assert item.time is not None
            self.clock.now = item.time
            t.check_idle_partitions()  # F064-R11
        elif item.kind == "idle":
            t.mark_partition_idle(p)
        elif item.kind == "active":
            t.mark_partition_active(p)
        elif item.kind == "register_source":
            t.register_source(item.source, item.count)  # type: ignore[arg-type]
        elif item.kind == "add_partition":
            t.add_partition(p)
        elif item.kind == "remove_partition":
            t.remove_partition(p)
        elif item.kind == "assign_core":
            t.assign_partition_to_core(p, item.core)  # type: ignore[arg-type]

    def _item_error(self, item: Item, segment: list[Item]) -> str | None:
        """F064-R22: malformed items and refused calls become error rows and change nothing."""
        if item.kind == "duplicate_seq":
            return "duplicate_seq"  # TR-15: it ends the step like every error row
        required = PARTITIONED_REQUIRED_FIELDS.get(item.kind)
        if required is None:
            return "unsupported_item"
        for name in required:
            if getattr(item, name) is None:
                return f"missing_{name}"
        if item.kind == "clock":
            return "clock_went_backwards" if item.time < self.clock.now else None  # type: ignore[operator]
        t = self.tracker
        p = PartitionId(item.source, item.partition if item.partition is not None else 0)  # type: ignore[arg-type]
        try:
            _check_partition_id(p)
        except InvalidPartition:
            return "invalid_partition"
        if item.kind == "register_source":
            return None if 0 <= item.count <= U32_MAX + 1 else "invalid_partition"  # type: ignore[operator]
        if item.kind == "assign_core" and item.core < 0:  # type: ignore[operator]
            return "invalid_partition"
        if item.source not in t.sources:
            # remove_partition of anything unknown is answered with None, not an error (F064-R13)
            return None if item.kind == "remove_partition" else "unknown_source"
        if item.kind == "add_partition":
            return "invalid_partition" if p in t.partitions else None
        if item.kind != "remove_partition" and p not in t.partitions:
            return "unknown_partition"
        return None

    def _partition_view(self) -> dict[PartitionId, tuple[int | None, str, int | None]]:
        return {
            p: (s.watermark, "idle" if s.is_idle else "active", s.assigned_core)
            for p, s in self.tracker.partitions.items()
        }

    def _source_view(self) -> dict[int, tuple[int | None, int]]:
        t = self.tracker
        return {s: (t.source_watermark(s), t.active_partition_count(s)) for s in t.sources}

    def checkpoint(self) -> dict[str, Any]:
        """F064-R23: everything that crosses a restart."""
        return {"tracker": self.tracker.checkpoint(), "clock": self.clock.now}

    def restore(self, snapshot: dict[str, Any]) -> None:
        self.clock = TraceClock(snapshot["clock"])
        self.tracker = PartitionedWatermarkTracker.restore(snapshot["tracker"], self.clock)


def run_trace(trace: Trace) -> dict[str, list[Row]]:
    """Plays a partitioned_watermarks trace and returns its observable output tables."""
    return play(trace, PartitionedWatermarkStream)


__all__ = [
    "CoreWatermarkState",
    "InvalidPartition",
    "PartitionId",
    "PartitionWatermarkState",
    "PartitionedWatermarkMetrics",
    "PartitionedWatermarkStream",
    "PartitionedWatermarkTracker",
    "SourceNotFound",
    "UnknownPartition",
    "collect_watermarks",
    "run_trace",
]
