"""Window joins (oxirs): saturating time arithmetic (TR-2) and the panes a left event reaches."""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.traces import I64_MAX, I64_MIN
from spark_impl.window_joins.settings import (
    StreamConfig,
)

# ---- saturating time arithmetic (TR-2) ---------------------------------------------------------


def sat_add(a: Any, b: Any) -> np.ndarray:
    """a + b elementwise on int64, clamped to the i64 bounds instead of wrapping."""
    a = np.asarray(a, np.int64)
    b = np.asarray(b, np.int64)
    with np.errstate(over="ignore"):
        total = a + b
    return np.where(
        (b > 0) & (total < a), np.int64(I64_MAX), np.where((b < 0) & (total > a), np.int64(I64_MIN), total)
    )


def pane_deadline(index: np.ndarray, size: int, lateness: int) -> np.ndarray:
    """OXJ-R4: the watermark that purges pane ``index``: its end (saturating) plus the lateness."""
    index = np.asarray(index, np.int64)
    with np.errstate(over="ignore"):  # an index from I64_MAX // size up ends beyond i64 max
        end = np.where(index >= I64_MAX // size, np.int64(I64_MAX), (index + 1) * np.int64(size))
    return sat_add(end, lateness)


def reached_left_panes(t: np.ndarray, cfg: StreamConfig) -> tuple[np.ndarray, np.ndarray]:
    """OXJ-R8, R11: the first and last left pane index a right event at ``t`` reaches (the left
    panes its sliding panes' union overlaps, within the representable times)."""
    ls, rs, slide = cfg.left_size_ms, cfg.right_size_ms, cfg.right_slide_ms
    t = np.asarray(t, np.int64)
    safe = (t >= I64_MIN + 2 * rs) & (t <= I64_MAX - 2 * rs) if rs < I64_MAX // 4 else np.zeros(len(t), bool)
    first = np.zeros(len(t), np.int64)
    last = np.zeros(len(t), np.int64)
    ts = t[safe]
    start = (np.floor_divide(ts - rs, slide) + 1) * slide
    end = np.floor_divide(ts, slide) * slide + rs
    first[safe] = np.floor_divide(start, ls)
    last[safe] = np.floor_divide(end - 1, ls)
    for i in np.flatnonzero(~safe).tolist():  # near the bounds: exact integers
        x = int(t[i])
        lo = max(I64_MIN, ((x - rs) // slide + 1) * slide)
        hi = min(I64_MAX, (x // slide) * slide + rs - 1)
        first[i], last[i] = lo // ls, hi // ls
    return first, last
