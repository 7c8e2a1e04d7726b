"""The pipeline's columns and state values: the units a row goes to next, the one set of columns every
stage shares, the operators' state under prefixed names, and the per-bucket, per-node and per-stream
state with how they pack.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pandas as pd

from harness.outputs import TABLES
from spark_impl.checkpoints import decoding
from spark_impl.common import OutputRows
from spark_impl.pipeline.settings import LAYOUT_VERSION, OPERATOR, PROGRESS
from spark_impl.scaleout import NULL_MASK, ROUTE, UnitStage, check_layout, pack_text, unpack_text

if TYPE_CHECKING:
    from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle

#: the item fields that may be missing, which enter the first stage as 0 and a null flag (a
#: nullable long would reach pandas as a float, exact only to 2**53)
NULLABLE_LONGS = ("event_time", "time", "priority", "producer", "partition", "sequence")


# units: the group of the next stage a row goes to
INGRESS, PASS, NARROW, KEYS, AGGREGATOR_WATERMARK = (
    "ingress",
    "pass",
    "narrow",
    "keys",
    "aggregator_watermark",
)


NARROW_BUCKET = -1


STRING_COLS = (
    "output", "stream_id", "p_unit", "stream", "key", "decision", "reason", "verdict", "node", "join", "side",
    "kind", "number",
)  # fmt: skip


LONG_COLS = (
    "batch",
    "seq",
    "event_time",
    "watermark",
    "assigned_time",
    "left_batch",
    "left_seq",
    "left_time",
    "left_value",
    "right_batch",
    "right_seq",
    "right_time",
    "right_value",
    "producer",
    "partition",
    "sequence",
    "count",
    *PROGRESS,
    "value",
    "p_bits",
    "p_order",
    "p_key_bucket",
    "p_bucket",
)


COLUMNS = (*STRING_COLS, *LONG_COLS)


SCHEMA = ", ".join(
    [f"`{c}` {'string' if c in STRING_COLS else 'long'}" for c in COLUMNS] + [f"`{NULL_MASK}` long"]
)


TABLE_COLUMNS = tuple(dict.fromkeys(c for cols in TABLES[OPERATOR].values() for c in cols))


BUCKET_SCHEMA = (
    "layout_version int, buckets int, seen binary, max_observed binary, watermark binary, flags binary, "
    "stream_lengths binary, stream_bytes binary"
)


NODE_SCHEMA = (
    "layout_version int, buckets int, watermarks binary, present binary, stream_lengths binary, "
    "stream_bytes binary"
)


TOTALS_SCHEMA = "layout_version int, buckets int, totals binary, watermark long, has_watermark boolean"


#: the grouping columns of each stage: the inspection of a checkpoint tells its stages apart by them
INGRESS_KEY = ("p_sid", "p_bucket")


CONSUMER_KEY = ("stream_id", "p_unit", "p_bucket")


KEY_STAGE_KEY = ("stream_id", ROUTE)


# ---- shared pieces -----------------------------------------------------------------------------


class _Prefixed:
    """A state handle whose variable names get a prefix: two operators' processors in one stage."""

    def __init__(self, handle: Any, prefix: str) -> None:
        self.handle, self.prefix = handle, prefix

    def getValueState(self, name: str, schema: Any, *args: Any) -> Any:
        return self.handle.getValueState(self.prefix + name, schema, *args)

    def getMapState(self, name: str, key_schema: Any, value_schema: Any, *args: Any) -> Any:
        return self.handle.getMapState(self.prefix + name, key_schema, value_schema, *args)


def prefixed(handle: Any, prefix: str) -> StatefulProcessorHandle:
    """``handle`` with ``prefix`` before every state name, typed as the handle it stands for: the
    operators' processors call only the two methods ``_Prefixed`` has."""
    return cast("StatefulProcessorHandle", _Prefixed(handle, prefix))


#: an operator processor's default settings, which the pipeline never uses: it hands each call its
#: stream's own
_EACH_CALL: Any = None


def _out(stream_id: str | None) -> OutputRows:
    return OutputRows(stream_id, COLUMNS, STRING_COLS)


def _longs(frame: pd.DataFrame, long_cols: Sequence[str], name: str) -> tuple[np.ndarray, np.ndarray]:
    """A long column of a masked frame: (values, is null)."""
    bit = np.int64(1) << np.int64(list(long_cols).index(name))
    return frame[name].to_numpy(np.int64), (frame[NULL_MASK].to_numpy(np.int64) & bit) != 0


class _Stage(UnitStage):
    """A stage of the pipeline: every stage has the same columns, and each stream id its settings."""

    columns = (*COLUMNS, NULL_MASK)


# ---- state layouts (OXP-R11) -------------------------------------------------------------------
# The stages also hold the state of the operators' processors they run, under prefixed names, in
# those operators' own layouts; the pipeline's layout version is theirs (checked below).


def _ints(data: Any, n: int, what: str) -> np.ndarray:
    values = np.frombuffer(bytes(data), np.int64)
    if len(values) != n:
        raise ValueError(f"{what}: {len(values)} numbers for {n} streams")
    return values.copy()


def _names(lengths: Any, data: Any) -> tuple[str, ...]:
    return tuple(str(s) for s in unpack_text(bytes(lengths), bytes(data)).tolist())


def _text(names: Sequence[str]) -> tuple[bytes, bytes]:
    return pack_text(np.array(list(names), dtype=object))


@dataclass
class BucketState:
    """An ingress bucket's ``bucket`` value: per ingress stream it has seen, its generator's
    count and maximum and its watermark (OXW-R1..R3, OXP-R8); a bucket holds few streams."""

    buckets: int
    streams: dict[str, tuple[int, int, bool, int, bool]]  # seen, max, has max, watermark, has one

    def to_tuple(self) -> tuple[Any, ...]:
        names = list(self.streams)
        rows = [self.streams[n] for n in names]
        column = [np.array([r[i] for r in rows], np.int64) for i in (0, 1, 3)]
        flags = np.array([int(r[2]) | int(r[4]) << 1 for r in rows], np.uint8)
        return (LAYOUT_VERSION, self.buckets, *(c.tobytes() for c in column), flags.tobytes(), *_text(names))

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...], buckets: int) -> BucketState:
        check_layout(OPERATOR, value, LAYOUT_VERSION, buckets, "bucket")
        with decoding(OPERATOR, "bucket"):
            names = _names(value[6], value[7])
            seen, top, mark = (
                _ints(value[i], len(names), f) for i, f in ((2, "seen"), (3, "max"), (4, "mark"))
            )
            flags = np.frombuffer(bytes(value[5]), np.uint8)
            if len(flags) != len(names):
                raise ValueError(f"flags: {len(flags)} for {len(names)} streams")
            streams = {
                n: (int(seen[i]), int(top[i]), bool(flags[i] & 1), int(mark[i]), bool(flags[i] & 2))
                for i, n in enumerate(names)
            }
        return cls(buckets, streams)


@dataclass
class NodeState:
    """A consumer group's ``<node>_node`` value: the last watermark of each stream feeding it."""

    buckets: int
    streams: tuple[str, ...]
    watermarks: np.ndarray
    present: np.ndarray

    def to_tuple(self) -> tuple[Any, ...]:
        return (LAYOUT_VERSION, self.buckets, np.asarray(self.watermarks, np.int64).tobytes(),
                np.asarray(self.present, bool).tobytes(), *_text(self.streams))  # fmt: skip

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...], buckets: int, variable: str) -> NodeState:
        check_layout(OPERATOR, value, LAYOUT_VERSION, buckets, variable)
        with decoding(OPERATOR, variable):
            streams = _names(value[4], value[5])
            present = np.frombuffer(bytes(value[3]), bool).copy()
            if len(present) != len(streams):
                raise ValueError(f"present: {len(present)} flags for {len(streams)} streams")
            return cls(buckets, streams, _ints(value[2], len(streams), "watermarks"), present)


@dataclass
class StreamState:
    """The narrow group's ``totals``: the progress counters and the consumers' watermark."""

    buckets: int
    totals: list[int]
    watermark: int = 0
    has_watermark: bool = False

    def to_tuple(self) -> tuple[Any, ...]:
        counts = np.array(self.totals, np.int64).tobytes()
        return (LAYOUT_VERSION, self.buckets, counts, self.watermark, self.has_watermark)

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...], buckets: int) -> StreamState:
        check_layout(OPERATOR, value, LAYOUT_VERSION, buckets, "totals")
        with decoding(OPERATOR, "totals"):
            counts = np.frombuffer(bytes(value[2]), np.int64)
            if len(counts) != len(PROGRESS):
                raise ValueError(f"{len(counts)} counters where the progress table has {len(PROGRESS)}")
            if len(value) != 5:
                raise ValueError(f"{len(value)} fields where the layout has 5")
            return cls(buckets, [int(c) for c in counts], int(value[3]), bool(value[4]))
