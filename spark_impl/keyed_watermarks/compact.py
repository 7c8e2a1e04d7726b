"""Keyed watermarks (F065): the compact tracker (F065-R26..R37), the shards of one bucket of one
stream as the wide stage runs them (pure pandas and numpy)."""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from harness.traces import I64_MAX, I64_MIN
from spark_impl.checkpoints import (
    IncompatibleCheckpoint,
    decoding,
)
from spark_impl.keyed_watermarks.exact import (
    LAST_CALL,
    _calls,
    _Out,
    _Reports,
)
from spark_impl.keyed_watermarks.layout import (
    Aggregate,
    BucketState,
    _same_length,
)
from spark_impl.keyed_watermarks.settings import (
    COMPACT_DOMAIN,
    HLL_INDEX_SHIFT,
    HLL_REGISTERS,
    StreamConfig,
)
from spark_impl.scaleout import (
    pack_text,
    unpack_text,
)

# ---- the compact tracker (F065-R26..R37): the shards of one bucket ----------

COMPACT_LAYOUT = -1  # BucketState.level of a compact stream's bucket: its summary rows are shards
SHARD_KEYS_SCHEMA = "key_lengths binary, key_bytes binary, numbers binary, idle binary"
SHARD_SKETCH_SCHEMA = (
    "shards long, exact_per_shard long, depth int, width long, events long, frequency binary, high binary, "
    "empty binary, registers binary"
)


def digest_words(keys: list[str]) -> np.ndarray:
    """F065-R27: the eight big-endian 64-bit words of each key's SHA-512 digest, one row per key."""
    digests = b"".join(hashlib.sha512(COMPACT_DOMAIN + k.encode("utf-8")).digest() for k in keys)
    return np.frombuffer(digests, ">u8").reshape(-1, 8).astype(np.uint64)


def hll_estimate(registers: np.ndarray) -> int:
    """F065-R34: a shard's HyperLogLog estimate in exact integers, linear counting for small counts."""
    m = HLL_REGISTERS
    counts = np.bincount(registers, minlength=HLL_INDEX_SHIFT + 2).tolist()
    total = sum(c << (64 - r) for r, c in enumerate(counts) if c)
    raw = (7213 * m**3 << 64) // ((10000 * m + 10790) * total)
    zeros = counts[0]
    if 2 * raw <= 5 * m and zeros > 0:
        return round(m * math.log(m / zeros))  # Python's round: half to even, as the clause says
    return raw


class _KeyTable:
    """The digest facts of the keys a call meets, computed once per distinct key: each key's
    flat sketch cells (row i's cell at i * width + w(2 + i) mod width), its shard and its
    HyperLogLog register and rank."""

    def __init__(self, cfg: StreamConfig, keys: np.ndarray) -> None:
        self.cfg = cfg
        self.offsets = np.arange(cfg.sketch_depth, dtype=np.int64) * cfg.width
        codes, distinct = pd.factorize(keys)
        self.codes = codes.astype(np.int64)
        words = digest_words(distinct.tolist() if len(keys) else [])
        self.shard = (words[:, 0] % np.uint64(cfg.shards)).astype(np.int64)
        self.cells: list[list[int]] = self._cells(words).tolist()
        low = words[:, 1] & np.uint64((1 << HLL_INDEX_SHIFT) - 1)
        # frexp's exponent of a value below 2**52 is its bit length (exact in a double; 0 for 0).
        self.register = (words[:, 1] >> np.uint64(HLL_INDEX_SHIFT)).astype(np.int64)
        self.rank = (HLL_INDEX_SHIFT + 1 - np.frexp(low.astype(np.float64))[1]).astype(np.uint8)

    def _cells(self, words: np.ndarray) -> np.ndarray:
        depth = self.cfg.sketch_depth
        return (words[:, 2 : 2 + depth] % np.uint64(self.cfg.width)).astype(np.int64) + self.offsets

    def cells_of(self, key: str) -> list[int]:
        """The cells of one key (a victim of R30 read from state), without numpy's per-call cost."""
        digest = hashlib.sha512(COMPACT_DOMAIN + key.encode("utf-8")).digest()
        width = self.cfg.width
        return [
            int.from_bytes(digest[16 + 8 * row : 24 + 8 * row], "big") % width + row * width
            for row in range(self.cfg.sketch_depth)
        ]


def unpack_sketch(value: tuple[Any, ...]) -> tuple[int, list[int], list[int | None], np.ndarray]:
    """A shard's stored sketches: event count, frequency cells, max cells (None where empty),
    HyperLogLog registers; each of the sizes its settings give, or the value is damaged."""
    with decoding("keyed_watermarks", "shard_sketches"):
        cells = int(value[2]) * int(value[3])
        frequency = np.frombuffer(bytes(value[5]), np.int64).tolist()
        high: list[int | None] = np.frombuffer(bytes(value[6]), np.int64).tolist()
        empty = np.frombuffer(bytes(value[7]), bool)
        registers = np.frombuffer(bytes(value[8]), np.uint8).copy()
        _same_length(cells=cells, frequency_cells=len(frequency), max_cells=len(high), empty_flags=len(empty))
        _same_length(registers=HLL_REGISTERS, stored_registers=len(registers))
        for cell in np.flatnonzero(empty).tolist():
            high[cell] = None
        return int(value[4]), frequency, high, registers


class _Sketch:
    """A shard's frequency sketch (R28), max sketch (R29), registers (R34) and event count. A
    key has at most six cells, so the per-event rule reads and writes Python lists (a numpy
    call per cell costs more than the work); they come from and go back to raw arrays once per
    call. An empty max-sketch cell is None."""

    def __init__(self, cfg: StreamConfig, value: tuple[Any, ...] | None = None) -> None:
        if value is None:
            size = cfg.sketch_depth * cfg.width
            self.events = 0
            self.frequency: list[int] = [0] * size
            self.high: list[int | None] = [None] * size
            self.registers = np.zeros(HLL_REGISTERS, np.uint8)
            return
        self.events, self.frequency, self.high, self.registers = unpack_sketch(value)

    def to_tuple(self, cfg: StreamConfig) -> tuple[Any, ...]:
        empty = np.fromiter((v is None for v in self.high), bool, len(self.high))
        high = np.fromiter((0 if v is None else v for v in self.high), np.int64, len(self.high))
        return (
            cfg.shards, cfg.exact_per_shard, cfg.sketch_depth, cfg.width, self.events,
            np.array(self.frequency, np.int64).tobytes(), high.tobytes(), empty.tobytes(),
            self.registers.tobytes(),
        )  # fmt: skip

    def count(self, cells: list[int], aging_period: int) -> None:
        frequency = self.frequency
        for cell in cells:
            frequency[cell] += 1  # F065-R28: every event, before it is judged
        self.events += 1
        if self.events % aging_period == 0:
            frequency[:] = [c >> 1 for c in frequency]  # F065-R28: aging halves, rounding down

    def frequency_of(self, cells: list[int]) -> int:
        frequency = self.frequency
        return min([frequency[cell] for cell in cells])

    def estimate(self, cells: list[int]) -> int | None:
        values = [self.high[cell] for cell in cells]
        if None in values:
            return None  # F065-R29: an empty cell, no estimate
        return min(values)  # type: ignore[type-var]

    def write(self, cells: list[int], event_time: int) -> None:
        high = self.high
        for cell in cells:
            old = high[cell]
            if old is None or old < event_time:
                high[cell] = event_time  # F065-R29: cells only rise


def check_sketch_settings(value: tuple[Any, ...], cfg: StreamConfig, shard: int) -> None:
    """A shard's sketch was written with this stream's shards, exact set and sketch shape, or the
    checkpoint is refused: another shard count routes keys elsewhere, another width reads other cells."""
    stored = (int(value[0]), int(value[1]), int(value[2]), int(value[3]))
    expected = (cfg.shards, cfg.exact_per_shard, cfg.sketch_depth, cfg.width)
    if stored != expected:
        names = "(shards, exact keys per shard, sketch_depth, width)"
        raise IncompatibleCheckpoint(
            f"keyed_watermarks: shard {shard} of the checkpoint holds {names} = {stored}; this stream's "
            f"settings give {expected}", "Start from a new checkpoint, or keep the settings",
            "keyed_watermarks", "shard_sketches",
        )  # fmt: skip


class _Shard:
    """One shard of a compact stream as a call holds it (F065-R27). ``exact``: key -> [maximum
    event time, watermark, last activity, idle, its sketch cells or None until needed], least
    recently active first (R13: the clock never goes back, so arrival order alone ranks
    activity). ``sketch``: None when the call read only the exact keys (no event of the shard)."""

    def __init__(self, exact: OrderedDict[str, list[Any]], sketch: _Sketch | None, estimate: int) -> None:
        self.exact = exact
        self.sketch = sketch
        self.estimate = estimate
        self.start = {k: (e[1], e[3]) for k, e in exact.items()}
        self.changed = False
        self._aggregate: Aggregate | None = None

    def touch(self) -> None:
        self.changed = True
        self._aggregate = None

    def aggregate(self) -> Aggregate:
        if self._aggregate is None:
            idle, low, high = 0, I64_MAX, I64_MIN
            for _, wm, _, is_idle, _ in self.exact.values():
                if is_idle:
                    idle += 1
                elif wm < low:
                    low = wm
                high = max(high, wm)
            self._aggregate = Aggregate(len(self.exact), idle, low, high)
        return self._aggregate

    def summary_row(self, number: int) -> tuple[int, ...]:
        agg = self.aggregate()
        # Least recently active first: the first active entry has the earliest activity.
        first_active = next((e[2] for e in self.exact.values() if not e[3]), I64_MAX)
        return (number, agg.keys, agg.idle, agg.min_active, agg.max_wm, first_active, self.estimate, 0)


def pack_exact(exact: OrderedDict[str, list[Any]]) -> tuple[Any, ...]:
    keys = np.array(list(exact), dtype=object) if exact else np.empty(0, object)
    lengths, data = pack_text(keys)
    entries = list(exact.values())
    numbers = np.array([e[:3] for e in entries], np.int64).reshape(-1, 3)
    idle = np.array([e[3] for e in entries], bool)
    return (lengths, data, numbers.tobytes(), idle.tobytes())


def unpack_exact(value: tuple[Any, ...]) -> OrderedDict[str, list[Any]]:
    with decoding("keyed_watermarks", "shard_keys"):
        keys = unpack_text(bytes(value[0]), bytes(value[1])).tolist()
        numbers = np.frombuffer(bytes(value[2]), np.int64).reshape(-1, 3).tolist()
        idle = np.frombuffer(bytes(value[3]), bool).tolist()
        return OrderedDict((k, [*n, i, None]) for k, n, i in zip(keys, numbers, idle, strict=True))


@dataclass
class _CompactBucket(_Reports):
    """One call of the wide stage on one (stream, bucket) of a compact stream: the shards it
    read, and the figures of those it did not."""

    st: BucketState
    cfg: StreamConfig
    bucket: int
    ordered: bool
    shards: dict[int, _Shard]
    rest: Aggregate = field(default_factory=Aggregate)
    emitted: Aggregate = field(default_factory=Aggregate)
    key_advances: int = 0
    evicted: int = 0
    estimated: int = 0
    departures: dict[str, str] = field(default_factory=dict)  # F065-R35: how a key left the exact set

    def aggregate(self) -> Aggregate:
        total = self.rest
        for shard in self.shards.values():
            total = total + shard.aggregate()
        return total

    def estimate(self) -> int:
        return self.estimated


def process_compact_bucket(run: _CompactBucket, rows: pd.DataFrame, b: int, out: _Out) -> None:
    """One batch of one bucket of a compact stream: segments and control rows in order (R16, R22),
    the events of each shard one by one (R30)."""
    st = run.st
    calls = _calls(rows, run.bucket, run.ordered, st.clock, st.ended, b, out)
    rows, kind, key, et, tm, seq, home, is_tick, has_err, control = calls
    n = len(rows)
    shard = rows["kw_shard"].to_numpy(np.int64)
    events = ~control
    table = _KeyTable(run.cfg, key[events])
    if not np.array_equal(table.shard[table.codes], shard[events]):
        raise RuntimeError("keyed_watermarks: the JVM's shard of a key differs from its SHA-512 digest's")
    row = np.full(n, -1, np.int64)
    row[events] = table.codes

    prev = 0
    for c in np.flatnonzero(control).tolist():
        if c > prev:
            _compact_segment(
                run, table, key[prev:c], row[prev:c], shard[prev:c], et[prev:c], seq[prev:c], b, out
            )
            run.summary(out, b, (int(seq[c]), 0))
        if not has_err[c]:
            _compact_control(run, kind[c], key[c], int(shard[c]), int(tm[c]), bool(home[c]), bool(is_tick[c]))
            run.summary(out, b, (int(seq[c]), 1))
        prev = c + 1
    if prev < n:
        _compact_segment(run, table, key[prev:], row[prev:], shard[prev:], et[prev:], seq[prev:], b, out)
        run.summary(out, b, (LAST_CALL, 0))
    for number, sh in run.shards.items():
        if sh.sketch is None:
            continue
        # F065-R34: registers only grow and decide nothing within the batch: they take it at once.
        mine = np.flatnonzero(table.shard == number)
        if len(mine):
            np.maximum.at(sh.sketch.registers, table.register[mine], table.rank[mine])
            sh.estimate = hll_estimate(sh.sketch.registers)
            sh.changed = True
    _compact_key_changes(run, b, out)


def _compact_segment(
    run: _CompactBucket, table: _KeyTable, keys: np.ndarray, rows: np.ndarray, shards: np.ndarray,
    times: np.ndarray, seq: np.ndarray, b: int, out: _Out,
) -> None:  # fmt: skip
    """F065-R30: this bucket's events of one segment, each in arrival order against its shard."""
    cfg = run.cfg
    delay, capacity, period = cfg.bounded_delay, cfg.exact_per_shard, cfg.aging_period
    clock = run.st.clock
    m = len(keys)
    kwm = np.zeros(m, np.int64)
    kwm_null = np.zeros(m, bool)
    late = np.zeros(m, bool)
    for j, (k, r, s, t) in enumerate(zip(keys.tolist(), rows.tolist(), shards.tolist(), times.tolist())):
        sh = run.shards[s]
        sketch = sh.sketch
        assert sketch is not None  # a shard with events is read whole
        cells = table.cells[r]
        sketch.count(cells, period)  # step 1
        entry = sh.exact.get(k)
        if entry is not None:  # step 2: exactly the keyed tracker (R2, R3, R11)
            wm = entry[1]
            kwm[j] = wm
            late[j] = t < wm
            entry[2], entry[3], entry[4] = clock, False, cells
            sh.exact.move_to_end(k)
            if t > entry[0]:
                entry[0] = t
                if max(I64_MIN, t - delay) > wm:
                    entry[1] = max(I64_MIN, t - delay)
                    run.key_advances += 1
            continue
        estimate = sketch.estimate(cells)  # step 3: judged by the estimate (R29)
        judged = None if estimate is None else max(I64_MIN, estimate - delay)
        if judged is None:
            kwm_null[j] = True
        else:
            kwm[j] = judged
            late[j] = t < judged
        top = t if estimate is None else max(estimate, t)
        enters = len(sh.exact) < capacity
        if not enters:
            victim = next(iter(sh.exact))  # the least recently active exact key (R13)
            victim_cells = sh.exact[victim][4] or table.cells_of(victim)
            if sketch.frequency_of(cells) > sketch.frequency_of(victim_cells):  # strictly more
                sketch.write(victim_cells, sh.exact.pop(victim)[0])  # the demoted key's time stays
                run.evicted += 1
                run.departures[victim] = "sketched"
                enters = True
        if enters:
            # A promoted key keeps its estimate: a fresh start would let late events through.
            sh.exact[k] = [top, max(I64_MIN, top - delay), clock, False, cells]
            run.departures.pop(k, None)
        else:
            sketch.write(cells, t)
        if judged is None or max(I64_MIN, top - delay) > judged:
            run.key_advances += 1
    for s in np.unique(shards).tolist():
        run.shards[s].touch()
    out.add(
        "events", m, batch=b, seq=(seq, np.full(m, not run.ordered)), key=keys, event_time=times,
        key_watermark=(kwm, kwm_null), verdict=np.where(late, "late", "on_time").astype(object),
        kw_route=run.bucket,
    )  # fmt: skip


def _compact_control(
    run: _CompactBucket, kind: str, key: Any, shard: int, time: int, home: bool, tick: bool
) -> None:
    """F065-R31: clock, idle and remove_key concern exact keys only."""
    if kind == "end":
        run.st.ended = True  # F065-R38: no windows here, so only the later rows change
        return
    if kind in ("clock", "tick"):
        if tick and time <= run.st.clock:
            return  # a processing-time tick never moves the clock back
        run.st.clock = time
        timeout = run.cfg.idle_timeout
        for loaded in run.shards.values():
            for entry in loaded.exact.values():
                if time - entry[2] <= timeout:
                    break  # least recently active first: every later key is as recent (F065-R10)
                if not entry[3]:
                    entry[3] = True
                    loaded.touch()
        return
    sh = run.shards.get(shard) if home else None
    if sh is None or key not in sh.exact:
        return  # another bucket's key, or no exact key: nothing changes (R9, R17, R31)
    if kind == "idle":
        if not sh.exact[key][3]:
            sh.exact[key][3] = True
            sh.touch()
    elif kind == "remove_key":
        del sh.exact[key]  # F065-R31: its cells stay in the sketches
        run.departures[key] = "removed"
        sh.touch()


def _compact_key_changes(run: _CompactBucket, b: int, out: _Out) -> None:
    """F065-R22, R35: exact keys whose (watermark, state) changed; a key that left says how."""
    keys: list[str] = []
    wms: list[int | None] = []
    states: list[str] = []
    for sh in run.shards.values():
        end = {k: (e[1], e[3]) for k, e in sh.exact.items()}
        for k in sh.start.keys() | end.keys():
            now = end.get(k)
            if sh.start.get(k) == now:
                continue
            keys.append(k)
            wms.append(None if now is None else now[0])
            states.append(run.departures.get(k, "removed") if now is None else "idle" if now[1] else "active")
    if keys:
        gone = np.array([w is None for w in wms])
        out.add(
            "keys", len(keys), batch=b, key=np.array(keys, dtype=object),
            watermark=(np.array([w or 0 for w in wms], np.int64), gone),
            state=np.array(states, dtype=object), kw_route=run.bucket,
        )  # fmt: skip
