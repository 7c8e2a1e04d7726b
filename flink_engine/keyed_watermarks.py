"""F065 on Flink: keyed streams under the stream's one watermark, judged by Flink's window operator.

Flink keeps one watermark per stream (per subtask), not one per key: the nearest it has to F065 is a
keyed stream under the bounded-out-of-orderness watermark, which this adapter answers with (Spark's
built-ins are judged the same way, with their one query watermark). The watermark is Flink's
``forBoundedOutOfOrderness`` rule, ``max event time - bounded_delay - 1``, declared on the source
column (common.to_flink: Flink's W - 1 means the spec's W) and emitted after each record.

Observed from Flink: which events a keyed window operator sends to its late side output, the
watermark each event met, each firing of the keyed ``window_size`` windows, and the watermark after
each batch. The per-event verdict comes from a keyed tumbling window of 1 ms with the late side
output: Flink calls an element late when its window's last millisecond is at or below the watermark,
which for a 1 ms window is the element's own time, ``t <= W - 1``: the spec's ``t < W`` (R3) against
the stream's watermark instead of the key's. (Spark's adapter reads the same verdict from
``dropDuplicates`` under ``withWatermark``.) Mapped by the adapter: ``late`` for an event on the late
output, ``on_time`` otherwise; a window's batch, the first batch after which the watermark reached
the one that fired it. Not observable: per-key state, idleness and removal (Flink has none to give
the trace's ``idle`` and ``remove_key`` items to, so they reach nothing), the tracker's counters,
and the error rows of malformed items (the adapter's input checks). The ``end`` item ends the input
Flink is given: a watermark above all of the case's times, which fires the open windows (R38).

The tracker's settings other than ``bounded_delay`` and ``window_size`` (the idle timeout, the key limit
and its eviction policy, the compact tracker's sketch) have no Flink counterpart and reach nothing, as
for Spark's built-ins. Declined: times beyond the case's stretch of Flink event time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from flink_engine import common
from harness.traces import InvalidConfig
from reference.keyed_watermarks import config_from_trace

AREA = "keyed_watermarks"
VERDICT_WINDOW_MS = 1  # a 1 ms window's last millisecond is its element's time (the module docstring)


@dataclass
class Prepared:
    case_id: str
    index: int
    base: int
    window_size: int | None
    batches: int
    rows: list[common.Row] = field(default_factory=list)


def prepare(case: dict[str, Any], index: int) -> Prepared | dict[str, Any]:
    try:
        config, window_size = config_from_trace(case.get("config", {}))
    except InvalidConfig as error:
        return {"id": case["id"], "error": {"type": "InvalidConfig", "message": str(error)}}
    base = common.case_base(index) // (window_size or 1) * (window_size or 1)  # windows stay on the grid
    prepared = Prepared(case["id"], index, base, window_size, len(case["batches"]))
    times, ended = [], False  # Flink is given the events with a key and a time, and the end of the input
    for b, batch in enumerate(case["batches"]):
        for seq, item in enumerate(batch):
            if ended:
                break
            if item.get("kind") == "end":  # a watermark above all of the case's times fires the rest
                end = base + common.END_OFFSET
                prepared.rows.append(("end", index, b, seq, "", end, end, 0, ""))
                ended = True
            elif item.get("kind") == "event" and None not in (item.get("key"), item.get("event_time")):
                times.append(item["event_time"])
                t = base + item["event_time"]
                wm = common.to_flink(t - config.bounded_delay)  # Flink's bounded-out-of-orderness watermark
                key = f"{index}:{item['key']}"
                prepared.rows.append(("event", index, b, seq, key, t, wm, item.get("value", 0), ""))
        prepared.rows.append(("mark", index, b, -1, "", 0, 0, 0, ""))  # reads the watermark after batch b
    if not common.fits(config.bounded_delay, window_size, *times):
        return {
            "id": case["id"],
            "unsupported": (
                f"times or durations of {common.TIME_LIMIT} ms or more: this adapter gives each case its own "
                "stretch of Flink event time, so the i64 ends of TR-2 are out of reach"
            ),
        }
    return prepared


def build(env: Any, t_env: Any, cases: list[Prepared]) -> list[Any]:
    """One source for every case; the verdict window, and one window operator per window size."""
    from pyflink.common import Time, Types
    from pyflink.datastream import OutputTag
    from pyflink.datastream.functions import ProcessWindowFunction
    from pyflink.datastream.window import TumblingEventTimeWindows

    rows = [row for case in cases for row in case.rows]
    observed = common.observed_source(env, t_env, rows)
    events = observed.filter(lambda r: r[0] == "event")
    outputs = [
        common.marks(observed),
        events.map(
            lambda r: json.dumps({"t": "event", "case": r[1], "batch": r[2], "seq": r[3], "wm": r[9]}),
            output_type=Types.STRING(),
        ),
    ]
    late_tag = OutputTag("keyed_late", common.observed_type())
    judged = (
        events.key_by(lambda r: r[4], key_type=Types.STRING())
        .window(TumblingEventTimeWindows.of(Time.milliseconds(VERDICT_WINDOW_MS)))
        .side_output_late_data(late_tag)
        .reduce(lambda a, b: a, output_type=common.observed_type())
    )
    outputs.append(
        judged.get_side_output(late_tag).map(
            lambda r: json.dumps({"t": "late", "case": r[1], "batch": r[2], "seq": r[3]}),
            output_type=Types.STRING(),
        )
    )

    class EmitWindow(ProcessWindowFunction):
        def process(self, key: str, context: Any, elements: Any) -> Any:
            items = list(elements)
            yield common.fired_window(
                "window", key, context, items, count=len(items), sum=sum(it[7] for it in items)
            )

    for size in sorted({case.window_size for case in cases if case.window_size is not None}):
        members = {case.index for case in cases if case.window_size == size}
        outputs.append(
            events.filter(lambda r, members=members: r[1] in members)
            .key_by(lambda r: r[4], key_type=Types.STRING())
            .window(TumblingEventTimeWindows.of(Time.milliseconds(size)))
            .process(EmitWindow(), Types.STRING())
        )
    return outputs


def assemble(case: Prepared, records: list[dict[str, Any]]) -> dict[str, Any]:
    base = case.base
    after_batch = {r["batch"]: r["wm"] for r in records if r["t"] == "mark"}
    late = {(r["batch"], r["seq"]) for r in records if r["t"] == "late"}
    met = {(r["batch"], r["seq"]): r["wm"] for r in records if r["t"] == "event"}
    events = []
    for row in case.rows:
        if row[0] != "event":
            continue
        _, _, b, seq, key, t, _, _, _ = row
        verdict = "late" if (b, seq) in late else "on_time"
        watermark = common.case_watermark_or_end(met[(b, seq)], base)
        events.append([b, seq, key.split(":", 1)[1], t - base, watermark, verdict])
    windows = []
    for r in records:
        if r["t"] != "window":
            continue
        fired = next((b for b in range(case.batches) if after_batch[b] >= r["wm"]), None)
        if fired is None:
            continue  # fired by a later case or the job's end: still open when the trace stops
        key = r["key"].split(":", 1)[1]
        windows.append([fired, key, r["start"] - base, r["end"] - base, r["count"], r["sum"]])
    progress = [
        [b, common.case_watermark_or_end(after_batch[b], base), None, None, None, None, None, None, None]
        for b in range(case.batches)
    ]
    return {"id": case.case_id, "tables": {"events": events, "progress": progress, "windows": windows}}
