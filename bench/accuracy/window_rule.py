"""Flink's own lateness rule on the same streams, to compare with the paper (numpy, not the F065 operator).

Flink's window operator drops an element when its WINDOW is already past
(window end <= watermark + 1, with the watermark max - bound - 1), while F065
(R3) drops an EVENT below its key's watermark (t < max - bound) even if its
window is still open. Under Flink's rule an event counts when its window had
not fired at its arrival and fires by the end of the stream:

    window_end > running_max_before - bound   and   window_end <= final_max - bound

with the maxima taken per vehicle (keyed) or over the stream (global).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from variants import BOUND_MS, WINDOW_MS, Stream


def counted_under_window_rule(stream: Stream, kind: str) -> int:
    group = stream.vehicle if kind == "keyed" else np.zeros(len(stream), np.int64)
    frame = pd.DataFrame({"g": group, "t": stream.event_time})
    before = frame.groupby("g")["t"].cummax().groupby(frame["g"]).shift(1)
    final = frame.groupby("g")["t"].transform("max").to_numpy(np.int64)
    end = stream.event_time - stream.event_time % WINDOW_MS + WINDOW_MS
    open_at_arrival = before.isna().to_numpy() | (end > before.fillna(0).to_numpy(np.int64) - BOUND_MS)
    return int(np.count_nonzero(open_at_arrival & (end <= final - BOUND_MS)))
