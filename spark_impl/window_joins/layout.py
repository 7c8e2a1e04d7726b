"""Window joins (oxirs): the output columns, the columns between the stages and the state layouts
(OXJ-R21): a bucket value, a stream value, the held windows and the index of their deadlines."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.outputs import TABLES
from spark_impl.checkpoints import (
    NEW_LOCATION,
    IncompatibleCheckpoint,
    decoding,
)
from spark_impl.scaleout import (
    NULL_MASK,
    ROUTE,
    check_layout,
    pack_text,
    unpack_text,
)
from spark_impl.window_joins.settings import (
    COUNTERS,
    JOINS,
    LAYOUT_VERSION,
    OPERATOR,
    SETTINGS,
    StreamConfig,
)

STRING_COLS = ("output", "stream_id", "key", "side", "reason")
OUTPUT_COLUMNS = (
    "output", "stream_id", "batch", "seq", "key", "left_batch", "left_seq", "left_time", "left_value",
    "right_batch", "right_seq", "right_time", "right_value", "side", "event_time", "watermark", *COUNTERS,
    "reason",
)  # fmt: skip
LONG_COLS = tuple(c for c in OUTPUT_COLUMNS if c not in STRING_COLS)
OUTPUT_SCHEMA = ", ".join(f"`{c}` {'string' if c in STRING_COLS else 'long'}" for c in OUTPUT_COLUMNS)

# Between the stages: long columns as values with one null mask (bit i: LONG_COLS[i] is null);
# ``kw_route`` picks the narrow stage's group (-1) or a pass-through group (the bucket);
# ``s_*`` are a bucket's counter deltas of one batch (its watermark rides in ``watermark``).
SUMMARY_COLS = tuple(f"s_{c}" for c in COUNTERS)
WIDE_COLUMNS = (*OUTPUT_COLUMNS, ROUTE, *SUMMARY_COLS)
WIDE_SCHEMA = ", ".join(
    [f"`{c}` {'string' if c in STRING_COLS else 'long'}" for c in WIDE_COLUMNS] + [f"`{NULL_MASK}` long"]
)
PASS_SCHEMA = OUTPUT_SCHEMA + f", `{NULL_MASK}` long"
BUCKET_SCHEMA = (
    "layout_version int, buckets int, join string, settings binary, watermark long, "
    "has_watermark boolean, slots binary"
)
WINDOW_KEY_SCHEMA = "key string, pane long"
WINDOW_SCHEMA = "left_events binary, right_events binary"
DUE_KEY_SCHEMA = "slot long"
DUE_SCHEMA = "key_lengths binary, key_bytes binary, panes binary, deadlines binary"
STREAM_SCHEMA = (
    "layout_version int, buckets int, join_watermark long, join_has_watermark boolean, "
    + ", ".join(f"{c} long" for c in COUNTERS)
)

TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    name: ("stream_id", *cols) for name, cols in TABLES[OPERATOR].items()
}
EVENT_FIELDS = 4  # a held event: batch, seq, time, value (int64 each)


# ---- state layouts (OXJ-R21) -------------------------------------------------------------------


def bound_setting(setting: str, found: Any, expected: Any) -> IncompatibleCheckpoint:
    """The refusal of a checkpoint written with another value of a setting it is bound to."""
    return IncompatibleCheckpoint(
        f"{OPERATOR}: the checkpoint holds {setting} {found!r}; this query has {setting} {expected!r}",
        f"A checkpoint is bound to its join and settings (OXJ-R21): pass {setting}={found!r}, "
        f"or {NEW_LOCATION}",
        OPERATOR, "bucket",
    )  # fmt: skip


@dataclass
class BucketState:
    """What one (stream, bucket) keeps in its ValueState; its windows and index are MapStates."""

    buckets: int
    join: str
    settings: np.ndarray
    watermark: int | None = None
    slots: np.ndarray = field(
        default_factory=lambda: np.zeros(0, np.int64)
    )  # sorted slots of the ``due`` index held

    def to_tuple(self) -> tuple[Any, ...]:
        wm = self.watermark
        return (
            LAYOUT_VERSION, self.buckets, self.join, np.ascontiguousarray(self.settings, np.int64).tobytes(),
            0 if wm is None else wm, wm is not None, np.ascontiguousarray(self.slots, np.int64).tobytes(),
        )  # fmt: skip

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...], buckets: int) -> BucketState:
        check_layout(OPERATOR, value, LAYOUT_VERSION, buckets, "bucket")
        with decoding(OPERATOR, "bucket"):
            settings = np.frombuffer(bytes(value[3]), np.int64).copy()
            if len(settings) != len(SETTINGS) or str(value[2]) not in JOINS:
                raise ValueError(f"join {value[2]!r} with {len(settings)} settings")
            slots = np.frombuffer(bytes(value[6]), np.int64).copy()
            return cls(buckets, str(value[2]), settings, int(value[4]) if value[5] else None, slots)

    def check(self, cfg: StreamConfig) -> None:
        if self.join != cfg.join:
            raise bound_setting("join", self.join, cfg.join)
        for name, found, expected in zip(SETTINGS, self.settings.tolist(), cfg.settings().tolist()):
            if found != expected:
                raise bound_setting(name, found, expected)


@dataclass
class StreamState:
    """What the narrow stage keeps per stream: the watermark and the counters (OXJ-R17)."""

    buckets: int
    watermark: int | None = None
    counts: tuple[int, ...] = (0, 0, 0, 0, 0)

    def to_tuple(self) -> tuple[Any, ...]:
        wm = self.watermark
        return (LAYOUT_VERSION, self.buckets, 0 if wm is None else wm, wm is not None, *self.counts)

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...], buckets: int) -> StreamState:
        check_layout(OPERATOR, value, LAYOUT_VERSION, buckets, "totals")
        with decoding(OPERATOR, "totals"):
            if len(value) != 4 + len(COUNTERS):
                raise ValueError(f"{len(value)} fields for {4 + len(COUNTERS)}")
            return cls(buckets, int(value[2]) if value[3] else None, tuple(int(v) for v in value[4:9]))


def pack_events(events: np.ndarray) -> bytes:
    return np.ascontiguousarray(events, np.int64).tobytes()


def unpack_window(value: tuple[Any, ...]) -> tuple[np.ndarray, np.ndarray]:
    """A ``windows`` entry -> (left events, right events), each rows of (batch, seq, time, value)."""
    with decoding(OPERATOR, "windows"):
        if len(value) != 2:
            raise ValueError(f"{len(value)} fields for the two sides")
        return tuple(  # type: ignore[return-value]
            np.frombuffer(bytes(v), np.int64).reshape(-1, EVENT_FIELDS).copy() for v in value[:2]
        )


def unpack_due(value: tuple[Any, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A ``due`` entry -> (keys, pane indices, deadlines)."""
    with decoding(OPERATOR, "due"):
        keys = unpack_text(bytes(value[0]), bytes(value[1]))
        panes = np.frombuffer(bytes(value[2]), np.int64).copy()
        deadlines = np.frombuffer(bytes(value[3]), np.int64).copy()
        if not len(keys) == len(panes) == len(deadlines):
            raise ValueError(f"{len(keys)} keys, {len(panes)} panes, {len(deadlines)} deadlines")
        return keys, panes, deadlines


class Windows:
    """The ``windows`` MapState of one call: read on first use, written back once."""

    def __init__(self, state: Any) -> None:
        self.state = state
        self.held: dict[tuple[str, int], tuple[np.ndarray, np.ndarray] | None] = {}
        self.existed: dict[tuple[str, int], bool] = {}

    def get(self, key: str, pane: int) -> tuple[np.ndarray, np.ndarray] | None:
        k = (key, pane)
        if k not in self.held:
            stored = self.state.getValue(k)
            self.existed[k] = stored is not None
            self.held[k] = None if stored is None else unpack_window(stored)
        return self.held[k]

    def put(self, key: str, pane: int, events: tuple[np.ndarray, np.ndarray] | None) -> None:
        self.get(key, pane)
        self.held[(key, pane)] = events

    def drop(self, key: str, pane: int) -> bool:
        """Forgets a window the purge index lists (so it is held, unless this call dropped it
        already): no read. Returns whether it was held."""
        k = (key, pane)
        if k in self.held:
            was = self.held[k] is not None
        else:
            was = self.existed[k] = True
        self.held[k] = None
        return was

    def flush(self) -> None:
        for k, events in self.held.items():
            if events is not None:
                self.state.updateValue(k, (pack_events(events[0]), pack_events(events[1])))
            elif self.existed[k]:
                self.state.removeKey(k)


class DueIndex:
    """The ``due`` MapState: slot -> the windows whose deadline lies in it. Only the slots a
    watermark reaches are read; the sorted slot list lives in the bucket's value."""

    def __init__(self, state: Any, slots: np.ndarray, granularity: int) -> None:
        self.state = state
        self.slots = set(slots.tolist())
        self.stored = set(self.slots)
        self.granularity = granularity
        self.entries: dict[int, dict[tuple[str, int], int]] = {}

    def _entry(self, slot: int) -> dict[tuple[str, int], int]:
        if slot not in self.entries:
            found: dict[tuple[str, int], int] = {}
            if slot in self.stored:
                value = self.state.getValue((slot,))
                if value is not None:
                    keys, panes, deadlines = unpack_due(value)
                    found = dict(zip(zip(keys.tolist(), panes.tolist()), deadlines.tolist()))
            self.entries[slot] = found
        return self.entries[slot]

    def add(self, keys: Any, panes: Any, deadlines: Any) -> None:
        for key, pane, deadline in zip(keys, panes, deadlines):
            entry = self._entry(int(deadline) // self.granularity)
            k = (str(key), int(pane))
            entry[k] = min(entry.get(k, int(deadline)), int(deadline))
            self.slots.add(int(deadline) // self.granularity)

    def pop_due(self, watermark: int) -> list[tuple[str, int, int]]:
        """Every entry of the slots ``watermark`` reaches (some of them may not be due yet)."""
        reached = watermark // self.granularity
        found: list[tuple[str, int, int]] = []
        for slot in sorted(s for s in self.slots if s <= reached):
            found += [(k, p, d) for (k, p), d in self._entry(slot).items()]
            self.entries[slot] = {}
            self.slots.discard(slot)
        return found

    def flush(self) -> np.ndarray:
        """Writes the changed slots; returns the sorted slots held."""
        for slot, entry in self.entries.items():
            if entry:
                keys = np.array([k for k, _ in entry], dtype=object)
                lengths, data = pack_text(keys)
                panes = np.array([p for _, p in entry], np.int64)
                deadlines = np.array(list(entry.values()), np.int64)
                self.state.updateValue((slot,), (lengths, data, panes.tobytes(), deadlines.tobytes()))
            elif slot in self.stored:
                self.state.removeKey((slot,))
        return np.array(sorted(self.slots), np.int64)
