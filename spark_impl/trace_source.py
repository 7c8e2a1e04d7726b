"""The ``trace`` streaming data source: exactly one trace batch per micro-batch.

A Python data source (``pyspark.sql.datasource``) whose offset is the batch
index. Its rows come from one parquet file (option ``path``) that holds all
rows of a run with a ``batch`` column (integer, 0-based); the file is written
with one row group per batch, so a micro-batch reads only its own batch.

    spark.readStream.format("trace").option("path", f).option("end_batch", 3).load()

Options:

- ``path`` (required): the parquet file.
- ``num_batches``: how many batches exist (default: max(batch) + 1 read
  from the file); batches without rows are still delivered, as empty
  micro-batches.
- ``end_batch``: the last batch index to deliver in this run (inclusive).
  A query on the same checkpoint with a larger ``end_batch`` continues
  from the next batch: the harness stops and restarts at batch boundaries.
- ``partitions``: input partitions per micro-batch (default 1); rows are
  split round-robin in their file order (arrival order is carried by an
  explicit ``seq`` column, never by the physical order).

Offsets are ``{"batch": n}`` = the number of batches delivered so far.
``latestOffset`` returns ``start + 1`` until the end, so every trigger,
including ``Trigger.AvailableNow`` (the reader implements
``SupportsTriggerAvailableNow``), runs one micro-batch per trace batch,
empty batches included.

The schema is the file's schema (integers as LongType/IntegerType, strings,
doubles, booleans, binary; arrow timestamps with a zone as TimestampType,
without one as TimestampNTZType).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

SOURCE_NAME = "trace"


class BatchPartition(InputPartition):
    """Part ``part`` of ``parts`` of trace batch ``batch``."""

    def __init__(self, batch: int, part: int, parts: int) -> None:
        self.batch = batch
        self.part = part
        self.parts = parts


def _arrow_to_ddl(schema: Any) -> str:
    import pyarrow as pa

    cols = []
    for f in schema:
        t = f.type
        if pa.types.is_int64(t):
            s = "long"
        elif pa.types.is_integer(t):
            s = "int"
        elif pa.types.is_string(t) or pa.types.is_large_string(t):
            s = "string"
        elif pa.types.is_floating(t):
            s = "double"
        elif pa.types.is_boolean(t):
            s = "boolean"
        elif pa.types.is_timestamp(t):
            s = "timestamp" if t.tz else "timestamp_ntz"
        elif pa.types.is_binary(t):
            s = "binary"
        else:
            raise ValueError(f"trace source: unsupported column type {t} of {f.name!r}")
        cols.append(f"`{f.name}` {s}")
    return ", ".join(cols)


class TraceStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        import pyarrow.parquet as pq

        self.path = options["path"]
        self.parts = max(1, int(options.get("partitions", "1")))
        meta = pq.ParquetFile(self.path).metadata
        if "num_batches" in options:
            self.num_batches = int(options["num_batches"])
        else:
            self.num_batches = _count_batches(self.path, meta)
        self.end = self.num_batches
        if options.get("end_batch") not in (None, ""):
            self.end = min(self.end, int(options["end_batch"]) + 1)
        self.target = self.end

    def initialOffset(self) -> dict:
        return {"batch": 0}

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self.end

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:
        # One trace batch per micro-batch, whatever the read limit says.
        done = 0 if start is None else int(start["batch"])
        return {"batch": min(done + 1, self.target) if done < self.target else done}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return [
            BatchPartition(b, p, self.parts)
            for b in range(int(start["batch"]), int(end["batch"]))
            for p in range(self.parts)
        ]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        import pyarrow.parquet as pq

        assert isinstance(partition, BatchPartition)
        f = pq.ParquetFile(self.path)
        groups = [
            i for i in range(f.metadata.num_row_groups) if _row_group_may_hold(f.metadata, i, partition.batch)
        ]
        if not groups:
            return
        table = f.read_row_groups(groups)
        import pyarrow.compute as pc

        table = table.filter(pc.equal(table["batch"], partition.batch))
        if partition.parts > 1:
            import numpy as np

            idx = np.arange(partition.part, table.num_rows, partition.parts)
            table = table.take(idx)
        table = table.cast(_spark_arrow_schema(table.schema))
        for rb in table.to_batches():
            if rb.num_rows:
                yield rb

    def commit(self, end: dict) -> None:
        pass


def _spark_arrow_schema(schema: Any) -> Any:
    """Timestamps as Spark hands them over: microseconds, UTC (or no zone for timestamp_ntz)."""
    import pyarrow as pa

    fields = []
    for f in schema:
        if pa.types.is_timestamp(f.type):
            f = f.with_type(pa.timestamp("us", tz="UTC" if f.type.tz else None))
        fields.append(f)
    return pa.schema(fields)


def _batch_col(meta: Any) -> int:
    schema = meta.schema.to_arrow_schema()
    return schema.get_field_index("batch")


def _row_group_may_hold(meta: Any, i: int, batch: int) -> bool:
    col = _batch_col(meta)
    stats = meta.row_group(i).column(col).statistics
    if stats is None or not stats.has_min_max:
        return True
    return stats.min <= batch <= stats.max


def _count_batches(path: str, meta: Any) -> int:
    col = _batch_col(meta)
    if col < 0:
        raise ValueError(f"trace source: {path} has no 'batch' column")
    top = -1
    for i in range(meta.num_row_groups):
        stats = meta.row_group(i).column(col).statistics
        if stats is None or not stats.has_min_max:
            import pyarrow.parquet as pq

            t = pq.read_table(path, columns=["batch"])
            return int(t["batch"].to_numpy().max()) + 1 if t.num_rows else 0
        top = max(top, int(stats.max))
    return top + 1


class TraceDataSource(DataSource):
    """``format("trace")``: see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        import pyarrow.parquet as pq

        if "path" not in self.options:
            raise ValueError("trace source: option 'path' (a parquet file) is required")
        return _arrow_to_ddl(pq.read_schema(self.options["path"]))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return TraceStreamReader(dict(self.options))


def register(spark: Any) -> None:
    """Registers ``format("trace")`` on a session (classic or Connect)."""
    spark.dataSource.register(TraceDataSource)


def write_trace_file(path: str, table: Any) -> None:
    """Writes a pyarrow table with a ``batch`` column, one row group per batch."""
    import pyarrow.parquet as pq

    table = table.sort_by([("batch", "ascending")]) if table.num_rows else table
    with pq.ParquetWriter(path, table.schema) as writer:
        if table.num_rows == 0:
            writer.write_table(table)
            return
        import numpy as np

        col = table["batch"].to_numpy()
        cuts = np.flatnonzero(np.diff(col)) + 1
        starts = [0, *cuts.tolist()]
        ends = [*cuts.tolist(), table.num_rows]
        for s, e in zip(starts, ends):
            writer.write_table(table.slice(s, e - s), row_group_size=1 << 30)
