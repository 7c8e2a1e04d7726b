"""OXL on Beam: FixedWindows with allowed lateness under the default trigger, a GroupByKey per case.

How a Beam user asks for late data: ``WindowInto(FixedWindows(window_size),
allowed_lateness=allowed_lateness)`` and a GroupByKey, with the default trigger (the watermark trigger,
repeated: a pane when the watermark reaches the window's end, then a late pane for each element that
arrives while the window is not expired) and the default DISCARDING accumulation. Beam drops an
element whose window is expired (``watermark > window.end + allowed_lateness``, GeneralTriggerDriver),
silently: the Python SDK has no late side output and no dropped-element counter (test_engine.py probes
both).

Mapping. The case's events are TestStream elements at their event time (common.py: milliseconds as
microseconds), keyed by the case; its watermark items are ``advance_watermark_to`` of their time,
unchanged (OXL-R1: this area's watermarks are given, never generated, so nothing is derived); clock
items move Beam's processing time, which nothing here reads. The windows are aligned to the case's
own times (its base is a multiple of window_size).

Observed from Beam: every pane GroupByKey emits (window, timing, the events in it), and the item after
which it came out (common.py, the markers). Mapped by the adapter: an event is kept when it is in some
pane (then ``assigned_time`` is its time), dropped when it is in none (null); a windows row per pane
emitted during the trace, with the item that caused it and the pane's count; panes fired only at the
case's end of time are windows still open when the trace stops (no row). Not shown, because Beam does
not report them: the verdict (on time and allowed late are the same to Beam), the watermark an event
met, lateness, the progress counters, the watermark of a firing, and the error rows of malformed items
(input checking by the adapter, not Beam).

Declined: no window_size (Beam judges lateness only through a window's expiry), the Reassign and
SideOutput policies (Beam never moves a late element's timestamp and has no late output), several
sources (one watermark per TestStream output).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import apache_beam as beam

from beam_engine import common
from harness.input_checks import late_data_errors
from harness.traces import InvalidConfig
from reference.late_data import config_from_trace

AREA = "late_data"
NO_WINDOWS = (
    "Beam judges lateness only through a window's expiry (an element is dropped when its window's end "
    "plus the allowed lateness is below the watermark); without window_size, in the global window, no "
    "element is ever late to Beam"
)
NO_REASSIGN = (
    "Beam never moves a late element's timestamp to the watermark: an element of an expired window is "
    "dropped, one of an open window kept at its own time (OXL-R7)"
)
NO_SIDE_OUTPUT = (
    "Beam's Python SDK has no late side output: GroupByKey has one output and an element of an expired "
    "window is dropped without a trace (OXL-R8)"
)
MANY_SOURCES = (
    "one TestStream output has one watermark; several sources in one stream would be several outputs "
    "flattened, whose watermark is their minimum, not one watermark per source (OXL-R2)"
)


@dataclass
class Prepared:
    case_id: str
    index: int
    base: int
    size: int
    lateness: int
    source: int | None
    batches: int
    items: list[tuple[int, int, dict[str, Any]]] = field(default_factory=list)  # accepted items


def prepare(case: dict[str, Any], index: int) -> Prepared | dict[str, Any]:
    try:
        config = config_from_trace(case.get("config", {}))
    except InvalidConfig as error:
        return {"id": case["id"], "error": {"type": "InvalidConfig", "message": str(error)}}
    policy = case["config"].get("policy", "Drop")
    if config.window_size is None:
        return {"id": case["id"], "unsupported": NO_WINDOWS}
    if policy == "Reassign":
        return {"id": case["id"], "unsupported": NO_REASSIGN}
    if policy == "SideOutput":
        return {"id": case["id"], "unsupported": NO_SIDE_OUTPUT}
    batches = case["batches"]
    errors = late_data_errors(batches)
    accepted = [
        (b, seq, it)
        for b, batch in enumerate(batches)
        for seq, it in enumerate(batch)
        if (b, seq) not in errors
    ]
    sources = {it.get("source") for _, _, it in accepted if it["kind"] != "clock"}
    if len(sources) > 1:
        return {"id": case["id"], "unsupported": MANY_SOURCES}
    times = [it.get("event_time", it.get("time")) for _, _, it in accepted if it["kind"] != "clock"]
    if not common.fits(config.window_size, config.allowed_lateness, *times):
        return {"id": case["id"], "unsupported": common.TOO_LARGE}
    size = config.window_size
    base = common.case_base(index) // size * size  # FixedWindows are aligned to 0: so are the case's
    return Prepared(
        case["id"],
        index,
        base,
        size,
        config.allowed_lateness,
        next(iter(sources), None),
        len(batches),
        accepted,
    )


def operator(case: Prepared) -> tuple[int, int]:
    """The window operator the case's events go to: window size and allowed lateness."""
    return (case.size, case.lateness)


def script(case: Prepared, out: common.Script) -> None:
    """The case's items as TestStream steps, each followed by its marker."""
    clock = 0
    for b, seq, item in case.items:
        mark = (case.index, b, seq)
        if item["kind"] == "event":
            out.element(("event", case.index, b, seq), case.base + item["event_time"], mark)
        elif item["kind"] == "watermark":
            out.advance_watermark(case.base + item["time"], mark)
        else:
            out.advance_clock(item["time"] - clock, mark)
            clock = item["time"]
    out.advance_watermark(case.base + common.END_OFFSET, (case.index, "end"))


def builder(cases: list[Prepared]) -> common.Builder:
    """One FixedWindows + GroupByKey branch per (window size, allowed lateness)."""
    from apache_beam.transforms.window import FixedWindows
    from apache_beam.utils.timestamp import Duration

    def build(source: Any) -> list[Any]:
        outputs = []
        for size, lateness in sorted({(c.size, c.lateness) for c in cases}):
            members = {c.index for c in cases if (c.size, c.lateness) == (size, lateness)}
            name = f"late_data {size} {lateness}"
            outputs.append(
                source
                | f"{name} events" >> beam.Filter(lambda r, m=members: r[0] == "event" and r[1] in m)
                | f"{name} key" >> beam.Map(lambda r: (r[1], (r[2], r[3])))
                | f"{name} window"
                >> beam.WindowInto(
                    FixedWindows(Duration(micros=common.micros(size))),
                    allowed_lateness=Duration(micros=common.micros(lateness)),
                )
                | f"{name} group" >> beam.GroupByKey()
                | f"{name} pane" >> beam.Map(lambda kv: {"case": kv[0], "events": sorted(kv[1])})
            )
        return outputs

    return build


def assemble(case: Prepared, outputs: list[tuple[Any, dict[str, Any]]]) -> dict[str, Any]:
    kept = {tuple(e) for _, output in outputs for e in output["out"]["events"]}
    events = []
    for b, seq, item in case.items:
        if item["kind"] == "event":
            t = item["event_time"]
            # Beam's own answer: kept when some pane holds it; the verdict columns Beam does not give
            assigned = t if (b, seq) in kept else None
            events.append([b, seq, case.source, t, None, None, None, assigned, None])
    windows = []
    for cause, output in outputs:
        if cause == ("end",):
            continue  # fired by the case's end of time: still open when the trace stops
        start, end = output["window"]
        count = len(output["out"]["events"])
        windows.append([cause[0], cause[1], case.source, start - case.base, end - case.base, None, count])
    tables = {"events": events, "side_outputs": [], "windows": windows}
    return {"id": case.case_id, "tables": tables}
