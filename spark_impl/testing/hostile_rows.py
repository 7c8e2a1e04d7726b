"""Hostile rows at a table boundary (spec/traces.md TR-16, TR-15): tables, their meaning, one run.

A Spark operator reads a typed DataFrame, which carries what a trace never
does: nulls in every column, keys of many Spark types, times as ints or
timestamps, times at the i64 bounds, values beyond 32 bits, repeated or
missing sequence numbers, JSON text that is not JSON. This module makes such
tables and says what each one means:

- ``hostile_tables(area, count, seed, max_batches, typing)``: tables drawn
  from the area's generated traces (``strategies/<area>.py``, the
  differential mix), turned into the rows the harness engine feeds an
  operator (one row per item, one ``batch_end`` marker per batch) and then
  mutated row by row (``mutations_of``), with repeated seqs, shifted seqs
  and times moved next to the i64 bounds, plus one table of a null stream id
  beside one called "None". The tables of one call share a column typing
  (``TYPINGS``): the key as a string, an integer, a short, a long, a boolean,
  a date, a decimal, binary or a timestamp; times as longs, ints or
  timestamps with or without a zone; narrower seqs, batches and numbers.
- ``meaning(table)``: the trace the table means by TR-16 (its items in seq
  order, ``duplicate_seq`` items for repeated seqs, the conversions of keys,
  times and text cells), with the map from trace positions back to the
  rows' seqs and the error rows of rows that take no place.
- ``expected_output(table)``: the oracle's answer to that trace, mapped back.
- ``run_tables(spark, tables)``: ONE streaming query over every table: the
  rows go to one parquet file read by the ``trace`` source, one micro-batch
  per batch; each (area, typing) gets the area's operator
  (``engine_output(df, configs, seq_unique=False)``) on its rows cast to the
  typing's Spark types; the outputs are unioned into one parquet sink and
  split back per table.

Nothing here knows what an operator should answer beyond the conversions of
TR-16: the answer itself is the oracle's.
"""

from __future__ import annotations

import datetime
import json
import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from harness.outputs import TABLES, Output, canonical
from harness.traces import I64_MAX, I64_MIN, ITEM_KINDS, InvalidConfig, Item, Trace

I32_MIN, I32_MAX = -(2**31), 2**31 - 1
EPOCH = datetime.datetime(1970, 1, 1)
MARKER = "batch_end"  # the harness's row closing each batch of a stream (spark_impl/engine.py)
STAND_IN = "duplicate_seq"  # the trace item an event refused for its value is written as (TR-16)
VALUE_OUT_OF_RANGE = "value_out_of_range"

# The columns of the engine's input that each area's ``engine_output`` reads, besides
# trace_id, batch, seq and kind (spark_impl/<area>.py).
AREA_FIELDS: dict[str, tuple[str, ...]] = {
    "keyed_watermarks": ("key", "event_time", "value", "time"),
    "partitioned_watermarks": ("source", "partition", "event_time", "time", "count", "core"),
    "session_windows": ("key", "event_time", "value"),
    "watermark_propagation": ("key", "event_time", "time"),
    "late_data": ("source", "event_time", "time"),
    "eventtime_buffer": ("key", "value", "time", "raw", "messages"),
    "sla_admission": ("key", "event_time", "time", "priority", "metrics"),
    "exactly_once_aggregation": ("producer", "partition", "sequence", "key", "amount"),
    "window_joins": ("side", "key", "event_time", "value", "time"),
}
# A kind each area does not accept: the item a row of no kind (null, "", "tick") means (TR-16).
FOREIGN_KIND = {
    area: "remove_key" if area == "partitioned_watermarks" else "assign_core" for area in AREA_FIELDS
}

# The settings of a stream that ``stream_configs`` cannot name (the null stream, TR-16): the
# operator's own, as ``engine_output`` sets them, written as the trace configuration.
NULL_STREAM_CONFIG: dict[str, dict[str, Any]] = {
    "keyed_watermarks": {"bounded_delay": 5000, "idle_timeout": 60000},
    "partitioned_watermarks": {"idle_timeout": 60000, "max_lateness": 0},
    "session_windows": {"gap": 1},
    "watermark_propagation": {"nodes": [], "edges": []},
    "late_data": {"policy": "Drop"},
    "eventtime_buffer": {
        "columns": ["raw"], "eventtime_column": "raw", "eventtime_type": "unixtimestamp_ms",
        "eventtime_enabled": True,
    },
    "sla_admission": {"streams": {}, "policy": "Strict"},
    "exactly_once_aggregation": {"aggregate": "sum", "dedup_window": 1024},
    "window_joins": {"join": "tumbling_tumbling", "size_ms": 10},
}  # fmt: skip

# Columns of a row (the engine's input columns, spark_impl.engine.INPUT_SCHEMA) and their
# Spark type in the plain typing; numbers are long, text cells string.
ROW_COLUMNS = (
    "trace_id", "batch", "seq", "kind", "key", "event_time", "value", "partition", "source", "time",
    "count", "core", "raw", "messages", "priority", "metrics", "producer", "sequence", "amount", "side",
)  # fmt: skip
TEXT_COLUMNS = frozenset({"trace_id", "kind", "key", "raw", "messages", "metrics", "amount", "side"})
# JSON text in the engine's rows, as in spark_impl.engine
JSON_COLUMNS = ("raw", "messages", "metrics", "amount")
DELIVERY = "delivered_in"  # a row's micro-batch, kept apart from its (possibly null) batch cell
TIME_COLUMNS = ("event_time", "time")
NUMBER_COLUMNS = (
    "batch", "seq", "value", "partition", "source", "count", "core", "priority", "producer", "sequence",
)  # fmt: skip


# ---- typed cells ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Micros:
    """A timestamp cell: microseconds since the epoch (UTC)."""

    micros: int

    def millis(self) -> int:
        return self.micros // 1000  # TR-16: towards minus infinity


@dataclass(frozen=True)
class Typing:
    """The Spark type of each column of a table (DDL names); columns not named are the plain ones."""

    name: str
    key: str = "string"
    event_time: str = "long"
    time: str = "long"
    seq: str = "long"
    batch: str = "long"
    numbers: str = "long"  # value, partition, source, count, core, priority, producer, sequence

    def of(self, column: str) -> str:
        if column in ("key", "trace_id") or column in TIME_COLUMNS or column in ("seq", "batch"):
            return "string" if column == "trace_id" else getattr(self, column)
        if column in NUMBER_COLUMNS:
            return self.numbers
        return "string"


TYPINGS: tuple[Typing, ...] = (
    Typing("plain"),
    Typing("int_keys", key="int", event_time="int", seq="int", numbers="int"),
    Typing("binary_keys", key="binary", event_time="timestamp", time="timestamp"),
    Typing("date_keys", key="date", event_time="timestamp_ntz", batch="int"),
    Typing("boolean_keys", key="boolean", time="timestamp", numbers="long"),
    Typing("decimal_keys", key="decimal(12,3)", event_time="int", time="int", seq="short"),
    Typing("long_keys", key="long", event_time="timestamp", seq="int", batch="short", numbers="int"),
    Typing("timestamp_keys", key="timestamp", time="timestamp_ntz"),
    Typing("short_keys", key="short", numbers="short"),
)
TYPING = {t.name: t for t in TYPINGS}
INTEGER_RANGE = {"long": (I64_MIN, I64_MAX), "int": (I32_MIN, I32_MAX), "short": (-(2**15), 2**15 - 1)}
# Timestamps the harness writes stay within Spark's years 0001..9999 (microseconds).
MICROS_RANGE = (-62_135_596_800_000_000, 253_402_300_799_999_999)


def key_text(cell: Any) -> str | None:
    """TR-16: a key cell of any Spark type as the string Spark's cast gives."""
    if cell is None or isinstance(cell, str):
        return cell
    if isinstance(cell, bool):
        return "true" if cell else "false"
    if isinstance(cell, int):
        return str(cell)
    if isinstance(cell, Decimal):
        return f"{cell:f}"
    if isinstance(cell, bytes):
        return cell.decode("utf-8")
    if isinstance(cell, Micros):
        at = EPOCH + datetime.timedelta(microseconds=cell.micros)
        text = at.strftime("%Y-%m-%d %H:%M:%S")
        fraction = f"{at.microsecond:06d}".rstrip("0")
        return f"{text}.{fraction}" if fraction else text
    if isinstance(cell, datetime.date):
        return cell.isoformat()
    raise TypeError(f"no key conversion for {cell!r}")


def time_millis(cell: Any) -> int | None:
    """TR-16: a time cell (integral milliseconds or a timestamp) in milliseconds."""
    if cell is None:
        return None
    return cell.millis() if isinstance(cell, Micros) else int(cell)


def typed_key(text: str, index: int, spark_type: str) -> Any:
    """A cell of ``spark_type`` standing for the trace key ``text`` (the ``index``-th key of a
    table): distinct keys stay distinct, except that booleans have two values."""
    if spark_type == "string":
        return text
    if spark_type == "binary":
        return text.encode("utf-8")
    if spark_type in INTEGER_RANGE:
        low, high = INTEGER_RANGE[spark_type]
        return [0, -1, high, low, 7, -300][index] if index < 6 else index * 37 - 500
    if spark_type == "boolean":
        return index % 2 == 0
    if spark_type == "date":
        return datetime.date(1969, 12, 30) + datetime.timedelta(days=index * 11)  # before 1970 too
    if spark_type.startswith("decimal"):
        return Decimal(index * 1234 - 2500).scaleb(-3)
    if spark_type == "timestamp":
        return Micros(-1_500 + index * 1_000_123_450)
    raise ValueError(f"no key cells of type {spark_type}")


# ---- text cells an area parses (TR-16, VELO-R5, R11, OXS-R15) ---------------------------------


def _strict_json(text: str, exact_ints: bool = False) -> Any:
    """JSON by the standard: NaN and infinities refused, numbers as int or exact Decimal
    (integers as Decimal too with ``exact_ints``, so that -0 keeps its sign)."""

    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    integers = Decimal if exact_ints else int
    return json.loads(text, parse_constant=refuse, parse_float=Decimal, parse_int=integers)


class NotACell(ValueError):
    """A text cell the trace cannot carry exactly (a generator mistake, not a finding)."""


UNPARSABLE = "not JSON"  # a string cell that VELO-R5 refuses: what text that is not JSON means


def eventtime_cell(text: str | None) -> Any:
    """TR-16: the buffer's event-time cell (JSON text) as the trace cell it means."""
    if text is None:
        return None
    try:
        value = _strict_json(text)
    except ValueError:
        return UNPARSABLE
    return _cell(value)


def _cell(value: Any) -> Any:
    if value is None or isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    if isinstance(value, Decimal):
        if value == value.to_integral_value():
            return int(value)  # exact: 1e400 is that integer, beyond every range
        as_float = float(value)
        if Decimal(repr(as_float)) != value:
            raise NotACell(f"{value} has no exact double: the trace cannot carry it")
        return as_float
    return UNPARSABLE  # true, false, objects and lists parse as nothing (VELO-R5)


def messages_cell(text: str | None) -> tuple[tuple[str, Any], ...] | None:
    """TR-16: the buffer's messages text as the trace's pairs; not a list of [name, cell] pairs:
    one message of a stream no configuration defines (``unknown_stream``, VELO-R11)."""
    if text is None:
        return None
    try:
        value = _strict_json(text)
    except ValueError:
        return (("", None),)
    if not isinstance(value, list) or any(
        not isinstance(m, list) or len(m) != 2 or not isinstance(m[0], str) for m in value
    ):
        return (("", None),)
    return tuple((m[0], _cell(m[1])) for m in value)


METRIC_NAMES = ("cpu", "memory", "queue_depth", "latency")
PERCENT_METRICS = ("cpu", "memory")


def metrics_cell(text: str | None) -> tuple[tuple[str, int], ...] | None:
    """TR-16, OXS-R15: a load report's JSON text as the trace's metrics; None (``invalid_load``)
    for a text the rules refuse; a metric beyond i64 as the i64 maximum."""
    if text is None:
        return None
    try:
        value = _strict_json(text)
    except ValueError:
        return None
    pairs = list(value.items()) if isinstance(value, dict) else value
    if not isinstance(pairs, list) or not pairs:
        return None
    report: dict[str, int] = {}
    for pair in pairs:
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            return None
        name, v = pair
        if name not in METRIC_NAMES or isinstance(v, bool) or not isinstance(v, int) or v < 0:
            return None
        if name in PERCENT_METRICS and v > 100:
            return None
        if name in report:
            raise NotACell(f"metric {name} named twice: the trace cannot carry it")
        report[name] = min(v, I64_MAX)
    return tuple(sorted(report.items()))


def amount_cell(text: str | None) -> Any:
    """TR-16, OXE-R16: a message's amount (JSON text) as the trace's amount: a number exactly
    (an integral one as that integer, so 1e400 stays beyond every double; a zero keeps its sign;
    any other as the nearest double), a string as it is, true and false as they are, null as
    absent (missing_amount); text that is not JSON, a list or an object as a string that is no
    amount (invalid_amount)."""
    if text is None:
        return None
    try:
        value = _strict_json(text, exact_ints=True)
    except ValueError:
        return UNPARSABLE
    if isinstance(value, Decimal):
        if value.is_zero():
            return -0.0 if value.is_signed() else 0
        return int(value) if value == value.to_integral_value() else float(value)
    return UNPARSABLE if isinstance(value, (list, dict)) else value


# ---- a table and what it means ---------------------------------------------------------------


@dataclass(frozen=True)
class HostileTable:
    """The rows of one stream of one area (each row a mapping of ROW_COLUMNS, markers included),
    their typing, the trace config of the stream, and what was done to them."""

    area: str
    stream: str | None
    config: Mapping[str, Any]
    typing: Typing
    rows: tuple[Mapping[str, Any], ...]
    batches: int
    mutations: tuple[str, ...] = ()
    origin: str = ""

    def describe(self) -> str:
        config = json.dumps(dict(self.config), sort_keys=True, default=str)
        lines = [f"{self.area} stream={self.stream!r} typing={self.typing.name} config={config}"]
        lines += [f"  {_row_text(r)}" for r in self.rows]
        return "\n".join(lines)


def _row_text(row: Mapping[str, Any]) -> str:
    cells = {c: row.get(c) for c in ROW_COLUMNS if row.get(c) is not None and c != "trace_id"}
    return " ".join(f"{c}={v!r}" for c, v in cells.items())


@dataclass(frozen=True)
class Meaning:
    """The trace a table means (TR-16), the table's seq at each trace position (per batch), the
    reason replacing the stand-in's at some positions, and the error rows of rows with no place."""

    trace: Trace
    seqs: tuple[tuple[int, ...], ...]
    reasons: Mapping[tuple[int, int], str]
    unplaced: tuple[tuple[int | None, int | None, str], ...]


def meaning(table: HostileTable) -> Meaning:
    """TR-16: the trace a table means, with everything needed to compare answers."""
    unplaced: list[tuple[int | None, int | None, str]] = []
    by_batch: dict[int, list[Mapping[str, Any]]] = {b: [] for b in range(table.batches)}
    for row in table.rows:
        if row["kind"] == MARKER:
            continue
        if row["batch"] is None:
            unplaced.append((None, row["seq"], "missing_batch"))
        elif row["seq"] is None:
            unplaced.append((row["batch"], None, "missing_seq"))
        else:
            by_batch[row["batch"]].append(row)
    batches: list[tuple[Item, ...]] = []
    seqs: list[tuple[int, ...]] = []
    reasons: dict[tuple[int, int], str] = {}
    for b in range(table.batches):
        rows = sorted(by_batch[b], key=lambda r: r["seq"])
        counts: dict[int, int] = {}
        for r in rows:
            counts[r["seq"]] = counts.get(r["seq"], 0) + 1
        items = []
        for position, r in enumerate(rows):
            if counts[r["seq"]] > 1:
                items.append(Item("duplicate_seq"))
                continue
            item, reason = row_item(r, table.area)
            items.append(item)
            if reason is not None:
                reasons[(b, position)] = reason
        batches.append(tuple(items))
        seqs.append(tuple(r["seq"] for r in rows))
    trace = Trace(table.area, dict(table.config), tuple(batches), name=table.origin)
    return Meaning(trace, tuple(seqs), reasons, tuple(unplaced))


def row_item(row: Mapping[str, Any], area: str) -> tuple[Item, str | None]:
    """TR-16: the item one placed row means, and the reason its error row takes instead of the
    stand-in's (an event whose value is beyond 32 bits)."""
    kind = row["kind"]
    if kind == "duplicate_seq":
        return Item("duplicate_seq"), None  # TR-15: a row of that kind is answered the same way
    if kind not in ITEM_KINDS:
        return Item(FOREIGN_KIND[area]), None
    wanted = AREA_FIELDS[area]
    value = row["value"] if "value" in wanted and row["value"] is not None else 0
    if kind == "event" and not I32_MIN <= value <= I32_MAX:
        return Item(STAND_IN), VALUE_OUT_OF_RANGE
    fields: dict[str, Any] = {"value": value if kind == "event" else 0}
    if "key" in wanted:
        fields["key"] = key_text(row["key"])
    for name in TIME_COLUMNS:
        if name in wanted:
            fields[name] = time_millis(row[name])
    for name in ("partition", "source", "count", "core", "priority", "producer", "sequence"):
        if name in wanted:
            fields[name] = row[name]
    if "amount" in wanted:
        fields["amount"] = amount_cell(row["amount"])
    if "side" in wanted:
        fields["side"] = row.get("side")  # OXJ-R19: any text is kept, so that the area can report it
    if "messages" in wanted and row["messages"] is not None:
        fields["messages"] = messages_cell(row["messages"])
    elif "raw" in wanted:
        fields["raw"] = eventtime_cell(row["raw"])
    if "metrics" in wanted:
        fields["metrics"] = metrics_cell(row["metrics"])
    return Item(kind, **fields), None


def expected_output(table: HostileTable) -> Output | Exception:
    """The oracle's answer to the trace the table means, in the table's seqs (TR-16)."""
    from harness.engine import run_canonical
    from harness.reference_engine import ReferenceEngine

    m = meaning(table)
    [answer] = run_canonical(ReferenceEngine(), [m.trace])
    if isinstance(answer, Exception):
        return answer
    return map_back(table.area, answer, m)


# A position column of a table and the batch column it counts in (a join pair names two events).
SEQ_COLUMNS = {
    "seq": "batch", "arrival_seq": "arrival_batch", "left_seq": "left_batch", "right_seq": "right_batch",
}  # fmt: skip


def map_back(area: str, answer: Output, m: Meaning) -> Output:
    """Trace positions to the table's seqs, the stand-in's reason replaced, the rows with no
    place added to ``errors``."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    for name, columns in TABLES[area].items():
        at = {c: columns.index(c) for c in columns}
        rows = []
        for row in answer.get(name, []):
            cells = list(row)
            for seq_col, batch_col in SEQ_COLUMNS.items():
                if seq_col in at and cells[at[seq_col]] is not None:
                    b, p = cells[at[batch_col]], cells[at[seq_col]]
                    if name == "errors" and (b, p) in m.reasons and cells[at["reason"]] == STAND_IN:
                        cells[at["reason"]] = m.reasons[(b, p)]
                    cells[at[seq_col]] = m.seqs[b][p]
            rows.append(tuple(cells))
        out[name] = rows
    out["errors"] = out.get("errors", []) + [tuple(e) for e in m.unplaced]
    return canonical(area, out)


# ---- drawing hostile tables ------------------------------------------------------------------


def trace_rows(trace: Trace, stream: str | None) -> list[dict[str, Any]]:
    """The harness engine's rows of a trace (spark_impl.engine): one per item, then a marker."""
    rows = []
    for b, batch in enumerate(trace.batches):
        for seq, item in enumerate([*batch, None]):
            row: dict[str, Any] = {c: None for c in ROW_COLUMNS}
            row.update(trace_id=stream, batch=b, seq=seq, kind=MARKER if item is None else item.kind)
            row[DELIVERY] = b
            if item is not None:
                for name in ROW_COLUMNS[4:]:
                    v = getattr(item, name)
                    row[name] = json.dumps(v) if name in JSON_COLUMNS and v is not None else v
            else:
                row["value"] = 0
            rows.append(row)
    return rows


# Hostile text cells: JSON that is not JSON by the standard, numbers beyond i64, odd strings.
RAW_TEXTS = (
    "NaN", "Infinity", "-Infinity", "1e400", "-1e400", "9223372036854775807", "9223372036854775808",
    "-9223372036854775808", "-9223372036854775809", "", '""', '"NaN"', "+5", "007", ".5", "5.", "1_000",
    " 12 ", "true", "[]", "1.5", "-0.0005", "2e3", '"-20"', "null", "{", "0x10",
)  # fmt: skip
MESSAGES_TEXTS = ("not json", "[]", '[["input"]]', '{"a": 1}', "[[1, 5]]", '[["", 1]]', "NaN")
METRICS_TEXTS = (
    "", "NaN", "[]", "{}", '{"cpu": NaN}', '{"cpu": 1.0}', '{"cpu": 1e2}', '{"cpu": 101}',
    '{"queue_depth": 100000000000000000000000}', '{"latency": 9223372036854775807}',
    '{"queue_depth": -1}', '[["cpu", 50], ["memory"]]', '{"disk": 5}', '{"cpu": true}', "{", '{"cpu": 7}',
)  # fmt: skip
# OXE-R16: amounts that are no JSON number, numbers beyond a double, zeros of both signs, JSON strings.
AMOUNT_TEXTS = (
    "NaN", "Infinity", '"NaN"', '"Infinity"', '"-Infinity"', '"nan"', '"1.5"', "1e400", "-1e400", "1e308",
    "true", "null", "[]", "{}", "", "abc", "{", "-0", "-0.0", "0.0", "0.1", "1e-400", "-1e-400",
    "9007199254740993", " 2 ", "2e3", "0.30000000000000004",
)  # fmt: skip
# OXJ-R19: sides a join does not read as its left or right input (compared as text, exactly)
ODD_SIDES = ("", "Left", "RIGHT", " left", "right ", "both", "None", "null")
ODD_KINDS = ("", "EVENT", " event", "tick", "probe", "summary", VALUE_OUT_OF_RANGE, "duplicate_seq", "clock ")


def _time_bounds(spark_type: str) -> tuple[Any, ...]:
    if spark_type.startswith("timestamp"):
        low, high = MICROS_RANGE
        return tuple(Micros(m) for m in (low, high, -1, -999, -1000, -1001, -1500, 999, 1000, 1_000_000_500))
    low, high = INTEGER_RANGE[spark_type]
    return (low, low + 1, -1, 0, high - 1, high)


def _numbers(spark_type: str) -> tuple[int, ...]:
    low, high = INTEGER_RANGE[spark_type]
    return tuple(sorted({low, -1, 0, high, max(low, I32_MIN - 1), min(high, I32_MAX + 1), min(high, 2**32)}))


Mutation = Callable[[dict[str, Any], random.Random, Typing], str | None]


def _set(column: str, choices: Callable[[Typing], Sequence[Any]], kinds: Sequence[str] = ()) -> Mutation:
    """A mutation setting ``column`` to one of ``choices``; with ``kinds``, of rows of those
    kinds only (a cell other kinds do not read would test nothing)."""

    def mutate(row: dict[str, Any], rng: random.Random, typing: Typing) -> str | None:
        options = choices(typing)
        if not options or (kinds and row["kind"] not in kinds):
            return None
        value = options[rng.randrange(len(options))]
        row[column] = value
        return f"{column}={value!r}"

    return mutate


def _null(column: str) -> Mutation:
    def mutate(row: dict[str, Any], rng: random.Random, typing: Typing) -> str | None:
        if row[column] is None:
            return None
        row[column] = None
        return f"{column}=null"

    return mutate


def _bounds_of(column: str) -> Callable[[Typing], Sequence[Any]]:
    return lambda t: _time_bounds(t.of(column))


def mutations_of(area: str) -> dict[str, Mutation]:
    """The row mutations that reach a column the area reads (TR-16's cases)."""
    fields = AREA_FIELDS[area]
    out: dict[str, Mutation] = {
        "null batch": _null("batch"),
        "null seq": _null("seq"),
        "null kind": _null("kind"),
        "odd kind": _set("kind", lambda t: ODD_KINDS),
    }
    for name in fields:
        out[f"null {name}"] = _null(name)
    if "key" in fields:
        out["empty key"] = _set("key", lambda t: {"string": ("",), "binary": (b"",)}.get(t.key, ()))
    if "event_time" in fields:
        out["event_time at the bounds"] = _set("event_time", _bounds_of("event_time"), ("event",))
    if "time" in fields:
        out["time at the bounds"] = _set("time", _bounds_of("time"), ("clock", "watermark"))
    if "value" in fields:
        out["value beyond 32 bits"] = _set("value", lambda t: _numbers(t.numbers), ("event",))
    for name in ("source", "partition", "count", "core", "priority", "producer", "sequence"):
        if name in fields:
            out[f"{name} at the bounds"] = _set(name, lambda t: _numbers(t.numbers))
    if "raw" in fields:
        out["odd event-time text"] = _set("raw", lambda t: RAW_TEXTS, ("event",))
        out["odd messages"] = _set("messages", lambda t: MESSAGES_TEXTS, ("event",))
    if "metrics" in fields:
        out["odd metrics"] = _set("metrics", lambda t: METRICS_TEXTS, ("load",))
    if "amount" in fields:
        out["odd amount text"] = _set("amount", lambda t: AMOUNT_TEXTS, ("event",))
    if "side" in fields:
        out["odd side"] = _set("side", lambda t: ODD_SIDES, ("event",))
    return out


def _retype(rows: list[dict[str, Any]], typing: Typing, area: str) -> dict[str, str]:
    """The rows' keys and times as cells of the typing's types (in place); returns the map
    from each trace key to the text of its cell, for configurations that name keys."""
    keys = sorted({r["key"] for r in rows if isinstance(r["key"], str)})
    cells = {k: typed_key(k, i, typing.key) for i, k in enumerate(keys)}
    for r in rows:
        if isinstance(r["key"], str):
            r["key"] = cells[r["key"]]
        for name in TIME_COLUMNS:
            t = r[name]
            if t is not None and typing.of(name).startswith("timestamp"):
                r[name] = Micros(t * 1000 + (t * 7919) % 1000)  # a sub-ms part the ms must ignore
    return {k: key_text(c) or "" for k, c in cells.items()}


KEYS_IN_CONFIG = frozenset({"watermark_propagation", "sla_admission"})


def _rename_keys(area: str, config: Mapping[str, Any], texts: Mapping[str, str]) -> dict[str, Any]:
    """A configuration that names keys (propagation's nodes, SLA streams) renamed like its rows."""
    config = dict(config)
    if area == "watermark_propagation":
        config["nodes"] = [texts.get(n, n) for n in config.get("nodes", [])]
        config["edges"] = [[texts.get(a, a), texts.get(b, b)] for a, b in config.get("edges", [])]
    if area == "sla_admission":
        config["streams"] = {texts.get(n, n): s for n, s in config.get("streams", {}).items()}
    return config


def _fits(typing: Typing, row: Mapping[str, Any]) -> bool:
    """Whether a row's numbers fit the typing's integer columns (a cast would fail otherwise)."""
    for name in ("event_time", "time", "seq", "batch", *NUMBER_COLUMNS):
        v, t = row.get(name), typing.of(name)
        if isinstance(v, int) and t in INTEGER_RANGE and not INTEGER_RANGE[t][0] <= v <= INTEGER_RANGE[t][1]:
            return False
        if isinstance(v, Micros) and not MICROS_RANGE[0] <= v.micros <= MICROS_RANGE[1]:
            return False
    return True


def _duplicate(rows: list[dict[str, Any]], rng: random.Random) -> str | None:
    """A repeated seq (TR-15): a copy of a row, or another row of its batch given its seq."""
    items = [
        i
        for i, r in enumerate(rows)
        if r["kind"] != MARKER and r["seq"] is not None and r["batch"] is not None
    ]
    if not items:
        return None
    i = items[rng.randrange(len(items))]
    if rng.random() < 0.5:
        rows.insert(i + 1, dict(rows[i]))
        return f"copy of seq {rows[i]['seq']}"
    mates = [j for j in items if j != i and rows[j]["batch"] == rows[i]["batch"]]
    if not mates:
        return None
    j = mates[rng.randrange(len(mates))]
    rows[j]["seq"] = rows[i]["seq"]
    return f"seq {rows[i]['seq']} given twice"


def _user_tick(rows: list[dict[str, Any]]) -> str | None:
    """A user's row of kind "tick" that shares the seq of the first placed event (TR-15, TR-16):
    both rows are duplicate_seq items, although two operators add "tick" rows of their own."""
    for i, r in enumerate(rows):
        if r["kind"] == "event" and r["seq"] is not None and r["batch"] is not None:
            rows.insert(i + 1, {**r, "kind": "tick"})
            return f"a user's tick sharing seq {r['seq']}"
    return None


def _append_load(rows: list[dict[str, Any]], rng: random.Random) -> str:
    """A load row with a hostile report, after the items of a batch (its marker is renumbered)."""
    markers = [i for i, r in enumerate(rows) if r["kind"] == MARKER]
    at = markers[rng.randrange(len(markers))]
    row: dict[str, Any] = {c: None for c in ROW_COLUMNS}
    text = METRICS_TEXTS[rng.randrange(len(METRICS_TEXTS))]
    row.update(trace_id=rows[at]["trace_id"], batch=rows[at]["batch"], seq=rows[at]["seq"], kind="load",
               value=0, metrics=text, **{DELIVERY: rows[at][DELIVERY]})  # fmt: skip
    rows.insert(at, row)
    rows[at + 1]["seq"] += 1
    return repr(text)


def _close_batches(rows: list[dict[str, Any]]) -> None:
    """Each marker after its batch's items: seq one past the highest seq of the batch."""
    top: dict[Any, int] = {}
    for r in rows:
        if r["kind"] != MARKER and r["seq"] is not None and r["batch"] is not None:
            top[r["batch"]] = max(top.get(r["batch"], r["seq"]), r["seq"])
    for r in rows:
        if r["kind"] == MARKER:
            r["seq"] = top.get(r["batch"], r["seq"] - 1) + 1


def generated_traces(area: str, count: int, seed: int, max_batches: int) -> list[Trace]:
    """The traces with a valid configuration among ``count`` of the area's differential mix, cut
    to ``max_batches`` batches and without restart points (a table has none)."""
    import importlib

    from harness.reference_engine import ReferenceEngine
    from strategies.common import differential_traces as draw

    module = importlib.import_module(f"strategies.{area}")
    out = []
    for t in draw(module.DIFFERENTIAL, count, seed):
        t = Trace(t.area, t.config, t.batches[:max_batches], name=t.name)
        if not isinstance(ReferenceEngine().run([t])[0], InvalidConfig):
            out.append(t)
    return out


TRACE_TIMES = 10**8  # generated traces keep their times in 0..10**7 (strategies.common.BOUNDED)
STREAM_NAMES = ("None", "", "null")  # stream ids a careless str() or a default could mistake


def hostile_tables(
    area: str, count: int, seed: int, max_batches: int, typing: Typing, rate: float = 0.3
) -> list[HostileTable]:
    """``count`` tables of ``area`` from its generated traces, each row mutated with probability
    ``rate``, a duplicate seq per batch on average, a user's "tick" row sharing an event's seq
    in the first table with an event, and some tables' seqs shifted (gaps, negative seqs); then
    one table of a null stream id (TR-16) with the operator's own settings."""
    rng = random.Random(f"{area}/{seed}/{typing.name}")
    chosen = mutations_of(area)
    names = sorted(chosen)
    tables: list[HostileTable] = []
    ticked = False  # the first table with an event gets a user's tick sharing its seq
    def candidates() -> Iterator[Trace]:
        yield from generated_traces(area, 2 * count + 4, seed, max_batches)
        # A narrow typing can refuse most of an area's traces (ids next to the i64 bounds): more
        # are drawn, from another seed, so that the null stream's table is never left out.
        yield from generated_traces(area, 8 * count + 16, seed + 7919, max_batches)

    for trace in candidates():
        if len(tables) > count:
            break
        n = len(tables)
        null_stream = n == count
        # The stream called "None" sits beside the null stream: neither may take the other's rows.
        stream = None if null_stream else STREAM_NAMES[n] if n < len(STREAM_NAMES) else f"s{n}"
        config = NULL_STREAM_CONFIG[area] if null_stream else trace.config
        rows = trace_rows(trace, stream)
        texts = _retype(rows, typing, area)
        if not all(_fits(typing, r) for r in rows):
            continue  # the trace's own numbers exceed the typing's columns
        if area in KEYS_IN_CONFIG and len(set(texts.values())) < len(texts):
            continue  # two keys of one text (booleans have two) would name one node or stream twice
        done: list[str] = []
        if rng.random() < 0.25 and all(typing.of(c) == "long" for c in TIME_COLUMNS):
            # TR-2: every time of the table moved next to a bound, so delays and gaps saturate
            offset = rng.choice((I64_MAX - 2 * TRACE_TIMES, I64_MIN))
            for r in rows:
                for name in TIME_COLUMNS:
                    if isinstance(r[name], int) and 0 <= r[name] <= TRACE_TIMES:
                        r[name] += offset
            done.append(f"times moved by {offset}")
        for r in rows:
            if r["kind"] == MARKER or rng.random() >= rate:
                continue
            before = dict(r)
            for _ in range(4):  # a few tries: some mutations concern other kinds of rows
                name = names[rng.randrange(len(names))]
                what = chosen[name](r, rng, typing)
                if what is not None and _fits(typing, r):
                    done.append(f"{name}: {what}")
                    break
                r.clear()
                r.update(before)
        if "metrics" in AREA_FIELDS[area]:
            for _ in range(1 + rng.randrange(2)):  # load rows are rare in traces: odd reports appended
                done.append(f"odd metrics: {_append_load(rows, rng)}")
        for _ in range(rng.randrange(len(trace.batches) + 1)):
            what = _duplicate(rows, rng)
            if what:
                done.append(f"duplicate seq: {what}")
        if not ticked:
            what = _user_tick(rows)
            if what:
                ticked = True
                done.append(f"duplicate seq: {what}")
        if rng.random() < 0.3:
            shift = rng.choice((-5, -(2**40), 2**40))
            low, high = INTEGER_RANGE[typing.seq]
            if all(low <= r["seq"] + shift <= high - 100 for r in rows if r["seq"] is not None):
                for r in rows:
                    r["seq"] = None if r["seq"] is None else r["seq"] + shift
                done.append(f"seqs shifted by {shift}")
        _close_batches(rows)
        config = _rename_keys(area, config, texts) if not null_stream else config
        tables.append(HostileTable(area, stream, config, typing, tuple(rows), len(trace.batches),
                                   tuple(done), trace.name))  # fmt: skip
    return tables


def hostile_row_count(table: HostileTable) -> int:
    """The rows a table's mutations touched (a shift counts once per row it moved)."""
    return sum(1 for m in table.mutations if not m.startswith(("seqs shifted", "times moved")))


# ---- one Spark query over many tables --------------------------------------------------------


def _arrow_table(tables: Sequence[tuple[int, HostileTable]]) -> Any:
    """Every row of every table: ``batch`` is the micro-batch a row arrives in; the row's own
    cells are ``c_<column>`` (text for keys, ready for Spark's cast to the typing), timestamps
    as ``c_<time>_us`` microseconds."""
    import pyarrow as pa

    cols: dict[str, list[Any]] = {"batch": [], "instance": []}
    for c in ROW_COLUMNS:
        cols[f"c_{c}"] = []
    for name in TIME_COLUMNS:
        cols[f"c_{name}_us"] = []
    for instance, table in tables:
        for r in table.rows:
            cols["batch"].append(r[DELIVERY])
            cols["instance"].append(instance)
            for c in ROW_COLUMNS:
                v = r[c]
                if c == "key" and v is not None:
                    v = _spark_text(v)
                if c in TIME_COLUMNS and isinstance(v, Micros):
                    cols[f"c_{c}_us"].append(v.micros)
                    v = None
                elif c in TIME_COLUMNS:
                    cols[f"c_{c}_us"].append(None)
                cols[f"c_{c}"].append(v)
    types = {name: pa.string() if name.removeprefix("c_") in TEXT_COLUMNS else pa.int64() for name in cols}
    return pa.table({n: pa.array(v, types[n]) for n, v in cols.items()})


def _spark_text(cell: Any) -> str:
    """A key cell as the text Spark's cast from string reads back as that cell."""
    if isinstance(cell, bytes):
        return cell.decode("utf-8")
    return key_text(cell) or ""


def _typed_columns(typing: Typing) -> list[Any]:
    """The engine's input columns of a typing, cast from the file's cells."""
    from pyspark.sql import functions as F

    out = []
    for c in ROW_COLUMNS:
        t = typing.of(c)
        if c in TIME_COLUMNS and t.startswith("timestamp"):
            micros = F.timestamp_micros(F.col(f"c_{c}_us"))
            out.append((micros.cast("timestamp_ntz") if t == "timestamp_ntz" else micros).alias(c))
        else:
            out.append(F.col(f"c_{c}").cast(t).alias(c))
    return out


@dataclass
class RunResult:
    """Per table index its output (or the query's failure), and what the run cost."""

    outputs: dict[int, Output]
    seconds: float
    micro_batches: int
    instances: int
    error: str | None = None
    by_instance: dict[int, tuple[str, str]] = field(default_factory=dict)


def run_tables(
    spark: Any, tables: Sequence[HostileTable], work: str, shuffle_partitions: int | None = None
) -> RunResult:
    """ONE streaming query over every table: per (area, typing) the area's operator
    (``engine_output(df, configs, seq_unique=False)``), outputs unioned into one parquet sink,
    split back per table by (operator instance, stream id). ``shuffle_partitions``: the query's
    own count (its checkpoint keeps it; the session's setting is restored once it started)."""
    return start_tables(spark, tables, work, shuffle_partitions).result()


@dataclass
class StartedTables:
    """The query of ``start_tables``, running in Spark's own threads until ``result`` waits for it."""

    spark: Any
    tables: Sequence[HostileTable]
    query: Any
    sink: str
    batches: int
    instances: dict[tuple[str, str], int]

    def result(self) -> RunResult:
        try:
            self.query.awaitTermination()
        finally:
            if self.query.isActive:
                self.query.stop()
        # its micro-batches' own time: it may have ended long before anyone waited for it
        seconds = sum(p["durationMs"].get("triggerExecution", 0) for p in self.query.recentProgress) / 1000
        tables, instances = self.tables, self.instances
        result = RunResult({}, seconds, self.batches, len(instances),
                           by_instance={n: g for g, n in instances.items()})  # fmt: skip
        if self.query.exception() is not None:
            result.error = str(self.query.exception())
            return result
        owner = {(instances[(t.area, t.typing.name)], t.stream): i for i, t in enumerate(tables)}
        raw: dict[int, dict[str, list[tuple[Any, ...]]]] = {
            i: {n: [] for n in TABLES[t.area]} for i, t in enumerate(tables)
        }
        for r in self.spark.read.parquet(self.sink).collect():
            d = r.asDict()
            owned = owner.get((d["hostile_instance"], d["stream_id"]))
            if owned is None:
                raise AssertionError(f"a row of no table: {d}")
            columns = TABLES[tables[owned].area][d["output"]]
            raw[owned][d["output"]].append(tuple(d[c] for c in columns))
        result.outputs = {i: canonical(tables[i].area, out) for i, out in raw.items()}
        return result


def start_tables(
    spark: Any, tables: Sequence[HostileTable], work: str, shuffle_partitions: int | None = None
) -> StartedTables:
    """``run_tables``' query, started and not waited for: the plan is built in the caller's thread."""
    import importlib
    import os

    from pyspark.sql import functions as F

    from spark_impl.trace_source import SOURCE_NAME, write_trace_file

    groups: dict[tuple[str, str], list[int]] = {}
    for i, t in enumerate(tables):
        groups.setdefault((t.area, t.typing.name), []).append(i)
    instances = {g: n for n, g in enumerate(sorted(groups))}
    indexed = [(instances[(t.area, t.typing.name)], t) for t in tables]
    path = os.path.join(work, "hostile.parquet")
    write_trace_file(path, _arrow_table(indexed))
    batches = max(t.batches for t in tables)
    df = spark.readStream.format(SOURCE_NAME).option("path", path).option("num_batches", str(batches)).load()
    output = None
    for (area, typing_name), n in sorted(instances.items(), key=lambda x: x[1]):
        mine = df.filter(F.col("instance") == n).select(*_typed_columns(TYPING[typing_name]))
        configs = {tables[i].stream: dict(tables[i].config) for i in groups[(area, typing_name)]
                   if tables[i].stream is not None}  # fmt: skip
        part = importlib.import_module(f"spark_impl.{area}").engine_output(mine, configs, seq_unique=False)
        part = part.withColumn("hostile_instance", F.lit(n))
        output = part if output is None else output.unionByName(part, allowMissingColumns=True)
    assert output is not None
    sink, checkpoint = os.path.join(work, "sink"), os.path.join(work, "checkpoint")
    session_partitions = spark.conf.get("spark.sql.shuffle.partitions")
    if shuffle_partitions is not None:
        spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions))
    try:
        query = (
            output.writeStream.format("parquet").option("checkpointLocation", checkpoint).option("path", sink)
            .outputMode("append").trigger(availableNow=True).start()
        )  # fmt: skip
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", session_partitions)
    return StartedTables(spark, tables, query, sink, batches, instances)


def differences(table: HostileTable, actual: Output) -> str:
    """Empty when the operator's answer equals the oracle's on the trace the table means."""
    from harness.outputs import diff

    expected = expected_output(table)
    if isinstance(expected, Exception):
        return f"the oracle refused the table's config: {expected}"
    return diff(table.area, expected, actual)


def all_tables(
    areas: Iterable[str], count: int, seed: int, max_batches: int, typings: int
) -> list[HostileTable]:
    """Tables of every area: ``typings`` typings per area, taken in turn from TYPINGS from a
    place that depends on the area and the seed, so every typing meets every area over runs."""
    out = []
    for a, area in enumerate(sorted(areas)):
        # Booleans have two values: a configuration naming three nodes or streams cannot use them.
        usable = [t for t in TYPINGS if not (area in KEYS_IN_CONFIG and t.key == "boolean")]
        for k in range(typings):
            typing = usable[(seed + a + k * 3) % len(usable)]
            out += hostile_tables(area, count, seed + k, max_batches, typing)
    return out


__all__ = [
    "AREA_FIELDS",
    "HostileTable",
    "Meaning",
    "Micros",
    "RunResult",
    "TYPINGS",
    "Typing",
    "all_tables",
    "differences",
    "amount_cell",
    "eventtime_cell",
    "expected_output",
    "generated_traces",
    "hostile_row_count",
    "hostile_tables",
    "key_text",
    "map_back",
    "meaning",
    "messages_cell",
    "metrics_cell",
    "row_item",
    "run_tables",
    "time_millis",
    "trace_rows",
    "typed_key",
]
