"""The compact tracker (F065-R26..R37) in the accuracy benchmark: the oracle only, at a small grid of sizes.

The compact tracker keeps no windows (R26), so its accuracy is derived from
its verdicts and key watermarks exactly as the keyed kind's is: an event is
counted when it is on time and its window [s, s + 10 s) fires, and a key's
window fires once the watermark the key is judged by reaches the window's end
(R21's ``watermark >= end``). That watermark never goes down without
``remove_key`` (exact maxima only grow, a promotion starts at the estimate or
above, sketch cells are never lowered, R29, R30), and no event is removed
here, so "fires by the end of the stream" is ``window end <= the key's final
watermark_for_key``. ``counted_by_final_watermark`` is that derivation; run.py
applies it to the keyed tracker too and asserts that it gives exactly the
events counted by the keyed kind's window operators, which checks it.

Per run it also checks two clauses on the whole stream (a failure is a
disagreement between the oracle and the spec, and stops the run):

- R32: every event the keyed tracker calls late is late for the compact one;
- R33's witness rule: every event whose verdict differs is of a key that
  shares its cell in every row with another key of the stream (same shard).

The grid (``GRID``): depth 4, one shard; an exact set of 10% of the vehicles
with error rates 0.01 and 0.001 (widths 272 and 2,719), and one of 2% at
0.001 (three sizes: each compact run costs the oracle about a minute at 1M
events). With 1,000
vehicles the tail that goes through the max sketch is 900 to 980 keys, so
one width is well below the tail (almost every tail key's cells are all
shared) and one is about three times the tail (R33's bound is below 1%): the
grid shows that the width must be sized for the tail, and that the size of
the exact set matters less.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np
from variants import BOUND_MS, WINDOW_MS, Stream, vehicle_names

from reference.keyed_watermarks import (
    CompactKeyedWatermarkConfig,
    CompactKeyedWatermarkTracker,
    EventOutcome,
    key_digest_words,
)

NO_WATERMARK = np.iinfo(np.int64).min  # a key without a watermark fires no window
HLL_REGISTER_BYTES = 4096  # R36: 4096 one-byte registers per shard
ENTRY_INTEGERS = 5  # R36 (R1): max event time, watermark, last activity, idle flag, arrival position
SHARD_INTEGERS = 2  # R36: the event count and the arrival counter of a shard
CELL_BYTES = 8  # R36: 64-bit cells


@dataclass(frozen=True)
class Sketch:
    """One compact configuration of the grid; the exact set is a share of the fleet."""

    exact_share: float
    sketch_error_rate: float
    sketch_depth: int = 4
    shards: int = 1

    def config(self, vehicles: int) -> CompactKeyedWatermarkConfig:
        return CompactKeyedWatermarkConfig(
            exact_key_count=max(self.shards, round(self.exact_share * vehicles)),
            sketch_error_rate=self.sketch_error_rate,
            sketch_depth=self.sketch_depth,
            shards=self.shards,
            bounded_delay=BOUND_MS,
        )

    def label(self, vehicles: int) -> str:
        c = self.config(vehicles)
        return f"compact {c.exact_key_count} exact, width {c.width}"


GRID = (
    Sketch(0.10, 0.01),
    Sketch(0.10, 0.001),
    Sketch(0.02, 0.001),
)


class _WatchedTracker(CompactKeyedWatermarkTracker):
    """The reference tracker, unchanged, with a look before and after each event for R33's bookkeeping."""

    def __init__(self, config: CompactKeyedWatermarkConfig, shard_of: dict[Hashable, int]) -> None:
        super().__init__(config)
        self.shard_of = shard_of
        self.sketch_written = [False] * config.shards  # a shard's max sketch is empty until its first write
        self.ever_exact: set[Hashable] = set()
        self.written: set[Hashable] = set()  # keys whose time went into a max sketch (R29)
        self.entered_after_write: set[Hashable] = set()  # keys that may have started from an estimate
        self.judged_by_sketch = 0  # events of keys outside the exact set (R30 step 3)
        self.observed = 0

    def _apply_event(self, key: Hashable, event_time: int) -> EventOutcome:
        index = self.shard_of[key]
        exact = self.shards[index].exact
        was_exact = key in exact
        was_full = len(exact) >= self.config.exact_per_shard
        had_writes = self.sketch_written[index]
        outcome = super()._apply_event(key, event_time)
        self.observed += 1
        if not was_exact:
            self.judged_by_sketch += 1
            if key in self.ever_exact:
                self.written.add(key)  # it left the exact set, and only a demotion does that here
            if was_full:
                self.sketch_written[index] = True  # R30: a full shard writes the victim or this key
            if key in exact:
                self.ever_exact.add(key)
                if had_writes:
                    self.entered_after_write.add(key)
            else:
                self.written.add(key)
        return outcome


@dataclass
class CompactOutcome:
    """What the compact tracker decided for one variant at one size, and what R33 and R36 say of it."""

    late: np.ndarray  # bool per event, arrival order
    final_watermark: np.ndarray  # int64 per vehicle index, NO_WATERMARK for none
    exact_keys: int
    demotions: int
    estimated_keys: int
    judged_by_sketch: int
    through_sketch_keys: int
    through_sketch_events: int
    written_keys: int
    r33_bound: float
    r33_bound_loose: float
    seconds: float


def final_watermarks(tracker: Any, stream: Stream) -> np.ndarray:
    """A tracker's watermark_for_key per vehicle index of the stream at the end (either tracker)."""
    span = int(stream.vehicle.max()) + 1 if len(stream) else 0
    marks = [tracker.watermark_for_key(name) for name in vehicle_names(np.arange(span)).tolist()]
    return np.array([NO_WATERMARK if m is None else m for m in marks], np.int64)


def counted_by_final_watermark(
    stream: Stream, late: np.ndarray, final_watermark: np.ndarray
) -> tuple[int, int]:
    """(events counted, windows fired): on time and window end <= the key's final watermark (docstring)."""
    start = stream.event_time - stream.event_time % WINDOW_MS
    counted = ~late & (start + WINDOW_MS <= final_watermark[stream.vehicle])
    pairs = np.unique(stream.vehicle[counted] * (1 << 40) + (start[counted] - start.min()))
    return int(np.count_nonzero(counted)), len(pairs)


def cells_by_key(names: list[str], config: CompactKeyedWatermarkConfig) -> dict[str, tuple[int, ...]]:
    """R27: (shard, cell of row 0, ..., cell of row depth - 1) per key."""
    out = {}
    for name in names:
        words = key_digest_words(name)
        cells = tuple(words[2 + row] % config.width for row in range(config.sketch_depth))
        out[name] = (words[0] % config.shards, *cells)
    return out


def run_compact(stream: Stream, sketch: Sketch, vehicles: int) -> CompactOutcome:
    config = sketch.config(vehicles)
    names = stream.vehicle_names()
    keys = names.tolist()
    times = stream.event_time.tolist()
    placement = cells_by_key(sorted(set(keys)), config)
    tracker = _WatchedTracker(config, {k: p[0] for k, p in placement.items()})
    cuts = np.flatnonzero(np.diff(stream.batch)) + 1
    bounds = list(zip([0, *cuts.tolist()], [*cuts.tolist(), len(stream)], strict=True))
    late = np.zeros(len(stream), bool)
    started = time.perf_counter()
    for first, end in bounds:
        outcomes = tracker.apply_batch(zip(keys[first:end], times[first:end], strict=True)).outcomes
        late[first:end] = [o.verdict == "late" for o in outcomes]
    seconds = time.perf_counter() - started
    assert tracker.observed == len(stream), "the watch must see every event (reference internals changed?)"
    misplaced = [
        k for i, shard in enumerate(tracker.shards) for k in shard.exact if placement[str(k)][0] != i
    ]
    assert not misplaced, f"the watch's shards differ from the tracker's for {misplaced[:5]}"
    exact_now = set(tracker.key_states)
    written = tracker.written | (tracker.ever_exact - exact_now)  # demoted after their last event
    through = written | tracker.entered_after_write
    unique, counts = np.unique(names, return_counts=True)
    events_per_key = {str(k): int(c) for k, c in zip(unique.tolist(), counts.tolist(), strict=True)}
    bound, loose, through_events = _r33_bound(
        config, placement, written, through, events_per_key, len(stream)
    )
    metrics = tracker.metrics()
    assert metrics.estimated_keys is not None
    return CompactOutcome(
        late=late,
        final_watermark=final_watermarks(tracker, stream),
        exact_keys=metrics.total_keys,
        demotions=metrics.evicted_keys,
        estimated_keys=metrics.estimated_keys,
        judged_by_sketch=tracker.judged_by_sketch,
        through_sketch_keys=len(through),
        through_sketch_events=through_events,
        written_keys=len(written),
        r33_bound=bound,
        r33_bound_loose=loose,
        seconds=seconds,
    )


def _r33_bound(
    config: CompactKeyedWatermarkConfig,
    placement: dict[str, tuple[int, ...]],
    written: set[Hashable],
    through: set[Hashable],
    events_per_key: dict[str, int],
    events: int,
) -> tuple[float, float, int]:
    """R33 per shard: share of events of keys through the sketch x (1 - (1 - 1/width)^n)^depth, summed.

    n = keys written to the shard's max sketch over the run. Also the looser (n / width)^depth form
    (capped at 1, as a probability), and the events of keys through the sketch.
    """
    written_per_shard: dict[int, int] = defaultdict(int)
    through_events_per_shard: dict[int, int] = defaultdict(int)
    for key in written:
        written_per_shard[placement[str(key)][0]] += 1
    for key in through:
        through_events_per_shard[placement[str(key)][0]] += events_per_key[str(key)]
    tight = loose = 0.0
    for shard, through_events in through_events_per_shard.items():
        n = written_per_shard[shard]
        share = through_events / events
        tight += share * (1 - (1 - 1 / config.width) ** n) ** config.sketch_depth
        loose += share * min(1.0, (n / config.width) ** config.sketch_depth)
    return tight, loose, sum(through_events_per_shard.values())


def check_r32(keyed_late: np.ndarray, compact_late: np.ndarray, label: str) -> None:
    """R32: the compact tracker never lets through an event the keyed tracker calls late."""
    let_through = np.flatnonzero(keyed_late & ~compact_late)
    if len(let_through):
        raise AssertionError(f"{label}: R32 broken at arrival positions {let_through[:10].tolist()}")


def check_r33_witness(
    stream: Stream,
    keyed_late: np.ndarray,
    compact_late: np.ndarray,
    sketch: Sketch,
    vehicles: int,
    label: str,
) -> int:
    """R33's witness rule; returns how many keys had a differing verdict."""
    config = sketch.config(vehicles)
    names = stream.vehicle_names()
    placement = cells_by_key(sorted(set(names.tolist())), config)
    sharers: dict[tuple[int, int, int], int] = defaultdict(int)  # (shard, row, cell) -> keys of the stream
    for shard, *cells in placement.values():
        for row, cell in enumerate(cells):
            sharers[(shard, row, cell)] += 1
    differing = sorted(set(names[keyed_late != compact_late].tolist()))
    alone = [
        key
        for key in differing
        if any(sharers[(placement[key][0], row, cell)] < 2 for row, cell in enumerate(placement[key][1:]))
    ]
    if alone:
        raise AssertionError(
            f"{label}: R33 witness rule broken for keys {alone[:10]}: a row's cell is theirs alone"
        )
    return len(differing)


def key_bytes(name: str) -> int:
    return len(name.encode("utf-8"))


def exact_tracker_bytes(names: list[str]) -> int:
    """R36's accounting applied to the keyed tracker: per tracked key, its bytes and five 64-bit integers."""
    return sum(key_bytes(n) + ENTRY_INTEGERS * 8 for n in names)


def compact_state_bytes(config: CompactKeyedWatermarkConfig, longest_key_bytes: int) -> int:
    """R36's bound: shards x (exact_per_shard x (key + 5 x 8) + 2 x depth x width x 8 + 4096 + 2 x 8)."""
    per_shard = (
        config.exact_per_shard * (longest_key_bytes + ENTRY_INTEGERS * 8)
        + 2 * config.sketch_depth * config.width * CELL_BYTES
        + HLL_REGISTER_BYTES
        + SHARD_INTEGERS * 8
    )
    return config.shards * per_shard


def break_even_keys(compact_bytes: int, longest_key_bytes: int) -> int:
    """The key count at which the keyed tracker's state reaches the compact bound."""
    return math.ceil(compact_bytes / (longest_key_bytes + ENTRY_INTEGERS * 8))
