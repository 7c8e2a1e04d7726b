"""Helpers shared by the Spark operators (keyed and partitioned watermarks).

Pure numpy/pandas: everything here also runs inside Spark's Python workers.

- ``require_int``: a setting that must be an integer in ``minimum..i64 max``.
- ``sat_sub``: saturating i64 subtraction, vectorised (numpy wraps silently).
- ``OutputRows``: the rows of one call of a stateful processor, collected as
  column pieces per output table and assembled into one pandas frame with
  exact nullable longs (never floats).
- ``opt``: a nullable scalar as the ``(values, null mask)`` pair OutputRows takes.
- ``with_defaults``: adds the normalised input columns a stream did not carry.
- ``StreamGroupProcessor``: the stateful processor both operators share: one
  call per stream (group) and micro-batch, one state read and one write.
- ``stream_settings``, ``check_columns``, ``event_time_millis``,
  ``table_projections``: what applying an operator to a DataFrame checks
  and builds, the same for every operator.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar

import numpy as np
import pandas as pd

from harness.traces import I64_MAX, I64_MIN, InvalidConfig


def require_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise InvalidConfig(f"{name} must be an integer >= {minimum}, got {value!r}")
    if value > I64_MAX:
        raise InvalidConfig(f"{name} must fit in a signed 64-bit integer, got {value!r}")
    return int(value)


def sat_sub(a: np.ndarray, d: int) -> np.ndarray:
    """max(i64 min, a - d) for d >= 0, without wrapping."""
    with np.errstate(over="ignore"):
        return np.where(a < I64_MIN + d, np.int64(I64_MIN), a - np.int64(d))


class OutputRows:
    """Pieces of the combined output, assembled column-wise without floats."""

    def __init__(self, stream_id: str, columns: Sequence[str], string_cols: Sequence[str]) -> None:
        self.stream_id = stream_id
        self.columns = tuple(columns)
        self.string_cols = frozenset(string_cols)
        self.pieces: list[tuple[int, dict[str, Any]]] = []

    def add(self, output: str, n: int, **cols: Any) -> None:
        """cols: numpy arrays / scalars; a long column may be (values, null_mask)."""
        if n:
            cols["output"] = output
            self.pieces.append((n, cols))

    def frame(self) -> pd.DataFrame:
        total = sum(n for n, _ in self.pieces)
        data: dict[str, Any] = {}
        for c in self.columns:
            if c == "stream_id":
                data[c] = np.full(total, self.stream_id, dtype=object)
                continue
            if c in self.string_cols:
                parts = []
                for n, cols in self.pieces:
                    v = cols.get(c)
                    parts.append(
                        np.full(n, v, dtype=object) if v is None or isinstance(v, str)
                        else np.asarray(v, dtype=object)
                    )
                data[c] = np.concatenate(parts) if parts else np.empty(0, object)
                continue
            vals, masks = [], []
            for n, cols in self.pieces:
                v = cols.get(c)
                if v is None:
                    vals.append(np.zeros(n, np.int64))
                    masks.append(np.ones(n, bool))
                elif isinstance(v, tuple):
                    vals.append(np.asarray(v[0], np.int64))
                    masks.append(np.asarray(v[1], bool))
                elif np.ndim(v) == 0:
                    vals.append(np.full(n, v, np.int64))
                    masks.append(np.zeros(n, bool))
                else:
                    vals.append(np.asarray(v, np.int64))
                    masks.append(np.zeros(n, bool))
            if vals:
                data[c] = pd.arrays.IntegerArray(np.concatenate(vals), np.concatenate(masks))
            else:
                data[c] = pd.array([], dtype="Int64")
        return pd.DataFrame(data, columns=list(self.columns))


def opt(value: int | None) -> tuple[np.ndarray, np.ndarray]:
    return (np.array([0 if value is None else value], np.int64), np.array([value is None]))


def with_defaults(pdf: pd.DataFrame, defaults: Mapping[str, Any]) -> pd.DataFrame:
    """Adds the normalised columns the input did not carry."""
    missing = {c: v for c, v in defaults.items() if c not in pdf.columns}
    if missing:
        pdf = pdf.assign(**{c: np.full(len(pdf), v, dtype=object if isinstance(v, str) else None)
                            for c, v in missing.items()})  # fmt: skip
    return pdf


try:
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle
except ImportError:  # pragma: no cover - pyspark is a dependency
    StatefulProcessor = object  # type: ignore[misc,assignment]
    StatefulProcessorHandle = Any  # type: ignore[misc,assignment]

Config = TypeVar("Config")


class StreamGroupProcessor(StatefulProcessor, Generic[Config]):  # type: ignore[misc]
    """One call per stream (group) and micro-batch: read the stream's state, process, write it.

    Subclasses name their state (``state_name``, ``state_schema``, ``state_class`` with
    ``from_tuple``/``to_tuple``) and implement ``process``; ``prepare`` normalises the rows.
    """

    state_name: str
    state_schema: Any
    state_class: Any

    def __init__(self, default: Config, per_stream: Mapping[str, Config], has_batch: bool) -> None:
        self.default = default
        self.per_stream = dict(per_stream)
        self.has_batch = has_batch

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getValueState(self.state_name, self.state_schema)

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[pd.DataFrame]:
        stream_id = key[0] if isinstance(key, tuple) else key
        frames = list(rows)
        pdf = self.prepare(frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True))
        stored = self.state.get()  # None for a new stream: one round trip, no exists() call
        st = self.state_class.from_tuple(stored) if stored is not None else self.state_class()
        result = self.process(st, pdf, self.per_stream.get(stream_id, self.default), stream_id)
        self.state.update(st.to_tuple())
        yield result

    def close(self) -> None:
        pass

    def prepare(self, pdf: pd.DataFrame) -> pd.DataFrame:
        return pdf

    def process(self, st: Any, pdf: pd.DataFrame, cfg: Config, stream_id: str) -> pd.DataFrame:
        raise NotImplementedError


def stream_settings(
    validate: Callable[[Mapping[str, Any]], Config],
    default: Mapping[str, Any],
    stream_configs: Mapping[str, Mapping[str, Any]] | None,
) -> tuple[Config, dict[str, Config]]:
    """The operator's own settings and each stream's, all checked (InvalidConfig names the stream)."""
    per_stream: dict[str, Config] = {}
    for sid, conf in (stream_configs or {}).items():
        try:
            per_stream[str(sid)] = validate(conf)
        except InvalidConfig as e:
            raise InvalidConfig(f"stream {sid!r}: {e}") from None
    return validate(default), per_stream


def check_columns(
    fields: Mapping[str, Any], named: Mapping[str, str | None], integral: Iterable[str], kind_col: str | None,
    seq_col: str | None,
) -> None:  # fmt: skip
    """Every named column exists; those labelled in ``integral`` are integer columns."""
    from pyspark.sql.types import IntegralType

    if kind_col is not None and seq_col is None:
        raise InvalidConfig("kind_col needs seq_col: control rows are placed by their sequence number")
    for label, name in named.items():
        if name is not None and name not in fields:
            raise InvalidConfig(f"{label}={name!r} is not a column of the input ({sorted(fields)})")
    for label in integral:
        name = named[label]
        if name is not None and not isinstance(fields[name], IntegralType):
            raise InvalidConfig(f"{label} {name!r} must be an integer column, got {fields[name]}")


def event_time_millis(fields: Mapping[str, Any], event_time_col: str) -> Any:
    """The event-time column as LongType milliseconds (TR-2), from longs or timestamps."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegralType, TimestampNTZType, TimestampType

    et_type = fields[event_time_col]
    if isinstance(et_type, (TimestampType, TimestampNTZType)):
        return F.unix_millis(F.col(event_time_col))
    if isinstance(et_type, IntegralType):
        return F.col(event_time_col).cast("long")
    raise InvalidConfig(
        f"event_time_col {event_time_col!r} must be integer milliseconds or a timestamp, got {et_type}"
    )


def table_projections(output: Any, table_columns: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """One DataFrame per output table, projected from the combined stream by its ``output`` column."""
    from pyspark.sql import functions as F

    table = F.col("output")
    return {name: output.filter(table == name).select(*cols) for name, cols in table_columns.items()}


__all__ = [
    "OutputRows",
    "StreamGroupProcessor",
    "check_columns",
    "event_time_millis",
    "opt",
    "require_int",
    "sat_sub",
    "stream_settings",
    "table_projections",
    "with_defaults",
]
