"""What every area's Flink pipeline shares: the job, the source with a per-record watermark, time shifts.

Flink has no micro-batches and one watermark per stream, so cases are multiplexed into one job by
giving each case its own stretch of event time (CASE_SPAN ms apart, in arrival order): a case's
watermark then starts below all of its times, as if it ran alone, and its keys are prefixed by its
index. The watermark comes from a Flink SQL source watermark declared on a column, which Flink's
WatermarkAssigner emits after every record when pipeline.auto-watermark-interval is 0, so its timing
is deterministic; python.fn-execution.bundle.size 1 makes Python operators see it record by record.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import Any

CASE_SPAN = 10**11  # ms of event time given to each case
TIME_LIMIT = CASE_SPAN // 8  # |time| and durations a case may use so that cases never overlap
END_OFFSET = CASE_SPAN // 2  # a case's end of time: the watermark its `end` item stands for
FIELD_NAMES = ["kind", "case_index", "batch", "seq", "key", "ts_ms", "wm_ms", "value", "extra"]
I64_MAX = 2**63 - 1

Row = tuple[Any, ...]


# The spec's watermark W says no event before W follows (an event at W is on time); Flink's W_f says
# no element at or before W_f follows. The two say the same when W_f = W - 1, which is also what
# Flink's own bounded-out-of-orderness generator emits (max - delay - 1). So the adapter hands Flink
# W - 1 and reports W_f + 1; a Flink SQL user who writes `rt - INTERVAL delay` gets W_f = W instead,
# one millisecond later than the spec's (docs/conformance/README.md shows what that changes).


def to_flink(watermark: int) -> int:
    """The Flink watermark that means what the spec's ``watermark`` means."""
    return watermark - 1


def from_flink(watermark: int) -> int:
    """The spec's watermark that means what Flink's ``watermark`` means."""
    return watermark + 1


def case_watermark(flink_watermark: int, base: int) -> int | None:
    """The spec's watermark of the case whose times start at ``base``, from Flink's; None while
    only earlier cases (or nothing) moved it."""
    if flink_watermark < base - CASE_SPAN // 2:
        return None
    return from_flink(flink_watermark) - base


def case_watermark_or_end(flink_watermark: int, base: int) -> int | None:
    """``case_watermark``, except that the case's end item (a watermark at END_OFFSET or above)
    stands for the top of time."""
    if flink_watermark >= base + END_OFFSET:
        return I64_MAX
    return case_watermark(flink_watermark, base)


def observed_source(env: Any, t_env: Any, rows: list[Row]) -> Any:
    """The source of ``rows`` with its watermark, each record tagged with the watermark it met."""
    return source_with_watermark(env, t_env, rows).process(observe_watermark(), output_type=observed_type())


def log(message: str) -> None:
    print(f"[flink_engine] {message}", file=sys.stderr, flush=True)


def case_base(case_index: int) -> int:
    return (case_index + 1) * CASE_SPAN


def fits(*values: Any) -> bool:
    """True when every integer value is small enough for the case's own stretch of event time."""
    return all(not isinstance(v, int) or abs(v) < TIME_LIMIT for v in values)


def new_environment(settings: dict[str, str] | None = None) -> tuple[Any, Any]:
    from pyflink.common import Configuration
    from pyflink.datastream import StreamExecutionEnvironment
    from pyflink.table import StreamTableEnvironment

    conf = Configuration()
    for key, value in {**SETTINGS, **(settings or {})}.items():
        conf.set_string(key, value)
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(1)
    return env, StreamTableEnvironment.create(env)


SETTINGS = {
    "pipeline.auto-watermark-interval": "0",  # the SQL assigner emits after each record
    "parallelism.default": "1",
    "python.fn-execution.bundle.size": "1",  # watermarks reach Python record by record
}


def provenance(started: bool) -> dict[str, str]:
    """Versions and settings of the run (the engine protocol's provenance line); Java's version
    when a job ran (asking it starts the JVM)."""
    from pyflink.version import __version__

    out = {"flink": __version__, "python": sys.version.split()[0], **SETTINGS, "jobs": "one per run"}
    if started:
        from pyflink.java_gateway import get_gateway

        out["java"] = str(get_gateway().jvm.java.lang.System.getProperty("java.version"))
    return out


def source_with_watermark(env: Any, t_env: Any, rows: list[Row]) -> Any:
    """A DataStream of `rows` (FIELD_NAMES) whose records carry ts_ms and whose watermark is max(wm_ms)."""
    return t_env.to_data_stream(source_table(env, t_env, rows))  # rt: each record's timestamp


def source_table(
    env: Any, t_env: Any, rows: list[Row], watermark_sql: str = "TO_TIMESTAMP_LTZ(wm_ms, 3)"
) -> Any:
    """A Table of `rows` (FIELD_NAMES) with the rowtime `rt` (ts_ms) and the watermark max(wm_ms), or
    the largest value of another expression a Flink SQL user would write (`rt - INTERVAL ...`)."""
    from pyflink.common import Types
    from pyflink.table import DataTypes, Schema

    stream = env.from_collection(rows, type_info=Types.ROW_NAMED(FIELD_NAMES, field_types()))
    sql_types = [
        DataTypes.STRING(),
        DataTypes.BIGINT(),
        DataTypes.BIGINT(),
        DataTypes.BIGINT(),
        DataTypes.STRING(),
        DataTypes.BIGINT(),
        DataTypes.BIGINT(),
        DataTypes.BIGINT(),
        DataTypes.STRING(),
    ]
    builder = Schema.new_builder()
    for name, sql_type in zip(FIELD_NAMES, sql_types, strict=True):
        builder = builder.column(name, sql_type)
    schema = (
        builder.column_by_expression("rt", "TO_TIMESTAMP_LTZ(ts_ms, 3)")
        .watermark("rt", watermark_sql)
        .build()
    )
    return t_env.from_data_stream(stream, schema)


def collect(env: Any, streams: Iterable[Any]) -> list[dict[str, Any]]:
    """Runs the job and returns every JSON record the given string streams produced."""
    return [json.loads(line) for line in collect_lines(env, streams)]


def collect_lines(env: Any, streams: Iterable[Any]) -> list[str]:
    """Runs the job and returns every line the given string streams produced."""
    streams = list(streams)
    if not streams:
        return []
    merged = streams[0].union(*streams[1:]) if len(streams) > 1 else streams[0]
    with merged.execute_and_collect("eventtime-conformance") as results:
        return list(results)


def observe_watermark() -> Any:
    """A ProcessFunction that tags each record with the watermark Flink had when the record arrived."""
    from pyflink.datastream.functions import ProcessFunction

    class ObserveWatermark(ProcessFunction):
        def process_element(self, value: Any, ctx: Any) -> Any:
            yield (*tuple(value[: len(FIELD_NAMES)]), ctx.timer_service().current_watermark())

    return ObserveWatermark()


def marks(observed: Any, kinds: tuple[str, ...] = ("mark",)) -> Any:
    """The observed rows of the given kinds (each trace batch's marker row) as JSON records with the
    watermark Flink had there."""
    from pyflink.common import Types

    return observed.filter(lambda r: r[0] in kinds).map(
        lambda r: json.dumps({"t": "mark", "case": r[1], "batch": r[2], "kind": r[0], "wm": r[9]}),
        output_type=Types.STRING(),
    )


def fired_window(tag: str, key: str, context: Any, items: list[Any], **fields: Any) -> str:
    """A JSON record of one firing of a window operator: its case, key, bounds and the watermark that
    fired it (a ProcessWindowFunction's context), with the area's own fields."""
    window = context.window()
    record = {"t": tag, "case": items[0][1], "key": key, "start": window.start, "end": window.end}
    return json.dumps({**record, "wm": context.current_watermark(), **fields})


def field_types() -> list[Any]:
    """Flink's types of FIELD_NAMES, in order."""
    from pyflink.common import Types

    string, long = Types.STRING(), Types.LONG()
    return [string, long, long, long, string, long, long, long, string]


def observed_type() -> Any:
    """A source row followed by the watermark its operator saw (ObserveWatermark)."""
    from pyflink.common import Types

    return Types.TUPLE([*field_types(), Types.LONG()])
