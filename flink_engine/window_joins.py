"""OXJ on Flink: tumbling x tumbling as a Flink SQL window join (TUMBLE on both sides, equal windows).

The trace's watermark items are the stream's watermark (a SQL source watermark on a column only they
raise, each item less one: common.to_flink, emitted after each record); both sides are filters of that
one source, so the join's input watermark is the trace's. Observed: the pairs the window join emits,
and the watermark after each batch. Mapped by the adapter: each pair's batch and seq, those of the
watermark item that fired its window (the first whose Flink watermark is at or above window_end - 1,
where Flink's window join fires), and the error rows of malformed items. Not observable: late rows (the
window join drops them without a trace) and the join's stats.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from flink_engine import common
from harness.traces import InvalidConfig
from reference.window_joins import validate_config

AREA = "window_joins"
OTHER_JOINS = {
    "tumbling_sliding": "Flink plans a join of TUMBLE and HOP windows as a regular join, not a window join "
    "(no purge, no lateness), and it pairs equal window bounds only, not overlapping panes (OXJ-R9)",
    "session_session": "a Flink window join pairs rows of one shared window, while OXJ-R13 pairs overlapping "
    "sessions built per side; this adapter maps tumbling_tumbling only",
}
NO_LATENESS = (
    "Flink's window join has no allowed lateness: it drops a row once the watermark passes its window"
)


@dataclass
class Prepared:
    case_id: str
    index: int
    base: int
    size: int
    batches: int
    # (batch, seq, the item's time shifted and in Flink's terms)
    watermarks: list[tuple[int, int, int]] = field(default_factory=list)
    rows: list[common.Row] = field(default_factory=list)
    errors: list[common.Row] = field(default_factory=list)


def _errors(batches: list[list[dict[str, Any]]]) -> dict[tuple[int, int], str]:
    """OXJ-R19, checked by the adapter: Flink has no notion of a malformed item."""
    errors = {}
    watermark = None
    for b, batch in enumerate(batches):
        for seq, item in enumerate(batch):
            kind = item.get("kind")
            if kind == "duplicate_seq":
                errors[(b, seq)] = "duplicate_seq"
            elif kind not in ("event", "watermark"):
                errors[(b, seq)] = "unsupported_item"
            elif kind == "event":
                side = item.get("side")
                reason = (
                    "missing_side"
                    if side is None
                    else "unknown_side"
                    if side not in ("left", "right")
                    else "missing_key"
                    if item.get("key") is None
                    else "missing_event_time"
                    if item.get("event_time") is None
                    else None
                )
                if reason:
                    errors[(b, seq)] = reason
            elif item.get("time") is None:
                errors[(b, seq)] = "missing_time"
            elif watermark is not None and item["time"] < watermark:
                errors[(b, seq)] = "watermark_regressed"
            else:
                watermark = item["time"]
    return errors


def prepare(case: dict[str, Any], index: int) -> Prepared | dict[str, Any]:
    config = case.get("config", {})
    try:
        validate_config(config)
    except InvalidConfig as error:
        return {"id": case["id"], "error": {"type": "InvalidConfig", "message": str(error)}}
    if config["join"] in OTHER_JOINS:
        return {"id": case["id"], "unsupported": OTHER_JOINS[config["join"]]}
    if config.get("allowed_lateness_ms", 0) > 0:
        return {"id": case["id"], "unsupported": NO_LATENESS}
    batches = case["batches"]
    errors = _errors(batches)
    accepted = [
        (b, seq, it)
        for b, batch in enumerate(batches)
        for seq, it in enumerate(batch)
        if (b, seq) not in errors
    ]
    size = config["size_ms"]
    times = [it.get("event_time", it.get("time")) for _, _, it in accepted]
    if not common.fits(size, *times):
        return {
            "id": case["id"],
            "unsupported": (
                f"times or sizes of {common.TIME_LIMIT} ms or more: this adapter gives each case its own "
                "stretch of Flink event time, so the i64 ends of TR-2 are out of reach"
            ),
        }
    base = common.case_base(index) // size * size
    prepared = Prepared(case["id"], index, base, size, len(batches))
    prepared.errors = [(b, seq, reason) for (b, seq), reason in sorted(errors.items())]
    ordered = sorted(
        accepted + [(b, len(batch), {"kind": "mark"}) for b, batch in enumerate(batches)],
        key=lambda entry: (entry[0], entry[1]),
    )  # a mark after each batch's items
    for b, seq, item in ordered:
        if item["kind"] == "mark":
            prepared.rows.append(("mark", index, b, -1, "", 0, 0, 0, ""))
        elif item["kind"] == "event":
            t = base + item["event_time"]
            key = f"{index}:{item['key']}"
            prepared.rows.append(("event", index, b, seq, key, t, 0, item.get("value", 0), item["side"]))
        else:
            t = common.to_flink(base + item["time"])
            prepared.watermarks.append((b, seq, t))
            prepared.rows.append(("watermark", index, b, seq, "", 0, t, 0, ""))
    return prepared


def build(env: Any, t_env: Any, cases: list[Prepared]) -> list[Any]:
    """One source for every case; one window join per pane size."""
    from pyflink.common import Types
    from pyflink.datastream.functions import ProcessFunction

    rows = [row for case in cases for row in case.rows]
    table = common.source_table(env, t_env, rows)
    t_env.create_temporary_view("join_source", table)
    observed = t_env.to_data_stream(table).process(
        common.observe_watermark(), output_type=common.observed_type()
    )
    outputs = [
        observed.filter(lambda r: r[0] == "mark").map(
            lambda r: json.dumps({"t": "mark", "case": r[1], "batch": r[2], "wm": r[9]}),
            output_type=Types.STRING(),
        )
    ]

    class PairWithWatermark(ProcessFunction):
        """The watermark the pair's consumer had when the pair arrived: the one before the firing one."""

        def process_element(self, r: Any, ctx: Any) -> Any:
            yield json.dumps(
                {
                    "t": "pair",
                    "case": r[0],
                    "key": r[1],
                    "left": [r[2], r[3], r[4], r[5]],
                    "right": [r[6], r[7], r[8], r[9]],
                    "wm": ctx.timer_service().current_watermark(),
                }
            )

    for size in sorted({case.size for case in cases}):
        members = ", ".join(str(case.index) for case in cases if case.size == size)
        side = "SELECT * FROM TABLE(TUMBLE(TABLE {view}, DESCRIPTOR(rt), INTERVAL '{seconds}' SECOND(1, 3)))"
        for name in ("left", "right"):
            t_env.create_temporary_view(
                f"join_{name}_{size}",
                t_env.sql_query(
                    f"SELECT * FROM join_source WHERE kind = 'event' AND extra = '{name}' "
                    f"AND case_index IN ({members})"
                ),
            )
        seconds = f"{size / 1000:.3f}"
        pairs = t_env.sql_query(
            "SELECT L.case_index, L.key, L.batch, L.seq, L.ts_ms, L.`value`, "
            "R.batch, R.seq, R.ts_ms, R.`value` "
            f"FROM ({side.format(view=f'join_left_{size}', seconds=seconds)}) L "
            f"JOIN ({side.format(view=f'join_right_{size}', seconds=seconds)}) R "
            "ON L.key = R.key AND L.window_start = R.window_start AND L.window_end = R.window_end"
        )
        outputs.append(t_env.to_data_stream(pairs).process(PairWithWatermark(), output_type=Types.STRING()))
    return outputs


def assemble(case: Prepared, records: list[dict[str, Any]]) -> dict[str, Any]:
    base = case.base
    after_batch = {r["batch"]: r["wm"] for r in records if r["t"] == "mark"}
    pairs = []
    pairs_by_batch = [0] * case.batches
    for r in records:
        if r["t"] != "pair":
            continue
        fire_at = r["left"][2] - r["left"][2] % case.size + case.size - 1  # the window's end - 1
        # the firing watermark: above the one the pair's consumer had (observed), at or above end - 1
        cause = next(((b, seq) for b, seq, w in case.watermarks if w >= fire_at and w > r["wm"]), None)
        if cause is None:
            continue  # fired by a later case or the job's end: the trace never closed this window
        b, seq = cause
        pairs_by_batch[b] += 1
        key = r["key"].split(":", 1)[1]
        left, right = r["left"], r["right"]
        pairs.append(
            [
                b,
                seq,
                key,
                left[0],
                left[1],
                left[2] - base,
                left[3],
                right[0],
                right[1],
                right[2] - base,
                right[3],
            ]
        )
    progress = []
    emitted = 0
    for b in range(case.batches):
        emitted += pairs_by_batch[b]
        progress.append([b, common.case_watermark(after_batch[b], base), None, None, emitted, None, None])
    tables = {"pairs": pairs, "progress": progress, "errors": [list(e) for e in case.errors]}
    return {"id": case.case_id, "tables": tables}
