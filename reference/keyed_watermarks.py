"""Keyed watermarks (F065): the oracle of spec/keyed_watermarks.md.

Deliberately simple: dictionaries and loops, one clause at a time. Every rule
names its clause id. Times are integer milliseconds; watermarks are ints or
None ("no watermark yet").
"""

from __future__ import annotations

import copy
import enum
import hashlib
import math
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.traces import I64_MAX, I64_MIN, InvalidConfig, Item, Trace, saturating_add, saturating_sub
from reference.traces import Row, TraceClock, play

Clock = Callable[[], int]


class KeyEvictionPolicy(enum.Enum):
    """F065-R12..R15: what happens when a new key arrives at ``max_keys``."""

    LeastRecentlyActive = "LeastRecentlyActive"
    LowestWatermark = "LowestWatermark"
    RejectNew = "RejectNew"


class MaxKeysReached(Exception):
    """F065-R15: a new key under ``RejectNew`` with ``max_keys`` keys tracked."""

    def __init__(self, rejected: Sequence[Hashable], max_keys: int) -> None:
        self.rejected = list(rejected)
        self.max_keys = max_keys
        super().__init__(f"max_keys={max_keys} reached; rejected new keys {self.rejected!r}")


@dataclass
class KeyedWatermarkConfig:
    """F065-R20: defaults of the seed, validated on construction; one delay for all keys (F065-R25)."""

    bounded_delay: int = 5000
    idle_timeout: int = 60000
    max_keys: int | None = None
    eviction_policy: KeyEvictionPolicy = KeyEvictionPolicy.LeastRecentlyActive

    def __post_init__(self) -> None:
        if not isinstance(self.eviction_policy, KeyEvictionPolicy):
            names = [p.value for p in KeyEvictionPolicy]
            if self.eviction_policy not in names:
                raise InvalidConfig(f"eviction_policy must be one of {names}, got {self.eviction_policy!r}")
            self.eviction_policy = KeyEvictionPolicy(self.eviction_policy)
        for name in ("bounded_delay", "idle_timeout"):
            _require_int(name, getattr(self, name), minimum=0)
        if self.max_keys is not None:
            _require_int("max_keys", self.max_keys, minimum=1)


def _require_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= I64_MAX:
        raise InvalidConfig(f"{name} must be an integer from {minimum} to {I64_MAX}, got {value!r}")


@dataclass
class KeyWatermarkState:
    """F065-R1: what is kept per tracked key."""

    max_event_time: int
    watermark: int
    last_activity: int
    is_idle: bool = False
    # F065-R13: arrival order of the key's latest event, breaks last_activity ties.
    activity_order: int = 0


@dataclass
class KeyedWatermarkMetrics:
    """F065-R19: three gauges read at call time, three cumulative counters."""

    total_keys: int = 0
    active_keys: int = 0
    idle_keys: int = 0
    evicted_keys: int = 0
    global_advances: int = 0
    key_advances: int = 0
    estimated_keys: int | None = None  # F065-R34: the compact tracker's distinct-key estimate


@dataclass
class EventOutcome:
    """What applying one event did: the key watermark it was judged by, and the verdict."""

    key: Hashable
    event_time: int
    key_watermark: int | None
    verdict: str  # "on_time" | "late" | "rejected"


@dataclass
class BatchResult:
    outcomes: list[EventOutcome]
    advanced: int | None


class _TrackerCalls:
    """What both trackers share: an exact key's event, the arrival counter, counting advances."""

    config: KeyedWatermarkConfig | CompactKeyedWatermarkConfig
    clock: Clock
    _activity_counter: int
    _global_advances: int
    _key_advances: int

    def global_watermark(self) -> int | None:
        raise NotImplementedError

    def _apply_to_tracked(self, state: KeyWatermarkState, key: Hashable, event_time: int) -> EventOutcome:
        before = state.watermark
        verdict = "late" if event_time < before else "on_time"  # F065-R3
        state.last_activity = self.clock()  # F065-R11: any event is activity
        state.activity_order = self._next_activity()
        state.is_idle = False  # F065-R11: reactivates an idle key
        if event_time > state.max_event_time:  # F065-R2: older events change no time
            state.max_event_time = event_time
            wm = saturating_sub(event_time, self.config.bounded_delay)
            if wm > state.watermark:
                state.watermark = wm
                self._key_advances += 1
        return EventOutcome(key, event_time, before, verdict)

    def _next_activity(self) -> int:
        self._activity_counter += 1
        return self._activity_counter

    def _count_advance(self, before: int | None) -> int | None:
        after = self.global_watermark()
        if after is not None and (before is None or after > before):  # F065-R8
            self._global_advances += 1
            return after
        return None


class KeyedWatermarkTracker(_TrackerCalls):
    """Per-key watermarks with a global watermark over the active keys."""

    config: KeyedWatermarkConfig

    def __init__(self, config: KeyedWatermarkConfig | None = None, clock: Clock | None = None) -> None:
        self.config = config if config is not None else KeyedWatermarkConfig()
        self.clock: Clock = clock if clock is not None else (lambda: 0)
        self.key_states: dict[Hashable, KeyWatermarkState] = {}
        self._evicted = 0
        self._global_advances = 0
        self._key_advances = 0
        self._activity_counter = 0

    # ---- queries -------------------------------------------------------

    def watermark_for_key(self, key: Hashable) -> int | None:
        state = self.key_states.get(key)  # F065-R1: an untracked key has no watermark
        return None if state is None else state.watermark

    def global_watermark(self) -> int | None:
        if not self.key_states:
            return None  # F065-R5: nothing tracked, no global watermark
        active = [s.watermark for s in self.key_states.values() if not s.is_idle]
        if active:
            return min(active)  # F065-R5: min over active keys (may drop: F065-R6)
        return max(s.watermark for s in self.key_states.values())  # F065-R7: all idle -> max

    def is_late(self, key: Hashable, event_time: int) -> bool:
        wm = self.watermark_for_key(key)
        return wm is not None and event_time < wm  # F065-R3: strict, own key only

    def active_key_count(self) -> int:
        return sum(1 for s in self.key_states.values() if not s.is_idle)

    def total_key_count(self) -> int:
        return len(self.key_states)

    def metrics(self) -> KeyedWatermarkMetrics:
        active = self.active_key_count()
        return KeyedWatermarkMetrics(
            total_keys=len(self.key_states),
            active_keys=active,
            idle_keys=len(self.key_states) - active,
            evicted_keys=self._evicted,
            global_advances=self._global_advances,
            key_advances=self._key_advances,
        )

    # ---- updates -------------------------------------------------------

    def update(self, key: Hashable, event_time: int) -> int | None:
        """F065-R16: update is update_batch of one event."""
        return self.update_batch([(key, event_time)])

    def update_batch(self, events: Iterable[tuple[Hashable, int]]) -> int | None:
        result = self.apply_batch(events)
        rejected = [o.key for o in result.outcomes if o.verdict == "rejected"]
        if rejected:
            assert self.config.max_keys is not None
            raise MaxKeysReached(rejected, self.config.max_keys)  # F065-R15, R16
        return result.advanced

    def apply_batch(self, events: Iterable[tuple[Hashable, int]]) -> BatchResult:
        """update_batch with the per-event outcomes a stream reports (F065-R22)."""
        before = self.global_watermark()
        outcomes = [self._apply_event(k, t) for k, t in events]
        return BatchResult(outcomes, self._count_advance(before))

    def _apply_event(self, key: Hashable, event_time: int) -> EventOutcome:
        state = self.key_states.get(key)  # F065-R4: only this key's own state is read
        if state is None:
            if self.config.max_keys is not None and len(self.key_states) >= self.config.max_keys:
                if self.config.eviction_policy is KeyEvictionPolicy.RejectNew:
                    return EventOutcome(key, event_time, None, "rejected")  # F065-R15: no change
                self._evict_one()  # F065-R12
            self._key_advances += 1  # F065-R19: a first watermark is an advance
            wm = saturating_sub(event_time, self.config.bounded_delay)  # F065-R2
            self.key_states[key] = KeyWatermarkState(
                event_time, wm, self.clock(), False, self._next_activity()
            )
            return EventOutcome(key, event_time, None, "on_time")  # F065-R3: no watermark yet
        return self._apply_to_tracked(state, key, event_time)

    def _evict_one(self) -> None:
        def recency(item: tuple[Hashable, KeyWatermarkState]) -> tuple[int, int]:
            return (item[1].last_activity, item[1].activity_order)

        if self.config.eviction_policy is KeyEvictionPolicy.LowestWatermark:
            victim = min(self.key_states.items(), key=lambda kv: (kv[1].watermark, *recency(kv)))  # F065-R14
        else:
            victim = min(self.key_states.items(), key=recency)  # F065-R13
        del self.key_states[victim[0]]
        self._evicted += 1

    def mark_idle(self, key: Hashable) -> int | None:
        before = self.global_watermark()
        state = self.key_states.get(key)
        if state is None:
            return None  # F065-R9: unknown key, no change
        state.is_idle = True
        return self._count_advance(before)

    def check_idle_keys(self) -> int | None:
        before = self.global_watermark()
        now = self.clock()
        for state in self.key_states.values():
            if not state.is_idle and now - state.last_activity > self.config.idle_timeout:  # F065-R10
                state.is_idle = True  # F065-R25: idle keys stay tracked until removed or evicted
        return self._count_advance(before)

    def recalculate_global(self) -> int | None:
        return self.global_watermark()  # F065-R18: the global is never cached

    def remove_key(self, key: Hashable) -> KeyWatermarkState | None:
        before = self.global_watermark()
        state = self.key_states.pop(key, None)  # F065-R17
        if state is not None:
            self._count_advance(before)
        return state

    def clear(self) -> None:
        self.key_states.clear()  # F065-R17: counters are cumulative and survive

    # ---- restart (F065-R24) ---------------------------------------------

    def checkpoint(self) -> dict[str, Any]:
        return copy.deepcopy({k: v for k, v in vars(self).items() if k not in ("clock",)})

    @classmethod
    def restore(cls, snapshot: dict[str, Any], clock: Clock) -> KeyedWatermarkTracker:
        tracker = cls(copy.deepcopy(snapshot["config"]), clock)
        for k, v in copy.deepcopy(snapshot).items():
            setattr(tracker, k, v)
        return tracker


# ---- the compact tracker (F065-R26..R37) -----------------------------------

COMPACT_DOMAIN = b"F065-compact\x00"  # F065-R27: prefixes every key's digest
MAX_SKETCH_DEPTH = 6  # F065-R27: w2..w7 of the digest give the cells of six rows at most
HLL_REGISTERS = 4096  # F065-R34: precision 12
HLL_INDEX_SHIFT = 52


@dataclass
class CompactKeyedWatermarkConfig:
    """F065-R26: the memory-bounded tracker's settings, validated on construction."""

    exact_key_count: int
    sketch_error_rate: float = 0.01
    sketch_depth: int = 4
    shards: int = 1
    bounded_delay: int = 5000
    idle_timeout: int = 60000

    def __post_init__(self) -> None:
        _require_int("exact_key_count", self.exact_key_count, minimum=1)
        rate = self.sketch_error_rate
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.00001 <= rate < 1:
            raise InvalidConfig(f"sketch_error_rate must be a number from 0.00001 to below 1, got {rate!r}")
        _require_int("sketch_depth", self.sketch_depth, minimum=1)
        if self.sketch_depth > MAX_SKETCH_DEPTH:
            raise InvalidConfig(f"sketch_depth must be at most {MAX_SKETCH_DEPTH}, got {self.sketch_depth}")
        _require_int("shards", self.shards, minimum=1)
        if self.shards > self.exact_key_count:
            raise InvalidConfig(
                f"shards ({self.shards}) must be at most exact_key_count ({self.exact_key_count}): "
                "every shard holds at least one exact key"
            )
        for name in ("bounded_delay", "idle_timeout"):
            _require_int(name, getattr(self, name), minimum=0)

    @property
    def width(self) -> int:
        return math.ceil(math.e / self.sketch_error_rate)  # F065-R27: the count-min width

    @property
    def exact_per_shard(self) -> int:
        return self.exact_key_count // self.shards  # F065-R27

    @property
    def aging_period(self) -> int:
        return 10 * self.exact_per_shard  # F065-R28


def key_digest_words(key: Hashable) -> tuple[int, ...]:
    """F065-R27: the eight big-endian 64-bit words of SHA-512(domain + key's UTF-8 string form)."""
    digest = hashlib.sha512(COMPACT_DOMAIN + str(key).encode("utf-8")).digest()
    return tuple(int.from_bytes(digest[i : i + 8], "big") for i in range(0, 64, 8))


class CompactShard:
    """F065-R27: one shard: its exact keys, its two sketches and its registers."""

    def __init__(self, config: CompactKeyedWatermarkConfig) -> None:
        self.config = config
        self.exact: dict[Hashable, KeyWatermarkState] = {}
        self.frequency = [[0] * config.width for _ in range(config.sketch_depth)]  # F065-R28
        self.high: list[list[int | None]] = [[None] * config.width for _ in range(config.sketch_depth)]  # R29
        self.registers = [0] * HLL_REGISTERS  # F065-R34
        self.events = 0

    def cells(self, words: tuple[int, ...]) -> list[int]:
        return [words[2 + row] % self.config.width for row in range(self.config.sketch_depth)]  # F065-R27

    def count(self, cells: list[int]) -> None:
        for row, cell in enumerate(cells):
            self.frequency[row][cell] += 1  # F065-R28: every event, before it is judged
        self.events += 1
        if self.events % self.config.aging_period == 0:
            self.frequency = [[c // 2 for c in counters] for counters in self.frequency]  # F065-R28: aging

    def frequency_of(self, cells: list[int]) -> int:
        return min(self.frequency[row][cell] for row, cell in enumerate(cells))  # F065-R28

    def estimate(self, cells: list[int]) -> int | None:
        values = [self.high[row][cell] for row, cell in enumerate(cells)]
        if any(v is None for v in values):
            return None  # F065-R29: an empty cell, no estimate
        return min(v for v in values if v is not None)

    def write(self, cells: list[int], event_time: int) -> None:
        for row, cell in enumerate(cells):
            old = self.high[row][cell]
            self.high[row][cell] = event_time if old is None else max(old, event_time)  # F065-R29

    def observe(self, word: int) -> None:
        index = word >> HLL_INDEX_SHIFT
        rank = HLL_INDEX_SHIFT - (word & ((1 << HLL_INDEX_SHIFT) - 1)).bit_length() + 1  # F065-R34
        self.registers[index] = max(self.registers[index], rank)

    def cardinality(self) -> int:
        """F065-R34: HyperLogLog in exact integers, linear counting for small counts."""
        m = HLL_REGISTERS
        total = sum(1 << (64 - r) for r in self.registers)
        raw = (7213 * m**3 << 64) // ((10000 * m + 10790) * total)
        zeros = self.registers.count(0)
        if 2 * raw <= 5 * m and zeros > 0:
            return round(m * math.log(m / zeros))
        return raw


class CompactKeyedWatermarkTracker(_TrackerCalls):
    """F065-R26..R37: exact state for the recently active keys of each shard, a max sketch for the rest."""

    config: CompactKeyedWatermarkConfig

    def __init__(self, config: CompactKeyedWatermarkConfig, clock: Clock | None = None) -> None:
        self.config = config
        self.clock: Clock = clock if clock is not None else (lambda: 0)
        self.shards = [CompactShard(config) for _ in range(config.shards)]
        self._evicted = 0
        self._global_advances = 0
        self._key_advances = 0
        self._activity_counter = 0
        # F065-R35: how keys left the exact set ("sketched" | "removed"), kept only when a stream asks.
        self.record_departures = False
        self.departures: dict[Hashable, str] = {}

    def _shard(self, key: Hashable) -> tuple[CompactShard, list[int], tuple[int, ...]]:
        words = key_digest_words(key)
        shard = self.shards[words[0] % self.config.shards]  # F065-R27
        return shard, shard.cells(words), words

    # ---- queries -------------------------------------------------------

    @property
    def key_states(self) -> dict[Hashable, KeyWatermarkState]:
        """The exact keys of every shard (F065-R31: the only keys with a state)."""
        return {k: s for shard in self.shards for k, s in shard.exact.items()}

    def watermark_for_key(self, key: Hashable) -> int | None:
        shard, cells, _ = self._shard(key)
        state = shard.exact.get(key)
        if state is not None:
            return state.watermark
        estimate = shard.estimate(cells)  # F065-R31: otherwise the estimate
        return None if estimate is None else saturating_sub(estimate, self.config.bounded_delay)

    def global_watermark(self) -> int | None:
        states = self.key_states  # F065-R31: exact keys only
        if not states:
            return None
        active = [s.watermark for s in states.values() if not s.is_idle]
        return min(active) if active else max(s.watermark for s in states.values())  # F065-R5, R7

    def is_late(self, key: Hashable, event_time: int) -> bool:
        wm = self.watermark_for_key(key)
        return wm is not None and event_time < wm  # F065-R3 with the answer of F065-R31

    def active_key_count(self) -> int:
        return sum(1 for s in self.key_states.values() if not s.is_idle)

    def total_key_count(self) -> int:
        return sum(len(shard.exact) for shard in self.shards)

    def metrics(self) -> KeyedWatermarkMetrics:
        total, active = self.total_key_count(), self.active_key_count()
        return KeyedWatermarkMetrics(
            total_keys=total,
            active_keys=active,
            idle_keys=total - active,
            evicted_keys=self._evicted,  # F065-R35: demotions
            global_advances=self._global_advances,
            key_advances=self._key_advances,
            estimated_keys=sum(shard.cardinality() for shard in self.shards),  # F065-R34
        )

    # ---- updates -------------------------------------------------------

    def update(self, key: Hashable, event_time: int) -> int | None:
        return self.apply_batch([(key, event_time)]).advanced

    def update_batch(self, events: Iterable[tuple[Hashable, int]]) -> int | None:
        return self.apply_batch(events).advanced  # F065-R16: one call; nothing is ever rejected

    def apply_batch(self, events: Iterable[tuple[Hashable, int]]) -> BatchResult:
        before = self.global_watermark()
        outcomes = [self._apply_event(k, t) for k, t in events]
        return BatchResult(outcomes, self._count_advance(before))

    def _apply_event(self, key: Hashable, event_time: int) -> EventOutcome:
        shard, cells, words = self._shard(key)
        shard.count(cells)  # F065-R30 step 1
        shard.observe(words[1])  # F065-R34
        delay = self.config.bounded_delay
        state = shard.exact.get(key)
        if state is not None:
            return self._apply_to_tracked(state, key, event_time)  # F065-R30 step 2: as the keyed tracker
        estimate = shard.estimate(cells)  # F065-R30 step 3: judged by the estimate
        judged = None if estimate is None else saturating_sub(estimate, delay)
        verdict = "late" if judged is not None and event_time < judged else "on_time"
        top = event_time if estimate is None else max(estimate, event_time)
        enters = len(shard.exact) < self.config.exact_per_shard
        if not enters:
            victim_key, victim = min(
                shard.exact.items(), key=lambda kv: (kv[1].last_activity, kv[1].activity_order)
            )  # F065-R13: the least recently active exact key
            victim_cells = shard.cells(key_digest_words(victim_key))
            if shard.frequency_of(cells) > shard.frequency_of(victim_cells):  # F065-R30: strictly more
                shard.write(victim_cells, victim.max_event_time)  # demotion keeps its time in the sketch
                del shard.exact[victim_key]
                self._evicted += 1
                self._depart(victim_key, "sketched")
                enters = True
        if enters:
            # F065-R30: the key keeps its estimate; a fresh start would let late events through.
            shard.exact[key] = KeyWatermarkState(
                top, saturating_sub(top, delay), self.clock(), False, self._next_activity()
            )
            self.departures.pop(key, None)
        else:
            shard.write(cells, event_time)
        after = saturating_sub(top, delay)
        if judged is None or after > judged:
            self._key_advances += 1  # F065-R30: the watermark the key is judged by rose
        return EventOutcome(key, event_time, judged, verdict)

    def _depart(self, key: Hashable, how: str) -> None:
        if self.record_departures:
            self.departures[key] = how

    def mark_idle(self, key: Hashable) -> int | None:
        before = self.global_watermark()
        shard, _, _ = self._shard(key)
        state = shard.exact.get(key)
        if state is None:
            return None  # F065-R31: only exact keys have an idle flag
        state.is_idle = True
        return self._count_advance(before)

    def check_idle_keys(self) -> int | None:
        before = self.global_watermark()
        now = self.clock()
        for shard in self.shards:
            for state in shard.exact.values():
                if not state.is_idle and now - state.last_activity > self.config.idle_timeout:  # F065-R10
                    state.is_idle = True
        return self._count_advance(before)

    def recalculate_global(self) -> int | None:
        return self.global_watermark()  # F065-R18

    def remove_key(self, key: Hashable) -> KeyWatermarkState | None:
        before = self.global_watermark()
        shard, _, _ = self._shard(key)
        state = shard.exact.pop(key, None)  # F065-R31: the sketch keeps its cells
        if state is not None:
            self._depart(key, "removed")
            self._count_advance(before)
        return state

    def clear(self) -> None:
        self.shards = [CompactShard(self.config) for _ in range(self.config.shards)]  # F065-R31

    # ---- restart (F065-R37) ---------------------------------------------

    def checkpoint(self) -> dict[str, Any]:
        return copy.deepcopy({k: v for k, v in vars(self).items() if k not in ("clock",)})

    @classmethod
    def restore(cls, snapshot: dict[str, Any], clock: Clock) -> CompactKeyedWatermarkTracker:
        tracker = cls(copy.deepcopy(snapshot["config"]), clock)
        for k, v in copy.deepcopy(snapshot).items():
            setattr(tracker, k, v)
        return tracker


@dataclass
class WindowResult:
    key: Hashable
    window_start: int
    window_end: int
    count: int
    sum: int


@dataclass
class KeyedTumblingWindowOperator:
    """F065-R21: tumbling windows per key, fired by the key's own watermark."""

    size: int
    open_windows: dict[tuple[Hashable, int], list[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _require_int("window_size", self.size, minimum=1)

    def process_keyed(
        self, key: Hashable, event_time: int, value: int, tracker: KeyedWatermarkTracker
    ) -> bool:
        """Adds the event to its window unless late for its key; True when accepted."""
        if tracker.is_late(key, event_time):
            return False  # F065-R21: late by the key's watermark, not the global one
        self.add(key, event_time, value)
        return True

    def add(self, key: Hashable, event_time: int, value: int) -> None:
        acc = self.open_windows.setdefault((key, self.window_start(event_time)), [0, 0])
        acc[0] += 1
        acc[1] += value

    def window_start(self, event_time: int) -> int:
        # F065-R21: the multiple of size at or below the time, clamped to the range (TR-2).
        return max(I64_MIN, event_time - event_time % self.size)

    def window_end(self, window_start: int) -> int:
        aligned = window_start - window_start % self.size  # undo the clamp of the first window
        return saturating_add(aligned, self.size)

    def trigger_key_windows(self, key: Hashable, key_watermark: int | None) -> list[WindowResult]:
        if key_watermark is None:
            return []
        fired = []
        for (k, start), (count, total) in sorted(self.open_windows.items(), key=lambda kv: kv[0][1]):
            end = self.window_end(start)
            if k == key and end <= key_watermark:  # F065-R21: fires once wm reaches the end
                fired.append(WindowResult(k, start, end, count, total))
        for w in fired:
            del self.open_windows[(w.key, w.window_start)]
        return fired

    def fire_all(self) -> list[WindowResult]:
        """F065-R38: at the end of the stream every open window is complete and fires."""
        fired = [
            WindowResult(k, start, self.window_end(start), count, total)
            for (k, start), (count, total) in sorted(self.open_windows.items(), key=lambda kv: repr(kv[0]))
        ]
        self.open_windows.clear()
        return fired


# ---- the stream (F065-R22..R24) -------------------------------------------

CONFIG_KEYS = {"bounded_delay", "idle_timeout", "max_keys", "eviction_policy", "window_size"}
COMPACT_KEYS = {"exact_key_count", "sketch_error_rate", "sketch_depth", "shards"}  # F065-R26
ACCEPTED_KINDS = ("event", "clock", "idle", "remove_key", "end")  # F065-R22, R38


def config_from_trace(
    config: dict[str, Any],
) -> tuple[KeyedWatermarkConfig | CompactKeyedWatermarkConfig, int | None]:
    """F065-R20, R26: the trace's settings, refused with InvalidConfig before any item."""
    unknown = set(config) - CONFIG_KEYS - COMPACT_KEYS
    if unknown:
        raise InvalidConfig(f"unknown keyed_watermarks settings {sorted(unknown)}")
    compact = COMPACT_KEYS & set(config)
    if compact:
        if "exact_key_count" not in config:
            raise InvalidConfig(f"{sorted(compact)} need exact_key_count (the compact tracker, F065-R26)")
        clash = sorted(k for k in ("max_keys", "window_size") if config.get(k) is not None)
        clash += ["eviction_policy"] if "eviction_policy" in config else []
        if clash:
            raise InvalidConfig(
                "the compact tracker (exact_key_count) bounds its own memory, picks its exact keys by its "
                f"own rule and keeps no windows; drop {clash}"
            )  # F065-R26
        return CompactKeyedWatermarkConfig(
            **{k: v for k, v in config.items() if k not in ("max_keys", "window_size", "eviction_policy")}
        ), None
    tracker_config = KeyedWatermarkConfig(**{k: v for k, v in config.items() if k != "window_size"})
    window_size = config.get("window_size")
    if window_size is not None:
        _require_int("window_size", window_size, minimum=1)
    return tracker_config, window_size


class KeyedWatermarkStream:
    """Plays a keyed_watermarks trace batch by batch and collects its output tables; what another cut of
    the same items into batches may change: F065-R39."""

    def __init__(self, config: dict[str, Any]) -> None:
        tracker_config, window_size = config_from_trace(config)
        self.clock = TraceClock()
        self.tracker: KeyedWatermarkTracker | CompactKeyedWatermarkTracker
        if isinstance(tracker_config, CompactKeyedWatermarkConfig):
            self.tracker = CompactKeyedWatermarkTracker(tracker_config, self.clock)
            self.tracker.record_departures = True  # F065-R35: the keys table says how a key left
        else:
            self.tracker = KeyedWatermarkTracker(tracker_config, self.clock)
        self.windows = KeyedTumblingWindowOperator(window_size) if window_size else None
        self.out: dict[str, list[Row]] = {
            t: [] for t in ("events", "progress", "keys", "windows", "errors")
        }
        self.ended = False  # F065-R38: after the end item every item is an error

    def run_batch(self, b: int, batch: Sequence[Item]) -> None:
        start_view = self._key_view()
        departures = getattr(self.tracker, "departures", {})
        departures.clear()
        segment: list[tuple[int, Item]] = []
        for seq, item in enumerate(batch):
            error = self._item_error(item)  # F065-R23
            if item.kind == "event" and error is None:
                segment.append((seq, item))  # F065-R22: events gather into a segment
                continue
            self._apply_segment(b, segment)
            segment = []
            if error is not None:
                self.out["errors"].append((b, seq, error))
            elif item.kind == "clock":
                assert item.time is not None
                self.clock.now = item.time
                self.tracker.check_idle_keys()  # F065-R10
            elif item.kind == "idle":
                self.tracker.mark_idle(item.key)  # F065-R9
            elif item.kind == "remove_key":
                self.tracker.remove_key(item.key)  # F065-R17
            elif item.kind == "end":
                self.ended = True  # F065-R38: every open window fires; no watermark moves
                for w in self.windows.fire_all() if self.windows is not None else []:
                    self.out["windows"].append((b, w.key, w.window_start, w.window_end, w.count, w.sum))
        self._apply_segment(b, segment)

        m = self.tracker.metrics()  # F065-R22: one progress row per batch
        self.out["progress"].append((
            b, self.tracker.global_watermark(), m.total_keys, m.active_keys, m.idle_keys,
            m.evicted_keys, m.global_advances, m.key_advances, m.estimated_keys,
        ))
        end_view = self._key_view()
        for key in sorted(set(start_view) | set(end_view)):
            if start_view.get(key) != end_view.get(key):
                wm, state = end_view.get(key, (None, departures.get(key, "removed")))  # F065-R35
                self.out["keys"].append((b, key, wm, state))

    def _apply_segment(self, b: int, segment: list[tuple[int, Item]]) -> None:
        """F065-R22: one update_batch; windows see each event with its arrival verdict."""
        if not segment:
            return
        events = [(item.key, item.event_time) for _, item in segment]
        outcomes = self.tracker.apply_batch(events).outcomes  # type: ignore[arg-type]
        for (seq, item), o in zip(segment, outcomes, strict=True):
            self.out["events"].append((b, seq, item.key, item.event_time, o.key_watermark, o.verdict))
            if self.windows is not None and o.verdict == "on_time":
                self.windows.add(o.key, o.event_time, item.value)  # F065-R21
        if self.windows is not None:
            for key in dict.fromkeys(o.key for o in outcomes):
                for w in self.windows.trigger_key_windows(key, self.tracker.watermark_for_key(key)):
                    self.out["windows"].append((b, w.key, w.window_start, w.window_end, w.count, w.sum))

    def _key_view(self) -> dict[Any, tuple[int, str]]:
        return {
            k: (s.watermark, "idle" if s.is_idle else "active") for k, s in self.tracker.key_states.items()
        }

    def _item_error(self, item: Item) -> str | None:
        """F065-R23: malformed items become error rows and change nothing."""
        if self.ended:
            return "after_end"  # F065-R38
        if item.kind == "duplicate_seq":
            return "duplicate_seq"  # TR-15: it ends the segment like every error row
        if item.kind not in ACCEPTED_KINDS:
            return "unsupported_item"
        if item.kind == "clock":
            if item.time is None:
                return "missing_time"
            return "clock_went_backwards" if item.time < self.clock.now else None
        if item.kind == "end":
            return None
        if item.key is None:
            return "missing_key"
        if item.kind == "event" and item.event_time is None:
            return "missing_event_time"
        return None

    def checkpoint(self) -> dict[str, Any]:
        """F065-R24: everything that crosses a restart."""
        return {
            "tracker": self.tracker.checkpoint(),
            "windows": copy.deepcopy(self.windows),
            "clock": self.clock.now,
            "ended": self.ended,
        }

    def restore(self, snapshot: dict[str, Any]) -> None:
        self.clock = TraceClock(snapshot["clock"])
        self.tracker = type(self.tracker).restore(snapshot["tracker"], self.clock)
        self.windows = copy.deepcopy(snapshot["windows"])
        self.ended = snapshot["ended"]


def run_trace(trace: Trace) -> dict[str, list[Row]]:
    """Plays a keyed_watermarks trace and returns its observable output tables."""
    return play(trace, KeyedWatermarkStream)


__all__ = [
    "BatchResult",
    "CompactKeyedWatermarkConfig",
    "CompactKeyedWatermarkTracker",
    "CompactShard",
    "EventOutcome",
    "KeyEvictionPolicy",
    "KeyWatermarkState",
    "KeyedTumblingWindowOperator",
    "KeyedWatermarkConfig",
    "KeyedWatermarkMetrics",
    "KeyedWatermarkStream",
    "KeyedWatermarkTracker",
    "MaxKeysReached",
    "WindowResult",
    "key_digest_words",
    "run_trace",
]
