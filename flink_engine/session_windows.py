"""F017E on Flink: EventTimeSessionWindows (a per-element gap), allowed lateness and the late side output.

What Flink decides, reported as observed: the sessions (bounds, count, sum) and the watermark that fired
each (ProcessWindowFunction context), the late side output, and the watermark each record met. What the
adapter adds: the error rows of malformed items (input checking, not Flink), and the batch of each row,
mapped from the watermark that produced it (a session fires at watermark W in the first batch after
which the observed watermark reached W). Not observable in Flink, so reported empty or null: the pending
timers (`timers`), `open_sessions`, and the reason: every Flink session fires by its event-time timer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from flink_engine import common
from harness.traces import InvalidConfig
from reference.session_windows import config_from_trace

AREA = "session_windows"


@dataclass
class Prepared:
    case_id: str
    index: int
    config: dict[str, Any]
    batches: int
    rows: list[common.Row] = field(default_factory=list)
    errors: list[common.Row] = field(default_factory=list)


def _item_error(item: dict[str, Any], ended: bool) -> str | None:
    """F017E-R20, checked by the adapter: Flink's DataStream has no notion of a malformed item."""
    kind = item.get("kind")
    if ended:
        return "after_end"
    if kind == "end":
        return None
    if kind == "duplicate_seq":
        return "duplicate_seq"
    if kind != "event":
        return "unsupported_item"
    if item.get("key") is None:
        return "missing_key"
    if item.get("event_time") is None:
        return "missing_event_time"
    return None


def prepare(case: dict[str, Any], index: int) -> Prepared | dict[str, Any]:
    try:
        config = config_from_trace(case.get("config", {}))
    except InvalidConfig as error:
        return {"id": case["id"], "error": {"type": "InvalidConfig", "message": str(error)}}
    batches = case["batches"]
    times = [it.get("event_time") for batch in batches for it in batch]
    if not common.fits(config["gap"], config["allowed_lateness"], config["bounded_delay"], *times):
        return {
            "id": case["id"],
            "unsupported": (
                f"times or durations of {common.TIME_LIMIT} ms or more: this adapter gives each case its own "
                "stretch of Flink event time (TIMESTAMP_LTZ(3), years 0000-9999), so the i64 ends of TR-2 "
                "are out of reach"
            ),
        }
    prepared = Prepared(case["id"], index, config, len(batches))
    base = common.case_base(index)
    ended = False
    for b, batch in enumerate(batches):
        for seq, item in enumerate(batch):
            reason = _item_error(item, ended)
            if reason is not None:
                prepared.errors.append((b, seq, reason))
            elif item["kind"] == "end":
                ended = True  # F017E-R23: the case's end of time, a watermark above all of its sessions
                end_time = base + common.END_OFFSET
                prepared.rows.append(("end", index, b, seq, "", end_time, end_time, 0, ""))
            else:
                t = base + item["event_time"]
                key = f"{index}:{item['key']}"
                value = item.get("value", 0)
                wm = common.to_flink(t - config["bounded_delay"])  # F017E's generator, in Flink's terms
                prepared.rows.append(("event", index, b, seq, key, t, wm, value, str(config["gap"])))
        prepared.rows.append(("mark", index, b, -1, "", 0, 0, 0, ""))  # observes the watermark after batch b
    return prepared


def build(env: Any, t_env: Any, cases: list[Prepared]) -> list[Any]:
    """One source for every case; one session window operator per allowed lateness."""
    from pyflink.common import Types
    from pyflink.datastream import OutputTag
    from pyflink.datastream.functions import ProcessWindowFunction
    from pyflink.datastream.window import EventTimeSessionWindows, SessionWindowTimeGapExtractor

    rows = [row for case in cases for row in case.rows]
    observed = common.observed_source(env, t_env, rows)

    class GapOfCase(SessionWindowTimeGapExtractor):
        def extract(self, element: Any) -> int:
            return int(element[8])

    class EmitSession(ProcessWindowFunction):
        def process(self, key: str, context: Any, elements: Any) -> Any:
            items = list(elements)
            yield common.fired_window(
                "session", key, context, items, count=len(items), sum=sum(it[7] for it in items)
            )

    outputs = [common.marks(observed, kinds=("mark", "end"))]
    for lateness in sorted({case.config["allowed_lateness"] for case in cases}):
        members = {case.index for case in cases if case.config["allowed_lateness"] == lateness}
        late_tag = OutputTag(f"late_{lateness}", common.observed_type())
        sessions = (
            observed.filter(lambda r, members=members: r[0] == "event" and r[1] in members)
            .key_by(lambda r: r[4], key_type=Types.STRING())
            .window(EventTimeSessionWindows.with_dynamic_gap(GapOfCase()))
            .allowed_lateness(lateness)
            .side_output_late_data(late_tag)
            .process(EmitSession(), Types.STRING())
        )
        late = sessions.get_side_output(late_tag).map(
            lambda r: json.dumps(
                {"t": "late", "case": r[1], "batch": r[2], "seq": r[3], "key": r[4], "ts": r[5], "wm": r[9]}
            ),
            output_type=Types.STRING(),
        )
        outputs += [sessions, late]
    return outputs


def assemble(case: Prepared, records: list[dict[str, Any]]) -> dict[str, Any]:
    base = common.case_base(case.index)
    after_batch: dict[int, int] = {}
    for r in records:
        if r["t"] == "mark" and r["kind"] == "mark":
            after_batch[r["batch"]] = r["wm"]
    verdict = "dropped" if case.config["emit_strategy"] == "Final" else "late_output"
    sessions, late = [], []
    closed_by_batch = [0] * case.batches
    late_by_batch = [0] * case.batches
    for r in records:
        if r["t"] == "session":
            fired = [b for b in range(case.batches) if after_batch[b] >= r["wm"]]
            if not fired or r["wm"] >= base + common.CASE_SPAN // 2 + common.END_OFFSET:
                continue  # fired only by a later case or by the job's end: still open when the trace stops
            b = fired[0]
            closed_by_batch[b] += 1
            key = r["key"].split(":", 1)[1]
            sessions.append([b, key, r["start"] - base, r["end"] - base, r["count"], r["sum"], "timer"])
        elif r["t"] == "late":
            late_by_batch[r["batch"]] += 1
            key = r["key"].split(":", 1)[1]
            late.append(
                [
                    r["batch"],
                    r["seq"],
                    key,
                    r["ts"] - base,
                    common.case_watermark_or_end(r["wm"], base),
                    verdict,
                ]
            )
    progress = []
    closed = late_count = 0
    for b in range(case.batches):
        closed += closed_by_batch[b]
        late_count += late_by_batch[b]
        progress.append([b, common.case_watermark_or_end(after_batch[b], base), None, closed, 0, late_count])
    tables = {
        "sessions": sessions,
        "late": late,
        "progress": progress,
        "errors": [list(e) for e in case.errors],
    }
    return {"id": case.case_id, "tables": tables}
