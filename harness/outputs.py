"""Observable outputs (spec/traces.md TR-8): per area, named tables of rows.

An engine returns, for each trace, a mapping table name -> list of rows
(tuples in the column order below, or dicts with those column names). The
harness puts every table in canonical order, so two engines conform on a
trace exactly when their canonical outputs are equal.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# Column order of every table of every area. Rows are sorted by all columns.
TABLES: dict[str, dict[str, tuple[str, ...]]] = {
    "keyed_watermarks": {
        "events": ("batch", "seq", "key", "event_time", "key_watermark", "verdict"),
        "progress": (
            "batch",
            "global_watermark",
            "total_keys",
            "active_keys",
            "idle_keys",
            "evicted_keys",
            "global_advances",
            "key_advances",
            "estimated_keys",
        ),
        "keys": ("batch", "key", "watermark", "state"),
        "windows": ("batch", "key", "window_start", "window_end", "count", "sum"),
        "errors": ("batch", "seq", "reason"),
    },
    "partitioned_watermarks": {
        "progress": (
            "batch",
            "combined_watermark",
            "total_partitions",
            "active_partitions",
            "idle_partitions",
            "watermark_advances",
            "rebalances",
        ),
        "partitions": ("batch", "source", "partition", "watermark", "state", "core"),
        "sources": ("batch", "source", "watermark", "active_partitions"),
        "errors": ("batch", "seq", "reason"),
    },
    "session_windows": {
        "sessions": ("batch", "key", "session_start", "session_end", "count", "sum", "reason"),
        "late": ("batch", "seq", "key", "event_time", "watermark", "verdict"),
        "timers": ("batch", "key", "session_start", "trigger_time"),
        "progress": (
            "batch", "watermark", "open_sessions", "sessions_closed_by_timer",
            "sessions_closed_by_watermark", "late_events",
        ),
        "errors": ("batch", "seq", "reason"),
    },  # fmt: skip
    "watermark_propagation": {
        "generated": ("batch", "seq", "key", "watermark"),
        "watermarks": ("batch", "seq", "key", "watermark"),
        "violations": ("batch", "seq", "key", "watermark", "reason"),
        "progress": ("batch", "aligned_watermark", "global_watermark", "violation_count"),
        "errors": ("batch", "seq", "reason"),
    },
    "late_data": {
        "events": (
            "batch", "seq", "source", "event_time", "watermark", "verdict", "lateness", "assigned_time",
            "channel",
        ),
        "side_outputs": ("batch", "channel", "position", "seq", "source", "event_time"),
        "windows": ("batch", "seq", "source", "window_start", "window_end", "watermark", "count"),
        "progress": (
            "batch", "on_time", "allowed_late", "reassigned", "dropped", "side_output", "open_windows",
        ),
        "errors": ("batch", "seq", "reason"),
    },  # fmt: skip
    "eventtime_buffer": {
        "emitted": (
            "batch", "kind", "key", "event_time", "value", "watermark", "reason", "arrival_batch",
            "arrival_seq",
        ),
        "late": ("batch", "seq", "key", "event_time", "watermark"),
        "progress": (
            "batch",
            "watermark",
            "max_timestamp_seen",
            "buffer_size",
            "late_dropped_count",
            "watermark_emitted_count",
        ),
        "errors": ("batch", "seq", "reason"),
    },
    "sla_admission": {
        "decisions": (
            "batch", "seq", "stream", "event_time", "now", "decision", "reason", "tokens_left", "lag",
        ),
        "streams": (
            "batch", "stream", "admitted", "rejected_lag", "rejected_jitter", "rejected_rate", "shed",
            "throttled", "tokens",
        ),
        "progress": ("batch", "admitted", "rejected", "shed", "throttled", "load_score"),
        "errors": ("batch", "seq", "reason"),
    },  # fmt: skip
    "exactly_once_aggregation": {
        "messages": ("batch", "seq", "producer", "partition", "sequence", "key", "verdict"),
        "aggregates": ("batch", "key", "kind", "number", "count"),
        "progress": ("batch", "folded", "duplicates", "outside_window", "keys"),
        "errors": ("batch", "seq", "reason"),
    },
    "window_joins": {
        "pairs": (
            "batch", "seq", "key", "left_batch", "left_seq", "left_time", "left_value", "right_batch",
            "right_seq", "right_time", "right_value",
        ),
        "late": ("batch", "seq", "side", "key", "event_time", "watermark"),
        "progress": (
            "batch", "watermark", "left_events", "right_events", "pairs_emitted", "late_events_dropped",
            "open_windows",
        ),
        "errors": ("batch", "seq", "reason"),
    },  # fmt: skip
    "pipeline": {
        "ingress": (
            "batch", "seq", "stream", "key", "event_time", "decision", "reason", "verdict", "watermark",
            "assigned_time",
        ),
        "watermarks": ("batch", "seq", "node", "watermark"),
        "pairs": (
            "batch", "seq", "join", "key", "left_batch", "left_seq", "left_time", "left_value", "right_batch",
            "right_seq", "right_time", "right_value",
        ),
        "join_late": ("batch", "seq", "join", "side", "key", "event_time", "watermark"),
        "messages": ("batch", "seq", "producer", "partition", "sequence", "key", "verdict"),
        "aggregates": ("batch", "key", "kind", "number", "count"),
        "progress": (
            "batch", "admitted", "rejected", "shed", "throttled", "dropped_late", "side_output", "reassigned",
            "pairs", "folded", "duplicates", "outside_window", "watermark",
        ),
        "errors": ("batch", "seq", "reason"),
    },  # fmt: skip
}

Row = tuple[Any, ...]
Output = dict[str, list[Row]]


def _sort_key(row: Row) -> tuple[Any, ...]:
    # None sorts before every value; mixed types never meet in one column.
    return tuple((v is not None, v) for v in row)


def canonical(area: str, raw: Mapping[str, Iterable[Any]]) -> Output:
    """Rows as tuples in column order, each table sorted; unknown tables refused."""
    tables = TABLES[area]
    unknown = set(raw) - set(tables)
    if unknown:
        raise ValueError(f"{area}: unknown output tables {sorted(unknown)}")
    out: Output = {}
    for name, columns in tables.items():
        rows = []
        for r in raw.get(name, ()):
            if isinstance(r, Mapping):
                rows.append(tuple(_plain(r[c]) for c in columns))
            else:
                t = tuple(_plain(v) for v in r)
                if len(t) != len(columns):
                    raise ValueError(f"{area}.{name}: row {t} does not have columns {columns}")
                rows.append(t)
        out[name] = sorted(rows, key=_sort_key)
    return out


def _plain(v: Any) -> Any:
    """numpy/pandas scalars and NaN-for-null to plain Python values."""
    if v is None:
        return None
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        v = v.item()
    if isinstance(v, float) and v != v:
        return None
    return v


def format_table(columns: Sequence[str], rows: Sequence[Row]) -> str:
    cells = [list(columns)] + [["-" if v is None else str(v) for v in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |" for row in cells]
    return "\n".join(lines)


def diff(area: str, expected: Output, actual: Output) -> str:
    """Side-by-side listing of the tables that differ; empty when equal."""
    parts = []
    for name, columns in TABLES[area].items():
        e, a = expected.get(name, []), actual.get(name, [])
        if e == a:
            continue
        only_e = [r for r in e if r not in a]
        only_a = [r for r in a if r not in e]
        parts.append(
            f"table {name!r} differs\n"
            f"expected ({len(e)} rows):\n{format_table(columns, e)}\n"
            f"actual ({len(a)} rows):\n{format_table(columns, a)}\n"
            f"only expected:\n{format_table(columns, only_e)}\n"
            f"only actual:\n{format_table(columns, only_a)}"
        )
    return "\n\n".join(parts)


def emitted_order(rows: Iterable[Row]) -> list[Row]:
    """The event-time buffer's ``emitted`` rows (TABLES column order) in output order
    (spec/eventtime_buffer.md VELO-R17): by batch; error items first, by arrival; then
    tuples and watermarks by time, a watermark after the tuples of its time, tuples of
    equal time by arrival."""
    columns = TABLES["eventtime_buffer"]["emitted"]
    at = {c: columns.index(c) for c in columns}

    def place(row: Row) -> tuple[int, int, int, int, int, int]:
        kind = row[at["kind"]]
        arrival = (row[at["arrival_batch"]] or 0, row[at["arrival_seq"]] or 0)
        if kind == "error":
            return (row[at["batch"]], 0, 0, 0, *arrival)
        if kind == "watermark":
            return (row[at["batch"]], 1, row[at["watermark"]], 1, 0, 0)
        return (row[at["batch"]], 1, row[at["event_time"]], 0, *arrival)

    return [tuple(r) for r in sorted(rows, key=place)]
