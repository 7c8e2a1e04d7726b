"""Checks of the Beam engine; run only in the Beam environment (`tox -e beam` runs them first).

It lives outside the default testpaths on purpose: apache-beam pins its own protobuf, grpcio and pyarrow.
The answer tests hold each area's output to Beam's documented rules; the probes run Beam's nearest
built-in for every decline and show the gap in Beam's own output.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import window as beam_window
from apache_beam.utils.timestamp import Duration, Timestamp

from beam_engine import common

ROOT = Path(__file__).resolve().parent.parent

LATE_BATCHES: list[list[dict[str, Any]]] = [
    [{"kind": "event", "event_time": 100}, {"kind": "event", "event_time": 1100}],
    [{"kind": "watermark", "time": 1000}],  # the window [0, 1000) fires at its end
    [{"kind": "event", "event_time": 999}],  # late, kept (1000 <= 1000 + 500): a pane of its own
    [{"kind": "watermark", "time": 1500}],
    [{"kind": "event", "event_time": 998}],  # kept: Beam expires the window only above 1500
    [{"kind": "watermark", "time": 1501}],
    [{"kind": "event", "event_time": 997}],  # dropped, without a trace
]
JOIN_BATCHES: list[list[dict[str, Any]]] = [
    [
        {"kind": "event", "key": "a", "event_time": 1, "side": "left"},
        {"kind": "event", "key": "a", "event_time": 2, "side": "right"},
        {"kind": "event", "key": "a", "event_time": 12, "side": "right"},
        {"kind": "event", "key": "a", "event_time": 13, "side": "left"},
        {"kind": "watermark", "time": 10},
    ],
    [{"kind": "event", "key": "a", "event_time": 3, "side": "right"}, {"kind": "watermark", "time": 20}],
]
SESSION_BATCHES: list[list[dict[str, Any]]] = [
    [
        {"kind": "event", "key": "a", "event_time": t, "side": side}
        for t, side in ((0, "left"), (10, "right"), (25, "left"), (30, "right"))
    ]
    + [{"kind": "watermark", "time": 100}]
]


def run_engine(cases: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    lines = "".join(json.dumps(case) + "\n" for case in cases)
    done = subprocess.run(
        [sys.executable, "-m", "beam_engine"],
        input=lines,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
        check=True,
    )
    written: list[dict[str, Any]] = [json.loads(line) for line in done.stdout.splitlines()]
    said = [line["provenance"] for line in written if "provenance" in line]
    assert len(said) == 1 and said[0]["runner"] == "BundleBasedDirectRunner" and said[0]["apache-beam"], said
    return {answer["id"]: answer for answer in written if "provenance" not in answer}


def _case(
    case_id: str, area: str, config: dict[str, Any], batches: list[list[dict[str, Any]]]
) -> dict[str, Any]:
    return {"id": case_id, "area": area, "config": config, "batches": batches, "restart_after": []}


@pytest.fixture(scope="module")
def answers() -> dict[str, dict[str, Any]]:
    late = {"window_size": 1000, "allowed_lateness": 500}
    cases = [
        _case("l", "late_data", late, LATE_BATCHES),
        _case("l-invalid", "late_data", {"allowed_lateness": 5}, [[]]),
        _case("l-no-windows", "late_data", {}, [[]]),
        _case("l-reassign", "late_data", {"policy": "Reassign", "max_lateness": 5, "window_size": 10}, [[]]),
        _case("l-side", "late_data", {"policy": "SideOutput", "channel": "c", "window_size": 10}, [[]]),
        _case(
            "j",
            "window_joins",
            {"join": "tumbling_tumbling", "size_ms": 10, "allowed_lateness_ms": 5},
            JOIN_BATCHES,
        ),
        _case("j-sessions", "window_joins", {"join": "session_session", "gap_ms": 10}, SESSION_BATCHES),
        _case(
            "j-sliding",
            "window_joins",
            {"join": "tumbling_sliding", "left_size_ms": 10, "right_size_ms": 20, "right_slide_ms": 10},
            [[]],
        ),
        _case("s", "session_windows", {"gap": 10}, [[{"kind": "event", "key": "a", "event_time": 1}]]),
        _case("k", "keyed_watermarks", {"bounded_delay": 0}, [[]]),
    ]
    # the same late case again, later in the run: it must answer as if alone (TR-9)
    return run_engine([*cases, {**cases[0], "id": "l-again"}])


def test_every_case_gets_one_answer(answers: dict[str, dict[str, Any]]) -> None:
    assert set(answers) == {
        "l", "l-again", "l-invalid", "l-no-windows", "l-reassign", "l-side",
        "j", "j-sessions", "j-sliding", "s", "k",
    }  # fmt: skip
    assert answers["l-invalid"]["error"]["type"] == "InvalidConfig"
    for declined in ("l-no-windows", "l-reassign", "l-side", "j-sliding", "s", "k"):
        assert answers[declined]["unsupported"]
    assert answers["l"]["tables"] == answers["l-again"]["tables"]


def test_late_data_follows_beams_trigger_and_expiry(answers: dict[str, dict[str, Any]]) -> None:
    """Beam's default trigger and GeneralTriggerDriver: a pane when the watermark reaches the window's
    end; a late pane (DISCARDING: only the new element) for each element of a window that is late but
    not expired; expired, and the element dropped, only when the watermark is above end + lateness."""
    tables = answers["l"]["tables"]
    assert sorted(tables["windows"]) == [
        [1, 0, None, 0, 1000, None, 1],  # on time, fired by the watermark 1000 (the spec: at 1500)
        [2, 0, None, 0, 1000, None, 1],  # the late 999
        [4, 0, None, 0, 1000, None, 1],  # the late 998, at a watermark equal to end + lateness
    ]  # [1000, 2000) fires only at the case's end: open when the trace stops, no row
    kept = {(b, seq): assigned for b, seq, _, _, _, _, _, assigned, _ in tables["events"]}
    assert kept == {(0, 0): 100, (0, 1): 1100, (2, 0): 999, (4, 0): 998, (6, 0): None}


def test_join_pairs_come_from_beams_panes(answers: dict[str, dict[str, Any]]) -> None:
    """CoGroupByKey under FixedWindows: a window's pairs come out when the watermark reaches its end;
    a late element kept by the allowed lateness fires a pane that holds only itself (DISCARDING), so
    it pairs with nothing already emitted; [10, 20) fires at the watermark 20."""

    def pair(b: int, seq: int, left: tuple[int, int, int], right: tuple[int, int, int]) -> list[Any]:
        return [b, seq, "a", *left, 0, *right, 0]

    assert sorted(answers["j"]["tables"]["pairs"]) == [
        pair(0, 4, (0, 0, 1), (0, 1, 2)),
        pair(1, 1, (0, 3, 13), (0, 2, 12)),
    ]  # (1, 3) is never paired: the spec pairs it at its arrival, (1, 0)
    assert answers["j"]["tables"]["late"] == []
    sessions = answers["j-sessions"]["tables"]["pairs"]
    # Beam's session of an element at t is [t, t + 10): 0 and 10 do not merge (half-open windows),
    # 25 and 30 do, in one session over both sides
    assert sorted(sessions) == [pair(0, 4, (0, 2, 25), (0, 3, 30))]


# ---- probes of the declines ------------------------------------------------------------------------


def _run(script: common.Script, build: common.Builder) -> dict[Any, list[dict[str, Any]]]:
    """Runs one probe pipeline and returns its outputs by the marker that followed them."""
    found: dict[Any, list[dict[str, Any]]] = {}
    for case, outputs in common.attribute(common.run(script, [build])).items():
        for cause, output in outputs:
            found.setdefault((case, *cause), []).append(output)
    return found


def _fixed_windows(size_ms: int, lateness_ms: int = 0) -> Any:
    return beam.WindowInto(
        beam_window.FixedWindows(Duration(micros=common.micros(size_ms))),
        allowed_lateness=Duration(micros=common.micros(lateness_ms)),
    )


def _values(kind: str) -> Any:
    return beam.Filter(lambda r, k=kind: r[0] == k) | beam.Map(lambda r: (r[1], r[2]))


def test_a_test_stream_of_events_moves_no_watermark() -> None:
    """Decline probe for session_windows, keyed_watermarks and eventtime_buffer (watermarks derived
    from event times): a TestStream of events at 0 .. 90 under FixedWindows(10) fires no window while
    the events arrive, whatever their times; every pane comes out at the stream's end only."""
    script = common.Script()
    for i in range(10):
        script.element(("event", "k", i * 10), i * 10, (0, 0, i))
    script.advance_watermark(10**6, (0, "end"))

    def build(source: Any) -> list[Any]:
        return [source | _values("event") | _fixed_windows(10) | beam.GroupByKey()]

    found = _run(script, build)
    assert set(found) == {(0, "end")}
    assert len(found[(0, "end")]) == 10


TIMES = (0, 5, 30, 12, 50)  # the event times the splittable DoFn reads


def _estimated_read() -> Any:
    """A splittable DoFn reading TIMES with Beam's MonotonicWatermarkEstimator."""
    from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
    from apache_beam.io.watermark_estimators import MonotonicWatermarkEstimator
    from apache_beam.transforms.core import RestrictionProvider

    class Offsets(RestrictionProvider):  # type: ignore[misc]
        def initial_restriction(self, element: Any) -> Any:
            return OffsetRange(0, len(TIMES))

        def create_tracker(self, restriction: Any) -> Any:
            return OffsetRestrictionTracker(restriction)

        def restriction_size(self, element: Any, restriction: Any) -> Any:
            return restriction.size()

    offsets = beam.DoFn.RestrictionParam(Offsets())
    monotonic = beam.DoFn.WatermarkEstimatorParam(MonotonicWatermarkEstimator.default_provider())

    class Read(beam.DoFn):  # type: ignore[misc]
        @beam.DoFn.unbounded_per_element()
        def process(self, element: Any, tracker: Any = offsets, estimator: Any = monotonic) -> Any:
            position = tracker.current_restriction().start
            if tracker.try_claim(position):
                t = TIMES[position]
                yield beam_window.TimestampedValue(("k", t), Timestamp(micros=common.micros(t)))
                tracker.defer_remainder()

    return Read()


def test_the_runner_refuses_a_watermark_estimator() -> None:
    """Decline probe, the other half: Beam's Python SDK derives a watermark from event times only in a
    splittable DoFn's watermark estimator (MonotonicWatermarkEstimator: the largest output timestamp),
    and the bundle-based DirectRunner cannot run such a DoFn in a streaming pipeline: it fails to
    replace the splittable DoFn's expansion (ProcessKeyedElements)."""
    with pytest.raises(RuntimeError, match="was not replaced as expected"):
        with beam.Pipeline(options=common.pipeline_options()) as p:
            _ = p | beam.Create([b"trace"]) | beam.ParDo(_estimated_read()) | beam.Map(print)


class _TimerAt5(beam.DoFn):  # type: ignore[misc]
    """Sets an event-time timer at 5 ms and records what its callback is given."""

    TIMER = beam.transforms.userstate.TimerSpec("t", beam.transforms.userstate.TimeDomain.WATERMARK)
    TIMER_PARAM = beam.DoFn.TimerParam(TIMER)

    def process(self, element: Any, timer: Any = TIMER_PARAM) -> Any:
        timer.set(Timestamp(micros=common.micros(5)))
        return []

    @beam.transforms.userstate.on_timer(TIMER)
    def fired(self, timestamp: Any = beam.DoFn.TimestampParam) -> Any:
        common.LOG.append({"out": {"case": 0, "timer_timestamp_ms": common.millis(timestamp)}})
        return []


def test_user_code_reads_no_watermark() -> None:
    """Decline probe for partitioned_watermarks and watermark_propagation (their results are watermark
    values): the nearest reading Beam's Python SDK gives user code is an event-time timer, and it fires
    with its own time (5), not the watermark that passed it (1000); a DoFn has no watermark parameter."""
    script = common.Script()
    script.element(("event", "k", 0), 0, (0, 0, 0))
    script.advance_watermark(1000, (0, 0, 1))
    script.advance_watermark(10**6, (0, "end"))

    def build(source: Any) -> list[Any]:
        _ = source | _values("event") | beam.ParDo(_TimerAt5())
        return []

    found = _run(script, build)
    assert found == {(0, 0, 1): [{"out": {"case": 0, "timer_timestamp_ms": 5}}]}
    assert not [name for name in dir(beam.DoFn) if "Watermark" in name and name != "WatermarkEstimatorParam"]


def test_an_element_of_an_expired_window_leaves_no_trace() -> None:
    """Decline probe for Reassign and SideOutput, and why late rows and dropped counts are not shown:
    an element at 100 after the watermark 10000 under FixedWindows(10) is in no pane, with its own time
    or another; GroupByKey has one output (no late tag); the run's metrics hold no counter."""
    script = common.Script()
    script.element(("event", "k", 5), 5, (0, 0, 0))
    script.advance_watermark(10000, (0, 0, 1))
    script.element(("event", "k", 100), 100, (0, 0, 2))
    script.advance_watermark(10**6, (0, "end"))

    def build(source: Any) -> list[Any]:
        grouped = source | _values("event") | _fixed_windows(10) | beam.GroupByKey()
        assert isinstance(grouped, beam.pvalue.PCollection)  # one output, no tagged late output
        return [grouped]

    found = _run(script, build)
    assert [(o["window"], o["out"]) for o in found[(0, 0, 1)]] == [((0, 10), ("k", [5]))]
    assert set(found) == {(0, 0, 1)}  # nothing for the element at 100, at any time

    with beam.Pipeline(options=common.pipeline_options()) as p:
        _ = p | script.test_stream() | _values("event") | _fixed_windows(10) | beam.GroupByKey()
    assert not p.result.metrics().query()["counters"]


def test_without_windows_no_element_is_late() -> None:
    """Decline probe for late data without window_size: Beam refuses a GroupByKey of an unbounded
    input in the global window under the default trigger, and with a trigger that fires per element
    an element far behind the watermark (100 after 10000) comes out like any other: Beam judges
    lateness only by a window's expiry, and the global window never expires."""
    from apache_beam.transforms import trigger

    script = common.Script()
    script.advance_watermark(10000, (0, 0, 0))
    script.element(("event", "k", 100), 100, (0, 0, 1))
    with pytest.raises(ValueError, match="global windowing and a default trigger"):
        with beam.Pipeline(options=common.pipeline_options()) as p:
            _ = p | script.test_stream() | _values("event") | beam.GroupByKey()

    def build(source: Any) -> list[Any]:
        per_element = beam.WindowInto(
            beam_window.GlobalWindows(),
            trigger=trigger.Repeatedly(trigger.AfterCount(1)),
            accumulation_mode=trigger.AccumulationMode.DISCARDING,
        )
        grouped = source | _values("event") | per_element | beam.GroupByKey()
        return [grouped | beam.Map(lambda kv: {"case": 0, "grouped": kv})]

    assert _run(script, build) == {(0, 0, 1): [{"out": {"case": 0, "grouped": ("k", [100])}}]}


def test_cogroupbykey_of_a_tumbling_and_a_sliding_input_pairs_nothing() -> None:
    """Decline probe for tumbling x sliding: CoGroupByKey of a FixedWindows(10) left and a
    SlidingWindows(20, 10) right input only warns, and groups by identical windows: the left element
    at 1 ([0, 10)) and the right one at 5 ([-10, 10) and [0, 20)) are never in one group, where OXJ-R9
    pairs a tumbling pane with every sliding pane it overlaps."""
    from apache_beam.transforms.window import TimestampedValue

    def at(side: str, t: int) -> Any:
        return TimestampedValue((side, "a", t), Timestamp(micros=common.micros(t)))

    stream = TestStream().add_elements([at("left", 1), at("right", 5), at("right", 12)])
    common.LOG.clear()
    with beam.Pipeline(options=common.pipeline_options()) as p:
        source = p | stream.advance_watermark_to(Timestamp(micros=common.micros(100)))
        sides = {
            side: source
            | f"{side}" >> beam.Filter(lambda r, s=side: r[0] == s)
            | f"{side} key" >> beam.Map(lambda r: (r[1], r[2]))
            | f"{side} window" >> beam.WindowInto(fn)
            for side, fn in (
                ("left", beam_window.FixedWindows(Duration(micros=10000))),
                ("right", beam_window.SlidingWindows(Duration(micros=20000), Duration(micros=10000))),
            )
        }
        _ = sides | beam.CoGroupByKey() | beam.ParDo(common.Sink())
    groups = sorted((r["window"], r["out"][1]["left"], r["out"][1]["right"]) for r in common.LOG)
    common.LOG.clear()
    assert groups == [((-10, 10), [], [5]), ((0, 10), [1], []), ((0, 20), [], [5, 12]), ((10, 30), [], [12])]


def test_a_flatten_of_two_sources_has_one_watermark_the_minimum() -> None:
    """Decline probe for late data with several sources: two TestStream outputs with watermarks of
    their own, flattened into one windowed GroupByKey: source a's watermark at 100 fires nothing while
    source b's stays behind; the flattened watermark is the minimum, not one per source."""
    from apache_beam.transforms.window import TimestampedValue

    stream = (
        TestStream(output_tags=["a", "b"])
        .add_elements([TimestampedValue(("k", 5), Timestamp(micros=5000))], tag="a")
        .advance_watermark_to(Timestamp(micros=100_000), tag="a")
        .add_elements([TimestampedValue(("k", 6), Timestamp(micros=6000))], tag="b")
    )
    with beam.Pipeline(options=common.pipeline_options()) as p:
        both = p | stream
        _ = (
            (both["a"], both["b"])
            | beam.Flatten()
            | _fixed_windows(10)
            | beam.GroupByKey()
            | beam.ParDo(common.Sink())
        )
    # one pane holding both: b's element at 6 was still on time after a's watermark reached 100
    assert [(r["window"], sorted(r["out"][1])) for r in common.LOG] == [((0, 10), [5, 6])]
    common.LOG.clear()


def test_every_element_passes_whatever_its_lag() -> None:
    """Decline probe for sla_admission and the pipeline: an element 10 s behind the watermark passes a
    ParDo like any other; Beam judges no lag, rejects and sheds nothing before a window's expiry."""
    script = common.Script()
    script.advance_watermark(10000, (0, 0, 0))
    script.element(("event", "k", 0), 0, (0, 0, 1))

    def build(source: Any) -> list[Any]:
        return [source | _values("event") | beam.Map(lambda kv: {"case": 0, "value": kv[1]})]

    assert _run(script, build) == {(0, 0, 1): [{"out": {"case": 0, "value": 0}}]}


def test_deduplicate_forgets_ids_by_time_and_gives_no_verdict() -> None:
    """Decline probe for exactly_once_aggregation: Beam's DeduplicatePerKey drops a repeated id with
    no output of its own, and forgets an id once its event-time duration passes (here 10 ms), so the
    same id comes out again: a window of time, not of the last sequences per channel (OXE-R2)."""
    from apache_beam.transforms.deduplicate import DeduplicatePerKey

    script = common.Script()
    script.element(("event", "p:1", 0), 0, (0, 0, 0))
    script.element(("event", "p:1", 1), 1, (0, 0, 1))  # re-delivered at once
    script.advance_watermark(1000, (0, 0, 2))
    script.element(("event", "p:1", 1000), 1000, (0, 0, 3))  # re-delivered after the duration
    script.advance_watermark(10**6, (0, "end"))

    def build(source: Any) -> list[Any]:
        deduplicated = (
            source | _values("event") | DeduplicatePerKey(event_time_duration=Duration(micros=10000))
        )
        return [deduplicated | beam.Map(lambda kv: {"case": 0, "id": kv[0], "value": kv[1]})]

    found = _run(script, build)
    assert found == {
        (0, 0, 0): [{"out": {"case": 0, "id": "p:1", "value": 0}}],
        (0, 0, 3): [{"out": {"case": 0, "id": "p:1", "value": 1000}}],
    }


def test_the_i64_ends_of_time_are_beyond_beams_timestamps() -> None:
    """Decline probe for times or durations near the i64 ends (TR-2): Beam's timestamps are
    microseconds within MAX_TIMESTAMP, about 9.2e15 ms, and a TestStream refuses an element at the
    spec's top of time, i64 max milliseconds."""
    from apache_beam.utils.timestamp import MAX_TIMESTAMP

    assert common.millis(MAX_TIMESTAMP) < 2**63 - 1
    script = common.Script()
    script.element(("event", "k", 0), 2**63 - 1, (0, 0, 0))
    with pytest.raises(AssertionError, match="MAX_TIMESTAMP"):
        with beam.Pipeline(options=common.pipeline_options()) as p:
            _ = p | script.test_stream() | _values("event")
