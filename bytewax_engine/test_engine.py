"""Checks of the Bytewax engine, and the probes behind its declines; run only in the Bytewax environment
(`tox -e bytewax` runs them first).

Each probe runs Bytewax's nearest built-in and shows the gap in Bytewax's own output.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bytewax_engine import common
from bytewax_engine.__main__ import AREAS, DECLINED, answer_all

ROOT = Path(__file__).resolve().parent.parent

SESSION_BATCHES: list[list[dict[str, Any]]] = [
    [
        {"kind": "event", "key": "a", "event_time": 0, "value": 1},
        {"kind": "event", "key": "a", "event_time": 500, "value": 2},
    ],
    [{"kind": "event", "key": "b", "event_time": 3000, "value": 4}],
    [{"kind": "event", "key": "a", "event_time": 1200, "value": 8}],
    [{"kind": "event", "key": "a", "event_time": 4000, "value": 16}],
    [{"kind": "end"}],
]
KEYED_BATCHES: list[list[dict[str, Any]]] = [
    [
        {"kind": "event", "key": "fast", "event_time": 10_000},
        {"kind": "event", "key": "slow", "event_time": 1000},
    ],
    [{"kind": "clock", "time": 60_000}],
    [
        {"kind": "event", "key": "slow", "event_time": 1500},
        {"kind": "event", "key": "fast", "event_time": 9000},
    ],
]


def _case(
    area: str, name: str, config: dict[str, Any], batches: list[list[dict[str, Any]]]
) -> dict[str, Any]:
    return {"id": f"{area}/{name}", "area": area, "config": config, "batches": batches, "restart_after": []}


CASES = [
    _case("session_windows", "per-key", {"gap": 1000}, SESSION_BATCHES),
    _case("keyed_watermarks", "clock", {"bounded_delay": 0}, KEYED_BATCHES),
    _case("session_windows", "refused", {"gap": 0}, [[]]),
    *(_case(area, "declined", {}, [[]]) for area in DECLINED),
]


@pytest.fixture(scope="module")
def answers() -> dict[str, dict[str, Any]]:
    """The engine's answers through its command, as the harness runs it."""
    lines = "".join(json.dumps(c) + "\n" for c in CASES)
    done = subprocess.run(
        [sys.executable, "-m", "bytewax_engine"],
        input=lines,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    out = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert "provenance" in out[-1] and out[-1]["provenance"]["bytewax"] == "0.21.1"
    return {a["id"]: a for a in out if "id" in a}


def test_every_case_gets_one_answer(answers: dict[str, dict[str, Any]]) -> None:
    assert sorted(answers) == sorted(c["id"] for c in CASES)
    assert answers["session_windows/refused"]["error"]["type"] == "InvalidConfig"
    for area in DECLINED:
        assert answers[f"{area}/declined"]["unsupported"] == DECLINED[area]
    assert set(AREAS) | set(DECLINED) == {
        "session_windows", "keyed_watermarks", "late_data", "window_joins", "eventtime_buffer",
        "partitioned_watermarks", "watermark_propagation", "sla_admission", "exactly_once_aggregation",
        "pipeline",
    }  # fmt: skip


def test_answers_are_the_same_in_every_run() -> None:
    """Every vector of the answered areas, answered twice in one process: the same answers (no wall clock)."""
    cases = []
    for area in AREAS:
        for folder in ("features", "generated"):
            for line in (ROOT / "vectors" / folder / f"{area}.jsonl").read_text().splitlines():
                vector = json.loads(line)
                if "trace" in vector:
                    cases.append({"id": vector["id"], "area": vector["area"], **vector["trace"]})
    assert len(cases) > 150
    assert answer_all(cases) == answer_all(cases)


# ---- what the answers are: Bytewax's rules, read from its own outputs ---------------------------------


def test_a_session_closes_only_by_its_own_keys_clock(answers: dict[str, dict[str, Any]]) -> None:
    """Bytewax keeps one clock per key: b's event at 3000 moves neither a's watermark (a's session [0,
    1500) stays open and a's event at 1200 joins it) nor closes a's session; a's own event at 4000 does."""
    tables = answers["session_windows/per-key"]["tables"]
    assert sorted(tables["sessions"]) == [
        [3, "a", 0, 2200, 3, 11, None],  # closed at batch 3 by a's own event at 4000
        [4, "a", 4000, 5000, 1, 16, None],  # the end of the input closes the rest, in the end's batch
        [4, "b", 3000, 4000, 1, 4, None],
    ]
    assert tables["late"] == []  # the spec's stream watermark 3000 would call a's event at 1200 late


def test_bytewax_session_windower_is_per_key_in_its_own_output() -> None:
    """The same, straight from Bytewax's collect_window: b's event does not close a's session."""
    out = _collect(
        [("a", 0), ("a", 500), ("b", 3000), ("a", 1200)],
        _session(1000),
        wait_ms=0,
    )
    assert out["late"] == []
    assert sorted((k, [t for t in ts]) for k, ts in out["down"]) == [("a", [0, 500, 1200]), ("b", [3000])]


def test_a_quiet_keys_watermark_moves_with_the_processing_clock(answers: dict[str, dict[str, Any]]) -> None:
    """EventClock adds the system time elapsed since a key's largest timestamp: after the trace's clock
    moved 60 s, slow's event at 1500 (above its largest, 1000) is late, and so is fast's at 9000."""
    events = answers["keyed_watermarks/clock"]["tables"]["events"]
    assert [(e[2], e[3], e[5]) for e in events] == [
        ("fast", 10_000, "on_time"),
        ("slow", 1000, "on_time"),  # the fast key's 10 000 does not make it late: a clock per key
        ("slow", 1500, "late"),
        ("fast", 9000, "late"),
    ]


def test_keyed_windows_close_when_the_keys_watermark_reaches_their_end() -> None:
    case = _case(
        "keyed_watermarks",
        "windows",
        {"bounded_delay": 0, "window_size": 10},
        [
            [{"kind": "event", "key": "a", "event_time": 5, "value": 1}],
            [{"kind": "event", "key": "b", "event_time": 100, "value": 2}],
            [{"kind": "event", "key": "a", "event_time": 10, "value": 4}],
            [{"kind": "end"}],
        ],
    )
    (answer,) = answer_all([case])
    assert sorted(answer["tables"]["windows"]) == [
        [2, "a", 0, 10, 1, 1],  # a's own watermark 10 reaches the end 10; b's 100 did not close it
        [3, "a", 10, 20, 1, 4],
        [3, "b", 100, 110, 1, 2],
    ]


# ---- probes behind the declines --------------------------------------------------------------------


def test_an_outside_watermark_has_no_way_into_bytewaxs_clock() -> None:
    """late_data and window_joins take their watermark from the trace's watermark items only. Bytewax's
    EventClock makes its watermark from item timestamps and the system clock; given the events of a
    trace whose watermark item 500 comes before an event at 100, Bytewax counts the event on time
    (nothing on its late output), where the spec judges it late."""
    out = _collect([("s", 100)], _tumbling(10), wait_ms=0)  # the watermark item 500 has nowhere to go
    assert out["late"] == []
    assert out["down"] == [("s", [100])]


def test_bytewaxs_window_join_pairs_what_an_outside_watermark_made_late() -> None:
    """join_window pairs a right event at 3 with the left one at 1 in the pane [0, 10): the trace's
    watermark 10 that came between them (OXJ: the right event is late, no pair) cannot reach it."""
    import bytewax.operators as op
    import bytewax.operators.windowing as win
    from bytewax.dataflow import Dataflow
    from bytewax.testing import TestingSink, TestingSource, run_main

    flow = Dataflow("join")
    left = op.key_on("l", op.input("left", flow, TestingSource([1])), lambda _t: "a")
    right = op.key_on("r", op.input("right", flow, TestingSource([3])), lambda _t: "a")
    clock = win.EventClock(common.to_datetime, timedelta(0), now_getter=lambda: common.EPOCH)
    out = win.join_window("join", clock, _tumbling(10), left, right, insert_mode="product")
    pairs: list[Any] = []
    op.output("out", out.down, TestingSink(pairs))
    run_main(flow)
    assert pairs == [("a", (0, (1, 3)))]


def test_bytewaxs_ordered_queue_keeps_an_item_at_the_watermark() -> None:
    """eventtime_buffer: the nearest built-in is a windowing operator's ordered queue, whose window logic
    (``WindowLogic.on_value``) gets one key's items in timestamp order once the watermark reaches them.
    With a wait of 1000 after 5000 (W_b 4000), it releases 4000 at once and calls only 3999 late; the
    buffer with a tolerance of 1000 drops both (ts <= W, VELO-R14), and 5000 waits for the end."""
    import bytewax.operators as op
    import bytewax.operators.windowing as win
    from bytewax.dataflow import Dataflow
    from bytewax.testing import TestingSink, TestingSource, run_main

    class Release(win.WindowLogic):  # type: ignore[misc]
        def on_value(self, value: int) -> list[int]:
            return [value]

        def on_merge(self, original: Any) -> list[int]:
            return []

        def on_close(self) -> list[int]:
            return []

        def snapshot(self) -> None:
            return None

    flow = Dataflow("buffer")
    keyed = op.key_on("k", op.input("in", flow, TestingSource([5000, 4000, 3999])), lambda _t: "s")
    clock = win.EventClock(common.to_datetime, 1000 * common.MS, now_getter=lambda: common.EPOCH)
    out = win.window("w", keyed, clock, _tumbling(10**9), lambda _s: Release(), ordered=True)
    released: list[Any] = []
    late: list[Any] = []
    op.output("d", out.down, TestingSink(released))
    op.output("l", out.late, TestingSink(late))
    run_main(flow)
    assert [t for _k, (_w, t) in released] == [4000, 5000]  # 5000 at the end of the input
    assert [t for _k, (_w, t) in late] == [3999]


def test_bytewaxs_watermark_is_the_largest_time_of_every_partition() -> None:
    """partitioned_watermarks: a windowing operator's clock sees one key's items from every partition
    of a source alike; after partition 0's event at 1000, partition 1's at 100 is late (its watermark
    is the maximum, no partition holds it back), where F064 combines partitions by their minimum."""
    out = _collect([("s", 1000), ("s", 100)], _tumbling(10), wait_ms=0)
    assert out["late"] == [("s", 100)]


def test_no_watermark_flows_from_one_bytewax_operator_to_the_next() -> None:
    """watermark_propagation: a window operator's watermark lives in its clock; its outputs carry only
    items, so a downstream windowing operator starts its own clock from what it receives. Upstream has
    seen 1000 (its watermark 1000); the item at 100 it passes on (as its late output) is on time
    downstream, where OXW gives the downstream operator its upstream's watermark."""
    import bytewax.operators as op
    import bytewax.operators.windowing as win
    from bytewax.dataflow import Dataflow
    from bytewax.testing import TestingSink, TestingSource, run_main

    flow = Dataflow("chain")
    up = op.key_on("k", op.input("in", flow, TestingSource([1000, 100])), lambda _t: "s")
    clock = win.EventClock(common.to_datetime, timedelta(0), now_getter=lambda: common.EPOCH)
    first = win.collect_window("first", up, clock, _tumbling(10))
    passed_on = op.map("unwrap", first.late, lambda kv: (kv[0], kv[1][1]))
    second = win.collect_window("second", passed_on, clock, _tumbling(10))
    late_up: list[Any] = []
    late_down: list[Any] = []
    down: list[Any] = []
    op.output("lu", first.late, TestingSink(late_up))
    op.output("ld", second.late, TestingSink(late_down))
    op.output("d", second.down, TestingSink(down))
    run_main(flow)
    assert late_up == [("s", (10, 100))] and late_down == []
    assert [(k, v) for k, (_w, v) in down] == [("s", [100])]


def test_bytewax_has_no_verdict_by_lag() -> None:
    """sla_admission (and the pipeline that starts with it): the nearest built-in verdict on an event's
    time is the windowing late output. With the processing clock 60 s ahead of an event's time, the
    event is taken on time: nothing in Bytewax compares event time with now."""
    out = _collect([("s", 0)], _tumbling(10), wait_ms=0, now_ms=60_000)
    assert out["late"] == [] and out["down"] == [("s", [0])]


def test_bytewax_counts_a_redelivered_message_twice() -> None:
    """exactly_once_aggregation: Bytewax has no de-duplication by (producer, sequence); count_window
    counts a message delivered twice twice."""
    import bytewax.operators as op
    import bytewax.operators.windowing as win
    from bytewax.dataflow import Dataflow
    from bytewax.testing import TestingSink, TestingSource, run_main

    messages = [("p1", 7, 100), ("p1", 7, 100)]  # producer, sequence, time: one message, redelivered
    flow = Dataflow("dedup")
    clock = win.EventClock(lambda m: common.to_datetime(m[2]), timedelta(0), now_getter=lambda: common.EPOCH)
    counted = win.count_window(
        "count", op.input("in", flow, TestingSource(messages)), clock, _tumbling(10), lambda m: m[0]
    )
    out: list[Any] = []
    op.output("out", counted.down, TestingSink(out))
    run_main(flow)
    assert out == [("p1", (10, 2))]


# ---- helpers -----------------------------------------------------------------------------------------


def _tumbling(ms: int) -> Any:
    from bytewax.operators.windowing import TumblingWindower

    return TumblingWindower(ms * common.MS, common.EPOCH)


def _session(gap_ms: int) -> Any:
    from bytewax.operators.windowing import SessionWindower

    return SessionWindower(gap_ms * common.MS)


def _collect(
    items: list[tuple[str, int]], windower: Any, wait_ms: int, ordered: bool = True, now_ms: int = 0
) -> dict[str, list[Any]]:
    """Bytewax's collect_window over (key, time) items under EventClock with a fixed now: its down
    output as (key, times) and its late output as (key, time)."""
    import bytewax.operators as op
    import bytewax.operators.windowing as win
    from bytewax.dataflow import Dataflow
    from bytewax.testing import TestingSink, TestingSource, run_main

    now: datetime = common.to_datetime(now_ms)
    flow = Dataflow("probe")
    keyed = op.key_on("k", op.input("in", flow, TestingSource(items)), lambda kt: kt[0])
    clock = win.EventClock(lambda kt: common.to_datetime(kt[1]), wait_ms * common.MS, now_getter=lambda: now)
    out = win.collect_window("w", keyed, clock, windower, ordered=ordered)
    down: list[Any] = []
    late: list[Any] = []
    op.output("d", out.down, TestingSink(down))
    op.output("l", out.late, TestingSink(late))
    run_main(flow)
    return {
        "down": [(k, [t for _k, t in kts]) for k, (_w, kts) in down],
        "late": [(k, kt[1]) for k, (_w, kt) in late],
    }
