"""The narrow group: a stream's cumulative counters and its progress rows from its buckets' summaries
(F017E-R9).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from spark_impl.checkpoints import decoding
from spark_impl.common import OutputRows
from spark_impl.scaleout import NULL_MASK, BatchSummaryStage, check_layout
from spark_impl.session_windows.layout import OUTPUT_COLUMNS, STREAM_SCHEMA, STRING_COLS
from spark_impl.session_windows.settings import LAYOUT_VERSION

# ---- the narrow group: the stream's counters and progress rows (F017E-R9) -------------------


@dataclass
class NarrowState:
    """What the narrow group keeps per stream: the cumulative counters and each bucket's latest
    number of open sessions."""

    buckets: int
    closed_by_timer: int = 0
    closed_by_watermark: int = 0
    late_events: int = 0
    open_sessions: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def __post_init__(self) -> None:
        if len(self.open_sessions) == 0:
            self.open_sessions = np.zeros(self.buckets, np.int64)

    def to_tuple(self) -> tuple[Any, ...]:
        return (
            LAYOUT_VERSION, self.buckets, self.closed_by_timer, self.closed_by_watermark, self.late_events,
            np.ascontiguousarray(self.open_sessions, np.int64).tobytes(),
        )  # fmt: skip

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...], buckets: int) -> NarrowState:
        check_layout("session_windows", value, LAYOUT_VERSION, buckets, "stream")
        with decoding("session_windows", "stream"):
            open_sessions = np.frombuffer(bytes(value[5]), np.int64).copy()
            if len(open_sessions) != buckets:
                raise ValueError(f"open-session counts of {len(open_sessions)} buckets for {buckets} buckets")
            return cls(buckets, int(value[2]), int(value[3]), int(value[4]), open_sessions)


def summarise_batch(st: NarrowState, rows: pd.DataFrame, b: int, out: OutputRows) -> None:
    """F017E-R9, R19: one progress row from the buckets' summaries of batch ``b``."""
    st.open_sessions[rows["s_bucket"].to_numpy(np.int64)] = rows["s_open"].to_numpy(np.int64)
    st.closed_by_timer += int(rows["s_by_timer"].sum())
    st.closed_by_watermark += int(rows["s_by_watermark"].sum())
    st.late_events += int(rows["s_late"].sum())
    has = rows["s_has_watermark"].to_numpy(np.int64) != 0
    watermark = int(rows["s_watermark"].to_numpy(np.int64)[has].max()) if has.any() else None
    out.add(
        "progress", 1, batch=b, watermark=(np.array([watermark or 0]), np.array([watermark is None])),
        open_sessions=int(st.open_sessions.sum()), sessions_closed_by_timer=st.closed_by_timer,
        sessions_closed_by_watermark=st.closed_by_watermark, late_events=st.late_events,
    )  # fmt: skip


class StreamSummaryProcessor(BatchSummaryStage):
    """The second stage: route -1 is the stream's narrow group; other routes pass rows through."""

    columns = (*OUTPUT_COLUMNS, NULL_MASK)
    state_schema = STREAM_SCHEMA
    state_class = NarrowState
    string_cols = STRING_COLS
    summarise_batch = staticmethod(summarise_batch)
