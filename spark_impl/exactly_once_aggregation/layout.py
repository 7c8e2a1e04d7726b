"""Exactly-once aggregation's columns and state values: the output columns, what crosses between the
channel, key and totals stages, and the per-bucket, per-key-bucket and per-stream state with how
they pack.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.outputs import TABLES
from spark_impl.checkpoints import NEW_LOCATION, IncompatibleCheckpoint, decoding
from spark_impl.exactly_once_aggregation.settings import (
    AGGREGATES,
    KIND_CODES,
    LAYOUT_VERSION,
    MAX_WINDOW,
    OPERATOR,
    TOTALS,
)
from spark_impl.scaleout import NULL_MASK, ROUTE, check_layout

# The aggregates table's double, as text (OXE-R17, R18), named as harness/outputs.py names it.
VALUE = TABLES[OPERATOR]["aggregates"][3]


STRING_COLS = ("output", "stream_id", "key", "verdict", "kind", VALUE, "reason")


OUTPUT_COLUMNS = (
    "output", "stream_id", "batch", "seq", "producer", "partition", "sequence", "key", "verdict", "kind",
    VALUE, "count", *TOTALS, "reason",
)  # fmt: skip


LONG_COLS = tuple(c for c in OUTPUT_COLUMNS if c not in STRING_COLS)


OUTPUT_SCHEMA = ", ".join(f"`{c}` {'string' if c in STRING_COLS else 'long'}" for c in OUTPUT_COLUMNS)


# Between the stages: the output columns (long columns as values with one null mask, bit i for
# LONG_COLS[i]), then the routes: ``eoa_key_bucket`` groups the key stage (a fold row's key
# bucket; the channel bucket for a row that passes through), ``kw_route`` groups the last stage
# (the bucket, or -1 for the summaries); ``eoa_bits`` is a fold row's amount as IEEE bits,
# ``eoa_order`` its arrival order; ``s_*`` are a bucket's counter deltas of one batch.
KEY_BUCKET = "eoa_key_bucket"


SUMMARY_COLS = tuple(f"s_{t}" for t in TOTALS)


WIDE_COLUMNS = (*OUTPUT_COLUMNS, KEY_BUCKET, ROUTE, "eoa_bits", "eoa_order", *SUMMARY_COLS)


WIDE_SCHEMA = ", ".join(
    [f"`{c}` {'string' if c in STRING_COLS else 'long'}" for c in WIDE_COLUMNS] + [f"`{NULL_MASK}` long"]
)


PASS_SCHEMA = OUTPUT_SCHEMA + f", `{NULL_MASK}` long"


BUCKET_SCHEMA = "layout_version int, buckets int, dedup_window long"


CHANNEL_KEY_SCHEMA = "producer long, partition long"


CHANNEL_SCHEMA = "high long, dedup_window long, bits binary"


KEY_BUCKET_SCHEMA = "layout_version int, buckets int, aggregate int"


AGGREGATE_KEY_SCHEMA = "key string"


AGGREGATE_SCHEMA = "kind int, value double, count long"


STREAM_SCHEMA = "layout_version int, buckets int, " + ", ".join(f"{t} long" for t in TOTALS)


TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "messages": ("stream_id", *TABLES[OPERATOR]["messages"]),
    "aggregates": ("stream_id", *TABLES[OPERATOR]["aggregates"]),
    "progress": ("stream_id", "batch", *TOTALS),
    "errors": ("stream_id", "batch", "seq", "reason"),
}


assert {t: c[1:] for t, c in TABLE_COLUMNS.items()} == TABLES[OPERATOR], "the tables of OXE-R18"


# ---- state layouts -----------------------------------------------------------------------------


@dataclass
class BucketState:
    """What one (stream, channel bucket) keeps in its ValueState; its channels are in a MapState."""

    buckets: int
    dedup_window: int

    def to_tuple(self) -> tuple[Any, ...]:
        return (LAYOUT_VERSION, self.buckets, self.dedup_window)

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...], buckets: int) -> BucketState:
        check_layout(OPERATOR, value, LAYOUT_VERSION, buckets, "bucket")
        with decoding(OPERATOR, "bucket"):
            window = int(value[2])
            if not 1 <= window <= MAX_WINDOW:
                raise ValueError(f"dedup_window {window} out of range")
            return cls(buckets, window)


@dataclass
class KeyBucketState:
    """What one (stream, key bucket) keeps in its ValueState; its keys are in a MapState."""

    buckets: int
    aggregate: str

    def to_tuple(self) -> tuple[Any, ...]:
        return (LAYOUT_VERSION, self.buckets, KIND_CODES[self.aggregate])

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...], buckets: int) -> KeyBucketState:
        check_layout(OPERATOR, value, LAYOUT_VERSION, buckets, "key_bucket")
        with decoding(OPERATOR, "key_bucket"):
            code = int(value[2])
            if not 1 <= code <= len(AGGREGATES):
                raise ValueError(f"unknown aggregate kind {code}")
            return cls(buckets, AGGREGATES[code - 1])


def unpack_aggregate(value: tuple[Any, ...]) -> tuple[str, float, int]:
    """A key's MapState value -> (kind name, double, count); refuses what R14 refuses."""
    with decoding(OPERATOR, "aggregates"):
        code, number, count = int(value[0]), float(value[1]), int(value[2])
        if not 1 <= code <= len(AGGREGATES):
            raise ValueError(f"unknown aggregate kind {code}")
        kind = AGGREGATES[code - 1]
        if kind in ("count", "mean") and count < 1:
            raise ValueError(f"a {kind} with count {count}")
        return kind, number, count


def bound_setting(setting: str, found: Any, expected: Any, variable: str) -> IncompatibleCheckpoint:
    """The refusal of a checkpoint written with another value of a setting it is bound to."""
    return IncompatibleCheckpoint(
        f"{OPERATOR}: the checkpoint holds {setting} {found!r}; this query has {setting} {expected!r}",
        f"A checkpoint is bound to its {setting} (OXE-R19): pass {setting}={found!r}, or {NEW_LOCATION}",
        OPERATOR, variable,
    )  # fmt: skip


@dataclass
class StreamState:
    """What the narrow stage keeps per stream: the progress totals."""

    buckets: int
    folded: int = 0
    duplicates: int = 0
    outside_window: int = 0
    keys: int = 0

    def to_tuple(self) -> tuple[Any, ...]:
        return (LAYOUT_VERSION, self.buckets, self.folded, self.duplicates, self.outside_window, self.keys)

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...], buckets: int) -> StreamState:
        check_layout(OPERATOR, value, LAYOUT_VERSION, buckets, "totals")
        with decoding(OPERATOR, "totals"):
            totals = [int(v) for v in value[2:6]]
            if len(totals) != 4 or min(totals) < 0:
                raise ValueError(f"totals {totals}")
            return cls(buckets, *totals)
