"""OXJ on Flink: Flink's DataStream window join, tumbling x tumbling and session x session.

Flink's Java DataStream API joins two streams in a window with
``a.join(b).where(key).equalTo(key).window(assigner).apply(pair)``, which Flink builds as a co-group: the
two inputs tagged by side, united, keyed, windowed by the one assigner, and every left element of a
fired window paired with every right one. PyFlink has no ``join``, so the adapter builds those same
documented parts: the trace's events (one source, each row tagged with its side) keyed by key,
``TumblingEventTimeWindows`` of ``size_ms`` or ``EventTimeSessionWindows`` of ``gap_ms``,
``allowed_lateness`` and ``side_output_late_data``, and a ProcessWindowFunction that emits the window's
cross product of left and right elements. Both sides reach the window through one channel, so the
order of records and watermarks is the source's and the answers do not vary between runs (Flink SQL's
WindowJoin, a two-input operator, paired differently from run to run as its inputs' watermarks met).

The trace's watermark items are the stream's watermark (a SQL source watermark on a column only they
raise, each item less one: common.to_flink, emitted after each record). Observed: every firing of a
window (its watermark, its left and right elements), the late side output with the watermark its
element met, and the watermark after each batch. Mapped by the adapter: each firing's batch and seq,
those of the watermark item that fired the window (Flink fires at ``window_end - 1``) or, for a window
fired again by a late element that allowed lateness keeps, that element's; the late rows and pairs
counted per batch; the error rows of malformed items. Not observable: the events taken per side and the
open windows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from flink_engine import common
from harness.input_checks import window_join_errors
from harness.traces import InvalidConfig
from reference.window_joins import validate_config

AREA = "window_joins"
OTHER_JOINS = {
    "tumbling_sliding": "Flink's window join takes one window assigner for both inputs (DataStream "
    "join(...).window(assigner)) and Flink SQL plans a join of TUMBLE and HOP windows as a regular join with "
    "no window purge, pairing equal window bounds only; OXJ-R9 pairs a tumbling pane with overlapping "
    "sliding panes",
}


@dataclass
class Prepared:
    case_id: str
    index: int
    base: int
    join: str
    length: int  # size_ms of tumbling panes or gap_ms of sessions
    lateness: int
    batches: int
    # (batch, seq, the item's time shifted and in Flink's terms)
    watermarks: list[tuple[int, int, int]] = field(default_factory=list)
    rows: list[common.Row] = field(default_factory=list)
    errors: list[common.Row] = field(default_factory=list)

    @property
    def window(self) -> tuple[str, int, int]:
        """The window operator the case's events go to: join kind, size or gap, allowed lateness."""
        return (self.join, self.length, self.lateness)


def prepare(case: dict[str, Any], index: int) -> Prepared | dict[str, Any]:
    config = case.get("config", {})
    try:
        validate_config(config)
    except InvalidConfig as error:
        return {"id": case["id"], "error": {"type": "InvalidConfig", "message": str(error)}}
    if config["join"] in OTHER_JOINS:
        return {"id": case["id"], "unsupported": OTHER_JOINS[config["join"]]}
    batches = case["batches"]
    errors = window_join_errors(batches)
    accepted = [
        (b, seq, it)
        for b, batch in enumerate(batches)
        for seq, it in enumerate(batch)
        if (b, seq) not in errors
    ]
    length = config["size_ms"] if config["join"] == "tumbling_tumbling" else config["gap_ms"]
    lateness = config.get("allowed_lateness_ms", 0)
    times = [it.get("event_time", it.get("time")) for _, _, it in accepted]
    if not common.fits(length, lateness, *times):
        return {
            "id": case["id"],
            "unsupported": (
                f"times or durations of {common.TIME_LIMIT} ms or more: this adapter gives each case its own "
                "stretch of Flink event time, so the i64 ends of TR-2 are out of reach"
            ),
        }
    base = common.case_base(index) // length * length  # Flink's panes start at multiples of the size
    prepared = Prepared(case["id"], index, base, config["join"], length, lateness, len(batches))
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
    """One source for every case; one window join per join kind, size or gap, and allowed lateness."""
    from pyflink.common import Types
    from pyflink.common.time import Time
    from pyflink.datastream import OutputTag
    from pyflink.datastream.functions import ProcessWindowFunction
    from pyflink.datastream.window import EventTimeSessionWindows, TumblingEventTimeWindows

    rows = [row for case in cases for row in case.rows]
    observed = common.observed_source(env, t_env, rows)
    outputs = [common.marks(observed)]

    class PairUp(ProcessWindowFunction):
        """The join's pair function over one firing of a window: every left element with every right one."""

        def process(self, key: str, context: Any, elements: Any) -> Any:
            items = list(elements)
            sides = {
                side: [[r[2], r[3], r[5], r[7]] for r in items if r[8] == side] for side in ("left", "right")
            }
            yield common.fired_window("fire", key, context, items, **sides)

    for join, length, lateness in sorted({case.window for case in cases}):
        members = {case.index for case in cases if case.window == (join, length, lateness)}
        assigner = (
            TumblingEventTimeWindows.of(Time.milliseconds(length))
            if join == "tumbling_tumbling"
            else EventTimeSessionWindows.with_gap(Time.milliseconds(length))
        )
        late_tag = OutputTag(f"late_{join}_{length}_{lateness}", common.observed_type())
        fired = (
            observed.filter(lambda r, members=members: r[0] == "event" and r[1] in members)
            .key_by(lambda r: r[4], key_type=Types.STRING())
            .window(assigner)
            .allowed_lateness(lateness)
            .side_output_late_data(late_tag)
            .process(PairUp(), Types.STRING())
        )
        late = fired.get_side_output(late_tag).map(
            lambda r: json.dumps(
                {
                    "t": "late",
                    "case": r[1],
                    "batch": r[2],
                    "seq": r[3],
                    "key": r[4],
                    "ts": r[5],
                    "side": r[8],
                    "wm": r[9],
                }
            ),
            output_type=Types.STRING(),
        )
        outputs += [fired, late]
    return outputs


def _cause(case: Prepared, fire: dict[str, Any]) -> tuple[int, int] | None:
    """The (batch, seq) of the item that made Flink fire the window: the first watermark item at or above
    its end - 1 or, when an element of the window arrived after that item (allowed lateness fires a window
    again for each element it keeps), the latest such element. None when no item of the trace fired it
    (a later case's watermark or the job's end did)."""
    at = next(((b, seq) for b, seq, w in case.watermarks if w >= fire["end"] - 1 and w <= fire["wm"]), None)
    if at is None:
        return None
    latest = max((b, seq) for b, seq, *_ in fire["left"] + fire["right"])
    return max(at, latest)


def assemble(case: Prepared, records: list[dict[str, Any]]) -> dict[str, Any]:
    base = case.base
    after_batch = {r["batch"]: r["wm"] for r in records if r["t"] == "mark"}
    pairs = []
    pairs_by_batch = [0] * case.batches
    late = []
    late_by_batch = [0] * case.batches
    for r in records:
        if r["t"] == "late":
            late_by_batch[r["batch"]] += 1
            key = r["key"].split(":", 1)[1]
            judged_by = common.case_watermark(r["wm"], base)
            late.append([r["batch"], r["seq"], r["side"], key, r["ts"] - base, judged_by])
        if r["t"] != "fire":
            continue
        cause = _cause(case, r)
        if cause is None:
            continue  # the trace never fired this window
        b, seq = cause
        key = r["key"].split(":", 1)[1]
        for left in r["left"]:
            for right in r["right"]:
                pairs_by_batch[b] += 1
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
    emitted = dropped = 0
    for b in range(case.batches):
        emitted += pairs_by_batch[b]
        dropped += late_by_batch[b]
        progress.append([b, common.case_watermark(after_batch[b], base), None, None, emitted, dropped, None])
    tables = {"pairs": pairs, "late": late, "progress": progress, "errors": [list(e) for e in case.errors]}
    return {"id": case.case_id, "tables": tables}
