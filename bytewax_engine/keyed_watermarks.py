"""F065 on Bytewax: ``EventClock`` keeps a watermark per key, judged by the ``window`` operator's late output.

Bytewax's windowing operators instantiate their clock "for each key which is encountered"
(``ClockLogic``'s docstring; ``_WindowLogic`` is a ``StatefulBatchLogic`` per key holding its own
``ClockLogic``): each key has its own watermark, moved only by that key's items. That is F065's
per-key watermark (R2, R4), so this area is answered with Bytewax's own per-key clocks.

The two contracts. The spec: a key's watermark is its largest event time minus ``bounded_delay``
(R2); an event is late when ``t < watermark`` just before it (R3); a keyed tumbling window fires when
the key's watermark reaches its end, ``watermark >= end`` (R21). Bytewax: ``EventClock`` with the wait
``bounded_delay`` gives the largest timestamp minus the wait, plus the system time elapsed since that
item; an item is late when ``t < W_b`` with W_b taken after the item is given to the clock, which is
the watermark before it for a late item (a late item cannot raise it) and for an on-time one (an
item that raises it lies at or above both); ``TumblingWindower(window_size, align_to=EPOCH)`` closes a
window ``[open_time, close_time)`` when ``close_time <= W_b``. So the wait is ``bounded_delay`` and no
shift is needed. Without ``window_size`` a 1 ms ``TumblingWindower`` carries the verdicts and its
windows are not reported.

The processing clock. Bytewax's watermark also grows with the system time elapsed since a key's
largest timestamp; ``now_getter`` is given the trace's processing clock (TR-4), which ``clock`` items
move. The spec's key watermark never moves with the processing clock (R2): where a trace's clock
moves between a key's events, Bytewax's watermark of that key is ahead, a Bytewax answer with its
deviations in expectations/bytewax.toml.

Observed from Bytewax: which items its late output holds (``late``, every other event ``on_time``)
and each closed window with the batch of the item whose processing closed it. The ``end`` item ends
the input: ``on_eof`` closes every window of every key (R38), in the end's batch; without it what the
end of the input closes is left out. Not observable: the key's watermark (in no output of Bytewax's),
per-key state, idleness and removal (Bytewax has no call for the trace's ``idle`` and ``remove_key``
items, so they reach nothing), the global watermark (Bytewax has none), the counters, and error rows
(the adapter's input checks). The idle timeout, the key limit and its eviction policy, and the compact
tracker's sketch have no Bytewax counterpart and reach nothing.
"""

from __future__ import annotations

from typing import Any

from bytewax_engine import common
from harness.traces import InvalidConfig
from reference.keyed_watermarks import config_from_trace

AREA = "keyed_watermarks"
VERDICT_WINDOW_MS = 1  # without window_size: any windower gives the verdicts, which its clock decides


def answer(case: dict[str, Any]) -> dict[str, Any]:
    from bytewax.operators.windowing import TumblingWindower

    try:
        config, window_size = config_from_trace(case.get("config", {}))
    except InvalidConfig as error:
        return {"id": case["id"], "error": {"type": "InvalidConfig", "message": str(error)}}
    delay = config.bounded_delay
    items: list[common.Event | int] = []
    values: list[Any] = [delay, window_size]
    end_batch = None
    for b, batch in enumerate(case["batches"]):
        for seq, item in enumerate(batch):
            kind = item.get("kind")
            if end_batch is not None:
                break  # after the end nothing reaches Bytewax
            if kind == "end":
                end_batch = b
            elif kind == "clock" and isinstance(item.get("time"), int):
                items.append(item["time"])  # the processing clock, Bytewax's system time (TR-4)
                values.append(item["time"])
            elif kind == "event" and None not in (item.get("key"), item.get("event_time")):
                items.append(common.Event(b, seq, item["key"], item["event_time"], item.get("value", 0)))
                values.append(item["event_time"])
    if not common.fits(*values):
        return common.out_of_range(case["id"])
    size = window_size or VERDICT_WINDOW_MS
    run = common.run_windowed(items, TumblingWindower(size * common.MS, common.EPOCH), delay)

    late = {(e.batch, e.seq) for e in run.late}
    events = [
        [e.batch, e.seq, e.key, e.time, None, "late" if (e.batch, e.seq) in late else "on_time"]
        for e in items
        if isinstance(e, common.Event)
    ]
    windows = []
    for w in run.windows if window_size is not None else []:
        batch = w["batch"] if w["batch"] is not None else end_batch
        if batch is None:
            continue  # closed only by the end of Bytewax's input: still open when the trace stops
        windows.append([batch, w["key"], w["open"], w["close"], w["count"], w["sum"]])
    return {"id": case["id"], "tables": {"events": events, "windows": windows}}
