"""Hostile rows at the DataFrame boundary (spec/traces.md TR-16, TR-15).

On the oracle: the conversions of TR-16 (keys of several Spark types, timestamps, JSON text
cells, rows with no place, repeated seqs, values beyond 32 bits), worked out by hand, and the
round trip of an untouched table. On Spark: every operator's public function on a streaming
DataFrame of hostile rows (``spark_impl.testing.hostile_rows``), all operators in ONE query; the query
never fails and each table's answer equals the oracle's on the trace the table means, error
rows included; and a column of a type the operator does not accept is refused when the
operator is defined, naming the column, its type and the types it accepts.

Budget (harness/hypothesis_profiles.py): ``ci`` and ``dev`` run one typing per operator and
two generated tables of two batches each, plus a table of a null stream id; ``thorough`` runs
three typings per operator and six tables of four batches per typing.
"""

from __future__ import annotations

import datetime
import tempfile
import time
from decimal import Decimal
from typing import Any

import pytest

from harness.hypothesis_profiles import profile_name, run_seed
from harness.traces import I64_MAX, I64_MIN
from spark_impl.engine import implemented_areas
from spark_impl.testing.hostile_rows import (
    AREA_FIELDS,
    HostileTable,
    Micros,
    RunResult,
    Typing,
    all_tables,
    amount_cell,
    differences,
    eventtime_cell,
    expected_output,
    generated_traces,
    hostile_row_count,
    key_text,
    meaning,
    messages_cell,
    metrics_cell,
    time_millis,
    trace_rows,
)

# Every operator with a public function over a DataFrame of the user's columns; the oxirs pipeline
# has none of its own yet (spark_impl/pipeline.py takes the engine's row form, already typed),
# and each operator it runs has its public function tested here.
AREAS = sorted(implemented_areas() - {"pipeline"})
# Each area's clause of malformed items: where its error rows are decided.
ERROR_CLAUSES = {
    "keyed_watermarks": "F065-R23",
    "partitioned_watermarks": "F064-R22",
    "session_windows": "F017E-R20",
    "watermark_propagation": "OXW-R17",
    "late_data": "OXL-R16",
    "eventtime_buffer": "VELO-R23",
    "sla_admission": "OXS-R15",
    "exactly_once_aggregation": "OXE-R16",
    "window_joins": "OXJ-R19",
}
# (tables per area, batches per table, typings per area) by profile
BUDGET = {"dev": (2, 2, 1), "ci": (2, 2, 1), "thorough": (6, 4, 3)}


# ---- the conversions, by hand (TR-16) ------------------------------------------------------


@pytest.mark.clauses("TR-16")
def test_a_key_of_any_spark_type_is_the_text_spark_casts_it_to() -> None:
    assert key_text(17) == "17" and key_text(-3) == "-3"
    assert key_text(True) == "true" and key_text(False) == "false"
    assert key_text(datetime.date(1969, 12, 30)) == "1969-12-30"
    assert key_text(Decimal("-2.500")) == "-2.500"  # a decimal keeps its scale's digits
    assert key_text("météo".encode()) == "météo"  # binary: the UTF-8 text it holds
    assert key_text("") == ""  # a key like any other
    assert key_text(Micros(-1_500)) == "1969-12-31 23:59:59.9985"
    assert key_text(Micros(86_400_000_000)) == "1970-01-02 00:00:00"  # no fraction when it is zero


@pytest.mark.clauses("TR-16", "TR-2")
def test_a_timestamp_is_its_microseconds_rounded_down_to_a_millisecond() -> None:
    assert [time_millis(Micros(u)) for u in (1_999, 1_000, 999, 0, -1, -999, -1_000, -1_001)] == [
        1, 1, 0, 0, -1, -1, -1, -2
    ]  # fmt: skip
    assert time_millis(I64_MIN) == I64_MIN and time_millis(I64_MAX) == I64_MAX  # longs as they are
    assert time_millis(None) is None


@pytest.mark.clauses("TR-16", "VELO-R5", "VELO-R11")
def test_event_time_text_that_is_not_json_parses_as_nothing() -> None:
    for text in ("NaN", "Infinity", "-Infinity", "+5", "007", ".5", "5.", "1_000", "", "{", "0x10"):
        assert eventtime_cell(text) == "not JSON", text  # a string cell: unparsable_eventtime
    assert eventtime_cell("true") == "not JSON" and eventtime_cell("[]") == "not JSON"
    assert eventtime_cell("1e400") == 10**400  # exact: out of range, not infinite
    assert eventtime_cell("-1e400") == -(10**400)
    assert eventtime_cell("2e3") == 2000 and eventtime_cell(" 12 ") == 12
    assert eventtime_cell("1.5") == 1.5 and eventtime_cell('"007"') == "007" and eventtime_cell('""') == ""
    assert eventtime_cell("null") is None and eventtime_cell(None) is None
    assert messages_cell("not json") == (("", None),)  # names no defined stream: unknown_stream
    assert messages_cell('[["input"]]') == (("", None),) and messages_cell('{"a": 1}') == (("", None),)
    assert messages_cell("[]") == ()
    assert messages_cell('[["orders", 1.5], ["users", "x"]]') == (("orders", 1.5), ("users", "x"))


@pytest.mark.clauses("TR-16", "OXS-R15")
def test_load_metrics_text_follows_the_areas_rules() -> None:
    refused = ("", "NaN", "[]", "{}", '{"cpu": NaN}', '{"cpu": 1.0}', '{"cpu": 1e2}', '{"cpu": 101}',
               '{"queue_depth": -1}', '{"disk": 5}', '{"cpu": true}',
               '[["cpu", 50], ["memory"]]')  # fmt: skip
    for text in refused:
        assert metrics_cell(text) is None, text  # invalid_load
    assert metrics_cell('{"queue_depth": 100000000000000000000000}') == (("queue_depth", I64_MAX),)
    assert metrics_cell('[["memory", 3], ["cpu", 50]]') == (("cpu", 50), ("memory", 3))


@pytest.mark.clauses("TR-16", "OXE-R16")
def test_amount_text_is_the_json_value_it_holds() -> None:
    """A number exactly (1e400 is a number too large, not an infinity; -0 keeps its sign), a
    JSON string as it is ("NaN" quoted is NaN, bare it is not JSON), null as a missing amount,
    everything else as a string that is no amount."""
    assert amount_cell("1e400") == 10**400 and amount_cell("-1e400") == -(10**400)
    assert str(amount_cell("-0")) == "-0.0" and str(amount_cell("-0.0")) == "-0.0" and amount_cell("0") == 0
    assert amount_cell("0.1") == 0.1 and amount_cell("2e3") == 2000 and amount_cell(" 2 ") == 2
    assert amount_cell("9007199254740993") == 2**53 + 1  # exact: the oracle rounds it
    assert amount_cell('"NaN"') == "NaN" and amount_cell('"-Infinity"') == "-Infinity"
    assert amount_cell("true") is True and amount_cell("null") is None and amount_cell(None) is None
    for text in ("NaN", "Infinity", "", "abc", "{", "[]", "{}", "[1]"):
        assert amount_cell(text) == "not JSON", text  # invalid_amount


def _table(area: str, config: dict[str, Any], rows: list[dict[str, Any]], batches: int) -> HostileTable:
    full = []
    for r in rows:
        row: dict[str, Any] = {c: None for c in ("trace_id", "batch", "seq", "kind", "key", "event_time",
                                                  "value", "partition", "source", "time", "count", "core",
                                                  "raw", "messages", "priority", "metrics")}  # fmt: skip
        row.update(trace_id="s", value=0, delivered_in=r.get("batch") or 0)
        row.update(r)
        full.append(row)
    return HostileTable(area, "s", config, Typing("plain"), tuple(full), batches)


@pytest.mark.clauses("TR-16", "TR-15", "F065-R23", "F065-R16")
def test_rows_with_no_place_change_nothing_and_a_refused_value_ends_the_segment() -> None:
    """Keyed watermarks, delay 1000. Batch 0: a@5000 (seq 0), a@9000 with a null seq, a@7000 with
    value 2**31 (seq 1), a@2000 (seq 2), two rows of seq 3, and a row with a null batch. Worked out
    by hand: the null-seq and null-batch rows are error rows and change nothing, so a's watermark
    stays 4000 and a@2000 is late against it; the refused value (TR-16) and the repeated seq
    (TR-15) are error rows at their place; seqs are the table's, not positions."""
    ev = {"kind": "event", "key": "a", "batch": 0}
    table = _table("keyed_watermarks", {"bounded_delay": 1000}, [
        {**ev, "seq": 0, "event_time": 5000},
        {**ev, "seq": None, "event_time": 9000},
        {**ev, "seq": 1, "event_time": 7000, "value": 2**31},
        {**ev, "seq": 2, "event_time": 2000},
        {**ev, "seq": 3, "event_time": 3000}, {**ev, "seq": 3, "event_time": 8000},
        {**ev, "batch": None, "seq": 4, "event_time": 9500},
        {"kind": "batch_end", "batch": 0, "seq": 5},
    ], batches=1)  # fmt: skip
    m = meaning(table)
    assert [i.kind for i in m.trace.batches[0]] == ["event", "duplicate_seq", "event", "duplicate_seq",
                                                     "duplicate_seq"]  # fmt: skip
    assert m.seqs == ((0, 1, 2, 3, 3),)
    out = expected_output(table)
    assert not isinstance(out, Exception)
    assert sorted(out["errors"], key=str) == sorted([
        (0, None, "missing_seq"), (None, 4, "missing_batch"), (0, 1, "value_out_of_range"),
        (0, 3, "duplicate_seq"), (0, 3, "duplicate_seq"),
    ], key=str)  # fmt: skip
    assert [(r[1], r[3], r[4], r[5]) for r in out["events"]] == [
        (0, 5000, None, "on_time"), (2, 2000, 4000, "late")
    ]  # fmt: skip


@pytest.mark.clauses("TR-16", "OXJ-R3", "OXJ-R6")
def test_a_join_pair_names_its_events_by_the_tables_seqs() -> None:
    """Window joins, tumbling x tumbling of 100 ms. Batch 0: right a@0 at seq 3, left a@0 at
    seq 7 (trace positions 0 and 1). Worked out by hand: the left event arrives second and
    emits the pair, so the pair and both events it names carry the table's seqs, 7 and 3; the
    conformance job once expected the positions in left_seq and right_seq."""
    ev = {"kind": "event", "key": "a", "event_time": 0, "batch": 0}
    table = _table("window_joins", {"join": "tumbling_tumbling", "size_ms": 100}, [
        {**ev, "seq": 3, "side": "right"},
        {**ev, "seq": 7, "side": "left"},
        {"kind": "batch_end", "batch": 0, "seq": 8},
    ], batches=1)  # fmt: skip
    out = expected_output(table)
    assert not isinstance(out, Exception)
    assert out["pairs"] == [(0, 7, "a", 0, 7, 0, 0, 0, 3, 0, 0)]


@pytest.mark.clauses("TR-16", "TR-7", "OXL-R16")
def test_a_null_kind_is_unsupported_and_a_null_field_is_missing() -> None:
    """Late data: a row of no kind is unsupported_item; an event without its time is
    missing_event_time; a watermark without its time missing_time (OXL-R16's order)."""
    table = _table("late_data", {"policy": "Drop"}, [
        {"kind": None, "batch": 0, "seq": 0, "event_time": 5},
        {"kind": "", "batch": 0, "seq": 1, "event_time": 5},
        {"kind": "event", "batch": 0, "seq": 2},
        {"kind": "watermark", "batch": 0, "seq": 3, "source": 1},
        {"kind": "batch_end", "batch": 0, "seq": 4},
    ], batches=1)  # fmt: skip
    out = expected_output(table)
    assert not isinstance(out, Exception)
    assert out["errors"] == [
        (0, 0, "unsupported_item"), (0, 1, "unsupported_item"), (0, 2, "missing_event_time"),
        (0, 3, "missing_time"),
    ]  # fmt: skip


@pytest.mark.clauses("TR-16", "TR-3", "TR-8")
@pytest.mark.parametrize("area", AREAS)
def test_an_untouched_table_gives_the_answer_of_its_trace(area: str) -> None:
    """The harness engine's rows of generated traces, read back by TR-16, mean those traces: every
    seq is its own position, nothing is left without a place, and the answer is the oracle's."""
    from harness.engine import run_canonical
    from harness.reference_engine import ReferenceEngine

    for trace in generated_traces(area, 6, run_seed(), 4):
        table = HostileTable(area, "s", trace.config, Typing("plain"), tuple(trace_rows(trace, "s")),
                             len(trace.batches))  # fmt: skip
        m = meaning(table)
        assert m.seqs == tuple(tuple(range(len(b))) for b in trace.batches)
        assert not m.unplaced and not m.reasons
        assert expected_output(table) == run_canonical(ReferenceEngine(), [trace])[0]


# ---- on Spark: one query over every operator -----------------------------------------------

_RUN: dict[str, tuple[list[HostileTable], RunResult]] = {}
_STARTED: dict[str, tuple[list[HostileTable], Any, tempfile.TemporaryDirectory[str]]] = {}


def start_shared_run() -> None:
    """Start the query once the pre-run is over: it runs in Spark's threads beside the tests that
    follow (the serial Spark tests leave most of a core idle), and its tests, run near the end
    (properties/conftest.py), find it done. Tables and plan are made here, in the main thread;
    a failure leaves the query to the tests, which report it."""
    if _RUN or _STARTED:
        return
    from spark_impl.session import get_spark
    from spark_impl.testing.hostile_rows import start_tables

    work = tempfile.TemporaryDirectory(prefix="hostile-rows-")
    try:
        tables = _tables()
        # a few rows per stage: each shuffle partition of a stateful stage costs ~1 s per batch
        _STARTED["run"] = (tables, start_tables(get_spark(), tables, work.name, shuffle_partitions=1), work)
    except Exception:  # noqa: BLE001 - the tests start it again and fail with it
        work.cleanup()


def _tables() -> list[HostileTable]:
    count, batches, typings = BUDGET.get(profile_name(), BUDGET["ci"])
    return all_tables(AREAS, count, run_seed(), batches, typings)


def _shared_run() -> tuple[list[HostileTable], RunResult]:
    """Every operator's hostile tables through ONE streaming query, once per test session."""
    if "run" not in _RUN:
        if "run" not in _STARTED:
            start_shared_run()
        started = time.perf_counter()
        try:
            tables, query, work = _STARTED.pop("run")
        except KeyError:  # the start failed: again, to report why
            tables = _tables()
            result = _result(lambda: _start_again(tables))
        else:
            with work:
                result = _result(query.result)
        print(f"hostile rows: {len(tables)} tables; the query's micro-batches: {result.seconds:.1f} s; "
              f"this test waited {time.perf_counter() - started:.1f} s for them")  # fmt: skip
        _RUN["run"] = (tables, result)
    return _RUN["run"]


def _result(run: Any) -> RunResult:
    try:
        return run()
    except Exception as error:  # noqa: BLE001 - every operator's test reports it, none runs it again
        return RunResult({}, 0.0, 0, 0, error=f"{type(error).__name__}: {error}")


def _start_again(tables: list[HostileTable]) -> RunResult:
    from spark_impl.session import get_spark
    from spark_impl.testing.hostile_rows import run_tables

    with tempfile.TemporaryDirectory(prefix="hostile-rows-") as work:
        return run_tables(get_spark(), tables, work, shuffle_partitions=1)


@pytest.mark.after_prerun.with_args(start_shared_run)
@pytest.mark.parametrize(
    "area",
    [pytest.param(a, marks=pytest.mark.clauses("TR-16", "TR-15", "TR-7", ERROR_CLAUSES[a])) for a in AREAS],
)
def test_spark_hostile_rows_give_the_oracles_answer(area: str) -> None:
    """The query never fails on a row, and every table's output equals the oracle's answer to
    the trace the table means (TR-16), error rows included."""
    tables, result = _shared_run()
    assert result.error is None, f"the query over hostile rows failed: {result.error}"
    mine = [(i, t) for i, t in enumerate(tables) if t.area == area]
    assert mine and any(t.stream is None for _, t in mine)
    failures = []
    for i, t in mine:
        d = differences(t, result.outputs[i])
        if d:
            failures.append(f"{t.describe()}\nmutations: {list(t.mutations)}\n{d}")
    rows = sum(hostile_row_count(t) for _, t in mine)
    print(f"{area}: {len(mine)} tables, {rows} hostile rows, typings "
          f"{sorted({t.typing.name for _, t in mine})}; every operator's query: {result.seconds:.1f} s in "
          f"{result.micro_batches} micro-batches, {result.instances} operators")  # fmt: skip
    assert not failures, "\n\n".join(failures)


# ---- on Spark: a column of a type the operator does not accept ---------------------------

# Types each column refuses (TR-16): numbers are integral, times integral or timestamps, text
# cells strings.
WRONG_TYPES = {
    "seq": ("double", "string"),
    "batch": ("decimal(20,0)",),
    "value": ("double", "string"),
    "source": ("string",),
    "partition": ("double",),
    "count": ("decimal(10,2)",),
    "core": ("boolean",),
    "priority": ("double",),
    "event_time": ("double", "string", "date", "decimal(20,3)"),
    "time": ("double", "string"),
    "raw": ("double",),
    "messages": ("int",),
    "metrics": ("binary",),
    "producer": ("double",),
    "sequence": ("string",),
    "amount": ("boolean",),
}
# The option that names each column in the area's engine_output (spark_impl/<area>.py).
OPTION = {"raw": "eventtime_col", "time": "time_col", "key": "key_col"}
OPTION_OF_AREA = {("watermark_propagation", "time"): "watermark_col"}


def _streaming_input(spark: Any, tmp: str) -> Any:
    import pyarrow as pa

    from spark_impl.engine import INPUT_SCHEMA
    from spark_impl.trace_source import SOURCE_NAME, write_trace_file

    types = {"string": pa.string(), "int64": pa.int64()}
    schema = pa.schema([(n, types[t]) for n, t in INPUT_SCHEMA if n != "area"])
    write_trace_file(f"{tmp}/input.parquet", schema.empty_table())
    return spark.readStream.format(SOURCE_NAME).option("path", f"{tmp}/input.parquet").load()


@pytest.mark.clauses("TR-16", "TR-6")
@pytest.mark.parametrize("area", AREAS)
def test_spark_a_column_of_a_type_it_does_not_accept_is_refused_when_defined(
    area: str, tmp_path: Any
) -> None:
    """Every column the operator reads, given a type it does not accept, is refused by its public
    function with InvalidConfig naming the column, the type and the types it accepts; no query
    starts. A None key of stream_configs is refused too: it would name the stream "None"."""
    import importlib

    from pyspark.sql import functions as F

    from harness.traces import InvalidConfig
    from spark_impl.session import get_spark

    module = importlib.import_module(f"spark_impl.{area}")
    df = _streaming_input(get_spark(), str(tmp_path))
    columns = ["seq", "batch", *AREA_FIELDS[area]]
    refused = 0
    for column in columns:
        for wrong in WRONG_TYPES.get(column, ()):
            bad = df.withColumn(column, F.lit(None).cast(wrong))
            with pytest.raises(InvalidConfig) as caught:
                module.engine_output(bad, {}, seq_unique=False)
            message = str(caught.value)
            assert f"'{column}'" in message and wrong in message and "accepts" in message, message
            refused += 1
    assert refused >= len(columns) - ("key" in columns)
    with pytest.raises(InvalidConfig, match="null stream"):
        module.engine_output(df, {None: {}}, seq_unique=False)
