"""VELO on Flink: the event-time reorder buffer as Flink SQL's ``ORDER BY rt`` on a streaming table.

Flink SQL plans an ascending sort on a rowtime attribute as a TemporalSort: it buffers rows, releases
them in rowtime order once the watermark reaches their time, and drops a row whose rowtime is at or
below the watermark when it arrives. That is the stage of VELO-R14..R18 with its watermark from Flink:
the source table declares ``WATERMARK FOR rt AS rt - late_tolerance`` (Flink SQL's bounded
out-of-orderness, emitted after every record that raises it), which is the spec's target
``max_timestamp_seen - late_tolerance``. Both watermarks mean that no tuple at or below W follows
(VELO-R18, Flink's contract), so no shift by one is needed here.

Observed from Flink: the rows the sort releases, each with the watermark before the one that released
it, and the watermark after each batch (a marker row read by a process function). Mapped by the
adapter: each released tuple's batch (the batch whose events raised Flink's watermark past the one
before its release; a tuple only the job's end or a later case releases is still buffered when the
trace stops), one ``watermark`` row per batch in which Flink's watermark rose, and the
case's ``end`` item as a watermark above all of its times (reported as I64_MAX, VELO-R21). Not
observable: the late tuples (the sort drops them without a trace) and the stage's counters.

Declined: processing-time mode (Flink's processing time is the wall clock, not the trace's clock
items), joined streams (a Flink rowtime is one column of one row, VELO-R11), event times that are not
integer milliseconds (parsing another format would be the adapter's, VELO-R5), and traces with an item
the spec turns into an error (VELO-R12, R23: the error items are part of the shown output, and the
adapter would compute them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from flink_engine import common
from harness.traces import InvalidConfig
from reference.eventtime_buffer import config_from_trace, plan_watermark_stage

AREA = "eventtime_buffer"
PROCESSING_TIME = (
    "Flink's processing time is the machine's clock: the trace's clock items cannot drive a Flink "
    "processing-time stage (VELO-R9)"
)
JOINED = (
    "a Flink rowtime is one column of one row, not the message-scoped event time of joined streams (VELO-R11)"
)
NOT_MILLISECONDS = (
    "this adapter hands Flink integer milliseconds only (eventtime_type unixtimestamp_ms); parsing other "
    "cells would be the adapter's work, not Flink's (VELO-R5)"
)
ERROR_ITEMS = (
    "the trace has items the spec turns into error items of the output (VELO-R12, R23); Flink has no "
    "notion of them and the adapter would compute them"
)


@dataclass
class Prepared:
    case_id: str
    index: int
    base: int
    tolerance: int
    batches: int
    rows: list[common.Row] = field(default_factory=list)


def _decline(case: dict[str, Any]) -> str | None:
    """Why the case is outside what the sort expresses, or None."""
    config = case.get("config", {})
    if not config.get("eventtime_enabled"):
        return PROCESSING_TIME
    if config.get("joined_streams"):
        return JOINED
    if config.get("eventtime_type") != "unixtimestamp_ms":
        return NOT_MILLISECONDS
    ended = False
    clock = None
    for batch in case["batches"]:
        for item in batch:
            kind = item.get("kind")
            if ended or kind not in ("event", "clock", "end"):
                return ERROR_ITEMS
            if kind == "end":
                ended = True
            elif kind == "clock":
                if item.get("time") is None or (clock is not None and item["time"] < clock):
                    return ERROR_ITEMS
                clock = item["time"]
            elif item.get("messages") is not None:
                return JOINED
            else:
                raw = item.get("raw")
                if not isinstance(raw, int) or isinstance(raw, bool):
                    return ERROR_ITEMS if raw is None or isinstance(raw, bool | float) else NOT_MILLISECONDS
    return None


def prepare(case: dict[str, Any], index: int) -> Prepared | dict[str, Any]:
    try:
        plan_watermark_stage(*config_from_trace(case.get("config", {})))
    except InvalidConfig as error:
        return {"id": case["id"], "error": {"type": "InvalidConfig", "message": str(error)}}
    reason = _decline(case)
    if reason is not None:
        return {"id": case["id"], "unsupported": reason}
    tolerance = case["config"].get("late_tolerance", 0)
    times = [it["raw"] for batch in case["batches"] for it in batch if it["kind"] == "event"]
    if not common.fits(tolerance, *times):
        return {
            "id": case["id"],
            "unsupported": (
                f"times or durations of {common.TIME_LIMIT} ms or more: this adapter gives each case its own "
                "stretch of Flink event time, so the i64 ends of TR-2 are out of reach"
            ),
        }
    base = common.case_base(index)
    prepared = Prepared(case["id"], index, base, tolerance, len(case["batches"]))
    for b, batch in enumerate(case["batches"]):
        for seq, item in enumerate(batch):
            if item["kind"] == "event":
                value = item.get("value", 0)
                prepared.rows.append(
                    ("event", index, b, seq, item.get("key") or "", base + item["raw"], 0, value, "")
                )
            elif item["kind"] == "end":  # (a mark's time, 0, is far below every case: it raises nothing)
                # an end row whose watermark is the case's end of time: above all of its times
                end = base + common.END_OFFSET + tolerance
                prepared.rows.append(("end", index, b, seq, "", end, 0, 0, ""))
        prepared.rows.append(("mark", index, b, -1, "", 0, 0, 0, ""))  # reads the watermark after batch b
    return prepared


def build(env: Any, t_env: Any, cases: list[Prepared]) -> list[Any]:
    """One source table and one sort per late tolerance (the watermark's delay is the table's)."""
    from pyflink.common import Types
    from pyflink.datastream.functions import ProcessFunction

    class Released(ProcessFunction):
        """A released row with the watermark its consumer had: the one before the watermark that
        released it (the sort emits while it handles the new watermark, before passing it on)."""

        def process_element(self, r: Any, ctx: Any) -> Any:
            yield json.dumps(
                {
                    "t": "tuple",
                    "case": r[0],
                    "batch": r[1],
                    "seq": r[2],
                    "key": r[3],
                    "ts": r[4],
                    "value": r[5],
                    "wm": ctx.timer_service().current_watermark(),
                }
            )

    outputs = []
    for tolerance in sorted({case.tolerance for case in cases}):
        rows = [row for case in cases if case.tolerance == tolerance for row in case.rows]
        table = common.source_table(
            env, t_env, rows, watermark_sql=f"TO_TIMESTAMP_LTZ(ts_ms - {tolerance}, 3)"
        )
        view = f"buffer_source_{tolerance}"
        t_env.create_temporary_view(view, table)
        observed = t_env.to_data_stream(table).process(
            common.observe_watermark(), output_type=common.observed_type()
        )
        outputs.append(common.marks(observed))
        released = t_env.sql_query(
            f"SELECT case_index, batch, seq, key, ts_ms, `value` FROM {view} WHERE kind = 'event' ORDER BY rt"
        )
        outputs.append(t_env.to_data_stream(released).process(Released(), output_type=Types.STRING()))
    return outputs


def _spec_watermark(flink_watermark: int, case: Prepared) -> int | None:
    """The case's watermark from Flink's (the same promise, no shift); None before the case's first."""
    if flink_watermark < case.base - common.CASE_SPAN // 2:
        return None
    if flink_watermark >= case.base + common.END_OFFSET:
        return common.I64_MAX  # the case's end item (VELO-R21)
    return flink_watermark - case.base


def assemble(case: Prepared, records: list[dict[str, Any]]) -> dict[str, Any]:
    after_batch = {r["batch"]: r["wm"] for r in records if r["t"] == "mark"}
    watermarks = [_spec_watermark(after_batch[b], case) for b in range(case.batches)]
    emitted: list[list[Any]] = []
    for r in records:
        if r["t"] != "tuple":
            continue
        t = r["ts"] - case.base
        # released by the first watermark above the one its consumer had: the batch that raised it
        released = next((b for b in range(case.batches) if after_batch[b] > r["wm"]), None)
        if released is None:
            continue  # only the job's end or a later case released it: still buffered when the trace stops
        key = r["key"] or None
        emitted.append([released, "tuple", key, t, r["value"], None, None, r["batch"], r["seq"]])
    before = None
    progress = []
    for b, w in enumerate(watermarks):
        if w is not None and (before is None or w > before):
            emitted.append([b, "watermark", None, None, None, w, None, None, None])
        before = w if w is not None else before
        progress.append([b, w, None, None, None, None])
    return {
        "id": case.case_id,
        "tables": {"emitted": emitted, "late": [], "progress": progress, "errors": []},
    }
