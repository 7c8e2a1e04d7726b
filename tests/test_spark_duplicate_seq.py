"""Duplicate sequence numbers at the table boundary (spec/traces.md TR-15), on the operators.

Each area's generated traces become tables whose ``seq`` column repeats: some rows share the
seq of the row before them, some are delivered twice, identical. Every chosen area's rows go
through its operator's ``engine_output(df, configs, seq_unique=False)`` in ONE streaming
query, two input partitions per micro-batch (so the rows of one seq may start in different
partitions).
The expected answer is the oracle's on the trace that says what the table holds: every row
of a repeated seq is a ``duplicate_seq`` item at its place, the others are the rows' items.
The oracle numbers items by position, the table by its own seqs, so the oracle's seq columns
are mapped to the table's before the comparison.

| profile | operators | tables per operator | batches per table |
|---|---|---|---|
| ci, dev | one, chosen from the run's seed | 3 | 2 |
| thorough | all seven | 12 | 4 |

Under ``ci`` the hostile-row test (properties/test_hostile_rows.py) also repeats seqs in every
operator's tables, in its own one query, a user's row of kind "tick" sharing an event's seq
among them (two operators add "tick" rows of their own, and must not take the user's for
theirs); this test adds the other operators under thorough.
The marking step itself (``spark_impl.scaleout._MarkDuplicates``) is also checked without
Spark, on Arrow batches.
"""

from __future__ import annotations

import importlib
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.hypothesis_profiles import profile_name, run_seed
from harness.outputs import TABLES, Output, canonical
from harness.replay import current_test, seed_command
from harness.traces import ITEM_FIELD_TYPES, InvalidConfig, Item, Trace
from reference.traces import Row

AREAS = (
    "eventtime_buffer", "exactly_once_aggregation", "keyed_watermarks", "late_data", "partitioned_watermarks",
    "session_windows", "sla_admission", "watermark_propagation", "window_joins",
)  # fmt: skip
# Each area's clause of malformed items, where its duplicate_seq rows are decided.
ERROR_CLAUSES = {
    "eventtime_buffer": "VELO-R23", "keyed_watermarks": "F065-R23", "late_data": "OXL-R16",
    "partitioned_watermarks": "F064-R22", "session_windows": "F017E-R20", "sla_admission": "OXS-R15",
    "watermark_propagation": "OXW-R17", "exactly_once_aggregation": "OXE-R16", "window_joins": "OXJ-R19",
}  # fmt: skip
THOROUGH = profile_name() == "thorough"
CHOSEN = AREAS if THOROUGH else (AREAS[run_seed() % len(AREAS)],)
# Every trace batch is a micro-batch of the one query, and every operator adds its stages to
# each: the operators and the batches set the cost, the tables hardly.
TRACES_PER_AREA = 12 if THOROUGH else 3
MAX_BATCHES = 4 if THOROUGH else 2
INPUT_PARTITIONS = 2
# Columns that hold an arrival position, and the column that names its batch.
SEQ_COLUMNS = {
    "seq": "batch", "arrival_seq": "arrival_batch", "left_seq": "left_batch", "right_seq": "right_batch",
}  # fmt: skip


@dataclass(frozen=True)
class Table:
    """A trace's items as table rows with their own seqs, and the trace the oracle is given."""

    rows: tuple[tuple[tuple[int, Item], ...], ...]  # per batch: (seq, item) in row order
    trace: Trace  # the rows of a repeated seq as duplicate_seq items (TR-15)
    seqs: tuple[tuple[int, ...], ...]  # per batch: the table seq of each trace position


def as_table(trace: Trace, rng: random.Random) -> Table:
    """Rows with repeated seqs made from ``trace``: a row may take the seq of the row before it,
    or come twice; seqs may skip numbers. At least one seq repeats."""
    batches: list[list[tuple[int, Item]]] = []
    for batch in trace.batches:
        rows: list[tuple[int, Item]] = []
        seq = rng.choice([0, 3])
        for item in batch:
            roll = rng.random()
            if roll < 0.2 and rows:
                rows.append((rows[-1][0], item))  # shares the seq of the row before it
                continue
            seq += rng.choice([1, 1, 1, 2]) if rows else 0
            rows.append((seq, item))
            if roll < 0.35:
                rows.append((seq, item))  # delivered twice, identical
        batches.append(rows)
    if not any(len({s for s, _ in b}) < len(b) for b in batches):
        first = next((b for b in batches if b), None)
        if first is None:
            batches[0].append((0, Item("event", key="k", event_time=0)))
            first = batches[0]
        first.append((first[-1][0], first[-1][1]))
    return table_of(trace, batches)


def table_of(trace: Trace, batches: Sequence[Sequence[tuple[int, Item]]]) -> Table:
    """TR-15: every row of a seq that another row shares is a ``duplicate_seq`` item at its place."""
    items: list[tuple[Item, ...]] = []
    seqs: list[tuple[int, ...]] = []
    for rows in batches:
        ordered = sorted(rows, key=lambda r: r[0])  # stable: the rows of one seq keep their order
        count: dict[int, int] = {}
        for s, _ in ordered:
            count[s] = count.get(s, 0) + 1
        items.append(tuple(Item("duplicate_seq") if count[s] > 1 else item for s, item in ordered))
        seqs.append(tuple(s for s, _ in ordered))
    oracle_trace = Trace(trace.area, trace.config, tuple(items), name=trace.name)
    return Table(tuple(tuple(b) for b in batches), oracle_trace, tuple(seqs))


def with_table_seqs(area: str, output: Output, seqs: Sequence[Sequence[int]]) -> Output:
    """The oracle's output with each position column replaced by the table's seq there."""
    mapped: dict[str, list[Row]] = {}
    for name, columns in TABLES[area].items():
        at = [(columns.index(c), columns.index(b)) for c, b in SEQ_COLUMNS.items() if c in columns]
        rows = []
        for row in output[name]:
            cells = list(row)
            for s, b in at:
                if cells[s] is not None:
                    cells[s] = seqs[cells[b]][cells[s]]
            rows.append(tuple(cells))
        mapped[name] = rows
    return canonical(area, mapped)


def drawn_traces(area: str, n: int, seed: int) -> list[Trace]:
    """``n`` of the area's differential traces with a valid configuration, cut to MAX_BATCHES."""
    from strategies.common import generate

    strategies = importlib.import_module(f"strategies.{area}")
    validate = importlib.import_module(f"spark_impl.{area}").validate_config
    chosen: list[Trace] = []
    for trace in generate(strategies.DIFFERENTIAL[0][0], 4 * n, seed):
        try:
            validate(trace.config)
        except InvalidConfig:
            continue
        chosen.append(Trace(area, trace.config, trace.batches[:MAX_BATCHES], name=trace.name))
        if len(chosen) == n:
            break
    return chosen


def input_table(tables: Mapping[str, Table]) -> Any:
    """The engine's input columns (spark_impl.engine.INPUT_SCHEMA), one stream per table, each
    row with its table seq; a batch_end marker after every batch's rows, as the engine writes."""
    import pyarrow as pa

    from spark_impl.engine import INPUT_SCHEMA

    cols: dict[str, list[Any]] = {name: [] for name, _ in INPUT_SCHEMA}
    for tid, table in tables.items():
        for b, rows in enumerate(table.rows):
            end = 1 + max((s for s, _ in rows), default=-1)
            for seq, item in [*rows, (end, None)]:
                cols["trace_id"].append(tid)
                cols["area"].append(table.trace.area)
                cols["batch"].append(b)
                cols["seq"].append(seq)
                cols["kind"].append("batch_end" if item is None else item.kind)
                for name, type_name in ITEM_FIELD_TYPES.items():
                    v = (0 if name == "value" else None) if item is None else getattr(item, name)
                    cols[name].append(json.dumps(v) if type_name == "json" and v is not None else v)
    schema = pa.schema([(n, pa.string() if t == "string" else pa.int64()) for n, t in INPUT_SCHEMA])
    return pa.table(cols, schema=schema)


def run_spark(tables: Mapping[str, Table], work: Path) -> dict[str, Output]:
    """One query over every table, each area's rows through its ``engine_output`` with the
    duplicate check on; the sink read back and split by stream."""
    from pyspark.sql import functions as F

    from spark_impl.session import get_spark
    from spark_impl.trace_source import SOURCE_NAME, write_trace_file

    spark = get_spark()
    path = str(work / "input.parquet")
    write_trace_file(path, input_table(tables))
    num_batches = max(len(t.rows) for t in tables.values())
    df = (
        spark.readStream.format(SOURCE_NAME).option("path", path).option("num_batches", str(num_batches))
        .option("partitions", str(INPUT_PARTITIONS)).load()
    )  # fmt: skip
    output = None
    for area in sorted({t.trace.area for t in tables.values()}):
        configs = {tid: dict(t.trace.config) for tid, t in tables.items() if t.trace.area == area}
        module = importlib.import_module(f"spark_impl.{area}")
        part = module.engine_output(df.filter(F.col("area") == area), configs, seq_unique=False)
        output = part if output is None else output.unionByName(part, allowMissingColumns=True)
    assert output is not None
    sink = str(work / "sink")
    query = (
        output.writeStream.format("parquet").option("checkpointLocation", str(work / "checkpoint"))
        .option("path", sink).outputMode("append").trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination()
    assert query.exception() is None, query.exception()
    raw: dict[str, dict[str, list[Row]]] = {
        tid: {name: [] for name in TABLES[t.trace.area]} for tid, t in tables.items()
    }
    for r in spark.read.parquet(sink).collect():
        d = r.asDict()
        area = tables[d["stream_id"]].trace.area
        raw[d["stream_id"]][d["output"]].append(tuple(d[c] for c in TABLES[area][d["output"]]))
    return {tid: canonical(tables[tid].trace.area, out) for tid, out in raw.items()}


@pytest.mark.clauses("TR-15", *(ERROR_CLAUSES[a] for a in CHOSEN))
def test_spark_every_row_of_a_repeated_seq_is_a_duplicate_seq_error_row(tmp_path: Path) -> None:
    seed = run_seed()
    rng = random.Random(seed)
    tables: dict[str, Table] = {}
    for area in CHOSEN:
        for i, trace in enumerate(drawn_traces(area, TRACES_PER_AREA, seed)):
            tables[f"{area[:4]}{i:03d}"] = as_table(trace, rng)
    expected = {}
    marked = dict.fromkeys(CHOSEN, 0)
    for tid, table in tables.items():
        oracle = importlib.import_module(f"reference.{table.trace.area}").run_trace(table.trace)
        expected[tid] = with_table_seqs(table.trace.area, oracle, table.seqs)
        marked[table.trace.area] += sum(r[-1] == "duplicate_seq" for r in expected[tid]["errors"])
    assert all(marked.values()), f"duplicate_seq error rows expected per area: {marked}"
    actual = run_spark(tables, tmp_path)
    for tid, table in tables.items():
        assert actual[tid] == expected[tid], (
            f"{tid}; repeat this run with: {seed_command(current_test() or 'this test', seed)}\n"
            "table rows per batch (seq, item):\n"
            + "\n".join(f"  batch {b}: " + ", ".join(f"{s}:{i.describe()}" for s, i in rows)
                        for b, rows in enumerate(table.rows))
            + f"\noracle's trace:\n{table.trace.describe()}\nexpected {expected[tid]}\nactual {actual[tid]}"
        )  # fmt: skip


@pytest.mark.clauses("TR-15")
def test_marking_step_flags_every_row_of_a_repeated_seq_and_no_other() -> None:
    """The step Spark runs per shuffle partition, given Arrow batches of two rows (as the tests'
    Arrow chunking sends them): the rows of a repeated (stream, batch, seq) are marked wherever
    they fall, the same seq in another stream or batch is not, markers and ticks are never
    marked nor counted, and a row without a seq is compared with none."""
    import pyarrow as pa

    from spark_impl.scaleout import _MarkDuplicates

    rows = [
        # sid, batch, seq, kind, seq_null, marked
        ("a", 0, 1, "event", False, True),
        ("a", 0, 2, "clock", False, False),
        ("b", 0, 1, "event", False, False),  # another stream
        ("a", 1, 1, "event", False, False),  # another batch
        ("a", 0, 1, "end", False, True),  # repeats the first row's triple, in a later Arrow batch
        ("a", 0, 3, "batch_end", False, False),  # a marker is no item
        ("a", 0, 3, "event", False, False),  # so this seq is not repeated
        ("a", 0, -(2**63), "tick", False, False),
        ("a", 0, -(2**63), "tick", False, False),  # ticks of two input partitions
        ("a", 1, 0, "event", True, False),  # a null seq (0 in the column)
        ("a", 1, 0, "event", False, False),  # so the only row with seq 0
        (None, 0, 5, "event", False, True),  # a null stream is a stream of its own
        (None, 0, 5, None, False, True),  # a null kind is an item too
    ]
    names = ("x_sid", "x_batch", "x_seq", "x_kind", "x_seq_null")
    types = (pa.string(), pa.int64(), pa.int64(), pa.string(), pa.bool_())
    schema = pa.schema(list(zip(names, types, strict=True)))
    table = pa.table({n: [r[i] for r in rows] for i, n in enumerate(names)}, schema=schema)
    mark = _MarkDuplicates(("x_sid", "x_batch", "x_seq"), "x_kind", "duplicate_seq", ("batch_end", "tick"),
                           ("x_seq_null",))  # fmt: skip
    out = pa.Table.from_batches(list(mark(iter(table.to_batches(max_chunksize=2)))))
    kinds = out.column("x_kind").to_pylist()
    assert kinds == ["duplicate_seq" if r[5] else r[3] for r in rows]
    assert out.drop_columns(["x_kind"]).equals(table.drop_columns(["x_kind"]))
    assert list(mark(iter([]))) == []
    # The buffer's kinds are integer codes: the marked row gets the code given.
    codes = pa.table({"s": ["a", "a", "a", "a"], "b": [0, 0, 0, 0], "q": [4, 4, 4, 5], "k": [0, 1, 3, 0]})
    coded = _MarkDuplicates(("s", "b", "q"), "k", 6, (3,))
    marked = pa.Table.from_batches(list(coded(iter(codes.to_batches()))))
    assert marked.column("k").to_pylist() == [6, 6, 3, 0]


@pytest.mark.clauses("TR-3", "TR-15")
def test_duplicate_seq_items_carry_no_fields() -> None:
    """A trace's duplicate_seq item has no field: the row's content is no part of the item."""
    from harness.traces import InvalidTrace

    assert Item("duplicate_seq").describe() == "duplicate_seq"
    twice = table_of(Trace("late_data", {}, ()), [[(0, Item("clock", time=1))] * 2]).trace
    assert Trace.from_json(twice.to_json()).batches == ((Item("duplicate_seq"), Item("duplicate_seq")),)
    for given in ({"key": "a"}, {"value": 1}, {"event_time": 0}, {"raw": "x"}):
        with pytest.raises(InvalidTrace, match="no fields"):
            Item("duplicate_seq", **given)
