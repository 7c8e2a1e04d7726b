"""What every area's Beam pipeline shares: the TestStream of a run, markers, the time mapping.

The watermark. Beam's watermark W is a lower bound on the event times of the input still to come: an
element with a timestamp below W is behind it (late), one at W is not (the Beam programming guide's
"watermark", and ``GeneralTriggerDriver``, which drops an element only when ``W > window.end +
allowed_lateness``). The spec's watermark W says that no event before W follows (spec/late_data.md
OXL-R4, spec/window_joins.md OXJ-R2): an event at W is on time. Both promise the same of the same
number, so the trace's watermark item ``time`` is handed to ``TestStream.advance_watermark_to``
unchanged (no shift, unlike Flink's W - 1). Only watermark items that the trace gives are handed to
Beam; the adapter never derives one from event times (where a spec does, the area is declined).

Time. Beam's Python timestamps are microseconds; a trace's milliseconds ``t`` become ``t * 1000``
microseconds, exactly, and window bounds come back divided by 1000 (always whole milliseconds, since
sizes and gaps are whole milliseconds too).

Timing. The bundle-based DirectRunner runs one worker thread (``_ExecutorServiceParallelExecutor
.NUM_WORKERS``), and its monitor hands a root transform (the TestStream) new work only once no other
transform is executing and no timer fired (``_add_work_if_necessary``): every TestStream event is
processed to quiescence before the next is read. So a marker element added after each trace item
reaches the sink after everything that item caused and before anything the next one causes, in every
run; the adapter reads which item caused an output from that order, it computes none.

Multiplexing. The cases of one window operator (an area, its window size or gap, its allowed
lateness) run in ONE pipeline, one case after another, each in its own stretch of event time
(CASE_SPAN ms apart) and with its own keys: before its first watermark item a case sees the previous
case's end, far below all of its times, which passes nothing of it, as the spec's "no watermark yet".
After its last item the adapter advances the watermark to the case's own end of time (END_OFFSET above
its base), so its open windows fire there, after the case's last marker: outputs after that marker are
"still open when the trace stops" and give no row, but they show which events Beam kept. One pipeline
per operator, not one for the whole run: the runner visits every transform at each TestStream step, so
a pipeline of every operator took 62 s where these take 11 s together (starting one takes about 0.3 s,
a step 10 to 25 ms).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import apache_beam as beam
from apache_beam.transforms.window import IntervalWindow

CASE_SPAN = 10**11  # ms of event time given to each case
TIME_LIMIT = CASE_SPAN // 8  # |time| and durations a case may use so that cases never overlap
END_OFFSET = CASE_SPAN // 2  # a case's end of time, the watermark after its last item

#: what a run records, in the order the sink saw it; filled by Sink, emptied by run()
LOG: list[dict[str, Any]] = []

SETTINGS = {
    "runner": "BundleBasedDirectRunner",
    "streaming": "true",
    "trigger": "DefaultTrigger (AfterWatermark, repeated for late elements)",
    "accumulation_mode": "DISCARDING (the default)",
    "timestamp_combiner": "END_OF_WINDOW (the default)",
}


def log(message: str) -> None:
    print(f"[beam_engine] {message}", file=sys.stderr, flush=True)


def case_base(case_index: int) -> int:
    return (case_index + 1) * CASE_SPAN


def fits(*values: Any) -> bool:
    """True when every integer value is small enough for the case's own stretch of event time."""
    return all(not isinstance(v, int) or abs(v) < TIME_LIMIT for v in values)


TOO_LARGE = (
    f"times or durations of {TIME_LIMIT} ms or more: Beam's timestamps are microseconds up to "
    "MAX_TIMESTAMP (about 9.2e15 ms; a TestStream refuses an element at the i64 top of time), and this "
    "adapter gives each case its own stretch of Beam event time, so the i64 ends of TR-2 are out of reach"
)


def micros(ms: int) -> int:
    return ms * 1000


def millis(timestamp: Any) -> int:
    """A Beam Timestamp (whole milliseconds here) as integer milliseconds."""
    return int(timestamp.micros) // 1000


@dataclass
class Script:
    """The TestStream of a run, built item by item: each trace item, then a marker naming it."""

    steps: list[tuple[str, Any]] = field(default_factory=list)
    watermark: int | None = None  # the last watermark handed to Beam, in microseconds

    def element(self, record: tuple[Any, ...], time_ms: int, mark: tuple[Any, ...]) -> None:
        self.steps.append(("element", (record, micros(time_ms))))
        self._mark(mark)

    def advance_watermark(self, time_ms: int, mark: tuple[Any, ...]) -> None:
        # an equal watermark changes nothing in Beam (a regression is an error row, never fed)
        if self.watermark is None or micros(time_ms) > self.watermark:
            self.watermark = micros(time_ms)
            self.steps.append(("watermark", self.watermark))
        self._mark(mark)

    def advance_clock(self, delta_ms: int, mark: tuple[Any, ...]) -> None:
        """A trace clock item: Beam's processing time moves on by the same amount (no trigger here
        reads it; the default trigger is event time only)."""
        if delta_ms > 0:
            self.steps.append(("clock", micros(delta_ms)))
        self._mark(mark)

    def _mark(self, mark: tuple[Any, ...]) -> None:
        self.steps.append(("element", (("mark", *mark), 0)))

    def test_stream(self) -> Any:
        from apache_beam.testing.test_stream import TestStream
        from apache_beam.transforms.window import TimestampedValue
        from apache_beam.utils.timestamp import Duration, Timestamp

        stream = TestStream()
        for kind, value in self.steps:
            if kind == "element":
                record, at = value
                stream.add_elements([TimestampedValue(record, Timestamp(micros=at))])
            elif kind == "watermark":
                stream.advance_watermark_to(Timestamp(micros=value))
            else:
                stream.advance_processing_time(Duration(micros=value))
        return stream


class Sink(beam.DoFn):  # type: ignore[misc]
    """Appends each output, with its window and pane, to LOG in the order the runner delivers it
    (defined at module level, so every copy the runner makes appends to this module's list: the
    DirectRunner runs in this process)."""

    def process(
        self, element: Any, window: Any = beam.DoFn.WindowParam, pane: Any = beam.DoFn.PaneInfoParam
    ) -> Any:
        record: dict[str, Any] = {"out": element}
        if isinstance(window, IntervalWindow):
            record["window"] = (millis(window.start), millis(window.end))
            record["timing"] = int(pane.timing)
            record["index"] = int(pane.index)
        LOG.append(record)
        return []


def pipeline_options() -> Any:
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    options = PipelineOptions(runner="BundleBasedDirectRunner")
    options.view_as(StandardOptions).streaming = True  # TestStream needs a streaming pipeline
    return options


Builder = Callable[[Any], Iterable[Any]]


def run(script: Script, builders: Iterable[Builder]) -> list[dict[str, Any]]:
    """Runs one pipeline: the script's TestStream, its markers straight to the sink, and each area's
    branches (a builder takes the source PCollection and returns PCollections of outputs)."""
    LOG.clear()
    with beam.Pipeline(options=pipeline_options()) as p:
        source = p | "trace" >> script.test_stream()
        _ = (
            source
            | "markers" >> beam.Filter(lambda r: r[0] == "mark")
            | "mark" >> beam.Map(lambda r: {"mark": tuple(r[1:])})
            | "sink markers" >> beam.ParDo(Sink())
        )
        for i, build in enumerate(builders):
            for j, outputs in enumerate(build(source)):
                _ = outputs | f"sink {i}.{j}" >> beam.ParDo(Sink())
    records = list(LOG)
    LOG.clear()
    return records


def attribute(records: list[dict[str, Any]]) -> dict[int, list[tuple[Any, dict[str, Any]]]]:
    """Each output with the marker that followed it: (case, batch, seq) of the item that caused it, or
    (case, "end") for what the case's end of time fired. By case index."""
    by_case: dict[int, list[tuple[Any, dict[str, Any]]]] = {}
    pending: list[dict[str, Any]] = []
    for record in records:
        out = record["out"]
        if isinstance(out, dict) and "mark" in out:
            mark = out["mark"]
            for output in pending:
                by_case.setdefault(mark[0], []).append((mark[1:], output))
            pending = []
        else:
            pending.append(record)
    if pending:  # only the TestStream's own end (watermark to +inf) follows the last marker
        log(f"{len(pending)} outputs after the last marker, ignored")
    return by_case


def provenance() -> dict[str, str]:
    """Versions and settings of the run (the engine protocol's provenance line): public facts only,
    no private attribute of the runner (the standard's first rule)."""
    return {
        "apache-beam": beam.__version__,
        "python": sys.version.split()[0],
        **SETTINGS,
        "pipelines": "one per window operator, its cases one after another",
    }
