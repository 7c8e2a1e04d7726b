"""Session windows closed by the watermark, with persistent timers (F017E), on Spark Structured Streaming.

Usage
-----
Apply the operator to your own streaming DataFrame and write its output::

    from spark_impl.session_windows import session_windows

    sw = session_windows(
        events_df,                    # a streaming DataFrame
        key_col="user",               # any type, compared as its string form
        event_time_col="ts",          # LongType milliseconds, or TimestampType
        gap_ms=1000,                  # inactivity gap (F017E-R2, R3)
        allowed_lateness_ms=0,        # F017E-R7, R10
        bounded_delay_ms=0,           # the watermark's delay (F017E-R5)
        emit_strategy="OnWindowClose",  # | "Final" (F017E-R11)
        value_col="amount",           # summed per session (count is always there)
    )
    q = (sw.output.writeStream.format("parquet")
         .option("checkpointLocation", ckpt).start(path))

``sw.output`` is the one combined stream (schema ``OUTPUT_SCHEMA``); its
``output`` column says which table a row belongs to. The convenience
DataFrames are projections of it:

- ``sw.sessions``: closed sessions with ``session_start``, ``session_end``,
  ``count``, ``sum`` and ``reason`` (``timer`` or ``watermark``, F017E-R8).
- ``sw.late``: every late event with the watermark it was judged by and its
  ``verdict`` (``late_output`` or ``dropped``, F017E-R10, R11);
  ``sw.late_output`` only the routed ones (empty under ``Final``).
- ``sw.timers``: the pending timers after each micro-batch, one per open
  session (F017E-R12); ``report_timers=False`` leaves them out.
- ``sw.progress``: one row per stream and micro-batch: watermark, open
  sessions and the counters (F017E-R9).
- ``sw.errors``: malformed rows (F017E-R20), with the reason.

Every projection is a separate streaming plan; to get several tables from one
run, write ``sw.output`` once (or use ``foreachBatch``) and split by ``output``.

Optional columns: ``stream_id_col`` (many independent streams in one query;
without it the whole DataFrame is one stream), ``seq_col`` (arrival order
inside a micro-batch; without it the rows are taken in event-time order,
ties by key), ``kind_col`` (event | batch_end; other kinds are error rows;
needs ``seq_col``), ``value_col``, ``batch_col`` (the batch number reported;
without it the operator counts micro-batches per stream). ``stream_configs``
maps a stream id to its own settings (``gap``, ``allowed_lateness``,
``bounded_delay``, ``emit_strategy``).

Design (how Spark realises the clauses)
---------------------------------------
- ONE GROUP PER STREAM: ``groupBy(stream_id).transformWithStateInPandas(...,
  outputMode="Append", timeMode="None")``. The watermark is one per stream
  and moves per event (F017E-R5, R6), and a session of a key without new
  events must close when other keys move it (R14): every open session and
  the timer index live in the stream's state. Spark's own watermark and
  event-time timers are not used (one value per query, moved between
  micro-batches only; EventTime mode would drop rows before we judge them).
  The watermark moves only with the stream's own rows, so the group is called
  in every micro-batch that can close a session; the harness's ``batch_end``
  row per stream and batch adds progress rows for empty batches.
- STATE: one ValueState per stream (RocksDB provider): a layout version, the
  greatest event time seen (the watermark generator), the counters, the
  number of micro-batches seen and one blob: the open sessions as the timer
  index (Arrow IPC, zstd: trigger_time, key, session_start,
  last_event_time, count, sum; one row per pending timer, sorted by trigger
  time). One read and one write per stream and micro-batch; the operator
  object keeps nothing between calls, so "dropped and recreated between
  micro-batches" is what happens every time (R15, R16).
- VECTORISED (F017E-R22): per batch, the watermark after each event is a
  running maximum; lateness one comparison; the sessions are the connected
  components of the stored sessions and the on-time events per key (one
  sort, a grouped running maximum, reduceat); a component closes at the
  first event whose watermark exceeds its timer (searchsorted over the
  non-decreasing watermarks), by the watermark when that event has the
  component's key, by its timer otherwise (R8).
- SATURATING i64 arithmetic is explicit (numpy wraps): end = min(i64 max,
  last + gap), trigger = min(i64 max, end + lateness), watermark =
  max(i64 min, max - delay).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from harness.traces import I64_MAX, InvalidConfig
from spark_impl.common import (
    OperatorStreams,
    OutputRows,
    StreamGroupProcessor,
    check_columns,
    event_time_millis,
    long_or_zero,
    one_group_per_stream,
    opt,
    require_int,
    sat_sub,
    stream_id_column,
    stream_settings,
    table_projections,
    warn_without_seq,
    with_defaults,
)
from spark_impl.session import check_session

LAYOUT_VERSION = 1
STRATEGIES = ("OnWindowClose", "Final")
CONFIG_KEYS = ("gap", "allowed_lateness", "bounded_delay", "emit_strategy")

STRING_COLS = ("output", "stream_id", "key", "reason", "verdict")
OUTPUT_COLUMNS = (
    "output", "stream_id", "batch", "seq", "key", "session_start", "session_end", "count", "sum",
    "reason", "event_time", "watermark", "verdict", "trigger_time", "open_sessions",
    "sessions_closed_by_timer", "sessions_closed_by_watermark", "late_events",
)  # fmt: skip
OUTPUT_SCHEMA = ", ".join(f"`{c}` {'string' if c in STRING_COLS else 'long'}" for c in OUTPUT_COLUMNS)
STATE_SCHEMA = (
    "layout_version int, has_max boolean, max_event_time long, closed_by_timer long, "
    "closed_by_watermark long, late_events long, batches long, sessions binary"
)

TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "sessions": ("stream_id", "batch", "key", "session_start", "session_end", "count", "sum", "reason"),
    "late": ("stream_id", "batch", "seq", "key", "event_time", "watermark", "verdict"),
    "timers": ("stream_id", "batch", "key", "session_start", "trigger_time"),
    "progress": (
        "stream_id", "batch", "watermark", "open_sessions", "sessions_closed_by_timer",
        "sessions_closed_by_watermark", "late_events",
    ),
    "errors": ("stream_id", "batch", "seq", "reason"),
}  # fmt: skip


# ---- configuration (F017E-R18) ----------------------------------------------------------


@dataclass(frozen=True)
class StreamConfig:
    gap: int
    allowed_lateness: int = 0
    bounded_delay: int = 0
    emit_strategy: str = "OnWindowClose"


def validate_config(config: Mapping[str, Any]) -> StreamConfig:
    """A trace-style config mapping (F017E-R18) -> StreamConfig, or InvalidConfig."""
    unknown = set(config) - set(CONFIG_KEYS)
    if unknown:
        raise InvalidConfig(f"unknown session_windows settings {sorted(unknown)}")
    if config.get("gap") is None:
        raise InvalidConfig("gap is required")
    strategy = config.get("emit_strategy", "OnWindowClose")
    strategy = getattr(strategy, "value", strategy)  # an enum member is accepted by its value
    if not isinstance(strategy, str) or strategy not in STRATEGIES:
        raise InvalidConfig(f"emit_strategy must be one of {list(STRATEGIES)}, got {strategy!r}")
    return StreamConfig(
        gap=require_int("gap", config["gap"], 1),
        allowed_lateness=require_int("allowed_lateness", config.get("allowed_lateness", 0), 0),
        bounded_delay=require_int("bounded_delay", config.get("bounded_delay", 0), 0),
        emit_strategy=strategy,
    )


def _sat_add(a: np.ndarray, s: int) -> np.ndarray:
    """min(i64 max, a + s) for s >= 0, without wrapping."""
    with np.errstate(over="ignore"):
        return np.where(a > I64_MAX - s, np.int64(I64_MAX), a + np.int64(s))


# ---- the stream state ---------------------------------------------------------------------

_SESSION_COLS = ("trigger_time", "key", "session_start", "last_event_time", "count", "sum")
Sessions = dict[str, np.ndarray]  # the columns above; "key" holds objects (str), the rest int64
_COMPRESS_FROM = 4096  # sessions; zstd costs more than it saves on small states


def _empty_sessions() -> Sessions:
    return {c: np.empty(0, object if c == "key" else np.int64) for c in _SESSION_COLS}


def _to_ipc(sessions: Sessions) -> bytes:
    import pyarrow as pa

    n = len(sessions["key"])
    if n == 0:
        return b""
    table = pa.table(
        {c: pa.array(sessions[c], type=pa.string() if c == "key" else pa.int64()) for c in _SESSION_COLS}
    ).replace_schema_metadata({"layout": "sessions", "layout_version": str(LAYOUT_VERSION)})
    options = pa.ipc.IpcWriteOptions(compression="zstd" if n >= _COMPRESS_FROM else None)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=options) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def _from_ipc(blob: bytes) -> Sessions:
    import pyarrow as pa

    if not blob:
        return _empty_sessions()
    table = pa.ipc.open_stream(pa.py_buffer(bytes(blob))).read_all()
    meta = table.schema.metadata or {}
    if meta.get(b"layout") != b"sessions" or meta.get(b"layout_version") != str(LAYOUT_VERSION).encode():
        raise RuntimeError(
            f"session_windows: the sessions blob in the checkpoint has layout {meta!r}; this release "
            f"reads layout version {LAYOUT_VERSION} only. Start from a new checkpoint."
        )
    return {
        c: table.column(c).to_numpy(zero_copy_only=False).astype(object if c == "key" else np.int64)
        for c in _SESSION_COLS
    }


@dataclass
class StreamState:
    """Everything one stream keeps across micro-batches (one ValueState, F017E-R15)."""

    max_event_time: int | None = None
    closed_by_timer: int = 0
    closed_by_watermark: int = 0
    late_events: int = 0
    batches: int = 0
    # F017E-R12: the timer index: one row per open session, sorted by trigger time.
    sessions: Sessions = field(default_factory=_empty_sessions)

    def to_tuple(self) -> tuple[Any, ...]:
        return (
            LAYOUT_VERSION, self.max_event_time is not None, self.max_event_time or 0, self.closed_by_timer,
            self.closed_by_watermark, self.late_events, self.batches, _to_ipc(self.sessions),
        )  # fmt: skip

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...]) -> StreamState:
        version = value[0]
        if version != LAYOUT_VERSION:
            raise RuntimeError(
                f"session_windows: the checkpoint holds state layout version {version}; this "
                f"release reads version {LAYOUT_VERSION} only. Start from a new checkpoint."
            )
        return cls(
            max_event_time=int(value[2]) if value[1] else None, closed_by_timer=int(value[3]),
            closed_by_watermark=int(value[4]), late_events=int(value[5]), batches=int(value[6]),
            sessions=_from_ipc(value[7]),
        )  # fmt: skip


class _Out(OutputRows):
    def __init__(self, stream_id: str) -> None:
        super().__init__(stream_id, OUTPUT_COLUMNS, STRING_COLS)


# ---- processing one stream's rows (pure numpy; runs in the worker) -------------------------


def process_rows(
    state: StreamState, rows: pd.DataFrame, cfg: StreamConfig, stream_id: str, has_batch: bool,
    report_timers: bool = True,
) -> pd.DataFrame:  # fmt: skip
    """Applies one call's rows of one stream to its state; returns the output rows.

    ``rows`` has the normalised columns built by ``session_windows``: sw_batch,
    sw_seq, sw_kind, sw_key, sw_et, sw_et_null, sw_value.
    """
    out = _Out(stream_id)
    cols = {c: rows[c].to_numpy() for c in ("sw_batch", "sw_seq", "sw_kind", "sw_key", "sw_et", "sw_et_null",
                                            "sw_value")}  # fmt: skip
    if has_batch:
        batch_of = cols["sw_batch"].astype(np.int64)
        groups = [(int(b), batch_of == b) for b in np.unique(batch_of)]
    else:
        groups = [(state.batches, np.ones(len(rows), bool))]
    for b, mask in groups:
        part = {c: v[mask] for c, v in cols.items()} if len(groups) > 1 else cols
        _process_batch(state, part, cfg, b, out, report_timers)
        state.batches += 1
    return out.frame()


def _process_batch(
    st: StreamState, rows: dict[str, np.ndarray], cfg: StreamConfig, b: int, out: _Out, report_timers: bool
) -> None:
    order = np.argsort(rows["sw_seq"].astype(np.int64), kind="stable")  # F017E-R19: arrival order is seq
    kind = rows["sw_kind"][order].astype(object)
    key = rows["sw_key"][order].astype(object)
    et = rows["sw_et"][order].astype(np.int64)
    seq = rows["sw_seq"][order].astype(np.int64)

    # F017E-R20: malformed rows, decided vectorised; they change nothing.
    is_event = kind == "event"
    key_null = pd.isna(key)
    err = np.full(len(kind), None, dtype=object)
    err[~is_event & (kind != "batch_end")] = "unsupported_item"
    err[is_event & key_null] = "missing_key"
    err[is_event & ~key_null & rows["sw_et_null"][order].astype(bool)] = "missing_event_time"
    bad = err != None  # noqa: E711 - elementwise
    if bad.any():
        out.add("errors", int(bad.sum()), batch=b, seq=seq[bad], reason=err[bad])
    ev = is_event & ~bad
    keys, times, seqs = key[ev], et[ev], seq[ev]
    values = rows["sw_value"][order].astype(np.int64)[ev]

    # F017E-R5/R6: the watermark after each event, in arrival order.
    if len(times):
        running = np.maximum.accumulate(times)
        if st.max_event_time is not None:
            running = np.maximum(running, np.int64(st.max_event_time))
        wm = sat_sub(running, cfg.bounded_delay)
        st.max_event_time = int(running[-1])
        late = times < sat_sub(wm, cfg.allowed_lateness)  # F017E-R10: event_time + lateness < watermark
    else:
        wm = np.empty(0, np.int64)
        late = np.zeros(0, bool)
    n_late = int(late.sum())
    if n_late:
        st.late_events += n_late
        verdict = "late_output" if cfg.emit_strategy == "OnWindowClose" else "dropped"  # F017E-R11
        out.add("late", n_late, batch=b, seq=seqs[late], key=keys[late], event_time=times[late],
                watermark=wm[late], verdict=verdict)  # fmt: skip

    st.sessions = _sessions_step(st, cfg, keys, times, values, ~late, wm, b, out)

    # F017E-R9/R19: the progress row and the pending timers after the batch.
    s = st.sessions
    watermark = None
    if st.max_event_time is not None:
        watermark = int(sat_sub(np.array([st.max_event_time], np.int64), cfg.bounded_delay)[0])
    out.add(
        "progress", 1, batch=b, watermark=opt(watermark), open_sessions=len(s["key"]),
        sessions_closed_by_timer=st.closed_by_timer, sessions_closed_by_watermark=st.closed_by_watermark,
        late_events=st.late_events,
    )  # fmt: skip
    if report_timers and len(s["key"]):
        out.add("timers", len(s["key"]), batch=b, key=s["key"], session_start=s["session_start"],
                trigger_time=s["trigger_time"])  # fmt: skip


def _grouped_running_max(codes: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Running maximum of ``values`` within runs of equal ``codes`` (codes sorted ascending)."""
    distinct, rank = np.unique(values, return_inverse=True)
    # codes ascending, so code * n + rank only grows from one run to the next: one accumulate for all.
    packed = codes.astype(np.int64) * len(distinct) + rank
    return distinct[np.maximum.accumulate(packed) - codes.astype(np.int64) * len(distinct)]


def _sessions_step(
    st: StreamState, cfg: StreamConfig, keys: np.ndarray, times: np.ndarray, values: np.ndarray,
    on_time: np.ndarray, wm: np.ndarray, b: int, out: _Out,
) -> Sessions:  # fmt: skip
    """F017E-R3/R7/R8/R22: the batch's sessions as components; those passed by the watermark close."""
    stored = st.sessions
    n_stored, n_new = len(stored["key"]), int(on_time.sum())
    if n_stored + n_new == 0:
        return stored
    # Keys of stored sessions and of every event (late ones too: R8 compares the passing event's key).
    codes, found = pd.factorize(np.concatenate([stored["key"], keys]))
    uniques = np.asarray(found, dtype=object)
    stored_codes, event_codes = codes[:n_stored], codes[n_stored:]
    block_code = np.concatenate([stored_codes, event_codes[on_time]])
    start = np.concatenate([stored["session_start"], times[on_time]])
    last = np.concatenate([stored["last_event_time"], times[on_time]])
    count = np.concatenate([stored["count"], np.ones(n_new, np.int64)])
    total = np.concatenate([stored["sum"], values[on_time]])
    stored_trigger = np.concatenate([stored["trigger_time"], np.zeros(n_new, np.int64)])
    is_stored = np.arange(n_stored + n_new) < n_stored

    order = np.lexsort((start, block_code))
    code_s, start_s, last_s = block_code[order], start[order], last[order]
    first = np.ones(len(order), bool)
    first[1:] = code_s[1:] != code_s[:-1]
    reach = _grouped_running_max(code_s, last_s)
    before = np.empty_like(reach)
    before[0] = 0
    before[1:] = reach[:-1]
    # F017E-R3: a block more than gap after everything before it (same key) starts a new session.
    heads = np.flatnonzero(first | (start_s > _sat_add(before, cfg.gap)))
    c_code = code_s[heads]
    c_start = start_s[heads]
    c_last = np.maximum.reduceat(last_s, heads)
    c_count = np.add.reduceat(count[order], heads)
    c_sum = np.add.reduceat(total[order], heads)
    size = np.diff(np.append(heads, len(order)))
    untouched = (size == 1) & is_stored[order][heads]
    c_end = _sat_add(c_last, cfg.gap)  # F017E-R2
    # F017E-R12: an untouched session keeps its stored timer; a grown or merged one gets a new one.
    c_trigger = np.where(untouched, stored_trigger[order][heads], _sat_add(c_end, cfg.allowed_lateness))

    passing = np.searchsorted(wm, c_trigger, side="right")  # F017E-R7: first event with watermark > trigger
    closed = passing < len(wm)
    n_closed = int(closed.sum())
    if n_closed:
        by_watermark = event_codes[passing[closed]] == c_code[closed]  # F017E-R8
        n_wm = int(by_watermark.sum())
        st.closed_by_watermark += n_wm
        st.closed_by_timer += n_closed - n_wm
        out.add(
            "sessions", n_closed, batch=b, key=uniques[c_code[closed]], session_start=c_start[closed],
            session_end=c_end[closed], count=c_count[closed], sum=c_sum[closed],
            reason=np.where(by_watermark, "watermark", "timer").astype(object),
        )  # fmt: skip
    keep = np.flatnonzero(~closed)
    keep = keep[np.lexsort((c_start[keep], c_code[keep], c_trigger[keep]))]  # the timer index order
    return {
        "trigger_time": c_trigger[keep], "key": uniques[c_code[keep]], "session_start": c_start[keep],
        "last_event_time": c_last[keep], "count": c_count[keep], "sum": c_sum[keep],
    }  # fmt: skip


# ---- the Spark operator ----------------------------------------------------------------


class SessionWindowProcessor(StreamGroupProcessor[StreamConfig]):
    """The stateful processor: one call per stream (group) and micro-batch."""

    state_name = "session_windows"
    state_schema = STATE_SCHEMA
    state_class = StreamState
    report_timers = True

    def prepare(self, pdf: pd.DataFrame) -> pd.DataFrame:
        return with_defaults(pdf, _DEFAULTS)

    def process(self, st: StreamState, pdf: pd.DataFrame, cfg: StreamConfig, stream_id: str) -> pd.DataFrame:
        return process_rows(st, pdf, cfg, stream_id, self.has_batch, self.report_timers)


class _UnorderedProcessor(SessionWindowProcessor):
    """Without a seq column: rows of a micro-batch in event-time order, ties by key."""

    def prepare(self, pdf: pd.DataFrame) -> pd.DataFrame:
        pdf = super().prepare(pdf).sort_values(["sw_et", "sw_key"], kind="stable").reset_index(drop=True)
        pdf["sw_seq"] = np.arange(len(pdf), dtype=np.int64)
        return pdf


_DEFAULTS: dict[str, Any] = {"sw_batch": np.int64(0), "sw_seq": np.int64(0), "sw_kind": "event",
                             "sw_value": np.int64(0)}  # fmt: skip


@dataclass
class SessionWindowStreams(OperatorStreams):
    """The operator's output: ``output`` (combined) and its projections; ``write_tables``
    writes every table from one query."""

    table_columns = TABLE_COLUMNS

    output: Any
    sessions: Any
    late: Any
    late_output: Any
    timers: Any
    progress: Any
    errors: Any


def session_windows(
    df: Any,
    key_col: str,
    event_time_col: str,
    gap_ms: int,
    allowed_lateness_ms: int = 0,
    bounded_delay_ms: int = 0,
    emit_strategy: str = "OnWindowClose",
    value_col: str | None = None,
    stream_id_col: str | None = None,
    seq_col: str | None = None,
    kind_col: str | None = None,
    batch_col: str | None = None,
    stream_configs: Mapping[str, Mapping[str, Any]] | None = None,
    report_timers: bool = True,
) -> SessionWindowStreams:
    """Applies F017E session windows to a streaming DataFrame (see the module docstring).

    Raises ``harness.traces.InvalidConfig`` for a bad setting or column.
    """
    from pyspark.sql import functions as F

    default, per_stream = stream_settings(
        validate_config,
        {"gap": gap_ms, "allowed_lateness": allowed_lateness_ms, "bounded_delay": bounded_delay_ms,
         "emit_strategy": emit_strategy},
        stream_configs,
    )  # fmt: skip
    fields = {f.name: f.dataType for f in df.schema.fields}
    check_session(df.sparkSession, "session_windows")
    warn_without_seq("session_windows", seq_col, "event-time order, ties by key")
    check_columns(
        fields,
        {"key_col": key_col, "event_time_col": event_time_col, "stream_id_col": stream_id_col,
         "seq_col": seq_col, "kind_col": kind_col, "value_col": value_col, "batch_col": batch_col},
        ("seq_col", "batch_col", "value_col"),
        kind_col, seq_col,
    )  # fmt: skip
    et = event_time_millis(fields, event_time_col)

    cols = [
        stream_id_column(stream_id_col, "sw_sid"),
        F.col(key_col).cast("string").alias("sw_key"),
        long_or_zero(et).alias("sw_et"),
        et.isNull().alias("sw_et_null"),
    ]
    for label, name in (("sw_batch", batch_col), ("sw_seq", seq_col), ("sw_value", value_col)):
        if name:
            cols.append(long_or_zero(name).alias(label))
    if kind_col:
        cols.append(F.col(kind_col).cast("string").alias("sw_kind"))
    processor = (SessionWindowProcessor if seq_col else _UnorderedProcessor)(
        default, per_stream, batch_col is not None
    )
    processor.report_timers = report_timers
    output = one_group_per_stream(df, cols, "sw_sid", processor, OUTPUT_SCHEMA)
    tables = table_projections(output, TABLE_COLUMNS)
    return SessionWindowStreams(
        output=output, late_output=tables["late"].filter(F.col("verdict") == "late_output"), **tables
    )


def native_session_report(spark: Any, trace: Any) -> dict[str, list[dict[str, int | str]]]:
    """Runs a trace's events through Spark's OWN ``session_window`` and reports what it emits.

    ``trace``: an F017E ``Trace`` (its well-formed ``event`` items; ``gap`` and
    ``bounded_delay`` from its config, no lateness). One streaming query, one
    trace batch per micro-batch (AvailableNow), append mode::

        events.withWatermark(ts, delay).groupBy(key, session_window(ts, gap)).agg(count, sum)

    Returns ``sessions`` (batch_id, key, session_start, session_end, count,
    sum; times in ms) and ``batches`` (batch_id, watermark in ms, dropped_late:
    rows dropped by Spark's watermark). For the comparison test only: it reads
    its result back to the driver.
    """
    import datetime
    import os
    import shutil
    import tempfile

    import pyarrow as pa
    from pyspark.sql import functions as F

    from spark_impl.trace_source import SOURCE_NAME, write_trace_file

    cfg = validate_config(trace.config)
    cols: dict[str, list[Any]] = {"batch": [], "key": [], "event_time": [], "value": []}
    for b, batch in enumerate(trace.batches):
        for i in batch:
            if i.kind == "event" and i.key is not None and i.event_time is not None:
                for name, v in zip(cols, (b, i.key, i.event_time, i.value), strict=True):
                    cols[name].append(v)
    types = {"batch": pa.int64(), "key": pa.string(), "event_time": pa.int64(), "value": pa.int64()}
    work = tempfile.mkdtemp(prefix="sw-native-")
    try:
        path, sink = os.path.join(work, "events.parquet"), os.path.join(work, "sessions")
        write_trace_file(path, pa.table({k: pa.array(v, types[k]) for k, v in cols.items()}))
        sessions = (
            spark.readStream.format(SOURCE_NAME).option("path", path)
            .option("num_batches", str(len(trace.batches))).load()
            .withColumn("ts", F.timestamp_millis("event_time"))
            .withWatermark("ts", f"{cfg.bounded_delay} milliseconds")
            .groupBy("key", F.session_window("ts", f"{cfg.gap} milliseconds").alias("w"))
            .agg(F.count("*").alias("count"), F.sum("value").alias("sum"))
            .select("key", F.unix_millis("w.start").alias("session_start"),
                    F.unix_millis("w.end").alias("session_end"), "count", "sum")
        )  # fmt: skip

        def keep(frame: Any, batch_id: int) -> None:
            frame.withColumn("batch_id", F.lit(batch_id)).write.mode("append").parquet(sink)

        query = (
            sessions.writeStream.outputMode("append").foreachBatch(keep).trigger(availableNow=True)
            .option("checkpointLocation", os.path.join(work, "checkpoint")).start()
        )  # fmt: skip
        query.awaitTermination()
        if query.exception() is not None:
            raise RuntimeError(f"native session_window query failed: {query.exception()}")
        progress = list(query.recentProgress)
        emitted = [r.asDict() for r in spark.read.parquet(sink).collect()] if os.path.exists(sink) else []
    finally:
        shutil.rmtree(work, ignore_errors=True)
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    batches = []
    for p in progress:
        wm = datetime.datetime.fromisoformat(p.eventTime["watermark"].replace("Z", "+00:00"))
        batches.append({
            "batch_id": int(p.batchId),
            "watermark": (wm - epoch) // datetime.timedelta(milliseconds=1),
            "dropped_late": sum(int(s.numRowsDroppedByWatermark or 0) for s in p.stateOperators),
        })  # fmt: skip
    return {"sessions": emitted, "batches": batches}


def engine_output(df: Any, stream_configs: Mapping[str, Mapping[str, Any]]) -> Any:
    """The harness engine's call (spark_impl.engine.area_module): its input columns, one stream per trace."""
    return session_windows(
        df, key_col="key", event_time_col="event_time", gap_ms=1, stream_id_col="trace_id", seq_col="seq",
        kind_col="kind", value_col="value", batch_col="batch", stream_configs=stream_configs,
    ).output  # fmt: skip


__all__ = [
    "LAYOUT_VERSION",
    "OUTPUT_COLUMNS",
    "OUTPUT_SCHEMA",
    "SessionWindowProcessor",
    "SessionWindowStreams",
    "StreamConfig",
    "StreamState",
    "engine_output",
    "native_session_report",
    "process_rows",
    "session_windows",
    "validate_config",
]
