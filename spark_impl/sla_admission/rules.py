"""The admission rules as pure numpy: the load score, the metrics report, the drop probabilities and
their draws, and the saturating lag.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from harness.traces import I64_MAX, I64_MIN
from spark_impl.sla_admission.settings import METRIC_NAMES, Shedder

# ---- the load shedder's arithmetic (OXS-R10..R12) -----------------------------------------


def load_score(metrics: Mapping[str, int], shedder: Shedder) -> int:
    """OXS-R10: the most saturated resource in thousandths (Python ints: a depth may be huge);
    a metric left out is 0."""
    return max(
        10 * metrics.get("cpu", 0), 10 * metrics.get("memory", 0),
        min(1000, 1000 * metrics.get("queue_depth", 0) // shedder.queue_capacity),
        min(1000, 1000 * metrics.get("latency", 0) // shedder.latency_target_ms),
    )  # fmt: skip


def metric_problem(name: Any, value: Any) -> str | None:
    """OXS-R15: why one metric of a load report is refused, or None when it is acceptable."""
    if name not in METRIC_NAMES:
        return f"unknown load metric {name!r} (known: {', '.join(METRIC_NAMES)})"
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return f"load metric {name} must be an integer >= 0, got {value!r}"
    if name in ("cpu", "memory") and value > 100:
        return f"load metric {name} is a percentage (0..100), got {value}"
    return None


def metrics_report(text: Any) -> dict[str, int] | None:
    """A load row's metrics (JSON text of [name, value] pairs), or None when OXS-R15 refuses it."""
    if text is None:
        return None
    try:
        pairs = json.loads(text)
    except (TypeError, ValueError):
        return None
    if isinstance(pairs, Mapping):
        pairs = list(pairs.items())
    if not isinstance(pairs, list) or not pairs:
        return None
    report: dict[str, int] = {}
    for pair in pairs:
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            return None
        name, value = pair
        if metric_problem(name, value) is not None:
            return None
        report[name] = min(value, I64_MAX)  # TR-16: the score is 1000 already; the state holds longs
    return report


def drop_probabilities(score: np.ndarray, priority: np.ndarray, shedder: Shedder) -> np.ndarray:
    """OXS-R11 per event, in thousandths: linear above the threshold, scaled by priority."""
    above = np.maximum(score - np.int64(shedder.threshold), 0)
    p = above * np.int64(shedder.max_drop) // np.int64(1000 - shedder.threshold)
    scaled = np.select(
        [priority == 0, priority == 2, priority == 3], [np.minimum(2 * p, 1000), p // 2, np.zeros_like(p)], p
    )
    return scaled.astype(np.int64)


def draw_of(seed_key: bytes, stream_prefix: bytes, n: int) -> int:
    """OXS-R12: a keyed blake2b of (stream, position) in 0..999; no generator state."""
    digest = hashlib.blake2b(stream_prefix + n.to_bytes(8, "big"), key=seed_key, digest_size=8).digest()
    return int.from_bytes(digest, "big") % 1000


def saturating_lag(now: np.ndarray, event_time: np.ndarray) -> np.ndarray:
    """OXS-R6: max(0, now - event_time), the difference saturated at the i64 bounds (TR-2)."""
    with np.errstate(over="ignore"):
        diff = now - event_time
    wrapped = ((now ^ event_time) & (now ^ diff)) < 0
    diff = np.where(wrapped, np.where(now > event_time, np.int64(I64_MAX), np.int64(I64_MIN)), diff)
    return np.maximum(diff, 0)
