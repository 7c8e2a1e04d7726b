"""Late data (oxirs, spec/late_data.md) on Spark Structured Streaming, spread over the cluster.

Usage
-----
Apply the operator to a streaming DataFrame that carries events and the
watermarks of their sources as rows, and write its output::

    from spark_impl.late_data import late_data

    ld = late_data(
        df,                          # a streaming DataFrame
        event_time_col="ts",         # LongType milliseconds, or TimestampType
        source_col="source",         # integer source id; null is the unnamed source (OXL-R2)
        kind_col="kind",             # "event" | "watermark" | "clock" rows (needs seq_col)
        seq_col="seq",               # arrival order inside a micro-batch
        time_col="time",             # the time of watermark and clock rows
        policy="SideOutput",         # "Drop" | "Reassign" (max_lateness_ms) | "SideOutput" (channel)
        channel="late",
        window_size_ms=60_000,       # optional tumbling windows with an allowed-lateness budget
        allowed_lateness_ms=5_000,
    )
    q = (ld.output.writeStream.format("parquet")
         .option("checkpointLocation", ckpt).start(path))

``ld.output`` is the one combined stream (schema ``OUTPUT_SCHEMA``); its
``output`` column names the table of a row. Projections (each its own
streaming plan: write ``ld.output`` once, or use ``foreachBatch``, to get
every table from one run):

- ``ld.events``: every event with the watermark it was judged against, its
  ``verdict`` (on_time | allowed_late | reassigned | dropped | side_output),
  ``lateness``, ``assigned_time`` (the time it continues with in the main
  stream; null when it left it) and ``channel`` (OXL-R4..R9, R11).
- ``ld.main``: the events that stay in the main stream, at ``assigned_time``.
- ``ld.side_outputs``: the side-channel events with ``channel`` and an
  explicit ``position`` (0, 1, ... per channel over the stream): a sink
  keeps no order, ``position`` does (OXL-R13, R14).
- ``ld.windows``: windows closed by a watermark, with their event count (OXL-R10, R12).
- ``ld.progress``: per micro-batch, cumulative verdict counts and open windows (OXL-R17).
- ``ld.errors``: malformed rows with the reason (OXL-R16).

Watermarks are given, not generated (OXL-R1): they are ``watermark`` rows of
the input (``kind_col``), per source. Without ``kind_col`` every row is an
event and nothing is late. ``stream_id_col`` runs many independent streams
in one query, ``stream_configs`` gives a stream its own trace-style settings
(``policy``, ``max_lateness``, ``channel``, ``window_size``,
``allowed_lateness``). ``batch_col`` is the batch number reported; without
it ``batch`` is the micro-batch's start instant in epoch milliseconds
(Spark's ``current_timestamp()``, the same in every row of a micro-batch).
Without ``seq_col`` the output ``seq`` is null (nothing then depends on the
order: without ``kind_col`` there are no watermark rows).

No clause of this area reads processing time (OXL-R10: the allowed-lateness
tracker's clock is the source's watermark), so the operator takes no
``processing_time_col``: ``clock`` rows only feed the check of TR-4.

Design
------
``docs/architecture.md`` draws the stages. In short:

- WIDE STAGE, grouped by (stream, source bucket): event and watermark rows go
  to the bucket ``pmod(xxhash64(source, source is null), buckets)``; clock
  rows, unsupported rows and the harness's ``batch_end`` marker go to bucket
  0. Everything about a source is decided there, in arrival order (``seq``):
  its watermark (OXL-R3), every verdict of its events (R4..R11), its windows
  and the watermark row that closes each (R12), and the error rows (R16).
  These rows pass through the second stage to the sink. The stage is
  ``transformWithStateInPandas`` in ``timeMode="None"``: Spark's own
  watermark is one value per query, lags a micro-batch and drops ``<=``.
- STATE of a bucket: a ``MapState`` from source (value, null flag) to that
  source's watermark and open windows (start, end, count as raw int64), so a
  micro-batch reads and writes the sources its rows name and nothing else;
  and a ``ValueState`` with the layout version, the bucket count and (bucket
  0) the processing clock of TR-4.
- NARROW STAGE, one group per stream (route -1 of the second
  ``transformWithStateInPandas``): per bucket and batch the wide stage sends
  one summary row (the batch's verdict counts and the change of its open
  windows) and the batch's side-output rows, nothing else. The group keeps
  the five counters, the open-window count and the channel's next position,
  numbers the side-output rows by ``seq`` (OXL-R14: positions follow arrival
  order over the whole stream, so they need one place) and writes the
  progress row (R17).
- SINK STEP: ``write_tables`` and ``foreach_batch`` run the narrow group's work in
  the sink instead (``spark_impl.scaleout.SinkStep``): each micro-batch's rows of route
  -1 are collected to the driver and folded with the stream's state, kept in two
  slots under ``<checkpoint>/sink_step/``; ``output`` runs it in a second stateful stage.
- ORDER: inside a micro-batch rows are taken by ``seq``, never by their
  physical order. SATURATING i64 arithmetic is explicit; nullable longs
  never become floats (they cross between the stages as a value and a null
  mask).
- RESTART (OXL-R18): everything is in the state store under the checkpoint;
  ``buckets`` is fixed in it (another value is refused with a message naming
  both), and so is the layout version.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from harness.traces import I64_MAX, I64_MIN, InvalidConfig
from spark_impl.checkpoints import Operator, Stage, decoding, register, schema_fields, value_buckets
from spark_impl.common import (
    OperatorStreams,
    OutputRows,
    StatefulProcessorHandle,
    batch_marker,
    batches_in,
    check_columns,
    event_time_millis,
    long_or_zero,
    millis_column,
    place_flags,
    require_int,
    sat_sub,
    split_unplaced,
    stream_id_column,
    stream_settings,
    table_projections,
    with_unplaced_errors,
)
from spark_impl.scaleout import (
    DUPLICATE_SEQ,
    NULL_MASK,
    SUMMARY_ROUTE,
    BatchSummaryStage,
    SinkStep,
    WideStage,
    check_layout,
    default_buckets,
    flag_duplicate_seqs,
    one_stage,
    restore_nulls,
    two_stages,
)
from spark_impl.session import prepare_session

LAYOUT_VERSION = 3  # 3: state under each bucket's spread label (scaleout.spread_labels)
POLICIES = ("Drop", "Reassign", "SideOutput")
CONFIG_KEYS = ("policy", "max_lateness", "channel", "window_size", "allowed_lateness")
VERDICTS = ("on_time", "allowed_late", "reassigned", "dropped", "side_output")

STRING_COLS = ("output", "stream_id", "verdict", "channel", "reason")
OUTPUT_COLUMNS = (
    "output", "stream_id", "batch", "seq", "source", "event_time", "watermark", "verdict", "lateness",
    "assigned_time", "channel", "position", "window_start", "window_end", "count", *VERDICTS,
    "open_windows", "reason",
)  # fmt: skip
LONG_COLS = tuple(c for c in OUTPUT_COLUMNS if c not in STRING_COLS)
OUTPUT_SCHEMA = ", ".join(f"`{c}` {'string' if c in STRING_COLS else 'long'}" for c in OUTPUT_COLUMNS)

# Between the stages: long columns as values with one null mask (bit i: LONG_COLS[i] is null);
# ``kw_route`` picks the second stage's group (the bucket for table rows, -1 for what the
# narrow stage reads); ``s_*`` are a bucket's counter deltas of one batch.
SUMMARY_COLS = tuple(f"s_{v}" for v in VERDICTS) + ("s_open_windows",)
PASS_SCHEMA = ", ".join([f"`{c}` {'string' if c in STRING_COLS else 'long'}" for c in OUTPUT_COLUMNS] + [
    f"`{NULL_MASK}` long"
])  # fmt: skip
WIDE_SCHEMA = ", ".join([PASS_SCHEMA, "`kw_route` long"] + [f"`{c}` long" for c in SUMMARY_COLS])
BUCKET_SCHEMA = "layout_version int, buckets int, clock long"
SOURCE_KEY_SCHEMA = "source long, source_null boolean"
SOURCE_SCHEMA = "watermark long, has_watermark boolean, windows binary"
STREAM_SCHEMA = "layout_version int, buckets int, counts binary, open_windows long, position long"

TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "events": (
        "stream_id", "batch", "seq", "source", "event_time", "watermark", "verdict", "lateness",
        "assigned_time", "channel",
    ),
    "side_outputs": ("stream_id", "batch", "channel", "position", "seq", "source", "event_time"),
    "windows": ("stream_id", "batch", "seq", "source", "window_start", "window_end", "watermark", "count"),
    "progress": ("stream_id", "batch", *VERDICTS, "open_windows"),
    "errors": ("stream_id", "batch", "seq", "reason"),
}  # fmt: skip


# ---- configuration (OXL-R15) ------------------------------------------------


@dataclass(frozen=True)
class StreamConfig:
    policy: str = "Drop"
    max_lateness: int = 0
    channel: str | None = None
    window_size: int | None = None
    allowed_lateness: int = 0


def validate_config(config: Mapping[str, Any]) -> StreamConfig:
    """A trace-style config mapping (OXL-R15) -> StreamConfig, or InvalidConfig."""
    unknown = set(config) - set(CONFIG_KEYS)
    if unknown:
        raise InvalidConfig(f"unknown late_data settings {sorted(unknown)}")
    policy = config.get("policy", "Drop")
    if policy not in POLICIES:
        raise InvalidConfig(f"policy must be one of {list(POLICIES)}, got {policy!r}")
    for setting, owner in (("max_lateness", "Reassign"), ("channel", "SideOutput")):
        if (policy == owner) != (setting in config):
            raise InvalidConfig(f"{setting} is required by policy {owner} and refused by the others")
    channel = config.get("channel")
    if policy == "SideOutput" and (not isinstance(channel, str) or not channel):
        raise InvalidConfig(f"channel must be a non-empty string, got {channel!r}")
    size = config.get("window_size")
    if size is None and "allowed_lateness" in config:
        raise InvalidConfig("allowed_lateness needs window_size")
    return StreamConfig(
        policy=policy,
        max_lateness=require_int("max_lateness", config["max_lateness"], 0) if policy == "Reassign" else 0,
        channel=channel,
        window_size=None if size is None else require_int("window_size", size, 1),
        allowed_lateness=require_int("allowed_lateness", config.get("allowed_lateness", 0), 0),
    )


# ---- state layouts (OXL-R18) -------------------------------------------------


@dataclass
class BucketState:
    """What one (stream, bucket) keeps in its ValueState; its sources are in a MapState."""

    buckets: int
    clock: int = 0  # TR-4: bucket 0 gets the clock rows

    def to_tuple(self) -> tuple[Any, ...]:
        return (LAYOUT_VERSION, self.buckets, self.clock)

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...], buckets: int) -> BucketState:
        check_layout("late_data", value, LAYOUT_VERSION, buckets, "bucket")
        with decoding("late_data", "bucket"):
            return cls(buckets, int(value[2]))


@dataclass
class StreamState:
    """What the narrow stage keeps per stream: the counters and the channel's next position."""

    buckets: int
    counts: np.ndarray = field(default_factory=lambda: np.zeros(len(VERDICTS), np.int64))
    open_windows: int = 0
    position: int = 0

    def to_tuple(self) -> tuple[Any, ...]:
        return (
            LAYOUT_VERSION, self.buckets, np.ascontiguousarray(self.counts, np.int64).tobytes(),
            self.open_windows, self.position,
        )  # fmt: skip

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...], buckets: int) -> StreamState:
        check_layout("late_data", value, LAYOUT_VERSION, buckets, "stream")
        with decoding("late_data", "stream"):
            counts = np.frombuffer(bytes(value[2]), np.int64).copy()
            if len(counts) != len(VERDICTS):
                raise ValueError(f"{len(counts)} counters for {len(VERDICTS)} verdicts")
            return cls(buckets, counts, int(value[3]), int(value[4]))


@dataclass
class Sources:
    """The sources one call of the wide stage loaded: watermarks and open windows, as matrices."""

    clock: int = 0
    sources: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), np.int64))  # value, null, wm
    windows: np.ndarray = field(
        default_factory=lambda: np.zeros((0, 5), np.int64)
    )  # value, null, start, end, count


def pack_source(watermark: int | None, windows: np.ndarray) -> tuple[Any, ...]:
    """One source's MapState value: its watermark and its open windows (start, end, count)."""
    blob = np.ascontiguousarray(windows, np.int64).tobytes()
    return (0 if watermark is None else int(watermark), watermark is not None, blob)


def unpack_sources(keys: list[tuple[int, bool]], values: list[tuple[Any, ...] | None], clock: int) -> Sources:
    """The matrices of ``Sources`` from the MapState values of ``keys`` (None: a new source)."""
    marks, windows = [], []
    for (value, null), stored in zip(keys, values, strict=True):
        if stored is None:
            continue
        with decoding("late_data", "sources"):
            if stored[1]:
                marks.append((value, int(null), int(stored[0])))
            w = np.frombuffer(bytes(stored[2]), np.int64).reshape(-1, 3)
        if len(w):
            windows.append(np.column_stack([np.full((len(w), 2), (value, int(null)), np.int64), w]))
    return Sources(
        clock, np.array(marks, np.int64).reshape(-1, 3),
        np.concatenate(windows) if windows else np.zeros((0, 5), np.int64),
    )  # fmt: skip


# ---- vectorised pieces (pure numpy/pandas; run in the worker) -----------------


def _sat_add(a: np.ndarray, s: int) -> np.ndarray:
    """min(i64 max, a + s) for s >= 0, without wrapping."""
    with np.errstate(over="ignore"):
        return np.where(a > I64_MAX - s, np.int64(I64_MAX), a + np.int64(s))


def window_bounds(t: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """OXL-R12: [start, end) of each time's tumbling window, clamped to the i64 range."""
    rest = np.mod(t, size)
    to_end = np.int64(size) - rest
    with np.errstate(over="ignore"):
        start = np.where(t < I64_MIN + rest, np.int64(I64_MIN), t - rest)
        end = np.where(t > I64_MAX - to_end, np.int64(I64_MAX), t + to_end)
    return start, end


def holds_the_top(start: np.ndarray, size: int) -> np.ndarray:
    """OXL-R12: the window holding I64_MAX (its end clamped), which no watermark closes."""
    return start > I64_MAX - size


def _lateness(t: np.ndarray, wm: np.ndarray) -> np.ndarray:
    """OXL-R5: wm - t for t < wm, saturated at i64 max (only a watermark >= 0 can overflow)."""
    with np.errstate(over="ignore"):
        over = (wm >= 0) & (t < wm - np.int64(I64_MAX))
        return np.where(over, np.int64(I64_MAX), wm - t)


def _watermarks_before(
    code: np.ndarray, is_wm: np.ndarray, tm: np.ndarray, base_wm: np.ndarray, base_has: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """OXL-R3: per row, its source's watermark just before it (the stored one, raised by the
    earlier watermark rows of the batch in seq order), and whether there is one."""
    n = len(code)
    order = np.argsort(code, kind="stable")  # rows are in seq order: stable keeps it per source
    c = code[order]
    v = np.where(is_wm[order], tm[order], np.int64(I64_MIN))
    groups = pd.Series(v).groupby(c, sort=False)
    running = groups.cummax().to_numpy(np.int64)
    seen = pd.Series(is_wm[order].astype(np.int64)).groupby(c, sort=False).cumsum().to_numpy(np.int64)
    first = np.ones(n, bool)
    first[1:] = c[1:] != c[:-1]
    prev = np.empty(n, np.int64)
    prev_seen = np.zeros(n, np.int64)
    if n:
        prev[0] = I64_MIN
        prev[1:] = running[:-1]
        prev_seen[1:] = seen[:-1]
    prev[first] = I64_MIN
    prev_seen[first] = 0
    has = base_has[c] | (prev_seen > 0)
    wm = np.where(
        base_has[c] & (prev_seen > 0), np.maximum(base_wm[c], prev), np.where(base_has[c], base_wm[c], prev)
    )
    inv = np.empty(n, np.int64)
    inv[order] = np.arange(n)
    return wm[inv], has[inv]


def _closing_items(
    win_code: np.ndarray, threshold: np.ndarray, item_code: np.ndarray, item_time: np.ndarray
) -> np.ndarray:
    """OXL-R12: per window, the index of the first accepted watermark row of its source whose time
    reaches the threshold (-1 when none). Times of accepted rows rise with seq within a source."""
    nw, ni = len(win_code), len(item_code)
    codes = np.concatenate([win_code, item_code])
    values = np.concatenate([threshold, item_time])
    is_item = np.concatenate([np.zeros(nw, bool), np.ones(ni, bool)])
    rank = np.concatenate([np.zeros(nw, np.int64), np.arange(ni, dtype=np.int64)])
    order = np.lexsort((rank, is_item, values, codes))  # by source, value; a window before an equal item
    big = np.int64(nw + ni)
    pos = np.where(is_item[order], np.arange(nw + ni), big)
    next_item = np.minimum.accumulate(pos[::-1])[::-1]
    found = np.full(nw, -1, np.int64)
    at = np.empty(nw + ni, np.int64)
    at[order] = np.arange(nw + ni)
    j = next_item[at[:nw]]
    ok = j < big
    ok[ok] = codes[order][j[ok]] == win_code[ok]
    found[ok] = order[j[ok]] - nw
    return found


# ---- one batch of one bucket (the wide stage; pure numpy/pandas) ---------------


class _Out(OutputRows):
    """The wide stage's rows of one call: table rows, side-output rows and summaries (WIDE_SCHEMA)."""

    def __init__(self, stream_id: str | None) -> None:
        super().__init__(stream_id, (*OUTPUT_COLUMNS, "kw_route", *SUMMARY_COLS), STRING_COLS)


def process_batch(
    st: Sources, rows: pd.DataFrame, cfg: StreamConfig, b: int, out: _Out, bucket: int, ordered: bool
) -> None:
    """One batch of one bucket's rows, in seq order: errors, verdicts, side-output rows, windows,
    and the bucket's summary (verdict counts and the change of its open windows)."""
    rows = rows.sort_values("ld_seq", kind="stable")
    n = len(rows)
    kind = rows["ld_kind"].to_numpy(object)
    seq = rows["ld_seq"].to_numpy(np.int64)
    seq_null = np.full(n, not ordered)
    src = rows["ld_source"].to_numpy(np.int64)
    src_null = rows["ld_source_null"].to_numpy(bool)
    et = rows["ld_et"].to_numpy(np.int64)
    et_null = rows["ld_et_null"].to_numpy(bool)
    tm = rows["ld_time"].to_numpy(np.int64)
    tm_null = rows["ld_time_null"].to_numpy(bool)
    open_before = len(st.windows)

    # OXL-R2: one code per source (value, null flag) over the loaded sources, windows and the batch.
    src_key = np.where(src_null, 0, src)
    all_val = np.concatenate([st.sources[:, 0], st.windows[:, 0], src_key])
    all_null = np.concatenate([st.sources[:, 1], st.windows[:, 1], src_null.astype(np.int64)])
    factor, _ = pd.factorize(all_val)
    all_code = factor.astype(np.int64) * 2 + all_null
    codes, dense = np.unique(all_code, return_inverse=True)
    ns, nwin = len(st.sources), len(st.windows)
    stored_code, win_code, code = dense[:ns], dense[ns : ns + nwin], dense[ns + nwin :]
    code_val = np.zeros(len(codes), np.int64)
    code_null = np.zeros(len(codes), bool)
    code_val[dense] = all_val
    code_null[dense] = all_null.astype(bool)
    base_wm = np.zeros(len(codes), np.int64)
    base_has = np.zeros(len(codes), bool)
    base_wm[stored_code] = st.sources[:, 2]
    base_has[stored_code] = True

    # OXL-R16: error reasons, in the clause's order.
    is_event, is_wm, is_clock = kind == "event", kind == "watermark", kind == "clock"
    err = np.full(n, None, dtype=object)
    err[~(is_event | is_wm | is_clock | (kind == "batch_end"))] = "unsupported_item"
    err[kind == DUPLICATE_SEQ] = DUPLICATE_SEQ  # TR-15
    err[is_event & et_null] = "missing_event_time"
    err[(is_wm | is_clock) & tm_null] = "missing_time"
    clocks = is_clock & ~tm_null
    if clocks.any():  # only bucket 0 gets clock rows
        running = np.maximum.accumulate(np.where(clocks, tm, np.int64(I64_MIN)))
        before = np.maximum(np.concatenate([[I64_MIN], running[:-1]]), np.int64(st.clock))
        err[clocks & (tm < before)] = "clock_went_backwards"  # TR-4
        st.clock = int(max(st.clock, running[-1]))
    wm_rows = is_wm & ~tm_null
    wm, has = _watermarks_before(code, wm_rows, tm, base_wm, base_has)
    err[wm_rows & has & (tm < wm)] = "watermark_regressed"  # OXL-R3
    has_err = err != None  # noqa: E711 - elementwise
    if has_err.any():
        e = has_err
        out.add("errors", int(e.sum()), batch=b, seq=(seq[e], seq_null[e]), reason=err[e], kw_route=bucket)

    accepted = wm_rows & ~has_err
    ev = is_event & ~has_err
    counts = _events(
        st, cfg, b, out, bucket, (seq[ev], seq_null[ev]), code[ev], src[ev], src_null[ev], et[ev], wm[ev],
        has[ev], win_code, accepted, code, seq, tm, code_val, code_null,
    )  # fmt: skip

    # OXL-R3: the stored watermark of a source is its last accepted watermark row's time.
    if accepted.any():
        last = pd.Series(tm[accepted]).groupby(code[accepted]).max()
        base_wm[last.index.to_numpy(np.int64)] = last.to_numpy(np.int64)
        base_has[last.index.to_numpy(np.int64)] = True
    keep = np.flatnonzero(base_has)
    st.sources = np.column_stack([code_val[keep], code_null[keep].astype(np.int64), base_wm[keep]])
    out.add(
        "summary", 1, batch=b, kw_route=SUMMARY_ROUTE, s_open_windows=len(st.windows) - open_before,
        **{f"s_{v}": int(c) for v, c in zip(VERDICTS, counts.tolist(), strict=True)},
    )  # fmt: skip


def _events(
    st: Sources, cfg: StreamConfig, b: int, out: _Out, bucket: int, seq: tuple[np.ndarray, np.ndarray],
    code: np.ndarray, src: np.ndarray, src_null: np.ndarray, et: np.ndarray, wm: np.ndarray,
    has: np.ndarray, win_code: np.ndarray, accepted: np.ndarray, row_code: np.ndarray,
    row_seq: np.ndarray, row_time: np.ndarray, code_val: np.ndarray, code_null: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """Verdicts, side-output rows and windows of one batch's well-formed events; the verdict counts."""
    m = len(et)
    late = has & (et < wm)  # OXL-R4: strict
    size = cfg.window_size
    allowed = np.zeros(m, bool)
    if size is not None:
        start, end = window_bounds(et, size)
        open_window = (wm < _sat_add(end, cfg.allowed_lateness)) | holds_the_top(start, size)  # OXL-R10, R12
        allowed = late & open_window  # OXL-R11
    to_policy = late & ~allowed
    if cfg.policy == "Reassign":  # OXL-R7: event_time >= watermark - budget is lateness <= budget
        reassigned = to_policy & (et >= sat_sub(wm, cfg.max_lateness))
        dropped = to_policy & ~reassigned
        side = np.zeros(m, bool)
    elif cfg.policy == "SideOutput":  # OXL-R8
        reassigned, dropped, side = np.zeros(m, bool), np.zeros(m, bool), to_policy
    else:  # OXL-R6
        reassigned, dropped, side = np.zeros(m, bool), to_policy, np.zeros(m, bool)
    verdict = np.full(m, "on_time", dtype=object)
    for name, mask in (("allowed_late", allowed), ("reassigned", reassigned), ("dropped", dropped),
                       ("side_output", side)):  # fmt: skip
        verdict[mask] = name
    kept = ~(dropped | side)
    assigned = np.where(reassigned, wm, et)  # OXL-R9
    if m:
        out.add(
            "events", m, batch=b, seq=seq, source=(src, src_null), event_time=et, watermark=(wm, ~has),
            verdict=verdict, lateness=(_lateness(et, wm), ~late), assigned_time=(assigned, ~kept),
            channel=_channel_column(side, cfg.channel), kw_route=bucket,
        )  # fmt: skip
    n_side = int(side.sum())
    if n_side:  # OXL-R14: numbered by the narrow stage, which sees the whole stream's side outputs
        out.add(
            "side_outputs", n_side, batch=b, channel=cfg.channel, seq=(seq[0][side], seq[1][side]),
            source=(src[side], src_null[side]), event_time=et[side], kw_route=SUMMARY_ROUTE,
        )  # fmt: skip
    if size is not None:
        _windows(st, cfg, b, out, bucket, code[kept], assigned[kept], win_code, accepted, row_code, row_seq,
                 row_time, code_val, code_null)  # fmt: skip
    return np.array([int((~late).sum()), int(allowed.sum()), int(reassigned.sum()), int(dropped.sum()),
                     n_side], np.int64)  # fmt: skip


def _channel_column(side: np.ndarray, channel: str | None) -> np.ndarray:
    column = np.full(len(side), None, dtype=object)
    column[side] = channel
    return column


def _windows(
    st: Sources, cfg: StreamConfig, b: int, out: _Out, bucket: int, code: np.ndarray, t: np.ndarray,
    win_code: np.ndarray, accepted: np.ndarray, row_code: np.ndarray, row_seq: np.ndarray,
    row_time: np.ndarray, code_val: np.ndarray, code_null: np.ndarray,
) -> None:  # fmt: skip
    """OXL-R12: count kept events per (source, window), then close windows at watermark rows."""
    assert cfg.window_size is not None
    start, end = window_bounds(t, cfg.window_size)
    stored = pd.DataFrame({"code": win_code, "start": st.windows[:, 2], "end": st.windows[:, 3],
                           "count": st.windows[:, 4]})  # fmt: skip
    added = pd.DataFrame({"code": code, "start": start, "end": end, "count": np.ones(len(t), np.int64)})
    grouped = pd.concat([stored, added], ignore_index=True).groupby(
        ["code", "start"], as_index=False, sort=False
    )
    w = grouped.agg(end=("end", "first"), count=("count", "sum"))
    wc = w["code"].to_numpy(np.int64)
    threshold = _sat_add(w["end"].to_numpy(np.int64), cfg.allowed_lateness)  # OXL-R10
    closing = _closing_items(wc, threshold, row_code[accepted], row_time[accepted])
    closed = (closing >= 0) & ~holds_the_top(w["start"].to_numpy(np.int64), cfg.window_size)
    if closed.any():
        j = closing[closed]
        cc = wc[closed]
        out.add(
            "windows", int(closed.sum()), batch=b, seq=row_seq[accepted][j],
            source=(code_val[cc], code_null[cc]), window_start=w["start"].to_numpy(np.int64)[closed],
            window_end=w["end"].to_numpy(np.int64)[closed], watermark=row_time[accepted][j],
            count=w["count"].to_numpy(np.int64)[closed], kw_route=bucket,
        )  # fmt: skip
    rest = w[~closed]
    rc = rest["code"].to_numpy(np.int64)
    st.windows = np.column_stack([
        code_val[rc], code_null[rc].astype(np.int64), rest["start"].to_numpy(np.int64),
        rest["end"].to_numpy(np.int64), rest["count"].to_numpy(np.int64),
    ]).reshape(-1, 5)  # fmt: skip


# ---- the two stages -----------------------------------------------------------


_DEFAULTS: dict[str, Any] = {
    "ld_kind": "event", "ld_source": np.int64(0), "ld_source_null": True, "ld_time": np.int64(0),
    "ld_time_null": True,
}  # fmt: skip


class SourceBucketProcessor(WideStage):
    """The wide stage: one call per (stream, source bucket) and micro-batch."""

    defaults = _DEFAULTS

    def open_state(self, handle: StatefulProcessorHandle) -> None:
        self.bucket_state = handle.getValueState("bucket", BUCKET_SCHEMA)
        self.sources = handle.getMapState("sources", SOURCE_KEY_SCHEMA, SOURCE_SCHEMA)

    def process(
        self, stream_id: str | None, bucket: int, cfg: StreamConfig, pdf: pd.DataFrame
    ) -> Iterator[pd.DataFrame]:
        if not self.ordered:  # no arrival order given, and none needed: no watermark rows without kinds
            pdf = pdf.assign(ld_seq=np.arange(len(pdf), dtype=np.int64))
        stored = self.bucket_state.get()
        bucket_st = (
            BucketState.from_tuple(stored, self.buckets) if stored is not None else BucketState(self.buckets)
        )
        # The sources this call names (event and watermark rows): the only ones it reads.
        kind = pdf["ld_kind"].to_numpy(object)
        named = (kind == "event") | (kind == "watermark")
        null = pdf["ld_source_null"].to_numpy(bool)[named]
        value = np.where(null, 0, pdf["ld_source"].to_numpy(np.int64)[named])
        pairs = np.unique(np.column_stack([value, null.astype(np.int64)]), axis=0)
        keys = [(int(v), bool(s)) for v, s in pairs.tolist()]
        values = [self.sources.getValue(k) for k in keys]
        st = unpack_sources(keys, values, bucket_st.clock)
        out = _Out(stream_id)
        for b, part in batches_in(pdf, "ld_batch", True, 0):
            process_batch(st, part, cfg, b, out, bucket, self.ordered)
        self._write(keys, [v is not None for v in values], st)
        bucket_st.clock = st.clock
        self.bucket_state.update(bucket_st.to_tuple())
        yield out.masked_frame(NULL_MASK)

    def _write(self, keys: list[tuple[int, bool]], stored: list[bool], st: Sources) -> None:
        """Each named source's watermark and open windows back to its entry; an empty one goes."""
        marks = {(int(v), bool(s)): int(w) for v, s, w in st.sources.tolist()}
        by_source: dict[tuple[int, bool], list[int]] = {}
        for i, (v, s) in enumerate(st.windows[:, :2].tolist()):
            by_source.setdefault((int(v), bool(s)), []).append(i)
        for k, existed in zip(keys, stored, strict=True):
            rows = by_source.get(k, [])
            if k not in marks and not rows:
                if existed:
                    self.sources.removeKey(k)
                continue
            self.sources.updateValue(k, pack_source(marks.get(k), st.windows[rows, 2:]))

    def close(self) -> None:
        pass


_SOURCE_NULL_BIT = np.int64(1 << LONG_COLS.index("source"))


def summarise_batch(st: StreamState, rows: pd.DataFrame, b: int, out: OutputRows) -> None:
    """OXL-R14, R17: the batch's side outputs numbered in arrival order, then its progress row."""
    output = rows["output"].to_numpy(object)
    summaries = rows[output == "summary"]
    st.counts += summaries[[f"s_{v}" for v in VERDICTS]].to_numpy(np.int64).sum(axis=0)
    st.open_windows += int(summaries["s_open_windows"].sum())
    side = rows[output == "side_outputs"].sort_values("seq", kind="stable")
    n_side = len(side)
    if n_side:
        nulls = side[NULL_MASK].to_numpy(np.int64)
        out.add(
            "side_outputs", n_side, batch=b, channel=side["channel"].to_numpy(object),
            position=st.position + np.arange(n_side, dtype=np.int64), seq=side["seq"].to_numpy(np.int64),
            source=(side["source"].to_numpy(np.int64), (nulls & _SOURCE_NULL_BIT) != 0),
            event_time=side["event_time"].to_numpy(np.int64),
        )  # fmt: skip
        st.position += n_side
    out.add("progress", 1, batch=b, open_windows=st.open_windows, **dict(zip(VERDICTS, st.counts.tolist())))


class StreamSummaryProcessor(BatchSummaryStage):
    """The narrow stage (route -1): the counters, the open windows and the side-output positions."""

    columns = (*OUTPUT_COLUMNS, NULL_MASK)
    state_schema = STREAM_SCHEMA
    state_class = StreamState
    string_cols = STRING_COLS
    summarise_batch = staticmethod(summarise_batch)


@dataclass
class LateDataStreams(OperatorStreams):
    """The operator's output: ``output`` (combined) and its projections; ``write_tables``
    writes every table from one query."""

    table_columns = TABLE_COLUMNS

    output: Any
    events: Any
    main: Any
    side_outputs: Any
    windows: Any
    progress: Any
    errors: Any
    sink_rows: Any = None
    sink_step: Any = None


def late_data(
    df: Any,
    event_time_col: str,
    source_col: str | None = None,
    kind_col: str | None = None,
    seq_col: str | None = None,
    time_col: str | None = None,
    policy: str = "Drop",
    max_lateness_ms: int | None = None,
    channel: str | None = None,
    window_size_ms: int | None = None,
    allowed_lateness_ms: int | None = None,
    stream_id_col: str | None = None,
    batch_col: str | None = None,
    stream_configs: Mapping[str, Mapping[str, Any]] | None = None,
    buckets: int | None = None,
    seq_unique: bool = False,
) -> LateDataStreams:
    """Routes late events of a streaming DataFrame by policy (see the module docstring).

    ``buckets``: groups per stream in the wide stage, each holding the sources that hash to it
    (default: 4 per shuffle partition of the session), fixed in the checkpoint.
    ``seq_unique``: the producer guarantees that ``seq_col`` is unique per stream and batch,
    which skips the duplicate check (TR-15: every row of a repeated seq is a ``duplicate_seq``
    error row), one shuffle less.
    Raises ``harness.traces.InvalidConfig`` for a bad setting or column.
    """
    from pyspark.sql import functions as F

    settings = {"policy": policy, "max_lateness": max_lateness_ms, "channel": channel,
                "window_size": window_size_ms, "allowed_lateness": allowed_lateness_ms}  # fmt: skip
    default, per_stream = stream_settings(
        validate_config, {k: v for k, v in settings.items() if v is not None}, stream_configs
    )
    buckets = default_buckets(df.sparkSession) if buckets is None else require_int("buckets", buckets, 1)
    fields = {f.name: f.dataType for f in df.schema.fields}
    prepare_session(df.sparkSession, "late_data")
    check_columns(
        fields,
        {"event_time_col": event_time_col, "source_col": source_col, "kind_col": kind_col,
         "seq_col": seq_col, "time_col": time_col, "stream_id_col": stream_id_col, "batch_col": batch_col},
        ("source_col", "seq_col", "batch_col"),
        kind_col, seq_col,
    )  # fmt: skip
    et = event_time_millis(fields, event_time_col)
    # Only the columns the input has cross into the Python worker; the processor fills the rest.
    cols = [
        stream_id_column(stream_id_col, "ld_sid"),
        long_or_zero(et).alias("ld_et"),
        et.isNull().alias("ld_et_null"),
        batch_marker(batch_col).alias("ld_batch"),
        *place_flags(seq_col, batch_col, "ld_"),
    ]
    if seq_col:
        cols.append(long_or_zero(seq_col).alias("ld_seq"))
    if kind_col:
        cols.append(F.col(kind_col).cast("string").alias("ld_kind"))
    source = F.col(source_col) if source_col else None
    time = millis_column(fields, "time_col", time_col) if time_col else None
    for expr, alias in ((source, "ld_source"), (time, "ld_time")):
        if expr is not None:
            cols.append(long_or_zero(expr).alias(alias))
            cols.append(expr.isNull().alias(f"{alias}_null"))
    rows, unplaced = split_unplaced(df.select(*cols), "ld_")  # TR-16: no seq or batch, no place
    if seq_col and not seq_unique:
        rows = flag_duplicate_seqs(rows, "ld_")  # TR-15, before any row is routed
    # An event or watermark row goes to its source's bucket; any other row (clock, malformed,
    # the batch_end marker) to bucket 0, which keeps the clock.
    kind = F.col("ld_kind") if "ld_kind" in rows.columns else F.lit("event")
    sourced = kind.isin("event", "watermark")
    source_hash = F.xxhash64(F.col("ld_source"), F.col("ld_source_null")) if source_col else F.lit(0)
    bucket = F.when(sourced, F.pmod(source_hash, F.lit(buckets))).otherwise(F.lit(0)).cast("int")
    rows = rows.withColumn("ld_bucket", bucket)
    first = SourceBucketProcessor(default, per_stream, seq_col is not None, buckets)
    narrow = StreamSummaryProcessor(buckets)
    both = two_stages(rows, "ld_sid", "ld_bucket", first, WIDE_SCHEMA, narrow, PASS_SCHEMA)
    output = with_unplaced_errors(restore_nulls(both, OUTPUT_COLUMNS, LONG_COLS), unplaced, "ld_")
    # write_tables and foreach_batch: the wide stage alone, the narrow step in the sink
    step = SinkStep("late_data", narrow, "stream", STREAM_SCHEMA, OUTPUT_COLUMNS, LONG_COLS)
    wide = one_stage(rows, "ld_sid", "ld_bucket", first, WIDE_SCHEMA)
    sink_rows = with_unplaced_errors(wide, unplaced, "ld_")
    tables = table_projections(output, TABLE_COLUMNS)
    main = tables["events"].filter(F.col("assigned_time").isNotNull())
    return LateDataStreams(output=output, main=main, **tables, sink_rows=sink_rows, sink_step=step)


ENGINE_BUCKETS = 3


def engine_streams(
    df: Any, stream_configs: Mapping[str, Mapping[str, Any]], seq_unique: bool = True,
    buckets: int = ENGINE_BUCKETS,
) -> LateDataStreams:
    """The harness engine's call (spark_impl.engine.area_module): one stream per trace; the
    engine writes a query of this area alone through ``foreach_batch`` (one stateful stage, the
    narrow step in the sink) and a query mixing areas through ``output``.

    Few buckets: every group costs a Python call per micro-batch, and a trace's handful of
    sources (the unnamed one and 0..2) still spreads over three. ``seq_unique``: the engine's
    seqs are trace positions, unique by construction; False checks them (TR-15)."""
    return late_data(
        df, event_time_col="event_time", source_col="source", kind_col="kind", seq_col="seq",
        time_col="time", stream_id_col="trace_id", batch_col="batch", stream_configs=stream_configs,
        buckets=buckets, seq_unique=seq_unique,
    )  # fmt: skip


def engine_output(
    df: Any, stream_configs: Mapping[str, Mapping[str, Any]], seq_unique: bool = True,
    buckets: int = ENGINE_BUCKETS,
) -> Any:
    """``engine_streams``'s combined stream with both stages (``output``)."""
    return engine_streams(df, stream_configs, seq_unique, buckets).output


# ---- the state layout as a checkpoint holds it (read by spark_impl/checkpoints.py) ----------

LAYOUT = register(
    Operator(
        "late_data", LAYOUT_VERSION,
        Stage({
            "bucket": lambda v, k: BucketState.from_tuple(v, value_buckets(v)),
            "sources": lambda v, k: unpack_sources([(k[0], k[1])], [v], 0),
        }, ("bucket",)),
        Stage({"stream": lambda v, k: StreamState.from_tuple(v, value_buckets(v))}, ("stream",)),
        schema_fields(STREAM_SCHEMA),
    )
)  # fmt: skip


__all__ = [
    "ENGINE_BUCKETS",
    "LAYOUT_VERSION",
    "BucketState",
    "LateDataStreams",
    "OUTPUT_SCHEMA",
    "SourceBucketProcessor",
    "StreamConfig",
    "StreamState",
    "StreamSummaryProcessor",
    "late_data",
    "pack_source",
    "process_batch",
    "unpack_sources",
    "validate_config",
    "window_bounds",
]
