"""The shared shape of an operator that grows with the cluster: a wide stage and a narrow stage.

``docs/architecture.md`` explains the pattern and its cost model; this module
holds the pieces every operator built on it uses:

- ``default_buckets``: the bucket count when the user gives none, derived from
  the session's ``spark.sql.shuffle.partitions`` (``BUCKETS_PER_PARTITION`` per
  partition, so the hash spreads evenly); the operators never set the
  partition count themselves.
- ``to_buckets``: the stateless projection before the first shuffle. A row of
  one unit (a key, a partition) goes to its bucket; a row that concerns every
  unit of its stream (a clock advance) is copied to every bucket by an
  ``explode``; a stream that must stay whole (a global limit) goes to bucket 0.
- ``spread_labels``: the grouping label of each bucket, chosen so Spark's hash places the same
  number of buckets on every shuffle partition (a stage's busiest task gets its fair share).
- ``two_stages``: the query shape. A first ``transformWithStateInPandas``
  grouped by (stream, bucket) does the per-event work and emits table rows
  plus small summary rows; a second one grouped by (stream, route) keeps the
  per-stream figures in the group of route -1, which reads the summaries only,
  while every other group passes its rows through without touching state.
  Both stages are ``timeMode="None"``: each operator keeps its own watermarks.
- ``WideStage``: the base of a first stage's processor (configuration per
  stream, the call's rows as one frame).
- ``SecondStage``: the processor of the second stage (pass-through, or the
  narrow work a subclass defines in ``summarise``).
- ``UnitStage``: the processor of a stage of an operator composed of units,
  grouped by (stream, unit, bucket): the oxirs pipeline's.
- ``restore_nulls``: the projection after the second stage that turns the
  null mask of the long columns back into nulls.
- ``processing_time`` and ``with_ticks``: production processing time (an
  operator's ``processing_time_col``): a ``tick`` row per input partition and
  stream carrying the latest time seen, which the operator copies to every
  bucket and treats as a clock row before the micro-batch's rows.
- ``flag_duplicate_seqs``: the stateless step before the first shuffle that
  turns every row whose (stream, batch, seq) another row shares into a row of
  kind ``duplicate_seq`` (spec/traces.md TR-15).
- ``block_of``: the block of a unit by linear hashing of its xxhash64, so a
  bucket's state values stay small however many units it holds.
- ``pack_text`` and ``unpack_text``: a column of strings as one state value's
  two binary fields (lengths and UTF-8 bytes), decoded by one Arrow array.
- ``MemoryStore``: the state store in a dict, so a processor's own code runs
  without Spark (pure tests of an operator's stages).

Why the table rows cross the second stage instead of joining it in a union:
a stateful operator whose output feeds two branches of one query runs once per
branch, each with its own state, so the first stage would do all its work
twice. Two stateful operators in one query only feed forward within a
micro-batch: the first stage cannot read what the second decides in the same
batch, so what it needs from the whole stream must come from its own input
(copied rows) or from its own state.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import pyarrow as pa

from harness.traces import I64_MIN, InvalidConfig
from spark_impl.checkpoints import (
    NEW_LOCATION,
    RESTORE,
    CheckpointError,
    CorruptCheckpoint,
    IncompatibleCheckpoint,
    layout_refusal,
)
from spark_impl.common import (
    OutputRows,
    StatefulProcessor,
    StatefulProcessorHandle,
    batches_in,
    micro_batch_start_millis,
    use_computed_once,
    with_defaults,
)

BUCKETS_PER_PARTITION = 4
# Candidate labels per bucket, in CASEs of LABEL_CASE each: a CASE of 40 branches already leaves
# Spark's generated code (measured here: 8x slower a row), one projection per CASE stays in it.
LABEL_CASE = 32
LABEL_TRIES = 4 * LABEL_CASE
NULL_MASK = "kw_nulls"
ROUTE = "kw_route"
SUMMARY_ROUTE = -1
CURRENT_TIMESTAMP = "current_timestamp"  # processing_time_col: the micro-batch's start
DUPLICATE_SEQ = "duplicate_seq"  # TR-15: the kind and the error reason of a row whose seq repeats


def default_buckets(spark: Any) -> int:
    """``BUCKETS_PER_PARTITION`` buckets per shuffle partition of the session."""
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    return max(1, partitions) * BUCKETS_PER_PARTITION


def check_layout(
    operator: str, value: tuple[Any, ...], version: int, buckets: int, variable: str | None = None
) -> None:
    """Refuses a state value whose first two fields (layout version, bucket count) differ from
    this release's with ``IncompatibleCheckpoint``, saying what to do: a checkpoint is bound to
    both (a key's bucket depends on the count). ``variable`` names the state value."""
    for what, found, expected in (
        ("state layout version", value[0], version),
        ("buckets", value[1], buckets),
    ):
        if found != expected:
            raise layout_refusal(operator, what, found, expected, variable)


def to_buckets(
    df: Any, buckets: int, unit_hash: Any, per_unit: Any, to_first: Any, whole_streams: Any, alias: str
) -> Any:
    """``df`` with the int column ``alias``: rows where ``per_unit`` holds go to
    ``pmod(unit_hash, buckets)``; rows where ``to_first`` holds, or of a stream where
    ``whole_streams`` holds, go to bucket 0; every other row is copied to every bucket."""
    from pyspark.sql import functions as F

    own = F.pmod(unit_hash, F.lit(buckets)).cast("int")
    targets = (
        F.when(whole_streams, F.array(F.lit(0)))
        .when(per_unit, F.array(own))
        .when(to_first, F.array(F.lit(0)))
        .otherwise(F.sequence(F.lit(0), F.lit(buckets - 1)))
    )
    return df.withColumn(alias, F.explode(targets))


def spread_labels(df: Any, bucket_col: str, buckets: int, stream_col: str | None) -> Any:
    """``df`` with each bucket number ``b >= 0`` of ``bucket_col`` replaced by its label, the
    first of ``b, b + buckets, b + 2 buckets, ...`` (``LABEL_TRIES`` of them) that Spark's hash
    partitioning of the grouping key (``stream_col``, label) sends to shuffle partition
    ``b mod P``, P = ``buckets / BUCKETS_PER_PARTITION``: with the default bucket count every
    partition of the session gets exactly ``BUCKETS_PER_PARTITION`` buckets of each stream,
    where hashing the numbers themselves gives some partitions twice their share. A bucket with
    no hit among its tries keeps its number; a negative number (the summary route) is kept.

    ``label mod buckets`` is the bucket again (``bucket_of``), and a label depends on the stream,
    the bucket and the bucket count only, which a checkpoint keeps: a query restarted with
    another ``spark.sql.shuffle.partitions`` finds its state under the same labels. The test
    is the one HashPartitioning computes, ``pmod(hash(key...), P)`` (Murmur3, seed 42), written
    in SQL so it runs in Spark's generated code."""
    from pyspark.sql import functions as F

    parts = max(1, buckets // BUCKETS_PER_PARTITION)
    if parts == 1:
        return df
    kind = df.schema[bucket_col].dataType.simpleString()  # the label hashes as the column's type
    b, found = _quoted(bucket_col), _quoted("__spread_label")
    keys = "" if stream_col is None else _quoted(stream_col) + ", "
    tries = min(LABEL_TRIES, (2**31 - 1) // buckets)  # no candidate past an int
    for first in range(0, tries, LABEL_CASE):
        ks = range(first, min(first + LABEL_CASE, tries))
        candidates = [f"CAST({b} + {k * buckets} AS {kind})" for k in ks]
        target = f"pmod({b}, {parts})"
        whens = " ".join(f"WHEN pmod(hash({keys}{c}), {parts}) = {target} THEN {c}" for c in candidates)
        missed = b if first + LABEL_CASE >= tries else "NULL"
        # the CASE before is read twice, so Spark keeps it a projection of its own
        before = f"WHEN {b} < 0 THEN {b}" if first == 0 else f"WHEN {found} IS NOT NULL THEN {found}"
        df = df.withColumn("__spread_label", F.expr(f"CASE {before} {whens} ELSE {missed} END"))
    return df.withColumn(bucket_col, F.col("__spread_label")).drop("__spread_label")


def bucket_of(label: Any, buckets: int) -> int:
    """The bucket of a grouping label that ``spread_labels`` chose (negative routes unchanged)."""
    value = int(label)
    return value if value < 0 else value % buckets


def two_stages(
    df: Any, stream_col: str, bucket_col: str, first: Any, first_schema: str, second: Any,
    second_schema: str,
) -> Any:  # fmt: skip
    """first: grouped by (stream, bucket label); second: grouped by (stream_id, route label) on its
    output (``spread_labels``; the processors read the bucket and the route back)."""
    wide = one_stage(df, stream_col, bucket_col, first, first_schema)
    return labelled_stage(wide, "stream_id", ROUTE, first.buckets, second, second_schema)


def one_stage(df: Any, stream_col: str, bucket_col: str, first: Any, first_schema: str) -> Any:
    """The first stage alone, grouped by (stream, bucket label): its table rows and its summary
    rows, for a ``SinkStep`` to finish in the sink."""
    return labelled_stage(df, stream_col, bucket_col, first.buckets, first, first_schema)


def labelled_stage(
    df: Any, stream_col: str, bucket_col: str, buckets: int, processor: Any, schema: str
) -> Any:
    """A stateful stage grouped by (stream, label of ``bucket_col``): ``processor`` once per
    group and micro-batch (``spread_labels``; the processor reads the bucket back)."""
    labelled = spread_labels(df, bucket_col, buckets, stream_col)
    return labelled.groupBy(stream_col, bucket_col).transformWithStateInPandas(
        statefulProcessor=processor, outputStructType=schema, outputMode="Append", timeMode="None"
    )


def restore_nulls(df: Any, columns: Sequence[str], long_cols: Sequence[str]) -> Any:
    """Selects ``columns``; a long column whose bit is set in the null mask becomes null.

    Written as SQL text: one ``selectExpr`` call, where building the same ``Column`` objects in
    classic PySpark costs a few py4j round trips per operation (about 0.4 s for 30 long columns,
    paid by the sink step in every micro-batch)."""
    mask = _quoted(NULL_MASK)
    cells = []
    for c in columns:
        if c in long_cols:
            bit = 1 << long_cols.index(c)
            name = _quoted(c)
            cells.append(f"CASE WHEN ({mask} & {bit}L) != 0 THEN NULL ELSE {name} END AS {name}")
        else:
            cells.append(_quoted(c))
    return df.selectExpr(*cells)


def _quoted(name: str) -> str:
    """A column name as a SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


def one_frame(rows: Iterator[pd.DataFrame], defaults: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """A call's Arrow chunks as one frame, with ``defaults`` for the columns the input lacks."""
    frames = list(rows)
    pdf = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    return with_defaults(pdf, defaults) if defaults else pdf


class WideStage(StatefulProcessor):  # type: ignore[misc]
    """The processor of the first stage: one call per (stream, bucket) and micro-batch, with the
    stream's own configuration. A subclass opens its state in ``open_state`` and yields the
    call's output frames from ``process``; ``defaults`` fills the optional input columns."""

    defaults: Mapping[str, Any] = {}

    def __init__(self, default: Any, per_stream: Mapping[str, Any], ordered: bool, buckets: int) -> None:
        self.default = default
        self.per_stream = dict(per_stream)
        self.ordered = ordered  # the input has an arrival-order column
        self.buckets = buckets

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.open_state(handle)

    def open_state(self, handle: StatefulProcessorHandle) -> None:
        raise NotImplementedError

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[pd.DataFrame]:
        # TR-16: a null stream id is a stream of its own (not the text "None"), with the default settings
        stream_id, bucket = None if key[0] is None else str(key[0]), bucket_of(key[1], self.buckets)
        config = self.default if stream_id is None else self.per_stream.get(stream_id, self.default)
        try:
            yield from self.process(stream_id, bucket, config, one_frame(rows, self.defaults))
        except CheckpointError as error:  # raised here, the worker's report is the message alone
            raise error.in_stream(stream_id) from None

    def process(
        self, stream_id: str | None, bucket: int, config: Any, pdf: pd.DataFrame
    ) -> Iterator[pd.DataFrame]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class UnitStage(StatefulProcessor):  # type: ignore[misc]
    """A stage of an operator composed of units (the oxirs pipeline's admission, joins and
    aggregator): one call per group and micro-batch, ``group`` reading the (unit, bucket) of a
    group from its grouping key after the stream id (default: the key's next two fields). A unit
    not in ``units`` passes through untouched, in ``columns``; a subclass opens its state in
    ``open_state`` and yields a call's frames from ``process`` with its stream's settings."""

    units: tuple[str, ...] = ()
    columns: Sequence[str] = ()

    def __init__(self, per_stream: Mapping[str, Any], buckets: int) -> None:
        self.per_stream = dict(per_stream)
        self.buckets = buckets

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.open_state(handle)

    def open_state(self, handle: Any) -> None:
        raise NotImplementedError

    def group(self, key: Any) -> tuple[str, int]:
        return str(key[1]), int(key[2])

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[pd.DataFrame]:
        stream_id = None if key[0] is None else str(key[0])
        unit, bucket = self.group(key)
        if unit not in self.units:
            for frame in rows:
                yield frame[list(self.columns)]
            return
        try:
            yield from self.process(stream_id, unit, bucket, self.per_stream[str(stream_id)], one_frame(rows))
        except CheckpointError as error:  # raised here, the worker's report is the message alone
            raise error.in_stream(stream_id) from None

    def process(
        self, stream_id: str | None, unit: str, bucket: int, config: Any, pdf: pd.DataFrame
    ) -> Iterator[pd.DataFrame]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class SecondStage(StatefulProcessor):  # type: ignore[misc]
    """Route -1 of a stream: ``summarise`` (the narrow stage, with state); any other route:
    the first stage's table rows, passed through with the second stage's columns."""

    columns: Sequence[str]

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.open_state(handle)

    def open_state(self, handle: StatefulProcessorHandle) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[pd.DataFrame]:
        stream_id, route = key
        if int(route) != SUMMARY_ROUTE:
            for frame in rows:
                yield frame[list(self.columns)]
            return
        try:
            yield self.summarise(None if stream_id is None else str(stream_id), one_frame(rows))
        except CheckpointError as error:  # raised here, the worker's report is the message alone
            raise error.in_stream(stream_id) from None

    def summarise(self, stream_id: str | None, rows: pd.DataFrame) -> pd.DataFrame:
        raise NotImplementedError

    def close(self) -> None:
        pass


class BatchSummaryStage(SecondStage):
    """A second stage whose narrow group folds each batch's summaries into one value per stream.

    A subclass names ``state_schema``, ``state_class`` (built from the bucket count, read with
    ``from_tuple(value, buckets)``, written with ``to_tuple()``), ``string_cols`` and
    ``summarise_batch(state, rows, batch, out)``, which appends the batch's rows to ``out``."""

    state_schema: str
    state_class: Any
    string_cols: Sequence[str]
    summarise_batch: Callable[[Any, pd.DataFrame, int, Any], None]  # a staticmethod of the subclass

    def __init__(self, buckets: int) -> None:
        self.buckets = buckets

    def open_state(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getValueState("stream", self.state_schema)

    def summarise(self, stream_id: str | None, rows: pd.DataFrame) -> pd.DataFrame:
        stored, cls = self.state.get(), self.state_class
        st = cls(self.buckets) if stored is None else cls.from_tuple(stored, self.buckets)
        out = OutputRows(stream_id, tuple(c for c in self.columns if c != NULL_MASK), tuple(self.string_cols))
        for b, part in batches_in(rows, "batch", True, 0):
            self.summarise_batch(st, part, b, out)
        self.state.update(st.to_tuple())
        return out.masked_frame(NULL_MASK)


StoreValues = dict[tuple[Any, ...], tuple[Any, ...]]  # a MemoryStore's values
SINK_STATE = "sink_step"  # the folder of the checkpoint that holds a SinkStep's per-stream state
SINK_SLOTS = 2


class SinkStep:
    """The narrow stage run once per micro-batch in the sink instead of in a second stateful stage.

    The query has one stateful stage (``one_stage``); its output as the stage wrote it (the
    long columns' nulls in the null mask) reaches a ``foreachBatch`` function, where ``run``
    collects the rows of route ``SUMMARY_ROUTE`` (what the narrow stage reads: summaries, and
    for some operators the few rows it numbers or orders, never every event) to the driver,
    applies the operator's own second-stage processor ``narrow`` to each stream's rows with its
    state in a ``MemoryStore``, and hands the table rows, nulls restored, plus the per-stream
    rows it made to ``consume``: the same rows and columns the two-stage plan writes. Every
    table row crosses Python once.

    The per-stream state lives beside Spark's checkpoint, in ``<checkpoint>/sink_step/slot=0``
    and ``slot=1``: each holds the state of every stream after one micro-batch, with that batch
    id. A batch reads the slot with the latest batch id below its own and writes the other one,
    so a batch Spark runs again after a failure reads what its first attempt read: the answer
    is the same, and the slot it read is never the one it overwrites. The state is cached
    between batches of one process. A batch after the first that finds no slot below it is
    refused (``CorruptCheckpoint``), and so, before the query starts, is a checkpoint that keeps
    the per-stream state in a second stateful stage (``refuse_second_stage``).

    ``narrow``: a ``SecondStage`` whose ``open_state`` registers one ValueState ``state_name``
    with the DDL ``state_schema`` and whose ``summarise`` reads the rows of one stream as its
    narrow group would get them; ``columns``/``long_cols``: the output columns and those
    restored from the null mask; ``finish``: what the operator's ``output`` does to the rows
    after the nulls are restored (a cast), applied before ``consume`` gets them; ``maps``: the
    MapStates ``narrow`` registers besides, name -> (DDL of the user key, DDL of the value),
    kept in the slots as one row per entry."""

    def __init__(
        self, operator: str, narrow: Any, state_name: str, state_schema: str, columns: Sequence[str],
        long_cols: Sequence[str], finish: Callable[[Any], Any] | None = None,
        maps: Mapping[str, tuple[str, str]] | None = None,
    ) -> None:  # fmt: skip
        self.operator = operator
        self.narrow = narrow
        self.state_name = state_name
        self.state_schema = state_schema
        self.columns = tuple(columns)
        self.long_cols = tuple(long_cols)
        self.finish = finish
        self.fields = _ddl_fields(state_schema)  # (name, DDL type) of the per-stream value's fields
        self.maps = {name: (_ddl_fields(k), _ddl_fields(v)) for name, (k, v) in (maps or {}).items()}
        self._cached: tuple[int, int, StoreValues] | None = None  # batch, slot, values

    def run(self, batch: Any, batch_id: int, checkpoint: str, consume: Callable[[Any], None]) -> None:
        """Finishes micro-batch ``batch_id`` of the one-stage stream and calls ``consume`` with it."""
        from pyspark.sql import functions as F

        spark = batch.sparkSession

        def finish(kept: Any) -> None:  # run again from its start when kept rows were lost (a replay)
            route = F.col(ROUTE)
            summaries = kept.filter(route == SUMMARY_ROUTE).toPandas()  # every column, as the stage wrote it
            slot, values = self._before(spark, batch_id, checkpoint)
            store = MemoryStore(dict(values))
            frames = []
            for sid, rows in summaries.groupby("stream_id", dropna=False, sort=True):
                stream_id = None if pd.isna(sid) else str(sid)
                self.narrow.open_state(store.handle((stream_id, SUMMARY_ROUTE)))
                frames.append(self.narrow.summarise(stream_id, rows.reset_index(drop=True)))
            # route null: the error rows of unplaced input rows
            table_rows = kept.filter(route.isNull() | (route != SUMMARY_ROUTE))
            tables = restore_nulls(table_rows, self.columns, self.long_cols)
            if frames:
                narrow_rows = pd.concat(frames, ignore_index=True)
                schema = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in batch.schema.fields
                                   if f.name in self.columns) + f", `{NULL_MASK}` long"  # fmt: skip
                made = spark.createDataFrame(narrow_rows[[*self.columns, NULL_MASK]], schema=schema)
                tables = tables.unionByName(restore_nulls(made, self.columns, self.long_cols))
            written = 1 - slot if slot is not None else 0
            self._write(spark, checkpoint, written, batch_id, store.values)
            consume(tables if self.finish is None else self.finish(tables))
            self._cached = (batch_id, written, store.values)

        use_computed_once(batch, finish)

    def refuse_second_stage(self, stages: Sequence[Any]) -> None:
        """Raises ``IncompatibleCheckpoint`` when the inspected checkpoint (``check_checkpoint``'s
        reports) keeps this operator's per-stream state in a second stateful stage: it was written
        by ``output``'s plan, or by ``write_tables`` before this release, and Spark would refuse
        the one-stage plan on it with an error about stateful operators that do not match."""
        if any(s.area == self.operator and s.stage == "second" for s in stages):
            raise IncompatibleCheckpoint(
                f"{self.operator}: the checkpoint keeps the per-stream state in a second stateful stage "
                "(the plan of .output, or of write_tables before this release); write_tables and "
                "foreach_batch keep it beside the checkpoint",
                f"write .output on it as it was started, or {NEW_LOCATION}", self.operator, self.state_name,
            )  # fmt: skip

    def _folder(self, checkpoint: str, slot: int) -> str:
        return f"{checkpoint.rstrip('/')}/{SINK_STATE}/slot={slot}"

    def _slot_columns(self) -> list[tuple[str, str]]:
        """(name, DDL type) of a slot's columns: a row per stream (its value), one per map entry
        (its map's columns, ``variable`` naming the map) and one with the batch id alone."""
        columns = [("batch_id", "long"), ("present", "boolean"), ("stream_id", "string"), *self.fields]
        if self.maps:  # without maps, the columns of the first release of the slots
            columns.append(("variable", "string"))
            for name, (key, value) in self.maps.items():
                columns += [(f"{name}_{field}", kind) for field, kind in (*key, *value)]
        return columns

    def _slot_row(self, batch_id: int, key: tuple[Any, ...], value: tuple[Any, ...]) -> tuple[Any, ...]:
        """A MemoryStore entry (``(stream, route, variable, *user key)``) as a row of a slot."""
        is_value = key[2] == self.state_name
        row = [batch_id, True, key[0], *(value if is_value else [None] * len(self.fields))]
        if self.maps:
            row.append(key[2])
            for name, (k, v) in self.maps.items():
                row += [*key[3:], *value] if name == key[2] else [None] * (len(k) + len(v))
        return tuple(row)

    def _entry(self, row: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """A slot's row as the MemoryStore entry it was written from."""
        name = row["variable"] if self.maps else self.state_name
        if name == self.state_name:
            return (row["stream_id"], SUMMARY_ROUTE, name), tuple(row[f] for f, _ in self.fields)
        key, value = self.maps[name]
        user_key = tuple(row[f"{name}_{f}"] for f, _ in key)
        return (row["stream_id"], SUMMARY_ROUTE, name, *user_key), tuple(row[f"{name}_{f}"] for f, _ in value)

    def _before(self, spark: Any, batch_id: int, checkpoint: str) -> tuple[int | None, StoreValues]:
        """(the slot read, the per-stream state after the latest batch below ``batch_id``)."""
        if self._cached is not None and self._cached[0] == batch_id - 1:
            return self._cached[1], self._cached[2]
        found: list[tuple[int, int, list[Any]]] = []
        if batch_id > 0:  # nothing precedes the first batch: no read, and no missing-path warning
            try:
                stored = spark.read.parquet(f"{checkpoint.rstrip('/')}/{SINK_STATE}").collect()
            except Exception as error:  # noqa: BLE001 - classic and Connect raise different classes
                if "PATH_NOT_FOUND" not in str(error) and "does not exist" not in str(error):
                    raise
                stored = []
            for slot in range(SINK_SLOTS):
                rows = [r for r in stored if r["slot"] == slot]
                ids = {r["batch_id"] for r in rows}
                if len(ids) > 1:
                    where = self._folder(checkpoint, slot)
                    finding = f"{self.operator}: {where} holds batch ids {sorted(ids)}"
                    raise CorruptCheckpoint(finding, RESTORE, self.operator, self.state_name)
                if ids:
                    found.append((ids.pop(), slot, rows))
        below = [f for f in found if f[0] < batch_id]
        if not below:
            if batch_id > 0:  # Spark committed the batches before this one; their state is gone
                finding = (
                    f"{self.operator}: micro-batch {batch_id} finds no per-stream state of an earlier batch "
                    f"in {SINK_STATE}/ of the checkpoint"
                )
                raise CorruptCheckpoint(finding, RESTORE, self.operator, self.state_name)
            return None, {}
        _, slot, rows = max(below)
        return slot, dict(self._entry(r) for r in rows if r["present"])

    def _write(self, spark: Any, checkpoint: str, slot: int, batch_id: int, values: StoreValues) -> None:
        """The state of every stream after ``batch_id`` into ``slot``, one Parquet file: written by
        this process when the checkpoint is a local folder (no Spark job per micro-batch), else by
        Spark. Readers find the same rows either way."""
        columns = self._slot_columns()
        rows = [(batch_id, False, *([None] * (len(columns) - 2)))]  # the batch id, whatever the streams
        rows += [self._slot_row(batch_id, k, v) for k, v in sorted(values.items(), key=_entry_order)]
        folder = self._folder(checkpoint, slot)
        local = local_folder(folder)
        if local is None:
            frame = spark.createDataFrame(rows, schema=", ".join(f"`{n}` {kind}" for n, kind in columns))
            frame.coalesce(1).write.mode("overwrite").parquet(folder)
            return
        import pyarrow.parquet as pq

        names = [name for name, _ in columns]
        types = [_ARROW_TYPES[kind] for _, kind in columns]
        table = pa.table([pa.array(list(c), t) for c, t in zip(zip(*rows), types)], names=names)
        os.makedirs(local, exist_ok=True)
        part = os.path.join(local, "part-0.parquet")
        pq.write_table(table, part + ".tmp")
        os.replace(part + ".tmp", part)  # a reader sees the old file or the new one, never half of one
        for name in os.listdir(local):
            if name != "part-0.parquet":  # what Spark wrote there before (a checkpoint moved folders)
                os.remove(os.path.join(local, name))


#: the Arrow type of each DDL type a SinkStep's state may use
_ARROW_TYPES = {
    "int": pa.int32(), "long": pa.int64(), "boolean": pa.bool_(), "string": pa.string(),
    "binary": pa.binary(), "double": pa.float64(),
}  # fmt: skip


def local_folder(path: str) -> str | None:
    """``path`` as a folder of this machine when it names one (no scheme, or ``file:``), else None."""
    if path.startswith("file:"):
        return "/" + path[len("file:") :].lstrip("/")
    return None if "://" in path or ":" in path.split("/")[0] else path


def _entry_order(item: tuple[tuple[Any, ...], Any]) -> tuple[bool, str, str]:
    key = item[0]
    return (key[0] is not None, "" if key[0] is None else str(key[0]), repr(key[2:]))


def _ddl_fields(schema: str) -> list[tuple[str, str]]:
    """(name, type) of each field of a DDL schema string such as ``"a long, b binary"``."""
    return [(f.split()[0].strip("`"), f.split()[1]) for f in schema.split(",")]


def processing_time(fields: Mapping[str, Any], name: str) -> Any:
    """The processing time as epoch milliseconds: a column, or the micro-batch's start."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegralType, TimestampNTZType, TimestampType

    if name == CURRENT_TIMESTAMP:
        return micro_batch_start_millis()
    if isinstance(fields[name], (TimestampType, TimestampNTZType)):
        return F.unix_millis(F.col(name))
    if isinstance(fields[name], IntegralType):
        return F.col(name).cast("long")
    raise InvalidConfig(
        f"processing_time_col {name!r} is {fields[name].simpleString()}; "
        "it accepts integral milliseconds or a timestamp"
    )


def with_ticks(rows: Any, time: Any, prefix: str) -> Any:
    """Adds, per input partition and stream, one ``tick`` row carrying the latest processing
    time of its rows, placed before every row (seq i64 min): each micro-batch of a stream
    then starts with a clock move that reaches every bucket (``to_buckets`` copies it).

    ``rows`` has the operator's internal columns named ``prefix`` + sid, batch and, when
    present, seq, et, et_null, value; this adds kind, time and time_null (an input row keeps
    the kind the projection gave it, such as an event refused for its value, TR-16, and is an
    event where it has none). ``time`` is an expression over ``rows`` (project
    ``processing_time`` into them first)."""
    from pyspark.sql import functions as F

    kind = F.col(prefix + "kind") if prefix + "kind" in rows.columns else F.lit("event")
    rows = (
        rows.withColumn(prefix + "kind", kind).withColumn(prefix + "time", time)
        .withColumn(prefix + "time_null", time.isNull())
    )  # fmt: skip
    from pyspark.sql.types import StructField, StructType

    # Nullable everywhere: a tick row has no key, even where the input's key column has no nulls.
    schema = StructType([StructField(f.name, f.dataType, True) for f in rows.schema.fields])

    def add_ticks(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        latest: dict[str, tuple[int, int]] = {}
        last_schema = None
        for batch in batches:
            last_schema = batch.schema
            if batch.num_rows:
                per_stream = (
                    pa.table(batch)
                    .group_by(prefix + "sid")
                    .aggregate([(prefix + "time", "max"), (prefix + "batch", "max")])
                )
                for sid, t, bt in zip(
                    *(
                        per_stream.column(c).to_pylist()
                        for c in (prefix + "sid", prefix + "time_max", prefix + "batch_max")
                    )
                ):
                    if t is not None and (sid not in latest or t > latest[sid][0]):
                        latest[sid] = (t, bt)
            yield batch
        if latest and last_schema is not None:
            n = len(latest)
            cols = {f.name: pa.nulls(n, type=f.type) for f in last_schema}
            given = {
                prefix + "sid": pa.array(list(latest), pa.string()),
                prefix + "kind": pa.array(["tick"] * n, pa.string()),
                prefix + "time": pa.array([t for t, _ in latest.values()], pa.int64()),
                prefix + "time_null": pa.array([False] * n),
                prefix + "batch": pa.array([bt for _, bt in latest.values()], pa.int64()),
                prefix + "et": pa.array([0] * n, pa.int64()),
                prefix + "et_null": pa.array([False] * n),
                prefix + "seq": pa.array([I64_MIN] * n, pa.int64()),
                prefix + "value": pa.array([0] * n, pa.int64()),
            }
            cols.update({c: v for c, v in given.items() if c in cols})
            yield pa.RecordBatch.from_arrays(list(cols.values()), schema=last_schema)

    return rows.mapInArrow(add_ticks, schema)


def flag_duplicate_seqs(
    rows: Any, prefix: str, duplicate: Any = DUPLICATE_SEQ, exempt: Sequence[Any] = ("batch_end",)
) -> Any:
    """TR-15: ``rows`` with the kind of every row whose (stream, batch, seq) another row shares
    replaced by ``duplicate``, the other rows unchanged (all columns nullable).

    ``rows`` has the operator's internal columns ``prefix`` + sid, batch, seq and, when present,
    kind (absent: every row is an event), seq_null and batch_null (a row without a seq or a
    batch is compared with none). Rows whose kind is in ``exempt`` (markers and the operator's
    own rows, no items) are neither marked nor counted; an operator that adds rows of its own
    (processing-time ticks) names their kind here and renames a user's rows of that kind first,
    so a user's "tick" is an item like any other. One stateless shuffle by the triple puts
    all its rows in one partition, where a ``mapInArrow`` step finds the repeats, vectorised; it
    holds one micro-batch's rows of its partition at a time. No state, so the query's stateful
    operators and their checkpoint stay as they are."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructField, StructType

    kind = prefix + "kind"
    if kind not in rows.columns:
        rows = rows.withColumn(kind, F.lit("event"))
    schema = StructType([StructField(f.name, f.dataType, True) for f in rows.schema.fields])
    unknown = tuple(c for c in (prefix + "seq_null", prefix + "batch_null") if c in rows.columns)
    mark = _MarkDuplicates((prefix + "sid", prefix + "batch", prefix + "seq"), kind, duplicate,
                           tuple(exempt), unknown)  # fmt: skip
    return rows.repartition(*mark.keys).mapInArrow(mark, schema)


@dataclass(frozen=True)
class _MarkDuplicates:
    """The ``mapInArrow`` body of ``flag_duplicate_seqs``: every row of a triple is in this
    partition, though maybe in several Arrow batches, so the partition is read whole first."""

    keys: tuple[str, str, str]
    kind: str
    duplicate: Any
    exempt: tuple[Any, ...]
    unknown: tuple[str, ...] = ()  # boolean columns: the row's seq or batch is null

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.compute as pc

        held = [b for b in batches if b.num_rows]
        if not held:
            return
        table = pa.Table.from_batches(held)
        kind = table.column(self.kind)
        kinds = pd.Series(kind.to_numpy(zero_copy_only=False), dtype=object)
        checked = ~kinds.isin(self.exempt).to_numpy(bool)
        for flag in self.unknown:
            checked &= ~table.column(flag).to_numpy(zero_copy_only=False).astype(bool)
        triples = pd.DataFrame(
            {k: table.column(k).to_numpy(zero_copy_only=False)[checked] for k in self.keys}, copy=False
        )
        repeated = checked.copy()
        repeated[checked] = triples.duplicated(keep=False).to_numpy(bool)
        if repeated.any():
            marked = pc.if_else(pa.array(repeated), pa.scalar(self.duplicate, kind.type), kind)
            table = table.set_column(table.schema.get_field_index(self.kind), self.kind, marked)
        yield from table.to_batches()


def block_of(key_hash: Any, level: int, split: int) -> Any:
    """The block of a key by linear hashing: the low ``level`` bits of its xxhash64 above the
    ones the bucket mostly uses, one bit more for the blocks already split at this level."""
    import numpy as np

    bits = np.right_shift(np.asarray(key_hash, np.int64), 16) & np.int64((1 << 47) - 1)
    block = bits & np.int64((1 << level) - 1)
    return np.where(block < split, bits & np.int64((1 << (level + 1)) - 1), block)


def pack_text(values: Any) -> tuple[bytes, bytes]:
    """Strings as (int32 lengths, concatenated UTF-8 bytes): two binary fields of a state value."""
    import numpy as np

    encoded = [s.encode() for s in values.tolist()]
    return np.fromiter(map(len, encoded), np.int32, len(encoded)).tobytes(), b"".join(encoded)


def unpack_text(lengths: bytes, data: bytes) -> Any:
    """``pack_text``'s fields back to an object array of str, through one Arrow string array."""
    import numpy as np
    import pyarrow as pa

    lens = np.frombuffer(lengths, np.int32)
    offsets = np.zeros(len(lens) + 1, np.int32)
    np.cumsum(lens, out=offsets[1:])
    # Arrow trusts the offsets: lengths that do not add up to the bytes would read past them.
    if offsets[-1] != len(data) or (len(lens) and lens.min() < 0):
        raise ValueError(f"{len(lens)} text lengths adding up to {int(offsets[-1])} for {len(data)} bytes")
    array = pa.StringArray.from_buffers(len(lens), pa.py_buffer(offsets.tobytes()), pa.py_buffer(data))
    return np.asarray(array.to_numpy(zero_copy_only=False), dtype=object)


class MemoryStore:
    """The state store of stateful processors in one dict, for running their own code without
    Spark: ``handle(group)`` gives the state variables of one group, as Spark scopes them by the
    implicit grouping key. Entries are keyed ``(*group, name)`` for a ValueState and ``(*group,
    name, *user_key)`` for a MapState entry; values are the tuples written."""

    def __init__(self, values: dict[tuple[Any, ...], tuple[Any, ...]] | None = None) -> None:
        self.values = {} if values is None else values

    def handle(self, group: tuple[Any, ...]) -> Any:
        """Stands in for Spark's StatefulProcessorHandle in a processor's ``init``."""
        return _MemoryHandle(self.values, tuple(group))


class _MemoryHandle:
    def __init__(self, values: dict[tuple[Any, ...], tuple[Any, ...]], group: tuple[Any, ...]) -> None:
        self.values = values
        self.group = group

    def getValueState(self, name: str, schema: Any, ttl_duration_ms: Any = None) -> _MemoryValue:
        return _MemoryValue(self.values, (*self.group, name))

    def getMapState(
        self, name: str, user_key_schema: Any, value_schema: Any, ttl_duration_ms: Any = None
    ) -> _MemoryMap:
        return _MemoryMap(self.values, (*self.group, name))


class _MemoryValue:
    def __init__(self, values: dict[tuple[Any, ...], tuple[Any, ...]], key: tuple[Any, ...]) -> None:
        self.values, self.key = values, key

    def get(self) -> tuple[Any, ...] | None:
        return self.values.get(self.key)

    def update(self, value: tuple[Any, ...]) -> None:
        self.values[self.key] = tuple(value)

    def clear(self) -> None:
        self.values.pop(self.key, None)


class _MemoryMap:
    def __init__(self, values: dict[tuple[Any, ...], tuple[Any, ...]], prefix: tuple[Any, ...]) -> None:
        self.values, self.prefix = values, prefix

    def getValue(self, key: tuple[Any, ...]) -> tuple[Any, ...] | None:
        return self.values.get((*self.prefix, *key))

    def updateValue(self, key: tuple[Any, ...], value: tuple[Any, ...]) -> None:
        self.values[(*self.prefix, *key)] = tuple(value)

    def removeKey(self, key: tuple[Any, ...]) -> None:
        self.values.pop((*self.prefix, *key), None)

    def containsKey(self, key: tuple[Any, ...]) -> bool:
        return (*self.prefix, *key) in self.values


__all__ = [
    "BUCKETS_PER_PARTITION",
    "CURRENT_TIMESTAMP",
    "DUPLICATE_SEQ",
    "MemoryStore",
    "NULL_MASK",
    "ROUTE",
    "SINK_STATE",
    "SUMMARY_ROUTE",
    "SecondStage",
    "SinkStep",
    "UnitStage",
    "WideStage",
    "block_of",
    "bucket_of",
    "check_layout",
    "default_buckets",
    "flag_duplicate_seqs",
    "one_frame",
    "one_stage",
    "pack_text",
    "processing_time",
    "restore_nulls",
    "spread_labels",
    "to_buckets",
    "two_stages",
    "unpack_text",
    "with_ticks",
]
