"""The parse step: a raw event-time cell or a joined stream's messages turned into milliseconds by the
declared parser, vectorised over a batch, and the operator's probe rows.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd

from harness.traces import I64_MAX, I64_MIN
from spark_impl.eventtime_buffer.layout import EVENT, NO_TUPLE, PARSED_COLUMNS, PROBE
from spark_impl.eventtime_buffer.settings import StreamConfig

# ---- parsing cells (VELO-R5, R10, R11) ---------------------------------------

# ints that fit int64 even after * 1000, as JSON writes them (no leading zeros) or as digit strings
_FAST_JSON = re.compile(r'-?(?:0|[1-9][0-9]{0,17})|"-?[0-9]{1,18}"')


_FAST_TEXT = re.compile(r"-?[0-9]{1,18}")


_INT_TEXT = re.compile(r"-?[0-9]+")


_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


_JSON_SPACE = " \t\n\r"


# TR-16: beyond 10**24 every unit's result leaves i64; below 10**-24 none reaches a whole ms.
_MAGNITUDE = 24


def cell_millis(json_text: str | None, unit: tuple[int, int]) -> tuple[int, str | None]:
    """The exact path: one cell's JSON text -> (ms, None) or (0, reason). Text that is not JSON by
    the standard (NaN, Infinity, +5, 007, .5, 1_000) parses as nothing (TR-16)."""
    if json_text is None:
        return 0, "null_eventtime"
    json_text = json_text.strip(_JSON_SPACE)
    if json_text == "null":
        return 0, "null_eventtime"
    if json_text.startswith('"'):
        try:
            text = json.loads(json_text)
        except ValueError:
            return 0, "unparsable_eventtime"
        if not isinstance(text, str) or not _INT_TEXT.fullmatch(text):
            return 0, "unparsable_eventtime"
        numerator, denominator = int(text), 1
    elif _JSON_NUMBER.fullmatch(json_text):
        value = Decimal(json_text)  # exact: the JSON text's value
        if value.is_zero():
            return 0, None
        if value.adjusted() > _MAGNITUDE:
            return 0, "eventtime_out_of_range"
        if value.adjusted() < -_MAGNITUDE:
            return (0 if value > 0 else -1), None  # rounded towards minus infinity (VELO-R5)
        numerator, denominator = value.as_integer_ratio()
    else:
        return 0, "unparsable_eventtime"  # true/false, objects, lists, and text that is not JSON
    num, den = unit
    ms = (numerator * num) // (denominator * den)  # floor division: rounds towards minus infinity
    if not I64_MIN <= ms <= I64_MAX:
        return 0, "eventtime_out_of_range"
    return ms, None


def _apply_unit(v: np.ndarray, unit: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised ms for int64 values: (ms, out_of_range mask)."""
    num, den = unit
    out_of_range = np.zeros(len(v), bool)
    if num > 1:
        out_of_range = (v > I64_MAX // num) | (v < -((-I64_MIN) // num))
        v = np.where(out_of_range, 0, v) * np.int64(num)
    if den > 1:
        v = np.floor_divide(v, np.int64(den))
    return v.astype(np.int64), out_of_range


def parse_cells(
    mode: str, raw: np.ndarray, raw_long: np.ndarray, raw_null: np.ndarray, unit: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray]:
    """VELO-R5: (ms, reason-or-None) for one-message cells; ``mode`` says what ``raw`` holds:
    ``json`` (the cell's JSON text), ``text`` (a string column) or ``long`` (``raw_long``)."""
    n = len(raw_null)
    ms = np.zeros(n, np.int64)
    reason = np.full(n, None, dtype=object)
    reason[raw_null] = "null_eventtime"
    if mode == "long":
        ms, oor = _apply_unit(raw_long, unit)
        reason[oor & ~raw_null] = "eventtime_out_of_range"
        return ms, reason
    texts = pd.Series(raw, dtype=object)
    pattern = _FAST_JSON if mode == "json" else _FAST_TEXT
    fast = texts.str.fullmatch(pattern, na=False).to_numpy(bool) & ~raw_null
    if fast.any():
        values = texts[fast].str.strip('"').astype(np.int64).to_numpy()
        ms[fast], oor = _apply_unit(values, unit)
        reason[np.flatnonzero(fast)[oor]] = "eventtime_out_of_range"
    for i in np.flatnonzero(~fast & ~raw_null).tolist():
        text = raw[i] if mode == "json" else json.dumps(raw[i])
        ms[i], reason[i] = cell_millis(text, unit)
    return ms, reason


def message_millis(messages_json: str, cfg: StreamConfig) -> tuple[int, str | None]:
    """VELO-R11: the first message whose stream declares event time decides (no fallback). A text
    that is not a JSON list of [stream name, cell] pairs names no defined stream (TR-16)."""
    pairs = _message_pairs(messages_json)
    if pairs is None or any(name not in cfg.units for name, _ in pairs):
        return 0, "unknown_stream"
    for name, cell in pairs:
        unit = cfg.units[name]
        if unit is not None:
            return cell_millis(str(cell) if isinstance(cell, Decimal) else json.dumps(cell), unit)
    return 0, "no_eventtime_message"


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _message_pairs(messages_json: str) -> list[tuple[str, Any]] | None:
    """The [stream name, cell] pairs of a messages text (numbers kept exact), None if it has none."""
    try:
        pairs = json.loads(messages_json, parse_float=Decimal, parse_constant=_refuse_constant)
    except ValueError:
        return None
    if not isinstance(pairs, list) or any(
        not isinstance(p, list) or len(p) != 2 or not isinstance(p[0], str) for p in pairs
    ):
        return None
    return [(p[0], p[1]) for p in pairs]


# ---- the parse step, before the shuffle (VELO-R5, R10..R12) ------------------------------


@dataclass(frozen=True)
class ParseStep:
    """The stateless ``mapInArrow`` body: per input partition, every event row gets its parsed
    time (``eb_ts``) and the reason its cell fails (``eb_reason``, null when it parses), and per
    stream and batch one ``probe`` row carries the highest time among the well-formed tuples
    (``eb_ts``; ``eb_reason`` is ``NO_TUPLE`` when there was none). A probe is written for every
    stream and batch the partition saw, so every bucket of a stream is called in every
    micro-batch the stream has rows in. In processing-time mode no cell is read (VELO-R9)."""

    default: StreamConfig
    per_stream: Mapping[str, StreamConfig]
    mode: str  # what eb_raw / eb_raw_long hold: "json", "text" or "long" (parse_cells)

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        highest: dict[tuple[str | None, int], int | None] = {}
        for batch in batches:
            if batch.num_rows:
                parsed, seen = self.parse(batch)
                for k, v in seen.items():
                    old = highest.get(k)
                    if k not in highest or (v is not None and (old is None or v > old)):
                        highest[k] = v
                yield parsed
        if highest:
            yield probe_rows(highest)

    def parse(self, batch: Any) -> tuple[Any, dict[tuple[str | None, int], int | None]]:
        """One Arrow batch: the batch with eb_ts and eb_reason instead of the raw columns, and the
        highest well-formed time per (stream, batch) it holds (None: none well-formed)."""
        n = batch.num_rows
        col = {name: batch.column(name) for name in batch.schema.names}
        sid = col["eb_sid"].to_numpy(zero_copy_only=False)
        number = col["eb_batch"].to_numpy(zero_copy_only=False).astype(np.int64)
        kind = col["eb_kind"].to_numpy(zero_copy_only=False).astype(np.int64)
        ts = np.zeros(n, np.int64)
        reason = np.full(n, None, dtype=object)
        good = np.zeros(n, bool)
        events = np.flatnonzero(kind == EVENT)
        one_stream = bool(n) and sid[0] is not None and bool((sid == sid[0]).all())  # the usual case
        if len(events):
            groups = (
                {sid[0]: np.arange(len(events))} if one_stream
                else pd.Series(events).groupby(sid[events], sort=False, dropna=False).indices
            )  # fmt: skip
            for stream, at in groups.items():
                # TR-16: the null stream has the operator's own settings, not those of "None"
                cfg = self.per_stream.get(str(stream), self.default) if _named(stream) else self.default
                if not cfg.eventtime_enabled:
                    continue  # VELO-R9: processing time reads no cell
                rows = events[at]
                ts[rows], reason[rows] = self._times(col, rows, cfg)
                good[rows] = reason[rows] == None  # noqa: E711 - elementwise
        return self._output(col, ts, reason), self._highest(sid, number, ts, good, one_stream)

    @staticmethod
    def _highest(
        sid: np.ndarray, number: np.ndarray, ts: np.ndarray, good: np.ndarray, one_stream: bool
    ) -> dict[tuple[str | None, int], int | None]:
        """The highest well-formed time per (stream, batch) of these rows, None where none is."""
        seen: dict[tuple[str | None, int], int | None] = {}
        if one_stream:
            for b in np.unique(number).tolist():
                mine = good & (number == b)
                seen[(str(sid[0]), int(b))] = int(ts[mine].max()) if mine.any() else None
            return seen
        # A null stream id is a stream of its own, as in the groupBy after the shuffle.
        pairs = pd.DataFrame({"sid": sid, "batch": number, "ts": ts, "good": good}, copy=False)
        top = pairs[pairs["good"]].groupby(["sid", "batch"], sort=False, dropna=False)["ts"].max()
        for s, b in pairs[["sid", "batch"]].drop_duplicates().itertuples(index=False):
            seen[(None if pd.isna(s) else str(s), int(b))] = None
        for s, b, t in top.reset_index().itertuples(index=False):
            seen[(None if pd.isna(s) else str(s), int(b))] = int(t)
        return seen

    @staticmethod
    def _output(col: Mapping[str, Any], ts: np.ndarray, reason: np.ndarray) -> Any:
        import pyarrow as pa

        kept = [c for c, _ in PARSED_COLUMNS if c not in ("eb_ts", "eb_reason")]
        arrays = [col[c] for c in kept] + [pa.array(ts, pa.int64()), pa.array(reason, pa.string())]
        return pa.RecordBatch.from_arrays(arrays, schema=parsed_arrow_schema())

    def _times(self, col: Mapping[str, Any], rows: np.ndarray, cfg: StreamConfig) -> tuple[Any, Any]:
        """VELO-R10, R11: (ms, reason) of these event rows of one stream."""
        messages = col["eb_messages"].to_numpy(zero_copy_only=False)[rows]
        multi = pd.notna(messages)
        ts = np.zeros(len(rows), np.int64)
        reason = np.full(len(rows), "no_eventtime_message", dtype=object)
        one = np.flatnonzero(~multi)
        unit = cfg.units.get(cfg.input_stream)
        if unit is not None and len(one):  # VELO-R10: one-message tuples of the input stream
            at = rows[one]
            ts[one], reason[one] = parse_cells(
                self.mode, col["eb_raw"].to_numpy(zero_copy_only=False)[at],
                col["eb_raw_long"].to_numpy(zero_copy_only=False)[at].astype(np.int64),
                col["eb_raw_null"].to_numpy(zero_copy_only=False)[at].astype(bool), unit,
            )  # fmt: skip
        for i in np.flatnonzero(multi).tolist():  # VELO-R11: rare, exact per row
            ts[i], reason[i] = message_millis(messages[i], cfg)
        return ts, reason


def _named(stream: Any) -> bool:
    """Whether a stream id read back from pandas is a name (a null one may come back as NaN)."""
    return stream is not None and not (isinstance(stream, float) and stream != stream)


def parsed_arrow_schema() -> Any:
    import pyarrow as pa

    types = {"string": pa.string(), "long": pa.int64(), "boolean": pa.bool_()}
    return pa.schema([pa.field(c, types[t], nullable=True) for c, t in PARSED_COLUMNS])


def probe_rows(highest: Mapping[tuple[str | None, int], int | None]) -> Any:
    """The probe rows of one input partition (ParseStep)."""
    import pyarrow as pa

    n = len(highest)
    keys, tops = list(highest), list(highest.values())
    values = {
        "eb_sid": pa.array([k[0] for k in keys], pa.string()),
        "eb_batch": pa.array([k[1] for k in keys], pa.int64()),
        "eb_seq": pa.array(np.zeros(n, np.int64)),
        "eb_kind": pa.array(np.full(n, PROBE, np.int64)),
        "eb_key": pa.nulls(n, pa.string()),
        "eb_value": pa.array(np.zeros(n, np.int64)),
        "eb_time": pa.array(np.zeros(n, np.int64)),
        "eb_time_null": pa.array(np.ones(n, bool)),
        "eb_ts": pa.array([0 if t is None else t for t in tops], pa.int64()),
        "eb_reason": pa.array([NO_TUPLE if t is None else None for t in tops], pa.string()),
    }
    schema = parsed_arrow_schema()
    return pa.RecordBatch.from_arrays([values[f.name] for f in schema], schema=schema)
