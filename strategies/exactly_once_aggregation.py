"""Hypothesis strategies for exactly-once aggregation traces (spec/exactly_once_aggregation.md).

A trace is a few producers sending on a few partitions (channels, OXE-R1),
each numbering its messages in order, delivered with disorder: runs of new
messages with small swaps and gaps, the gaps filled later (late first
deliveries), and about one delivery in ten a re-delivery (the same id again,
in the same batch, a few batches later, after a restart point, or far enough
back to fall outside a small window; sometimes with another amount). Keys are
few (k1..kN, sometimes keys whose UTF-8 order differs from UTF-16's); amounts
are mostly integers and simple decimals, with -0.0, 1e16, values near the
largest double, and rare "NaN", "Infinity" and "-Infinity". Every kind, small
and large windows, empty batches, restart points, one large batch, and rare
malformed items of each error reason (OXE-R16). The generator keeps what it
sent per channel to aim its re-deliveries; the oracle alone decides verdicts.

The clauses' own arithmetic the tests and the case count share is here too:
``expected_error`` (R16), ``brute_force`` (R2, R3, R5..R8 from the full message
list, with unbounded memory) and ``double_of`` (R16's reading of an amount).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from hypothesis import strategies as st

from harness.outputs import TABLES
from harness.traces import I64_MAX, I64_MIN, InvalidConfig, Item, Trace
from strategies.common import LARGE_BATCH, restart_points
from strategies.generator_coverage import batch_shape_cases

AREA = "exactly_once_aggregation"
KINDS = ("count", "sum", "min", "max", "mean")
ERROR_REASONS = (
    "unsupported_item",
    "missing_id",
    "invalid_sequence",
    "missing_key",
    "missing_amount",
    "invalid_amount",
)
SMALL_WINDOWS = (1, 2, 3, 4, 6)
LARGE_WINDOWS = (64, 1024, 1_048_576)
#: code point order (and UTF-8's) puts U+E000 below U+1F600; UTF-16 puts it above
ODD_KEYS = ("é", "\ue000", "\U0001f600", "", "Z", "a b")
NON_FINITE = ("NaN", "Infinity", "-Infinity")
#: JSON values that are no amount (OXE-R16); 10**400 is a number too large for a double
INVALID_AMOUNTS = (True, False, "abc", "nan", "inf", "", "1.5", 10**400, -(10**400), 2**1024)


# ---- the clauses' arithmetic, shared by tests and the case count ---------------------------


def double_of(amount: Any) -> float | None:
    """OXE-R16: the double a valid amount means, None for one that is missing or invalid."""
    if isinstance(amount, bool) or amount is None:
        return None
    if isinstance(amount, str):
        return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}.get(amount)
    if isinstance(amount, int):
        return float(amount) if abs(amount) < 2**1024 - 2**970 else None  # at or beyond: rounds to infinity
    if isinstance(amount, float) and math.isfinite(amount):
        return amount
    return None


def expected_error(item: Item) -> str | None:
    """OXE-R16: the reasons in their order."""
    if item.kind == "duplicate_seq":
        return "duplicate_seq"
    if item.kind != "event":
        return "unsupported_item"
    if item.producer is None or item.partition is None or item.sequence is None:
        return "missing_id"
    if item.sequence < 0:
        return "invalid_sequence"
    if item.key is None:
        return "missing_key"
    if item.amount is None:
        return "missing_amount"
    return "invalid_amount" if double_of(item.amount) is None else None


def bits(x: float) -> int:
    """OXE-R9: the double's bits, NaN as the canonical quiet NaN."""
    return 0x7FF8000000000000 if math.isnan(x) else struct.unpack("<Q", struct.pack("<d", x))[0]


def text_of(x: float) -> str:
    """OXE-R17 by hand: names for the non-finite values, else the shortest repr."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "-Infinity" if x < 0 else "Infinity"
    return repr(x)


def value_of(kind: str, amounts: list[float]) -> tuple[str | None, int | None]:
    """OXE-R5..R8 from the whole list of a key's folded amounts, in fold order: the
    ``aggregates`` row's (value, count)."""
    if kind == "count":
        return None, len(amounts)
    if kind in ("sum", "mean"):
        total = amounts[0]
        for a in amounts[1:]:
            total += a  # R7: left to right, each addition rounded
        return text_of(total), (len(amounts) if kind == "mean" else None)
    if any(math.isnan(a) for a in amounts):
        return "NaN", None  # R8: NaN absorbs
    order = sorted(amounts, key=lambda a: (a, math.copysign(1.0, a)))  # R8: -0.0 below +0.0
    return text_of(order[0] if kind == "min" else order[-1]), None


@dataclass
class BruteForce:
    """Every table the clauses imply, from the full message list with unbounded memory."""

    verdicts: dict[tuple[int, int], str] = field(default_factory=dict)
    errors: dict[tuple[int, int], str] = field(default_factory=dict)
    aggregates: list[tuple[Any, ...]] = field(default_factory=list)
    progress: list[tuple[int, ...]] = field(default_factory=list)
    folded_amounts: dict[str, list[float]] = field(default_factory=dict)


def brute_force(trace: Trace) -> BruteForce:
    """OXE-R2, R3 without a window's bookkeeping: a channel's high is the greatest sequence ever
    folded on it; a sequence at or below high - window is outside_window; otherwise it is a
    duplicate exactly when an earlier delivery of the same id was folded. OXE-R5..R8, R18:
    a key's value is ``value_of`` its folded amounts; totals count since the start."""
    window = trace.config.get("dedup_window", 1024)
    kind = trace.config.get("aggregate", "sum")
    out = BruteForce()
    folded_ids: set[tuple[int, int, int]] = set()
    high: dict[tuple[int, int], int] = {}
    totals = {"folded": 0, "duplicate": 0, "outside_window": 0}
    for b, batch in enumerate(trace.batches):
        touched: dict[str, None] = {}
        for s, item in enumerate(batch):
            reason = expected_error(item)
            if reason is not None:
                out.errors[(b, s)] = reason
                continue
            assert item.producer is not None and item.partition is not None and item.sequence is not None
            channel, seq = (item.producer, item.partition), item.sequence
            if channel in high and seq <= high[channel] - window:
                verdict = "outside_window"
            elif (*channel, seq) in folded_ids:
                verdict = "duplicate"
            else:
                verdict = "folded"
                folded_ids.add((*channel, seq))
                high[channel] = max(high.get(channel, seq), seq)
                amount = double_of(item.amount)
                assert amount is not None and item.key is not None
                out.folded_amounts.setdefault(item.key, []).append(amount)
                touched.setdefault(item.key)
            out.verdicts[(b, s)] = verdict
            totals[verdict] += 1
        for key in touched:
            out.aggregates.append((b, key, kind, *value_of(kind, out.folded_amounts[key])))
        out.progress.append((b, totals["folded"], totals["duplicate"], totals["outside_window"],
                             len(out.folded_amounts)))  # fmt: skip
    return out


# ---- configurations (OXE-R15) --------------------------------------------------------------


@st.composite
def exactly_once_configs(draw: st.DrawFn) -> dict[str, Any]:
    """Valid settings: every kind (sum sometimes by default), a small or a large window."""
    config: dict[str, Any] = {}
    kind = draw(st.sampled_from((None, *KINDS)))
    if kind is not None:
        config["aggregate"] = kind
    roll = draw(st.integers(0, 9))
    if roll < 6:
        config["dedup_window"] = draw(st.sampled_from(SMALL_WINDOWS))
    elif roll < 9:
        config["dedup_window"] = draw(st.sampled_from(LARGE_WINDOWS))
    return config


#: one configuration per refusal rule of OXE-R15, each JSON-safe
INVALID_CONFIGS: st.SearchStrategy[dict[str, Any]] = st.sampled_from((
    {"aggregate": "avg"},
    {"aggregate": "SUM"},
    {"aggregate": 1},
    {"aggregate": None},
    {"dedup_window": 0},
    {"dedup_window": -1},
    {"dedup_window": 1_048_577},
    {"dedup_window": 1.5},
    {"dedup_window": 8.0},
    {"dedup_window": True},
    {"dedup_window": "8"},
    {"dedup_window": None},
    {"window": 8},
    {"state_key": "aggregator/state"},
    {"aggregate": "sum", "dedup_window": 4, "seed": 1},
))  # fmt: skip


# ---- traces ----------------------------------------------------------------------------------


def message(producer: int | None, partition: int | None, sequence: int | None, key: str | None,
            amount: Any) -> Item:  # fmt: skip
    """A message item (OXE-R1, R16)."""
    return Item("event", producer=producer, partition=partition, sequence=sequence, key=key, amount=amount)


@dataclass
class _Channel:
    next: int  # the next new sequence the producer numbers
    skipped: list[int] = field(default_factory=list)  # passed over, for late first deliveries
    sent: list[Item] = field(default_factory=list)  # its deliveries so far


@dataclass
class _Model:
    channels: dict[tuple[int, int], _Channel]
    keys: tuple[str, ...]
    style: str
    items: list[Item] = field(default_factory=list)
    batch_start: int = 0  # where this batch's items start in ``sent_all``
    sent_all: list[Item] = field(default_factory=list)

    def send(self, item: Item) -> None:
        self.items.append(item)
        if item.producer is not None and item.partition is not None:
            self.channels[(item.producer, item.partition)].sent.append(item)
            self.sent_all.append(item)


def _amount(draw: st.DrawFn, style: str) -> Any:
    """An amount of the trace's style: whole numbers, decimals whose sums round, or edges."""
    roll = draw(st.integers(0, 99))
    if roll < 4:
        return draw(st.sampled_from(NON_FINITE))
    if style == "ints" or roll < 30:
        return draw(st.integers(-3, 20))
    if style == "decimals" or (style == "mixed" and roll < 70):
        return draw(st.sampled_from((0.1, 0.2, 0.3, 0.25, 1.5, -2.5, 0.7, 1e-7)))
    if style == "edges" and roll < 65:
        return draw(st.sampled_from((-0.0, 0.0, 0)))  # OXE-R8: which zero is the least
    return draw(st.sampled_from((-0.0, 0.0, 1e16, -1e16, 1e308, -1e308, 2**53 + 1, 10**20)))


def _channel(draw: st.DrawFn, model: _Model) -> tuple[int, int]:
    """Skew: half of the picks take the first channel."""
    names = list(model.channels)
    return names[0] if draw(st.booleans()) else draw(st.sampled_from(names))


def _run(draw: st.DrawFn, model: _Model, channel: tuple[int, int], n: int) -> None:
    """``n`` new messages of a channel: sometimes a gap is left (filled later), adjacent ones swapped."""
    c = model.channels[channel]
    sequences = []
    for _ in range(n):
        if draw(st.integers(0, 5)) == 0:
            gap = draw(st.integers(1, 3))
            c.skipped += range(c.next, c.next + gap)
            c.next += gap
        sequences.append(c.next)
        c.next += 1
    for i in range(len(sequences) - 1):
        if draw(st.integers(0, 3)) == 0:
            sequences[i], sequences[i + 1] = sequences[i + 1], sequences[i]
    for s in sequences:
        model.send(message(*channel, s, draw(st.sampled_from(model.keys)), _amount(draw, model.style)))


def _redeliver(draw: st.DrawFn, model: _Model) -> None:
    """The same id again: from this batch, a recent one, one far back, or a producer re-sending
    its last messages (as after a crash, OXE-R19); sometimes with another amount or key (R1)."""
    if not model.sent_all:
        return
    roll = draw(st.integers(0, 9))
    if roll < 2 and len(model.sent_all) > model.batch_start:
        picks = [draw(st.sampled_from(model.sent_all[model.batch_start :]))]
    elif roll < 5:
        picks = [draw(st.sampled_from(model.sent_all[-4:]))]
    elif roll < 7:
        picks = [draw(st.sampled_from(model.sent_all[:3]))]
    else:
        c = model.channels[_channel(draw, model)]
        picks = c.sent[-draw(st.integers(1, 4)) :]
    for item in picks:
        roll = draw(st.integers(0, 7))
        if roll < 2:
            item = message(item.producer, item.partition, item.sequence, item.key, _amount(draw, model.style))
        elif roll == 2:
            item = message(item.producer, item.partition, item.sequence, draw(st.sampled_from(model.keys)),
                           item.amount)  # fmt: skip
        model.send(item)


def _late_first(draw: st.DrawFn, model: _Model) -> None:
    """A sequence a run passed over, delivered now for the first time (inside or outside the window)."""
    waiting = [name for name, c in model.channels.items() if c.skipped]
    if not waiting:
        _run(draw, model, _channel(draw, model), 1)
        return
    channel = draw(st.sampled_from(waiting))
    c = model.channels[channel]
    s = c.skipped.pop(draw(st.integers(0, len(c.skipped) - 1)))
    model.send(message(*channel, s, draw(st.sampled_from(model.keys)), _amount(draw, model.style)))


def _malformed(draw: st.DrawFn, model: _Model) -> Item:
    """One item of each error reason of OXE-R16 (producer, partition, sequence, key, amount)."""
    channel = _channel(draw, model)
    key: str | None = draw(st.sampled_from(model.keys))
    amount = _amount(draw, model.style)
    sequence = model.channels[channel].next
    reason = draw(st.sampled_from((*ERROR_REASONS, "invalid_amount")))  # its values are many: twice
    if draw(st.integers(0, 2)) == 0:  # faults of later reasons too: the first reason in order wins
        amount = draw(st.sampled_from((None, "abc")))
        key = None if reason in ("missing_id", "invalid_sequence") else key
    if reason == "unsupported_item":
        return draw(st.sampled_from((Item("end"), Item("clock", time=5), Item("idle", key=key),
                                     Item("watermark", source=0, time=5))))  # fmt: skip
    if reason == "missing_id":
        missing = draw(st.integers(0, 2))
        parts = [None if i == missing else v for i, v in enumerate((*channel, sequence))]
        return message(parts[0], parts[1], parts[2], key, amount)
    if reason == "invalid_sequence":
        return message(*channel, draw(st.sampled_from((-1, -sequence - 1, I64_MIN))), key, amount)
    if reason == "missing_key":
        return message(*channel, sequence, None, amount)
    if reason == "missing_amount":
        return message(*channel, sequence, key, None)
    return message(*channel, sequence, key, draw(st.sampled_from(INVALID_AMOUNTS)))


def _episode(draw: st.DrawFn, model: _Model, malformed: bool) -> None:
    roll = draw(st.integers(0, 99))
    if malformed and roll < 24:
        model.items.append(_malformed(draw, model))
    elif roll < 55:
        _run(draw, model, _channel(draw, model), draw(st.integers(1, 5)))
    elif roll < 80:
        _redeliver(draw, model)
    elif roll < 90:
        _late_first(draw, model)
    else:
        for _ in range(draw(st.integers(1, 3))):
            _run(draw, model, draw(st.sampled_from(list(model.channels))), 1)


def _large_batch(draw: st.DrawFn, model: _Model) -> None:
    """LARGE_BATCH or more messages of one or two channels, re-deliveries among them."""
    while len(model.items) < LARGE_BATCH:
        if draw(st.integers(0, 4)) == 0:
            _redeliver(draw, model)
        else:
            _run(draw, model, _channel(draw, model), draw(st.integers(3, 8)))


def _channels(draw: st.DrawFn) -> list[tuple[int, int]]:
    """One to four channels of producers 0..2 and partitions 0..1, sometimes ids at the i64 bounds."""
    if draw(st.integers(0, 9)) == 0:
        pool = [(I64_MIN, 0), (I64_MAX, I64_MAX), (-1, -1), (0, I64_MIN)]
    else:
        pool = [(p, q) for p in (0, 1, 2) for q in (0, 1)]
    return draw(st.lists(st.sampled_from(pool), min_size=1, max_size=4, unique=True))


@st.composite
def exactly_once_traces(draw: st.DrawFn, invalid_config_rate: int = 0, large_batch_rate: int = 0) -> Trace:
    """A trace of 1..6 batches of 0..4 episodes; ``invalid_config_rate`` and ``large_batch_rate``
    (one batch of LARGE_BATCH or more messages) are percentages."""
    if invalid_config_rate and draw(st.integers(0, 99)) < invalid_config_rate:
        refused: dict[str, Any] = draw(INVALID_CONFIGS)
        # a varied item keeps equal refused configurations from collapsing when traces are deduplicated
        return Trace(AREA, refused, ((message(0, 0, draw(st.integers(0, 10**6)), "k1", 1),),))
    config = draw(exactly_once_configs())
    n_keys = draw(st.integers(1, 5))
    keys = tuple(f"k{i}" for i in range(1, n_keys + 1))
    if draw(st.integers(0, 9)) == 0:
        keys += tuple(draw(st.lists(st.sampled_from(ODD_KEYS), min_size=1, max_size=3, unique=True)))
    start = draw(st.sampled_from((0, 0, 0, 1, 1000, I64_MAX - 10_000)))
    minmax = config.get("aggregate") in ("min", "max")
    model = _Model(
        {name: _Channel(start) for name in _channels(draw)},
        keys,
        # zeros matter most to min and max (OXE-R8)
        draw(st.sampled_from(("ints", "decimals", "mixed", "edges", *(("edges",) * 2 * minmax)))),
    )
    malformed = draw(st.booleans())
    n_batches = draw(st.integers(1, 6))
    # a high roll, not a low one, makes the large batch: Hypothesis's simplest trace stays small
    large = draw(st.integers(0, 99)) >= 100 - large_batch_rate
    large_at = draw(st.integers(0, n_batches - 1)) if large else None
    batches: list[tuple[Item, ...]] = []
    for b in range(n_batches):
        model.items, model.batch_start = [], len(model.sent_all)
        if b == large_at:
            _large_batch(draw, model)
        elif draw(st.integers(0, 9)):
            for _ in range(draw(st.integers(1, 4))):
                _episode(draw, model, malformed)
        batches.append(tuple(model.items))
    return Trace(AREA, config, tuple(batches), draw(restart_points(n_batches)))


# ---- the differential mix and the cases it must reach (spec/traces.md TR-13) ---------------

DIFFERENTIAL = ((exactly_once_traces(invalid_config_rate=18, large_batch_rate=12), 1.0),)

CASES: dict[str, str] = {
    **{f"aggregate_{k}": f"a {k} aggregate with a folded message (OXE-R4..R8, R18)" for k in KINDS},
    "small_window": "a dedup_window of at most 6 (OXE-R2, R15)",
    "folded_out_of_order": "a message folded below its channel's high, inside the window (OXE-R3)",
    "duplicate_same_batch": "a duplicate of a message folded earlier in its batch (OXE-R3)",
    "duplicate_later_batch": "a duplicate of a message folded in an earlier batch (OXE-R3, R19)",
    "duplicate_after_restart": "a duplicate of a message folded before a restart point (OXE-R13, R19)",
    "redelivery_other_amount": "a duplicate carrying another amount than the folded delivery (OXE-R1)",
    "redelivery_other_key": "a duplicate carrying another key than the folded delivery (OXE-R1)",
    "outside_window_redelivery": "a re-delivery of a folded message outside the window (OXE-R2, R3)",
    "outside_window_first_delivery": "a first delivery outside the window (OXE-R3)",
    "window_edge_inside": "a sequence exactly high - window + 1, judged inside (OXE-R2, R3)",
    "window_edge_outside": "a sequence exactly high - window, outside the window (OXE-R2, R3)",
    "key_of_two_channels": "a key folded from two channels (OXE-R4)",
    "nan_amount": "a folded NaN amount (OXE-R6..R9, R16)",
    "infinite_amount": "a folded Infinity or -Infinity amount (OXE-R7, R8, R16)",
    "signed_zeros": "a min or max key that folded both -0.0 and 0.0 (OXE-R8)",
    "rounded_sum": "a sum or mean whose additions round (OXE-R7)",
    "exponent_text": "an aggregate value written with an exponent (OXE-R17)",
    "ids_at_i64_bounds": "a message of a producer or partition at an i64 bound, or a huge sequence (OXE-R1)",
    **{f"error_{r}": f"an item refused with {r} (OXE-R16, TR-7)" for r in ERROR_REASONS},
    "restart": "a restart point between batches (OXE-R19, TR-5)",
    "empty_batch": "an empty batch still has its progress row (OXE-R18, TR-5)",
    "large_batch": f">= {LARGE_BATCH} messages in one batch (OXE-R3, R18)",
    "invalid_config": "a refused configuration (OXE-R15, TR-6)",
}

RARE: dict[str, str] = {}


def _rows(output: dict[str, Any], table: str) -> list[dict[str, Any]]:
    return [dict(zip(TABLES[AREA][table], r, strict=True)) for r in output[table]]


def cases_reached(trace: Trace, output: Any) -> set[str]:
    """The CASES one trace reaches, from the trace and the oracle's canonical output."""
    if isinstance(output, InvalidConfig):
        return {"invalid_config"}
    if not isinstance(output, dict):
        return set()
    error_at = {(b, s) for b, s, _ in output["errors"]}
    shape = batch_shape_cases(trace, error_at, lambda item: 0 if item.kind == "event" else None)
    reached = shape & {"restart", "empty_batch", "large_batch"}
    reached |= {f"error_{reason}" for _, _, reason in output["errors"]}
    window = trace.config.get("dedup_window", 1024)
    kind = trace.config.get("aggregate", "sum")
    if window <= max(SMALL_WINDOWS):
        reached.add("small_window")
    if output["aggregates"]:
        reached.add(f"aggregate_{kind}")
    rows = sorted(_rows(output, "messages"), key=lambda r: (r["batch"], r["seq"]))
    first_fold: dict[tuple[int, int, int], tuple[int, Item]] = {}  # id -> (batch, item)
    high: dict[tuple[int, int], int] = {}
    channels_of_key: dict[str, set[tuple[int, int]]] = {}
    amounts_of_key: dict[str, list[float]] = {}
    restarts = sorted(trace.restart_after)
    for r in rows:
        item = trace.batches[r["batch"]][r["seq"]]
        channel, s = (r["producer"], r["partition"]), r["sequence"]
        ident = (*channel, s)
        if any(v in (I64_MIN, I64_MAX) for v in channel) or s > 2**62:
            reached.add("ids_at_i64_bounds")
        if channel in high and s == high[channel] - window + 1 and s != high[channel]:
            reached.add("window_edge_inside")
        if channel in high and s == high[channel] - window:
            reached.add("window_edge_outside")
        verdict = r["verdict"]
        if verdict == "folded":
            if channel in high and s < high[channel]:
                reached.add("folded_out_of_order")
            first_fold[ident] = (r["batch"], item)
            high[channel] = max(high.get(channel, s), s)
            channels_of_key.setdefault(r["key"], set()).add(channel)
            amount = double_of(item.amount)
            assert amount is not None
            amounts_of_key.setdefault(r["key"], []).append(amount)
            if math.isnan(amount):
                reached.add("nan_amount")
            if math.isinf(amount):
                reached.add("infinite_amount")
        elif verdict == "duplicate":
            batch, folded_item = first_fold[ident]
            reached.add("duplicate_same_batch" if batch == r["batch"] else "duplicate_later_batch")
            if any(batch <= point < r["batch"] for point in restarts):
                reached.add("duplicate_after_restart")
            if bits(double_of(item.amount) or 0.0) != bits(double_of(folded_item.amount) or 0.0):
                reached.add("redelivery_other_amount")
            if item.key != folded_item.key:
                reached.add("redelivery_other_key")
        else:
            seen = ident in first_fold
            reached.add("outside_window_redelivery" if seen else "outside_window_first_delivery")
    if any(len(c) >= 2 for c in channels_of_key.values()):
        reached.add("key_of_two_channels")
    for amounts in amounts_of_key.values():
        if kind in ("min", "max") and {bits(a) for a in amounts} >= {bits(0.0), bits(-0.0)}:
            reached.add("signed_zeros")
        if kind in ("sum", "mean") and all(math.isfinite(a) for a in amounts):
            total = amounts[0]
            for a in amounts[1:]:
                if math.isfinite(total + a) and Fraction(total + a) != Fraction(total) + Fraction(a):
                    reached.add("rounded_sum")
                total += a
    for row in _rows(output, "aggregates"):
        if row["number"] is not None and "e" in row["number"]:
            reached.add("exponent_text")
    return reached


__all__ = [
    "AREA",
    "CASES",
    "DIFFERENTIAL",
    "ERROR_REASONS",
    "INVALID_AMOUNTS",
    "INVALID_CONFIGS",
    "KINDS",
    "LARGE_WINDOWS",
    "RARE",
    "SMALL_WINDOWS",
    "BruteForce",
    "bits",
    "brute_force",
    "cases_reached",
    "double_of",
    "exactly_once_configs",
    "exactly_once_traces",
    "expected_error",
    "message",
    "text_of",
    "value_of",
]
