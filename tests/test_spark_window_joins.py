"""Window joins on Spark in a pipeline (spark_impl/window_joins/).

What the harness's differential runs do not show:

- the operator's own API: two streaming DataFrames (left and right) and a third carrying the
  watermark rows, three joins in one query (``stream_configs``), stopped after a batch and
  continued from its checkpoint, equal the oracle on the same arrivals, whose seqs are
  negative (a producer's offsets may be: a seq is any int64, TR-16);
- rows the trace model cannot carry (a null side, a null batch or seq, a time column Spark
  cannot read as milliseconds) and rows it can (null key or time, i64-bound times, a side that
  never sends) give the rows spec/window_joins.md OXJ-R19 and TR-15, TR-16 name;
- a checkpoint written with other settings is refused, naming the setting.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from harness.traces import I64_MAX, I64_MIN, Item, Trace
from reference.window_joins import run_trace

AREA = "window_joins"
STREAMS = {
    "tt": {"join": "tumbling_tumbling", "size_ms": 10, "allowed_lateness_ms": 5},
    "ts": {"join": "tumbling_sliding", "left_size_ms": 10, "right_size_ms": 15, "right_slide_ms": 5},
    "ss": {"join": "session_session", "gap_ms": 4, "allowed_lateness_ms": 3},
    "lonely": {"join": "tumbling_tumbling", "size_ms": 10},  # its right side never sends
}
BATCHES = 4
RESTART_AFTER = 1
SEQ_OFFSET = -(2**40)  # every input seq is its trace position plus this: all of them negative
EVENT_COLUMNS = ("stream", "batch", "seq", "key", "ts", "amount")


def generated_items(rng: random.Random, sides: tuple[str, ...]) -> list[list[Item]]:
    """Four batches: events of three keys around a rising watermark, out of order (some late),
    watermark rows (some below the current one), a few events without key or time and a few at
    the i64 bounds."""
    watermark = 0
    batches = []
    for _ in range(BATCHES):
        batch = []
        for _ in range(14):
            roll = rng.random()
            if roll < 0.18:
                watermark += rng.choice([-6, 3, 8, 12])
                batch.append(Item("watermark", time=watermark))
                continue
            key: str | None = rng.choice(["a", "b", "é"])
            time: int | None = max(0, watermark + rng.randint(-12, 20))
            if roll > 0.96:
                key = None
            elif roll > 0.92:
                time = None
            elif roll > 0.89:
                time = rng.choice([I64_MIN, I64_MAX])
            side = rng.choice(sides)
            batch.append(Item("event", side=side, key=key, event_time=time, value=rng.randint(-5, 5)))
        batches.append(batch)
    batches[-1].append(Item("watermark", time=I64_MAX))  # closes every session (OXJ-R14)
    return batches


def as_trace(config: dict[str, Any], batches: list[list[Item]]) -> Trace:
    return Trace(AREA, config, tuple(tuple(b) for b in batches), restart_after=frozenset({RESTART_AFTER}))


def write_inputs(work: Path, streams: dict[str, list[list[Item]]]) -> dict[str, str]:
    """The left events, the right events and the watermark rows as three files, one row group
    per batch, the seq being the item's place in the trace batch (one order over the three)
    plus ``SEQ_OFFSET``."""
    import pyarrow as pa

    from spark_impl.trace_source import write_trace_file

    rows: dict[str, list[dict[str, Any]]] = {"left": [], "right": [], "watermarks": []}
    for sid, batches in streams.items():
        for b, batch in enumerate(batches):
            for seq, item in enumerate(batch):
                place = {"stream": sid, "batch": b, "seq": seq + SEQ_OFFSET}
                if item.kind == "watermark":
                    rows["watermarks"].append({**place, "watermark": item.time})
                else:
                    event = {"key": item.key, "ts": item.event_time, "amount": item.value}
                    rows[str(item.side)].append({**place, **event})
    paths = {}
    for name, found in rows.items():
        columns = ("stream", "batch", "seq", "watermark") if name == "watermarks" else EVENT_COLUMNS
        types = {"stream": pa.string(), "key": pa.string(), "amount": pa.int32()}
        schema = pa.schema([(c, types.get(c, pa.int64())) for c in columns])
        paths[name] = str(work / f"{name}.parquet")
        write_trace_file(
            paths[name], pa.table({c: [r.get(c) for r in found] for c in columns}, schema=schema)
        )
    return paths


def source(path: str, end_batch: int | None = None) -> Any:
    from spark_impl.session import get_spark
    from spark_impl.trace_source import SOURCE_NAME

    reader = get_spark().readStream.format(SOURCE_NAME).option("path", path).option("num_batches", BATCHES)
    return (reader.option("end_batch", end_batch) if end_batch is not None else reader).load()


def run_to_end(query: Any) -> None:
    query.awaitTermination()
    assert query.exception() is None, query.exception()


def read_table(out: Path, name: str, columns: tuple[str, ...]) -> list[tuple[Any, ...]]:
    from spark_impl.session import get_spark

    if not (out / name).exists():
        return []
    return [tuple(r[c] for c in columns) for r in get_spark().read.parquet(str(out / name)).collect()]


@pytest.fixture(scope="module")
def restarted_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[list[Item]]]]:
    """One query over the four streams, stopped after batch 1 and continued from its checkpoint."""
    from spark_impl.window_joins import window_joins

    work = tmp_path_factory.mktemp("wj")
    rng = random.Random(20261127)
    streams = {
        sid: generated_items(rng, ("left",) if sid == "lonely" else ("left", "right")) for sid in STREAMS
    }
    paths = write_inputs(work, streams)
    for end_batch in (RESTART_AFTER, BATCHES - 1):
        wj = window_joins(
            source(paths["left"], end_batch), source(paths["right"], end_batch), key_col="key", time_col="ts",
            value_col="amount", watermarks_df=source(paths["watermarks"], end_batch),
            watermark_col="watermark", seq_col="seq", batch_col="batch", stream_id_col="stream",
            stream_configs=STREAMS, buckets=3,
        )  # fmt: skip
        run_to_end(
            wj.write_tables(str(work / "out"), str(work / "checkpoint"), trigger={"availableNow": True})
        )
    return work, streams


@pytest.mark.clauses(
    "OXJ-R2", "OXJ-R3", "OXJ-R5", "OXJ-R6", "OXJ-R7", "OXJ-R9", "OXJ-R10", "OXJ-R11", "OXJ-R12", "OXJ-R13",
    "OXJ-R14", "OXJ-R15", "OXJ-R16", "OXJ-R17", "OXJ-R19", "OXJ-R20", "OXJ-R21", "TR-16",
)  # fmt: skip
def test_spark_two_dataframes_after_a_restart_equal_the_oracle(
    restarted_run: tuple[Path, dict[str, list[list[Item]]]],
) -> None:
    """Every table of every stream equals the oracle's answer to the same arrivals; the
    arrivals reach pairs, late events and error rows, and the lonely stream pairs nothing."""
    from spark_impl.window_joins import TABLE_COLUMNS

    work, streams = restarted_run
    seen: dict[str, int] = {}
    for table, columns in TABLE_COLUMNS.items():
        seqs = [i for i, c in enumerate(columns) if c in ("seq", "left_seq", "right_seq")]
        rows = [
            tuple(v - SEQ_OFFSET if i in seqs and v is not None else v for i, v in enumerate(row))
            for row in read_table(work / "out", table, columns)
        ]  # back to trace positions, the oracle's seqs
        for sid, batches in streams.items():
            expected = sorted(run_trace(as_trace(STREAMS[sid], batches))[table], key=repr)
            got = sorted((row[1:] for row in rows if row[0] == sid), key=repr)
            assert got == expected, (sid, table)
            seen[table] = seen.get(table, 0) + len(expected)
    assert min(seen.values()) > 0, seen
    lonely = run_trace(as_trace(STREAMS["lonely"], streams["lonely"]))
    assert lonely["pairs"] == [] and lonely["progress"][-1][3] == 0


@pytest.mark.clauses("OXJ-R19", "TR-15", "TR-16")
def test_spark_rows_it_cannot_take_give_the_designs_rows(tmp_path: Path) -> None:
    """One DataFrame with a side column: rows of a null or unknown side, null key or time,
    an unsupported kind, a shared seq and a watermark below the current one are error rows, as
    the oracle says; rows without a batch or seq are ``missing_batch`` / ``missing_seq``
    (TR-16, worked by hand); none of them changes the pairs, and times at the i64 bounds join."""
    import pyarrow as pa

    from spark_impl.trace_source import write_trace_file
    from spark_impl.window_joins import TABLE_COLUMNS, window_join_rows

    items = [
        Item("event", side="left", key="k", event_time=I64_MAX, value=1),
        Item("event", side=None, key="k", event_time=I64_MAX),
        Item("event", side="up", key="k", event_time=I64_MAX),
        Item("event", side="right", key=None, event_time=I64_MAX),
        Item("event", side="right", key="k", event_time=None),
        Item("clock", time=5),
        Item("event", side="right", key="k", event_time=I64_MAX - 3, value=2),
        Item("watermark", time=100),
        Item("watermark", time=99),
        Item("event", side="left", key="m", event_time=I64_MIN, value=3),
        Item("event", side="right", key="m", event_time=I64_MIN, value=4),  # late: its pane is purged
    ]
    config = {"join": "tumbling_tumbling", "size_ms": 10}
    expected = run_trace(Trace(AREA, config, (tuple(items),)))
    rows = [
        {"batch": 0, "reported": 0, "seq": seq, "kind": it.kind, "side": it.side, "key": it.key,
         "ts": it.event_time, "wm": it.time, "amount": it.value}
        for seq, it in enumerate(items)
    ]  # fmt: skip
    rows += [
        {**rows[0], "seq": 20},
        {**rows[0], "seq": 20, "key": "x"},  # a shared seq: both refused
        {**rows[0], "seq": 21, "reported": None},
        {**rows[0], "seq": None},  # no place
    ]
    expected["errors"] += [(0, 20, "duplicate_seq"), (0, 20, "duplicate_seq")]
    expected["errors"] += [(None, 21, "missing_batch"), (0, None, "missing_seq")]
    columns = ("batch", "reported", "seq", "kind", "side", "key", "ts", "wm", "amount")
    types = {"kind": pa.string(), "side": pa.string(), "key": pa.string(), "amount": pa.int32()}
    schema = pa.schema([(c, types.get(c, pa.int64())) for c in columns])
    path = str(tmp_path / "rows.parquet")
    write_trace_file(path, pa.table({c: [r[c] for r in rows] for c in columns}, schema=schema))
    wj = window_join_rows(
        source(path, 0), join="tumbling_tumbling", size_ms=10, side_col="side", key_col="key", time_col="ts",
        value_col="amount", kind_col="kind", watermark_col="wm", seq_col="seq", batch_col="reported",
        buckets=2,
    )  # fmt: skip
    out = tmp_path / "out"
    run_to_end(wj.write_tables(str(out), str(tmp_path / "checkpoint"), trigger={"availableNow": True}))
    for table, cols in TABLE_COLUMNS.items():
        got = sorted((r[1:] for r in read_table(out, table, cols)), key=repr)
        assert got == sorted(expected[table], key=repr), table
    assert expected["pairs"] and expected["late"]


@pytest.mark.clauses("OXJ-R18", "OXJ-R21")
def test_spark_a_checkpoint_of_other_settings_is_refused(tmp_path: Path) -> None:
    """A query continued on a checkpoint written with another size fails with the message
    naming the setting and both values; no row of the refused batch is written."""
    import pyarrow as pa

    from spark_impl.trace_source import write_trace_file
    from spark_impl.window_joins import window_join_rows

    columns = ("batch", "seq", "side", "key", "ts")
    rows = [(0, 0, "left", "k", 3), (1, 0, "right", "k", 4)]
    schema = pa.schema([(c, pa.string() if c in ("side", "key") else pa.int64()) for c in columns])
    path = str(tmp_path / "rows.parquet")
    write_trace_file(path, pa.table({c: [r[i] for r in rows] for i, c in enumerate(columns)}, schema=schema))
    checkpoint, out = str(tmp_path / "checkpoint"), tmp_path / "out"
    for end_batch, size in ((0, 10), (1, 20)):
        wj = window_join_rows(
            source(path, end_batch), join="tumbling_tumbling", size_ms=size, side_col="side", key_col="key",
            time_col="ts", seq_col="seq", batch_col="batch", buckets=2,
        )  # fmt: skip
        query = wj.write_tables(str(out), checkpoint, trigger={"availableNow": True})
        if size == 10:
            run_to_end(query)
            continue
        with pytest.raises(Exception, match="size_ms 10; this query has size_ms 20"):
            query.awaitTermination()
    assert read_table(out, "pairs", ("batch",)) == []


@pytest.mark.clauses("OXJ-R18", "TR-16")
def test_spark_columns_and_settings_it_cannot_read_are_refused_when_defined() -> None:
    """A bad setting, or a time column Spark cannot read as milliseconds, is refused with
    InvalidConfig naming it when the operator is applied, before any query exists."""
    from harness.traces import InvalidConfig
    from spark_impl.session import get_spark
    from spark_impl.window_joins import window_joins

    spark = get_spark()
    good = "key string, ts long, seq long"
    left = spark.createDataFrame([], good)
    names = {"key_col": "key", "time_col": "ts", "seq_col": "seq"}
    window_joins(left, left, join="session_session", gap_ms=5, **names)  # accepted as it is
    for settings, named in (
        ({"join": "session_session"}, "needs the setting gap_ms"),
        ({"join": "session_session", "gap_ms": 5, "size_ms": 3}, r"\['size_ms'\] are not used"),
        ({"join": "tumbling_tumbling", "size_ms": True}, "size_ms must be an integer"),
        ({"join": "tumbling_sliding", "left_size_ms": 1, "right_size_ms": 300, "right_slide_ms": 1},
         "right_size_ms 300 is above 256"),
        ({"join": "tumbling_sliding", "left_size_ms": 5, "right_size_ms": 5, "right_slide_ms": 6},
         "right_slide_ms 6 is above right_size_ms 5"),
        ({"join": "tumbling_tumbling", "size_ms": 5, "allowed_lateness_ms": 2**63}, "allowed_lateness_ms"),
    ):  # fmt: skip
        with pytest.raises(InvalidConfig, match=named):
            window_joins(left, left, **names, **settings)
    text_time = spark.createDataFrame([], "key string, ts string, seq long")
    with pytest.raises(InvalidConfig, match="time_col 'ts' is string"):
        window_joins(text_time, text_time, join="session_session", gap_ms=5, **names)
