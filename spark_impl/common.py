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
from contextlib import contextmanager
from typing import Any, ClassVar, Generic, TypeVar

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

    def __init__(self, stream_id: str | None, columns: Sequence[str], string_cols: Sequence[str]) -> None:
        self.stream_id = stream_id
        self.columns = tuple(columns)
        self.string_cols = frozenset(string_cols)
        self.pieces: list[tuple[int, dict[str, Any]]] = []

    def add(self, output: str, n: int, **cols: Any) -> None:
        """cols: numpy arrays / scalars; a long column may be (values, null_mask)."""
        if n:
            cols["output"] = output
            self.pieces.append((n, cols))

    def _text(self, c: str, total: int) -> np.ndarray:
        """String column ``c`` of every piece (None where a piece lacks it)."""
        # Filled by slice: numpy's full() of objects is slow on 100k-row pieces.
        text = np.empty(total, dtype=object)
        start = 0
        for n, cols in self.pieces:
            v = self.stream_id if c == "stream_id" else cols.get(c)
            if v is not None:
                text[start : start + n] = v
            start += n
        return text

    def frame(self) -> pd.DataFrame:
        total = sum(n for n, _ in self.pieces)
        data: dict[str, Any] = {}
        for c in self.columns:
            if c in self.string_cols or c == "stream_id":
                data[c] = self._text(c, total)
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
        return pd.DataFrame({c: data[c] for c in self.columns}, copy=False)

    def masked_frame(self, mask_col: str) -> pd.DataFrame:
        """As ``frame`` but every long column is plain int64 (0 where null) and ``mask_col``
        holds the nulls, bit i for the i-th long column: pandas turns a nullable long that
        crosses into another Python stage into a float, which loses precision past 2**53.
        Built straight from the pieces (no nullable frame first): it runs on every call."""
        total = sum(n for n, _ in self.pieces)
        longs = [c for c in self.columns if c not in self.string_cols and c != "stream_id"]
        if len(longs) > 63:
            raise ValueError("masked_frame: at most 63 long columns fit one mask")
        nulls = np.zeros(total, np.int64)
        data: dict[str, np.ndarray] = {}
        for c in self.columns:
            if c in self.string_cols or c == "stream_id":
                data[c] = self._text(c, total)
                continue
            bit = np.int64(1) << np.int64(longs.index(c))
            values = np.zeros(total, np.int64)
            start = 0
            for n, cols in self.pieces:
                v = cols.get(c)
                part = slice(start, start + n)
                if v is None:
                    nulls[part] |= bit
                elif isinstance(v, tuple):
                    values[part] = v[0]
                    nulls[part] |= np.where(np.asarray(v[1], bool), bit, np.int64(0))
                else:
                    values[part] = v
                start += n
            values[(nulls & bit) != 0] = 0
            data[c] = values
        data[mask_col] = nulls
        return pd.DataFrame(data, copy=False)


def opt(value: int | None) -> tuple[np.ndarray, np.ndarray]:
    return (np.array([0 if value is None else value], np.int64), np.array([value is None]))


def with_defaults(pdf: pd.DataFrame, defaults: Mapping[str, Any]) -> pd.DataFrame:
    """Adds the normalised columns the input did not carry."""
    missing = {c: v for c, v in defaults.items() if c not in pdf.columns}
    if missing:
        pdf = pdf.assign(**{c: np.full(len(pdf), v, dtype=object if isinstance(v, str) else None)
                            for c, v in missing.items()})  # fmt: skip
    return pdf


def batches_in(
    rows: pd.DataFrame, batch_col: str, has_batch: bool, next_batch: int
) -> list[tuple[int, pd.DataFrame]]:
    """One call's rows split by trace batch, in batch order (a restarted or multiplexed call
    may carry several); without a batch column the whole call is batch ``next_batch``."""
    if not has_batch:
        return [(next_batch, rows)]
    batch = rows[batch_col].to_numpy(np.int64)
    return [(int(b), rows[batch == b]) for b in np.unique(batch)]


try:
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle
except ImportError:  # pragma: no cover - pyspark is a dependency
    StatefulProcessor = object  # type: ignore[misc,assignment]
    StatefulProcessorHandle = Any  # type: ignore[misc,assignment]

Config = TypeVar("Config")
_T = TypeVar("_T")


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
        if sid is None:  # TR-16: str(None) would hand these settings to the stream called "None"
            raise InvalidConfig(
                "stream_configs names streams by their text; the null stream has the operator's own settings"
            )
        try:
            per_stream[str(sid)] = validate(conf)
        except InvalidConfig as e:
            raise InvalidConfig(f"stream {sid!r}: {e}") from None
    return validate(default), per_stream


_warned: set[str] = set()


def warn_once(message: str) -> None:
    """A UserWarning the first time ``message`` is said in this process."""
    import warnings

    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, UserWarning, stacklevel=3)


def warn_without_seq(operator: str, seq_col: str | None, order: str) -> None:
    """Without ``seq_col`` Spark keeps no arrival order inside a micro-batch: say what is used."""
    if seq_col is None:
        warn_once(
            f"{operator}: no seq_col, so the rows of one micro-batch are taken in {order}; disorder "
            "inside a micro-batch cannot be seen, only disorder across micro-batches can make an event "
            "late. Name an arrival-order column with seq_col to judge it event by event."
        )


def check_columns(
    fields: Mapping[str, Any], named: Mapping[str, str | None], integral: Iterable[str], kind_col: str | None,
    seq_col: str | None, text: Iterable[str] = (),
) -> None:  # fmt: skip
    """Every named column exists; those labelled in ``integral`` are integer columns, those in
    ``text`` string columns (TR-16: refused here, when the operator is defined)."""
    from pyspark.sql.types import IntegralType, StringType

    if kind_col is not None and seq_col is None:
        raise InvalidConfig("kind_col needs seq_col: control rows are placed by their sequence number")
    for label, name in named.items():
        if name is not None and name not in fields:
            raise InvalidConfig(f"{label}={name!r} is not a column of the input ({sorted(fields)})")
    for labels, wanted, accepted in ((integral, IntegralType, INTEGRAL_TYPES), (text, StringType, TEXT_TYPE)):
        for label in labels:
            name = named[label]
            if name is not None and not isinstance(fields[name], wanted):
                raise InvalidConfig(f"{label} {name!r} is {_type_name(fields[name])}; it accepts {accepted}")


INTEGRAL_TYPES = "an integral type (tinyint, smallint, int, bigint)"
TEXT_TYPE = "string (JSON text)"
TIME_TYPES = "integral milliseconds (tinyint, smallint, int, bigint) or timestamp, timestamp_ntz"


def _type_name(data_type: Any) -> str:
    return str(data_type.simpleString())


def millis_column(fields: Mapping[str, Any], label: str, name: str) -> Any:
    """A time column as LongType milliseconds (TR-16): integral columns as they are, timestamps
    by ``unix_millis`` (their microseconds divided by 1000, rounded towards minus infinity)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegralType, TimestampNTZType, TimestampType

    col_type = fields[name]
    if isinstance(col_type, (TimestampType, TimestampNTZType)):
        return F.unix_millis(F.col(name))
    if isinstance(col_type, IntegralType):
        return F.col(name).cast("long")
    raise InvalidConfig(f"{label} {name!r} is {_type_name(col_type)}; it accepts {TIME_TYPES}")


def event_time_millis(fields: Mapping[str, Any], event_time_col: str) -> Any:
    """The event-time column as LongType milliseconds (TR-2, TR-16), from integers or timestamps."""
    return millis_column(fields, "event_time_col", event_time_col)


VALUE_OUT_OF_RANGE = "value_out_of_range"  # TR-16: the kind and reason of an event whose value breaks TR-3
I32_MIN, I32_MAX = -(2**31), 2**31 - 1


def value_checked_kind(kind: Any, value: Any) -> Any:
    """TR-16: the kind column (text) with ``value_out_of_range`` for an event whose value lies
    outside 32 bits (``value``: the input's column, any integral type); a user's row of that
    kind becomes ``user value_out_of_range``, a kind no area accepts."""
    from pyspark.sql import functions as F

    wide = F.col(value).cast("long") if isinstance(value, str) else value.cast("long")
    beyond = (wide < F.lit(I32_MIN)) | (wide > F.lit(I32_MAX))
    return (
        F.when(kind == VALUE_OUT_OF_RANGE, F.concat(F.lit("user "), kind))
        .when((kind == "event") & beyond, F.lit(VALUE_OUT_OF_RANGE))
        .otherwise(kind)
    )


def place_flags(seq_col: str | None, batch_col: str | None, prefix: str) -> list[Any]:
    """The projection's flags of rows with no place (TR-16): a null seq, a null batch."""
    from pyspark.sql import functions as F

    flags = []
    if seq_col is not None:
        flags.append(F.col(seq_col).isNull().alias(prefix + "seq_null"))
    if batch_col is not None:
        flags.append(F.col(batch_col).isNull().alias(prefix + "batch_null"))
    return flags


def split_unplaced(rows: Any, prefix: str) -> tuple[Any, Any | None]:
    """TR-16: (the rows with a place, without the flags; the rows with none, or None when no
    flag exists). A row with no place never reaches a stateful stage."""
    from pyspark.sql import functions as F

    flags = [c for c in (prefix + "seq_null", prefix + "batch_null") if c in rows.columns]
    if not flags:
        return rows, None
    unplaced = F.lit(False)
    for flag in flags:
        unplaced = unplaced | F.col(flag)
    return rows.filter(~unplaced).drop(*flags), rows.filter(unplaced)


def with_unplaced_errors(output: Any, unplaced: Any | None, prefix: str) -> Any:
    """TR-16: ``output`` and, unioned with it, one error row per row with no place:
    ``missing_batch`` (batch null, the row's seq) before ``missing_seq`` (seq null). A stateless
    branch: these rows change nothing, so no stateful stage needs to see them."""
    from pyspark.sql import functions as F

    if unplaced is None:
        return output
    batch_null = F.col(prefix + "batch_null") if prefix + "batch_null" in unplaced.columns else F.lit(False)
    seq_null = F.col(prefix + "seq_null") if prefix + "seq_null" in unplaced.columns else F.lit(False)
    has_seq = prefix + "seq" in unplaced.columns
    cells = {
        "output": F.lit("errors"),
        "stream_id": F.col(prefix + "sid"),
        "batch": F.when(~batch_null, F.col(prefix + "batch")),
        "seq": F.when(~seq_null, F.col(prefix + "seq")) if has_seq else F.lit(None),
        "reason": F.when(batch_null, F.lit("missing_batch")).otherwise(F.lit("missing_seq")),
    }
    errors = unplaced.select(*[
        cells.get(f.name, F.lit(None)).cast(f.dataType).alias(f.name) for f in output.schema.fields
    ])  # fmt: skip
    return output.unionByName(errors)


def micro_batch_start_millis() -> Any:
    """The micro-batch's start instant in epoch milliseconds (``current_timestamp()``), the same
    in every row of a micro-batch.

    Spark writes that instant into the generated code of the stage that reads it as a constant,
    so every micro-batch compiled the whole stage again: about 25 ms, and 0.3 s once the stage
    holds the spread labels' CASEs (``scaleout.spread_labels``). Read through a lambda that Spark
    evaluates without generated code (``transform_values``), the instant stays out of the code,
    the projection holding it runs apart from the stage, and the stage's compiled code is reused
    from one micro-batch to the next (``tests/test_spark_batch_start.py`` counts compilations).
    """
    from pyspark.sql import functions as F

    instant = F.expr("element_at(transform_values(map(0, unix_millis(current_timestamp())), (k, v) -> v), 0)")
    return F.coalesce(instant, F.lit(0).cast("long"))  # never null, as current_timestamp()


def batch_marker(batch_col: str | None) -> Any:
    """A row's batch: the batch column as a long (null read as 0), or without one the micro-batch's
    start instant."""
    return long_or_zero(batch_col) if batch_col else micro_batch_start_millis()


def long_or_zero(column: Any) -> Any:
    """A column (or its name) as LongType, null read as 0 (a null flag travels beside it where it matters)."""
    from pyspark.sql import functions as F

    expr = F.col(column) if isinstance(column, str) else column
    return F.coalesce(expr.cast("long"), F.lit(0).cast("long"))


def stream_id_column(stream_id_col: str | None, alias: str) -> Any:
    """The stream id as text; without a stream column the whole DataFrame is one stream ("")."""
    from pyspark.sql import functions as F

    return (F.col(stream_id_col).cast("string") if stream_id_col else F.lit("")).alias(alias)


def one_group_per_stream(df: Any, cols: Sequence[Any], sid: str, processor: Any, output_schema: Any) -> Any:
    """Only ``cols`` cross into the Python worker; one group per stream id, state in Spark's
    store, timeMode "None": each operator keeps its own watermark (docs/spark-facts.md)."""
    return (
        df.select(*cols)
        .groupBy(sid)
        .transformWithStateInPandas(
            statefulProcessor=processor, outputStructType=output_schema, outputMode="Append", timeMode="None"
        )
    )


class OperatorStreams:
    """Base of every operator's result: ``output`` is the combined stream (its ``output``
    column names each row's table) and the other fields are its projections. Writing two
    projections to two sinks starts two queries, which run the operator twice, each with its
    own state: ``write_tables`` writes them all from one, and ``foreach_batch`` hands each
    micro-batch of ``output``'s rows to a function.

    An operator whose per-stream step can run in the sink (``sink_step``, a
    ``spark_impl.scaleout.SinkStep``, over ``sink_rows``, its one-stage stream) runs
    ``write_tables`` and ``foreach_batch`` with one stateful stage instead of two; ``output``
    keeps both stages, so that any streaming sink gets every table."""

    output: Any
    table_columns: ClassVar[Mapping[str, Sequence[str]]] = {}
    sink_rows: Any = None
    sink_step: Any = None

    def foreach_batch(
        self, function: Callable[[Any, int], None], checkpoint_location: str, *,
        trigger: Mapping[str, Any] | None = None, inspect_checkpoint: bool = True,
    ) -> Any:  # fmt: skip
        """Starts ONE query that calls ``function(batch_df, batch_id)`` for each micro-batch with
        the rows ``output`` would give for it (columns and tables alike), at least once: a batch
        Spark runs again after a failure gives ``function`` the same rows. ``trigger`` goes to
        ``DataStreamWriter.trigger``. Returns the StreamingQuery. Raises ``IncompatibleCheckpoint``
        or ``CorruptCheckpoint`` (spark_impl.checkpoints) for a checkpoint this release cannot
        continue from, before any batch runs (``inspect_checkpoint=False`` skips that inspection,
        for a caller that made it already) or, for what only a batch can see, in it."""
        from spark_impl.checkpoints import check_checkpoint

        step = self.sink_step
        if inspect_checkpoint:
            # C1-C4 (docs/reliability.md): refuse a checkpoint of another layout or a damaged one first
            stages = check_checkpoint(self.output.sparkSession, checkpoint_location)
            if step is not None:
                step.refuse_second_stage(stages)
        if step is None:
            stream, each = self.output, function
        else:

            def each(batch: Any, batch_id: int) -> None:
                step.run(batch, batch_id, checkpoint_location, lambda rows: function(rows, batch_id))

            stream = self.sink_rows
        writer = stream.writeStream.foreachBatch(each).option("checkpointLocation", checkpoint_location)
        if trigger:
            writer = writer.trigger(**trigger)
        return writer.start()

    def write_tables(
        self, path: str, checkpoint_location: str, *, trigger: Mapping[str, Any] | None = None
    ) -> Any:
        """Starts ONE query writing every table to ``<path>/<table>/batch_id=<n>`` (Parquet; a
        micro-batch Spark replays after a failure overwrites its own folders, so nothing is
        written twice). ``trigger`` goes to ``DataStreamWriter.trigger`` (e.g.
        ``{"processingTime": "10 seconds"}``). Returns the StreamingQuery; read a table back
        with ``spark.read.parquet(f"{path}/events")``: the first micro-batch (batch 0) writes
        every table, an empty one as its columns only, so each folder exists from then on.
        Raises ``IncompatibleCheckpoint`` or ``CorruptCheckpoint`` (spark_impl.checkpoints) for
        a checkpoint this release cannot continue from (see ``foreach_batch``)."""
        tables = {name: list(cols) for name, cols in self.table_columns.items()}
        base = path.rstrip("/")

        cached = self.sink_step is not None  # a SinkStep hands on rows of the batch it computed once

        def write_batch(batch: Any, batch_id: int) -> None:
            write_batch_tables(batch, batch_id, base, tables, cache=not cached, every_table=batch_id == 0)

        return self.foreach_batch(write_batch, checkpoint_location, trigger=trigger)


def write_batch_tables(
    batch: Any,
    batch_id: int,
    path: str,
    tables: Mapping[str, Sequence[str]],
    reached: Callable[[str, int], None] | None = None,
    cache: bool = True,
    every_table: bool = False,
) -> None:
    """``write_tables``'s work for one micro-batch (the ``foreachBatch`` function): every table
    present in ``batch`` (by its ``output`` column; with ``every_table``, every table of
    ``tables``, an empty one as a file of its columns alone) to
    ``<path>/<table>/batch_id=<batch_id>``, its ``tables[table]`` columns, overwriting what an
    earlier attempt of the same batch wrote.

    The batch is computed once first (``use_computed_once``), which commits the operators' state
    stores; the tables follow in name order. ``reached(point, batch_id)``, when given, is called at
    ``after_state`` (state committed, no table written), ``between_tables`` (before each table
    but the first) and ``after_sink`` (every table written, before Spark's commit log): the
    points where spark_impl/testing/faults.py kills the query. ``cache=False`` reads ``batch`` once per
    table instead of computing it once first: for rows that come from a batch kept already (a
    ``SinkStep``'s), where keeping them again would copy every row once more."""
    from pyspark.sql import functions as F

    def write(rows: Any) -> None:
        present = {r["output"] for r in rows.select("output").distinct().collect()}
        if reached:
            reached("after_state", batch_id)
        for n, name in enumerate(sorted(set(tables) if every_table else present & set(tables))):
            if reached and n:
                reached("between_tables", batch_id)
            table = rows.filter(F.col("output") == name).select(*tables[name])
            table.write.mode("overwrite").parquet(f"{path}/{name}/batch_id={batch_id}")
        if reached:
            reached("after_sink", batch_id)

    if cache:
        use_computed_once(batch, write)
    else:
        write(batch)


#: Spark's error for a kept block that is gone: the executor that held it died after the batch was kept
LOST_KEPT_BLOCK = "CHECKPOINT_RDD_BLOCK_ID_NOT_FOUND"
#: computations of one micro-batch before losses of its kept blocks fail it
KEEP_ATTEMPTS = 3


def use_computed_once(batch: Any, use: Callable[[Any], _T]) -> _T:
    """``use(rows)`` on ``batch`` ``computed_once``. When an executor holding some of the kept rows
    dies before ``use`` is done (``LOST_KEPT_BLOCK``), the batch is computed again and ``use`` runs
    again from its start, as Spark runs a failed micro-batch again: ``use`` must be what a replay
    does (the same writes, overwriting). So a lost executor costs the batch's computation, not
    the query (TR-17); after ``KEEP_ATTEMPTS`` losses the error is raised."""
    for attempt in range(1, KEEP_ATTEMPTS + 1):
        try:
            with computed_once(batch) as kept:
                return use(kept)
        except Exception as error:
            if attempt == KEEP_ATTEMPTS or LOST_KEPT_BLOCK not in str(error):
                raise
    raise AssertionError("unreachable: the last attempt returns or raises")


@contextmanager
def computed_once(batch: Any) -> Iterator[Any]:
    """A micro-batch's rows computed once (its stateful stages run and commit here) and kept in
    the executors for the reads that follow, released on exit; read them only inside.

    A local checkpoint, not ``persist``: Spark's columnar cache encodes and compresses every
    column, which added 1.9 s to a 100,000-event micro-batch of 39 columns at local[2], the
    local checkpoint's rows 0.4 s (``bench/sink_cache.py``). Unlike a cache, lost blocks are
    not computed again: read them through ``use_computed_once``, which computes the batch again
    when an executor that held some of them died."""
    kept = batch.localCheckpoint(eager=True)
    try:
        yield kept
    finally:
        if hasattr(kept, "_jdf"):  # classic: drop the blocks now, not when the JVM collects the RDD
            kept._jdf.queryExecution().analyzed().rdd().unpersist(False)
        # Spark Connect releases the checkpoint when the client's DataFrame is collected


def table_projections(output: Any, table_columns: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """One DataFrame per output table, projected from the combined stream by its ``output`` column."""
    from pyspark.sql import functions as F

    table = F.col("output")
    return {name: output.filter(table == name).select(*cols) for name, cols in table_columns.items()}


def native_watermark_progress(query_df: Any, output_mode: str, checkpoint: str) -> list[dict[str, int]]:
    """Runs a native (``withWatermark``) streaming query to the noop sink and returns, per
    micro-batch, its id, input rows, Spark's global watermark in ms and rows dropped as late."""
    import datetime

    query = (
        query_df.writeStream.format("noop").outputMode(output_mode).trigger(availableNow=True)
        .option("checkpointLocation", checkpoint).start()
    )  # fmt: skip
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"native watermark query failed: {query.exception()}")
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    report = []
    for p in query.recentProgress:
        # Properties, not keys: through Spark Connect some keys are only filled in by them.
        wm = datetime.datetime.fromisoformat(p.eventTime["watermark"].replace("Z", "+00:00"))
        report.append({
            "batch_id": int(p.batchId),
            "input_rows": int(p.numInputRows),
            "watermark": (wm - epoch) // datetime.timedelta(milliseconds=1),
            "dropped_late": sum(int(s.numRowsDroppedByWatermark or 0) for s in p.stateOperators),
        })  # fmt: skip
    return report


__all__ = [
    "OutputRows",
    "StreamGroupProcessor",
    "batches_in",
    "check_columns",
    "computed_once",
    "use_computed_once",
    "event_time_millis",
    "long_or_zero",
    "millis_column",
    "place_flags",
    "split_unplaced",
    "value_checked_kind",
    "with_unplaced_errors",
    "native_watermark_progress",
    "one_group_per_stream",
    "opt",
    "require_int",
    "sat_sub",
    "stream_id_column",
    "stream_settings",
    "table_projections",
    "with_defaults",
    "write_batch_tables",
]
