"""Session windows' columns and schemas: the output columns, what crosses between the order, wide and
narrow stages, and the state schemas.
"""

from __future__ import annotations

from spark_impl.scaleout import NULL_MASK, ROUTE

STRING_COLS = ("output", "stream_id", "key", "reason", "verdict")


OUTPUT_COLUMNS = (
    "output", "stream_id", "batch", "seq", "key", "session_start", "session_end", "count", "sum",
    "reason", "event_time", "watermark", "verdict", "trigger_time", "open_sessions",
    "sessions_closed_by_timer", "sessions_closed_by_watermark", "late_events",
)  # fmt: skip


LONG_COLS = tuple(c for c in OUTPUT_COLUMNS if c not in STRING_COLS)


OUTPUT_SCHEMA = ", ".join(f"`{c}` {'string' if c in STRING_COLS else 'long'}" for c in OUTPUT_COLUMNS)


# The order stage's rows: the input row (or a chunk summary, ``sw_summary``), its bucket, and
# ``sw_run``: the highest event time of its chunk before it (``sw_run_has``: there is one). A
# summary reuses the columns: ``sw_run`` the chunk's highest event time, ``sw_seq`` its rows.
ORDER_FIELDS = (
    ("sw_sid", "string"), ("sw_bucket", "long"), ("sw_batch", "long"), ("sw_chunk", "long"),
    ("sw_seq", "long"), ("sw_kind", "string"), ("sw_key", "string"), ("sw_hash", "long"),
    ("sw_et", "long"), ("sw_et_null", "boolean"), ("sw_value", "long"), ("sw_run", "long"),
    ("sw_run_has", "boolean"), ("sw_summary", "boolean"),
)  # fmt: skip


ORDER_SCHEMA = ", ".join(f"`{name}` {kind}" for name, kind in ORDER_FIELDS)


# A bucket's summary of one batch for the narrow group: its open sessions after the batch, the
# sessions it closed by timer and by watermark, its late events, and the batch's final watermark.
SUMMARY_COLS = (
    "s_bucket",
    "s_open",
    "s_by_timer",
    "s_by_watermark",
    "s_late",
    "s_watermark",
    "s_has_watermark",
)


PASS_SCHEMA = ", ".join([f"`{c}` {'string' if c in STRING_COLS else 'long'}" for c in OUTPUT_COLUMNS]
                        + [f"`{NULL_MASK}` long"])  # fmt: skip


WIDE_SCHEMA = ", ".join([PASS_SCHEMA, f"`{ROUTE}` long"] + [f"`{c}` long" for c in SUMMARY_COLS])


BUCKET_SCHEMA = (
    "layout_version int, buckets int, level int, split int, has_max boolean, max_event_time long, "
    "ended boolean, batches long, blocks binary"
)


BLOCK_SCHEMA = "key_lengths binary, key_bytes binary, numbers binary"


STREAM_SCHEMA = (
    "layout_version int, buckets int, closed_by_timer long, closed_by_watermark long, late_events long, "
    "open_sessions binary"
)


TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "sessions": ("stream_id", "batch", "key", "session_start", "session_end", "count", "sum", "reason"),
    "late": ("stream_id", "batch", "seq", "key", "event_time", "watermark", "verdict"),
    "timers": ("stream_id", "batch", "key", "session_start", "trigger_time"),
    "progress": (
        "stream_id", "batch", "watermark", "open_sessions", "sessions_closed_by_timer",
        "sessions_closed_by_watermark", "late_events",
    ),
    "errors": ("stream_id", "batch", "seq", "reason"),
}  # fmt: skip
