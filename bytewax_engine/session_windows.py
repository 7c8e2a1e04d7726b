"""F017E on Bytewax: ``SessionWindower`` under ``EventClock``, and the ``window`` operator's late output.

The two contracts. The spec (F017E-R5, R7, R10): a stream's watermark W is its largest event time minus
``bounded_delay``; an event is late when ``t + allowed_lateness < W``; a session ``[start, last + gap)``
closes when ``last + gap + allowed_lateness < W``. Bytewax (``EventClock``, ``SessionWindower``): the
watermark W_b is the largest timestamp minus ``wait_for_system_duration`` (plus the system time elapsed
since, which the trace's clock keeps at 0 here); an item is late when ``t < W_b``; a session whose
metadata says ``open_time`` (its first timestamp) and ``close_time`` (its last timestamp, "inclusive"
by ``WindowMetadata``'s docstring) closes when ``close_time < W_b - gap``. Bytewax has no allowed
lateness, and both of its rules compare with W_b alone, so the adapter gives it the wait
``bounded_delay + allowed_lateness``: then ``W_b = W - allowed_lateness`` and Bytewax's two rules are
the spec's two rules, term for term. The watermark a late item met (read from the clock, in the
``late`` rows but not shown: it is in no output of Bytewax's) is given as ``W_b + allowed_lateness``.
A session's bounds are Bytewax's ``[open_time, close_time + gap)``. Joining is the same on both
sides: an item within ``gap`` of a session's first or last timestamp, boundary included, joins it, and
sessions within ``gap`` of each other merge.

What differs is whose watermark: Bytewax keeps one clock per key, the spec one watermark per stream
(F017E-R5), so in Bytewax another key's event neither closes a session (R8, R14) nor makes an event
late (R10). That is Bytewax's answer, not the adapter's, and its deviations are in
expectations/bytewax.toml.

Observed from Bytewax: each closed session (the ``meta`` output's bounds, the window logic's count and
sum), the item whose processing closed it (its batch) or the end of the input, and the late output
(each late item). The ``end`` item ends the input Bytewax is given: its ``on_eof`` watermark is the
top of time and closes every session, in the end's batch; without an ``end`` the sessions the end of
the input closes were still open when the trace stopped, and are left out. Not shown: the error rows
of malformed items (the adapter's input checks, F017E-R20), the closing reason, timers, open sessions
(Bytewax keeps them to itself), and the stream watermark, which Bytewax does not have.
"""

from __future__ import annotations

from typing import Any

from bytewax_engine import common
from harness.traces import InvalidConfig
from reference.session_windows import config_from_trace

AREA = "session_windows"


def answer(case: dict[str, Any]) -> dict[str, Any]:
    from bytewax.operators.windowing import SessionWindower

    try:
        config = config_from_trace(case.get("config", {}))
    except InvalidConfig as error:
        return {"id": case["id"], "error": {"type": "InvalidConfig", "message": str(error)}}
    gap, lateness, delay = config["gap"], config["allowed_lateness"], config["bounded_delay"]
    batches = case["batches"]
    times = [it.get("event_time") for batch in batches for it in batch]
    if not common.fits(gap, lateness, delay, *times):
        return common.out_of_range(case["id"])
    items: list[common.Event | int] = []
    end_batch = None
    for b, batch in enumerate(batches):
        for seq, item in enumerate(batch):
            if end_batch is not None:
                break  # after the end nothing reaches Bytewax
            if item.get("kind") == "end":
                end_batch = b
            elif item.get("kind") == "event" and None not in (item.get("key"), item.get("event_time")):
                items.append(common.Event(b, seq, item["key"], item["event_time"], item.get("value", 0)))
    run = common.run_windowed(items, SessionWindower(gap * common.MS), delay + lateness)

    sessions = []
    for w in run.windows:
        batch = w["batch"] if w["batch"] is not None else end_batch
        if batch is None:
            continue  # closed only by the end of Bytewax's input: still open when the trace stops
        sessions.append([batch, w["key"], w["open"], w["close"] + gap, w["count"], w["sum"], None])
    judged = {(e[1].batch, e[1].seq): e[2] for e in run.record.entries if e[0] == "item"}
    verdict = "dropped" if config["emit_strategy"] == "Final" else "late_output"
    late = [[e.batch, e.seq, e.key, e.time, judged[(e.batch, e.seq)] + lateness, verdict] for e in run.late]
    progress = []
    for b in range(len(batches)):
        late_events = sum(1 for row in late if row[0] <= b)
        progress.append([b, None, None, None, None, late_events])
    return {"id": case["id"], "tables": {"sessions": sessions, "late": late, "progress": progress}}
