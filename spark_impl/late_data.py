"""Late data (oxirs, spec/late_data.md) on Spark Structured Streaming.

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
``allowed_lateness``), ``batch_col`` is the batch number reported (without
it the operator counts each stream's micro-batches).

Design (how Spark realises the clauses)
---------------------------------------
- ONE GROUP PER STREAM: ``groupBy(stream id).transformWithStateInPandas(...,
  timeMode="None")``. Spark's own watermark is one value per query, lags a
  micro-batch and drops ``<=``; this area judges each event by its own
  source's watermark as it stands at the event's place in arrival order, with
  ``<`` (OXL-R2..R4), so the per-source watermarks live in the state.
- STATE: one ValueState per stream (RocksDB provider), read once and written
  once per micro-batch: a layout version, the processing clock, the batch
  counter, the next side-output position, the five verdict counters, and two
  int64 matrices as bytes: sources (value, null flag, watermark) and open
  windows (source value, null flag, start, end, count). Another layout
  version is refused with a clear error.
- VECTORISED per micro-batch, in seq order: sources are factorised to codes;
  the watermark before every row is a grouped running maximum of the
  watermark rows' times, started from the stored watermark; regressions,
  verdicts, lateness (overflow-guarded), Reassign budgets, window bounds and
  allowed-lateness checks are numpy column operations. The closing watermark
  row of each window is found with one lexsort of window thresholds against
  the accepted watermark rows of its source.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from harness.traces import I64_MAX, I64_MIN, InvalidConfig
from spark_impl.common import (
    OutputRows,
    StreamGroupProcessor,
    batches_in,
    check_columns,
    event_time_millis,
    long_or_zero,
    one_group_per_stream,
    require_int,
    sat_sub,
    stream_id_column,
    stream_settings,
    table_projections,
    with_defaults,
)

LAYOUT_VERSION = 1
POLICIES = ("Drop", "Reassign", "SideOutput")
CONFIG_KEYS = ("policy", "max_lateness", "channel", "window_size", "allowed_lateness")
VERDICTS = ("on_time", "allowed_late", "reassigned", "dropped", "side_output")

STRING_COLS = ("output", "stream_id", "verdict", "channel", "reason")
OUTPUT_COLUMNS = (
    "output", "stream_id", "batch", "seq", "source", "event_time", "watermark", "verdict", "lateness",
    "assigned_time", "channel", "position", "window_start", "window_end", "count", *VERDICTS,
    "open_windows", "reason",
)  # fmt: skip
OUTPUT_SCHEMA = ", ".join(f"`{c}` {'string' if c in STRING_COLS else 'long'}" for c in OUTPUT_COLUMNS)
STATE_SCHEMA = (
    "layout_version int, clock long, batches long, position long, counts binary, sources binary, "
    "windows binary"
)

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


# ---- the stream state (OXL-R18) ----------------------------------------------


def _matrix(blob: bytes, width: int) -> np.ndarray:
    return np.frombuffer(bytes(blob), dtype=np.int64).reshape(-1, width).copy()


@dataclass
class StreamState:
    """Everything one stream keeps across micro-batches (one ValueState)."""

    clock: int = 0
    batches: int = 0
    position: int = 0
    counts: np.ndarray = field(default_factory=lambda: np.zeros(len(VERDICTS), np.int64))
    sources: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), np.int64))  # value, null, wm
    windows: np.ndarray = field(
        default_factory=lambda: np.zeros((0, 5), np.int64)
    )  # value, null, start, end, n

    def to_tuple(self) -> tuple[Any, ...]:
        return (
            LAYOUT_VERSION, self.clock, self.batches, self.position, self.counts.astype(np.int64).tobytes(),
            np.ascontiguousarray(self.sources, np.int64).tobytes(),
            np.ascontiguousarray(self.windows, np.int64).tobytes(),
        )  # fmt: skip

    @classmethod
    def from_tuple(cls, value: tuple[Any, ...]) -> StreamState:
        if value[0] != LAYOUT_VERSION:
            raise RuntimeError(
                f"late_data: the checkpoint holds state layout version {value[0]}; this release reads "
                f"version {LAYOUT_VERSION} only. Start from a new checkpoint."
            )
        return cls(
            clock=int(value[1]), batches=int(value[2]), position=int(value[3]),
            counts=np.frombuffer(bytes(value[4]), dtype=np.int64).copy(),
            sources=_matrix(value[5], 3), windows=_matrix(value[6], 5),
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


# ---- processing one stream's rows --------------------------------------------


class _Out(OutputRows):
    def __init__(self, stream_id: str) -> None:
        super().__init__(stream_id, OUTPUT_COLUMNS, STRING_COLS)


def process_rows(
    state: StreamState, rows: pd.DataFrame, cfg: StreamConfig, stream_id: str, has_batch: bool
) -> pd.DataFrame:
    """Applies one call's rows of one stream to its state; returns the output rows.

    ``rows`` has the normalised columns built by ``late_data``: ld_batch, ld_seq, ld_kind,
    ld_source, ld_source_null, ld_et, ld_et_null, ld_time, ld_time_null.
    """
    out = _Out(stream_id)
    for b, part in batches_in(rows, "ld_batch", has_batch, state.batches):
        _process_batch(state, part, cfg, b, out)
        state.batches += 1
    return out.frame()


def _process_batch(st: StreamState, rows: pd.DataFrame, cfg: StreamConfig, b: int, out: _Out) -> None:
    rows = rows.sort_values("ld_seq", kind="stable")
    n = len(rows)
    kind = rows["ld_kind"].to_numpy(object)
    seq = rows["ld_seq"].to_numpy(np.int64)
    src = rows["ld_source"].to_numpy(np.int64)
    src_null = rows["ld_source_null"].to_numpy(bool)
    et = rows["ld_et"].to_numpy(np.int64)
    et_null = rows["ld_et_null"].to_numpy(bool)
    tm = rows["ld_time"].to_numpy(np.int64)
    tm_null = rows["ld_time_null"].to_numpy(bool)

    # OXL-R2: one code per source (value, null flag) over the stored sources, windows and the batch.
    src_key = np.where(src_null, 0, src)
    all_val = np.concatenate([st.sources[:, 0], st.windows[:, 0], src_key])
    all_null = np.concatenate([st.sources[:, 1], st.windows[:, 1], src_null.astype(np.int64)])
    factor, _ = pd.factorize(all_val)
    all_code = factor.astype(np.int64) * 2 + all_null
    codes, dense = np.unique(all_code, return_inverse=True)
    ns, nwin = len(st.sources), len(st.windows)
    stored_code, win_code, code = dense[:ns], dense[ns : ns + nwin], dense[ns + nwin :]
    src_val = np.concatenate([st.sources[:, 0], st.windows[:, 0], src_key])
    src_isnull = all_null.astype(bool)
    code_val = np.zeros(len(codes), np.int64)
    code_null = np.zeros(len(codes), bool)
    code_val[dense] = src_val
    code_null[dense] = src_isnull
    base_wm = np.zeros(len(codes), np.int64)
    base_has = np.zeros(len(codes), bool)
    base_wm[stored_code] = st.sources[:, 2]
    base_has[stored_code] = True

    # OXL-R16: error reasons, in the clause's order.
    is_event, is_wm, is_clock = kind == "event", kind == "watermark", kind == "clock"
    err = np.full(n, None, dtype=object)
    err[~(is_event | is_wm | is_clock | (kind == "batch_end"))] = "unsupported_item"
    err[is_event & et_null] = "missing_event_time"
    err[(is_wm | is_clock) & tm_null] = "missing_time"
    clocks = is_clock & ~tm_null
    if clocks.any():
        running = np.maximum.accumulate(np.where(clocks, tm, np.int64(I64_MIN)))
        before = np.maximum(np.concatenate([[I64_MIN], running[:-1]]), np.int64(st.clock))
        err[clocks & (tm < before)] = "clock_went_backwards"  # TR-4
        st.clock = int(max(st.clock, running[-1]))
    wm_rows = is_wm & ~tm_null
    wm, has = _watermarks_before(code, wm_rows, tm, base_wm, base_has)
    err[wm_rows & has & (tm < wm)] = "watermark_regressed"  # OXL-R3
    has_err = err != None  # noqa: E711 - elementwise
    if has_err.any():
        out.add("errors", int(has_err.sum()), batch=b, seq=seq[has_err], reason=err[has_err])

    accepted = wm_rows & ~has_err
    ev = is_event & ~has_err
    _events(st, cfg, b, out, seq[ev], code[ev], src[ev], src_null[ev], et[ev], wm[ev], has[ev],
            win_code, accepted, code, seq, tm, code_val, code_null)  # fmt: skip

    # OXL-R3: the stored watermark of a source is its last accepted watermark row's time.
    if accepted.any():
        last = pd.Series(tm[accepted]).groupby(code[accepted]).max()
        base_wm[last.index.to_numpy(np.int64)] = last.to_numpy(np.int64)
        base_has[last.index.to_numpy(np.int64)] = True
    keep = np.flatnonzero(base_has)
    st.sources = np.column_stack([code_val[keep], code_null[keep].astype(np.int64), base_wm[keep]])
    out.add("progress", 1, batch=b, open_windows=len(st.windows), **dict(zip(VERDICTS, st.counts.tolist())))


def _events(
    st: StreamState, cfg: StreamConfig, b: int, out: _Out, seq: np.ndarray, code: np.ndarray,
    src: np.ndarray, src_null: np.ndarray, et: np.ndarray, wm: np.ndarray, has: np.ndarray,
    win_code: np.ndarray, accepted: np.ndarray, row_code: np.ndarray, row_seq: np.ndarray,
    row_time: np.ndarray, code_val: np.ndarray, code_null: np.ndarray,
) -> None:  # fmt: skip
    """Verdicts, side outputs and windows of one batch's well-formed events."""
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
    st.counts += np.array([int((~late).sum()), int(allowed.sum()), int(reassigned.sum()),
                           int(dropped.sum()), int(side.sum())], np.int64)  # fmt: skip
    if m:
        out.add(
            "events", m, batch=b, seq=seq, source=(src, src_null), event_time=et, watermark=(wm, ~has),
            verdict=verdict, lateness=(_lateness(et, wm), ~late), assigned_time=(assigned, ~kept),
            channel=_channel_column(side, cfg.channel),
        )  # fmt: skip
    n_side = int(side.sum())
    if n_side:  # OXL-R14: drained at the end of the batch, positions running over the stream
        out.add(
            "side_outputs", n_side, batch=b, channel=cfg.channel, seq=seq[side],
            position=st.position + np.arange(n_side, dtype=np.int64), source=(src[side], src_null[side]),
            event_time=et[side],
        )  # fmt: skip
        st.position += n_side
    if size is not None:
        _windows(st, cfg, b, out, code[kept], assigned[kept], win_code, accepted, row_code, row_seq,
                 row_time, code_val, code_null)  # fmt: skip


def _channel_column(side: np.ndarray, channel: str | None) -> np.ndarray:
    column = np.full(len(side), None, dtype=object)
    column[side] = channel
    return column


def _windows(
    st: StreamState, cfg: StreamConfig, b: int, out: _Out, code: np.ndarray, t: np.ndarray,
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
            count=w["count"].to_numpy(np.int64)[closed],
        )  # fmt: skip
    rest = w[~closed]
    rc = rest["code"].to_numpy(np.int64)
    st.windows = np.column_stack([
        code_val[rc], code_null[rc].astype(np.int64), rest["start"].to_numpy(np.int64),
        rest["end"].to_numpy(np.int64), rest["count"].to_numpy(np.int64),
    ]).reshape(-1, 5)  # fmt: skip


# ---- the Spark operator -------------------------------------------------------


class LateDataProcessor(StreamGroupProcessor[StreamConfig]):
    """The stateful processor: one call per stream (group) and micro-batch."""

    state_name = "late_data"
    state_schema = STATE_SCHEMA
    state_class = StreamState

    def prepare(self, pdf: pd.DataFrame) -> pd.DataFrame:
        pdf = with_defaults(pdf, _DEFAULTS)
        if "ld_seq" not in pdf.columns:  # no arrival order given: event-time order (documented)
            pdf = pdf.sort_values("ld_et", kind="stable").reset_index(drop=True)
            pdf["ld_seq"] = np.arange(len(pdf), dtype=np.int64)
        return pdf

    def process(self, st: StreamState, pdf: pd.DataFrame, cfg: StreamConfig, stream_id: str) -> pd.DataFrame:
        return process_rows(st, pdf, cfg, stream_id, self.has_batch)


_DEFAULTS: dict[str, Any] = {
    "ld_batch": np.int64(0), "ld_kind": "event", "ld_source": np.int64(0), "ld_source_null": True,
    "ld_time": np.int64(0), "ld_time_null": True,
}  # fmt: skip


@dataclass
class LateDataStreams:
    """The operator's output: ``output`` (combined) and its projections."""

    output: Any
    events: Any
    main: Any
    side_outputs: Any
    windows: Any
    progress: Any
    errors: Any


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
) -> LateDataStreams:
    """Routes late events of a streaming DataFrame by policy (see the module docstring).

    Raises ``harness.traces.InvalidConfig`` for a bad setting or column.
    """
    from pyspark.sql import functions as F

    settings = {"policy": policy, "max_lateness": max_lateness_ms, "channel": channel,
                "window_size": window_size_ms, "allowed_lateness": allowed_lateness_ms}  # fmt: skip
    default, per_stream = stream_settings(
        validate_config, {k: v for k, v in settings.items() if v is not None}, stream_configs
    )
    fields = {f.name: f.dataType for f in df.schema.fields}
    check_columns(
        fields,
        {"event_time_col": event_time_col, "source_col": source_col, "kind_col": kind_col,
         "seq_col": seq_col, "time_col": time_col, "stream_id_col": stream_id_col, "batch_col": batch_col},
        ("source_col", "seq_col", "time_col", "batch_col"),
        kind_col, seq_col,
    )  # fmt: skip
    et = event_time_millis(fields, event_time_col)
    cols = [
        stream_id_column(stream_id_col, "ld_sid"),
        long_or_zero(et).alias("ld_et"),
        et.isNull().alias("ld_et_null"),
    ]
    for name, alias in ((batch_col, "ld_batch"), (seq_col, "ld_seq")):
        if name:
            cols.append(long_or_zero(name).alias(alias))
    if kind_col:
        cols.append(F.col(kind_col).cast("string").alias("ld_kind"))
    for name, alias in ((source_col, "ld_source"), (time_col, "ld_time")):
        if name:
            cols.append(long_or_zero(name).alias(alias))
            cols.append(F.col(name).isNull().alias(f"{alias}_null"))
    processor = LateDataProcessor(default, per_stream, batch_col is not None)
    output = one_group_per_stream(df, cols, "ld_sid", processor, OUTPUT_SCHEMA)
    tables = table_projections(output, TABLE_COLUMNS)
    main = tables["events"].filter(F.col("assigned_time").isNotNull())
    return LateDataStreams(output=output, main=main, **tables)


def engine_output(df: Any, stream_configs: Mapping[str, Mapping[str, Any]]) -> Any:
    """The harness engine's call (spark_impl.engine.area_module): one stream per trace."""
    return late_data(
        df, event_time_col="event_time", source_col="source", kind_col="kind", seq_col="seq",
        time_col="time", stream_id_col="trace_id", batch_col="batch", stream_configs=stream_configs,
    ).output  # fmt: skip


__all__ = [
    "LAYOUT_VERSION",
    "LateDataProcessor",
    "LateDataStreams",
    "OUTPUT_SCHEMA",
    "StreamConfig",
    "StreamState",
    "late_data",
    "process_rows",
    "validate_config",
    "window_bounds",
]
