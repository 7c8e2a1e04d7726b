"""OXJ on Beam: CoGroupByKey over one WindowFn, tumbling x tumbling and session x session.

How a Beam user joins two keyed PCollections in event time: window both with the same WindowFn
(``FixedWindows(size_ms)`` or ``Sessions(gap_ms)``, with ``allowed_lateness``), ``CoGroupByKey``, and a
ParDo that emits, for each grouped result, every left value with every right value (the join written
as Beam's documentation writes CoGroupByKey joins). CoGroupByKey tags both inputs, flattens them and
groups them in one GroupByKey, so a Sessions window merges elements of both sides into one session.
The default trigger fires a pane when the watermark reaches the window's end and a late pane for each
element that arrives later while the window is not expired (``watermark <= end + allowed_lateness``);
the default DISCARDING mode puts only the new elements in a late pane. An element of an expired window
is dropped without a trace (no late output in the Python SDK).

Mapping (common.py): events are TestStream elements at their event time, keyed by case and key; the
trace's watermark items are ``advance_watermark_to`` of their time, unchanged (OXJ-R2: the join's
watermark is given, never generated).

Observed from Beam: every pair the pipeline's ParDo emits, with the item after which its pane came out
(the markers). Mapped by the adapter: the pair rows, with that item's batch and seq; panes fired only at
the case's end of time are pairs never emitted during the trace (no row). Not shown: the late rows
(Beam has none, so the late table is compared and every late row the spec reports is missing), the
progress counters and the error rows of malformed items (input checks by the adapter).

Declined: tumbling x sliding (CoGroupByKey groups identical windows only; test_engine.py shows a
FixedWindows x SlidingWindows CoGroupByKey that never groups overlapping panes together).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import apache_beam as beam

from beam_engine import common
from harness.input_checks import window_join_errors
from harness.traces import InvalidConfig
from reference.window_joins import validate_config

AREA = "window_joins"
NO_SLIDING = (
    "Beam's join, CoGroupByKey, groups elements of identical windows only: given a FixedWindows and a "
    "SlidingWindows input it warns and never puts a tumbling pane with the sliding panes it overlaps in "
    "one group, and Beam has no other window join; OXJ-R9 pairs them"
)


@dataclass
class Prepared:
    case_id: str
    index: int
    base: int
    join: str
    length: int  # size_ms of the panes or gap_ms of the sessions
    lateness: int
    items: list[tuple[int, int, dict[str, Any]]] = field(default_factory=list)  # accepted items

    @property
    def window(self) -> tuple[str, int, int]:
        return (self.join, self.length, self.lateness)


def prepare(case: dict[str, Any], index: int) -> Prepared | dict[str, Any]:
    config = case.get("config", {})
    try:
        validate_config(config)
    except InvalidConfig as error:
        return {"id": case["id"], "error": {"type": "InvalidConfig", "message": str(error)}}
    join = config["join"]
    if join == "tumbling_sliding":
        return {"id": case["id"], "unsupported": NO_SLIDING}
    length = config["size_ms"] if join == "tumbling_tumbling" else config["gap_ms"]
    lateness = config.get("allowed_lateness_ms", 0)
    batches = case["batches"]
    errors = window_join_errors(batches)
    accepted = [
        (b, seq, it)
        for b, batch in enumerate(batches)
        for seq, it in enumerate(batch)
        if (b, seq) not in errors
    ]
    times = [it.get("event_time", it.get("time")) for _, _, it in accepted]
    if not common.fits(length, lateness, *times):
        return {"id": case["id"], "unsupported": common.TOO_LARGE}
    base = common.case_base(index) // length * length  # FixedWindows are aligned to 0: so are the case's
    return Prepared(case["id"], index, base, join, length, lateness, accepted)


def operator(case: Prepared) -> tuple[str, int, int]:
    """The window operator the case's events go to: join, size or gap, allowed lateness."""
    return case.window


def script(case: Prepared, out: common.Script) -> None:
    """The case's items as TestStream steps, each followed by its marker."""
    for b, seq, item in case.items:
        mark = (case.index, b, seq)
        if item["kind"] == "event":
            value = (b, seq, item["event_time"], item.get("value", 0))
            record = ("event", case.index, item["side"], item["key"], value)
            out.element(record, case.base + item["event_time"], mark)
        else:
            out.advance_watermark(case.base + item["time"], mark)
    out.advance_watermark(case.base + common.END_OFFSET, (case.index, "end"))


class JoinPairs(beam.DoFn):  # type: ignore[misc]
    """The join after CoGroupByKey: every left value of a grouped result with every right value."""

    def process(self, element: Any) -> Any:
        (case, key), grouped = element
        pairs = [(left, right) for left in grouped["left"] for right in grouped["right"]]
        yield {"case": case, "key": key, "pairs": sorted(pairs)}


def builder(cases: list[Prepared]) -> common.Builder:
    """One CoGroupByKey branch per (join, size or gap, allowed lateness)."""
    from apache_beam.transforms.window import FixedWindows, Sessions
    from apache_beam.utils.timestamp import Duration

    def build(source: Any) -> list[Any]:
        outputs = []
        for join, length, lateness in sorted({c.window for c in cases}):
            members = {c.index for c in cases if c.window == (join, length, lateness)}
            name = f"window_joins {join} {length} {lateness}"
            window_fn = (
                FixedWindows(Duration(micros=common.micros(length)))
                if join == "tumbling_tumbling"
                else Sessions(Duration(micros=common.micros(length)))
            )
            sides = {}
            for side in ("left", "right"):
                sides[side] = (
                    source
                    | f"{name} {side}"
                    >> beam.Filter(lambda r, m=members, s=side: r[0] == "event" and r[1] in m and r[2] == s)
                    | f"{name} {side} key" >> beam.Map(lambda r: ((r[1], r[3]), r[4]))
                    | f"{name} {side} window"
                    >> beam.WindowInto(window_fn, allowed_lateness=Duration(micros=common.micros(lateness)))
                )
            outputs.append(
                sides | f"{name} group" >> beam.CoGroupByKey() | f"{name} join" >> beam.ParDo(JoinPairs())
            )
        return outputs

    return build


def assemble(case: Prepared, outputs: list[tuple[Any, dict[str, Any]]]) -> dict[str, Any]:
    pairs = []
    for cause, output in outputs:
        if cause == ("end",):
            continue  # fired by the case's end of time: never emitted while the trace ran
        key = output["out"]["key"]
        for left, right in output["out"]["pairs"]:
            pairs.append([cause[0], cause[1], key, *left, *right])
    return {"id": case.case_id, "tables": {"pairs": pairs, "late": []}}
