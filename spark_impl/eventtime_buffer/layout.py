"""The reorder buffer's columns and state values: row kinds as codes, the output and input columns, the
schemas between the stages, and the buffer and per-bucket and per-stream state with how they pack
(VELO-R15, R24).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from spark_impl.checkpoints import decoding
from spark_impl.eventtime_buffer.settings import LAYOUT_VERSION
from spark_impl.scaleout import DUPLICATE_SEQ, NULL_MASK, ROUTE, check_layout

# Row kinds as codes (an integer crosses Arrow and the shuffle cheaper than text): the trace's
# (VELO-R23), the harness's marker, the operator's own probe, any other kind, and a row whose seq
# another row shares (TR-15).
EVENT, CLOCK, END, MARKER, PROBE, OTHER, DUPLICATE, VALUE_RANGE = range(8)  # VALUE_RANGE: TR-16


KIND_CODES = {"event": EVENT, "clock": CLOCK, "end": END, "batch_end": MARKER, DUPLICATE_SEQ: DUPLICATE}


COMPRESS_FROM = 4096  # buffered tuples from which a bucket's buffer is stored zstd-compressed


NO_TUPLE = "no_tuple"  # a probe's reason when its input partition saw no well-formed tuple


STRING_COLS = ("output", "stream_id", "kind", "key", "reason")


OUTPUT_COLUMNS = (
    "output", "stream_id", "batch", "kind", "key", "event_time", "value", "watermark", "reason",
    "arrival_batch", "arrival_seq", "seq", "max_timestamp_seen", "buffer_size", "late_dropped_count",
    "watermark_emitted_count",
)  # fmt: skip


LONG_COLS = tuple(c for c in OUTPUT_COLUMNS if c not in STRING_COLS)


OUTPUT_SCHEMA = ", ".join(f"`{c}` {'string' if c in STRING_COLS else 'long'}" for c in OUTPUT_COLUMNS)


PASS_SCHEMA = f"{OUTPUT_SCHEMA}, `{NULL_MASK}` long"


# A bucket's summary of one batch (output "summary", route -1) travels in the output columns:
# seq is the bucket, buffer_size its share, late_dropped_count and watermark_emitted_count the
# batch's counts, max_timestamp_seen its highest time ingested, watermark the stream's.
WIDE_SCHEMA = f"{PASS_SCHEMA}, `{ROUTE}` long"


BUCKET_SCHEMA = (
    "layout_version int, buckets int, clock long, has_watermark boolean, watermark long, "
    "has_max boolean, max_seen long, ended boolean, batches long, buffer binary"
)


STREAM_SCHEMA = (
    "layout_version int, buckets int, late_dropped long, watermarks_emitted long, has_max boolean, "
    "max_seen long, has_watermark boolean, watermark long, sizes binary"
)


TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "emitted": (
        "stream_id", "batch", "kind", "key", "event_time", "value", "watermark", "reason", "arrival_batch",
        "arrival_seq",
    ),
    "late": ("stream_id", "batch", "seq", "key", "event_time", "watermark"),
    "progress": (
        "stream_id", "batch", "watermark", "max_timestamp_seen", "buffer_size", "late_dropped_count",
        "watermark_emitted_count",
    ),
    "errors": ("stream_id", "batch", "seq", "reason"),
}  # fmt: skip


# The projected input (``eventtime_buffer``) and what the parse step makes of it.
INPUT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("eb_sid", "string"), ("eb_batch", "long"), ("eb_seq", "long"), ("eb_kind", "long"),
    ("eb_key", "string"), ("eb_value", "long"), ("eb_time", "long"), ("eb_time_null", "boolean"),
    ("eb_raw", "string"), ("eb_raw_long", "long"), ("eb_raw_null", "boolean"), ("eb_messages", "string"),
)  # fmt: skip


RAW_COLUMNS = ("eb_raw", "eb_raw_long", "eb_raw_null", "eb_messages")


PARSED_COLUMNS: tuple[tuple[str, str], ...] = (
    *((c, t) for c, t in INPUT_COLUMNS if c not in RAW_COLUMNS), ("eb_ts", "long"), ("eb_reason", "string"),
)  # fmt: skip


# ---- state (VELO-R15, R24) ------------------------------------------------------------


@dataclass
class Buffer:
    """A bucket's buffered tuples, sorted by (ts, arrival batch, arrival seq) (VELO-R15)."""

    ts: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    arrival_batch: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    arrival_seq: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    key: np.ndarray = field(default_factory=lambda: np.empty(0, object))
    value: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))

    COLUMNS = ("ts", "arrival_batch", "arrival_seq", "key", "value")

    def __len__(self) -> int:
        return len(self.ts)

    def take(self, index: Any) -> Buffer:
        return Buffer(*(getattr(self, c)[index] for c in self.COLUMNS))

    def merged(self, new: Buffer) -> Buffer:
        if not len(new):
            return self
        both = Buffer(*(np.concatenate([getattr(self, c), getattr(new, c)]) for c in self.COLUMNS))
        return both.take(np.lexsort((both.arrival_seq, both.arrival_batch, both.ts)))

    def to_ipc(self) -> bytes:
        """An Arrow IPC stream (zstd once it is large; RocksDB compresses small values itself);
        no bytes for an empty buffer."""
        import pyarrow as pa

        if not len(self):
            return b""
        table = pa.table(
            {
                "ts": pa.array(self.ts, pa.int64()),
                "arrival_batch": pa.array(self.arrival_batch, pa.int64()),
                "arrival_seq": pa.array(self.arrival_seq, pa.int64()),
                "key": pa.array(self.key, pa.string()),
                "value": pa.array(self.value, pa.int64()),
            }
        )
        options = pa.ipc.IpcWriteOptions(compression="zstd" if len(self) >= COMPRESS_FROM else None)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema, options=options) as w:
            w.write_table(table)
        return sink.getvalue().to_pybytes()

    @classmethod
    def from_ipc(cls, blob: bytes) -> Buffer:
        import pyarrow as pa

        if not blob:
            return cls()
        table = pa.ipc.open_stream(pa.py_buffer(bytes(blob))).read_all()
        longs = {
            c: table.column(c).to_numpy().astype(np.int64)
            for c in ("ts", "arrival_batch", "arrival_seq", "value")
        }
        key = np.asarray(table.column("key").to_numpy(zero_copy_only=False), dtype=object).reshape(-1)
        return cls(longs["ts"], longs["arrival_batch"], longs["arrival_seq"], key, longs["value"])


@dataclass
class BucketState:
    """One bucket's ValueState: the stream scalars, the same in every bucket, and its share of
    the buffer. ``batches`` counts the micro-batches (the batch number without batch_col)."""

    buckets: int
    clock: int = 0
    watermark: int | None = None  # VELO-R13: none before the first
    max_seen: int | None = None
    ended: bool = False  # VELO-R21
    batches: int = 0
    buffer: Buffer = field(default_factory=Buffer)

    def to_tuple(self) -> tuple[Any, ...]:
        return (
            LAYOUT_VERSION, self.buckets, self.clock, self.watermark is not None, self.watermark or 0,
            self.max_seen is not None, self.max_seen or 0, self.ended, self.batches, self.buffer.to_ipc(),
        )  # fmt: skip

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...], buckets: int) -> BucketState:
        check_layout("eventtime_buffer", value, LAYOUT_VERSION, buckets, "bucket")
        with decoding("eventtime_buffer", "bucket"):
            watermark = int(value[4]) if value[3] else None
            max_seen = int(value[6]) if value[5] else None
            buffer = Buffer.from_ipc(value[9])
            return cls(buckets, int(value[2]), watermark, max_seen, bool(value[7]), int(value[8]), buffer)


@dataclass
class StreamState:
    """The narrow stage's value per stream: the counters, the highest time ingested, the
    watermark, and each bucket's latest buffer size (VELO-R22)."""

    buckets: int
    late_dropped: int = 0
    watermarks_emitted: int = 0
    max_seen: int | None = None
    watermark: int | None = None
    sizes: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))

    def __post_init__(self) -> None:
        if len(self.sizes) != self.buckets:
            self.sizes = np.zeros(self.buckets, np.int64)

    def to_tuple(self) -> tuple[Any, ...]:
        return (
            LAYOUT_VERSION, self.buckets, self.late_dropped, self.watermarks_emitted,
            self.max_seen is not None, self.max_seen or 0, self.watermark is not None, self.watermark or 0,
            np.ascontiguousarray(self.sizes, np.int64).tobytes(),
        )  # fmt: skip

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...], buckets: int) -> StreamState:
        check_layout("eventtime_buffer", value, LAYOUT_VERSION, buckets, "stream")
        with decoding("eventtime_buffer", "stream"):
            sizes = np.frombuffer(bytes(value[8]), np.int64).copy()
            if len(sizes) != buckets:  # a stream keeps one buffer size per bucket
                raise ValueError(f"buffer sizes of {len(sizes)} buckets for {buckets} buckets")
            return cls(
                buckets, int(value[2]), int(value[3]), int(value[5]) if value[4] else None,
                int(value[7]) if value[6] else None, sizes,
            )  # fmt: skip
