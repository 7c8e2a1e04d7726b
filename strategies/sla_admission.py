"""Hypothesis strategies for SLA admission traces (spec/sla_admission.md).

Configurations register one to four streams of random classes, with or
without a rate cap, a lag budget, a jitter budget and a token cost of at most
three decimals (often the capacity divided by 1, 2, 4, 5 or 8, so a burst can
empty the bucket exactly), a policy and sometimes a shedder. Traces are cut
into batches of episodes that aim at the edges of the three checks: bursts
at the capacity edge, steady arrivals near the refill interval, clock steps
exactly at and one past a jitter budget, silences long enough to refill the
bucket, events exactly at and one past their lag budget, load reports that
push the score over the shedder's threshold, events of unregistered streams
and a few malformed items. The generator keeps a small model of each bucket
to aim its bursts; the oracle alone decides. Times stay in a small positive
range.

The spec arithmetic the tests and the case count share (R1..R4, R10..R12) is
here too: ``figures``, ``shedder_settings``, ``load_score``, ``drop_probability``,
``shedder_draw``; it is written from the clauses, not taken from the oracle.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from hypothesis import strategies as st

from harness.outputs import TABLES
from harness.traces import InvalidConfig, Item, Trace
from strategies.common import LARGE_BATCH, LONG_TIE_RUN, restart_points
from strategies.generator_coverage import batch_shape_cases

AREA = "sla_admission"

#: OXS-R1: class -> (capacity in tokens, refill in tokens per second, default max_lag in ms)
CLASSES: dict[str, tuple[int, int, int]] = {
    "Bronze": (5, 1, 5000),
    "Silver": (20, 5, 2000),
    "Gold": (50, 20, 500),
    "Platinum": (200, 100, 100),
}
NANO = 10**9  # nano-tokens per token (OXS-R3)

#: the non-ASCII name makes the draw hash its UTF-8 bytes (OXS-R12)
STREAM_NAMES = ("orders", "clicks", "billing", "météo")
UNREGISTERED = "ghost"
METRIC_NAMES = ("cpu", "memory", "queue_depth", "latency")
POLICIES = ("Strict", "PreferThrottle", "BypassShedder")
SHEDDER_DEFAULTS = {
    "seed": 0,
    "threshold": 800,
    "max_drop": 1000,
    "queue_capacity": 1000,
    "latency_target_ms": 1000,
}
ERROR_REASONS = (
    "unsupported_item",
    "missing_stream",
    "missing_event_time",
    "invalid_priority",
    "missing_time",
    "clock_went_backwards",
    "invalid_load",
)
SLA_ADMITTED = ("admit", "shed", "throttle")  # the SLA said yes; the shedder decided the rest (OXS-R13)

#: a silence never needs to be longer than this to refill a bucket the generator draws (ms)
LONGEST_SILENCE = 60_000


# ---- the spec's arithmetic (OXS-R1..R4, R10..R12), shared by tests and the case count ----


def thousandths_of(value: int | float) -> int:
    """OXS-R3: a setting with at most three decimals as an integer count of thousandths."""
    return int(Decimal(repr(value)) * 1000)


@dataclass(frozen=True)
class Figures:
    """One stream's agreement in exact integers (OXS-R1..R4)."""

    capacity_nano: int
    cost_nano: int
    refill_per_ms: int  # nano-tokens per millisecond
    max_lag: int
    jitter_budget: int | None
    capped: bool  # max_events_per_sec lowers the class's refill (OXS-R4)

    @property
    def full_refill_ms(self) -> int:
        """The silence after which an empty bucket is full again."""
        return math.ceil(self.capacity_nano / self.refill_per_ms)

    @property
    def token_interval_ms(self) -> int:
        """The silence after which an empty bucket holds one event's cost."""
        return math.ceil(self.cost_nano / self.refill_per_ms)


def figures(settings: Mapping[str, Any]) -> Figures:
    """A valid stream configuration read by OXS-R1..R4."""
    capacity, refill_per_sec, default_lag = CLASSES[settings["class"]]
    cost = thousandths_of(settings.get("token_cost", 1))
    class_rate = refill_per_sec * 10**6  # tokens per second -> nano-tokens per millisecond
    rate = class_rate
    cap = settings.get("max_events_per_sec")
    if cap is not None:
        rate = min(class_rate, thousandths_of(cap) * cost)
    max_lag = settings.get("max_lag")
    return Figures(
        capacity_nano=capacity * NANO,
        cost_nano=cost * 10**6,
        refill_per_ms=rate,
        max_lag=default_lag if max_lag is None else max_lag,
        jitter_budget=settings.get("jitter_budget_ms"),
        capped=rate < class_rate,
    )


def shedder_settings(config: Mapping[str, Any]) -> dict[str, int] | None:
    """OXS-R14: the shedder's settings with their defaults, or None without a shedder."""
    if "shedder" not in config:
        return None
    return {**SHEDDER_DEFAULTS, **config["shedder"]}


def load_score(metrics: Mapping[str, int], shedder: Mapping[str, int]) -> int:
    """OXS-R10: the most saturated resource, in thousandths."""
    return max(
        10 * metrics.get("cpu", 0),
        10 * metrics.get("memory", 0),
        min(1000, 1000 * metrics.get("queue_depth", 0) // shedder["queue_capacity"]),
        min(1000, 1000 * metrics.get("latency", 0) // shedder["latency_target_ms"]),
    )


def drop_probability(score: int, priority: int, shedder: Mapping[str, int]) -> int:
    """OXS-R11: in thousandths; low doubles, high halves, critical is never dropped."""
    threshold = shedder["threshold"]
    if score <= threshold:
        return 0
    p = (score - threshold) * shedder["max_drop"] // (1000 - threshold)
    return {0: min(1000, 2 * p), 1: p, 2: p // 2, 3: 0}[priority]


def shedder_draw(seed: int, stream: str, position: int) -> int:
    """OXS-R12: the event's draw in 0..999 from the shedder's seed, its stream and its position."""
    message = stream.encode("utf-8") + b"\x00" + position.to_bytes(8, "big")
    digest = hashlib.blake2b(message, key=seed.to_bytes(8, "big", signed=True), digest_size=8).digest()
    return int.from_bytes(digest, "big") % 1000


def arrivals(
    trace: Trace, error_at: set[tuple[int, int]]
) -> list[tuple[int, int, Item, int, dict[str, int]]]:
    """Every item that is no error row, in arrival order, with the processing clock and the
    metrics in effect when it arrives: (batch, seq, item, now, metrics) (TR-4, OXS-R15, R16)."""
    now = 0
    metrics = dict.fromkeys(METRIC_NAMES, 0)
    out = []
    for b, batch in enumerate(trace.batches):
        for s, item in enumerate(batch):
            if (b, s) in error_at:
                continue
            if item.kind == "clock" and item.time is not None:
                now = item.time
            elif item.kind == "load" and item.metrics:
                metrics.update(dict(item.metrics))
            out.append((b, s, item, now, dict(metrics)))
    return out


# ---- configurations (OXS-R2, R14) -------------------------------------------------------


def _number(value: Decimal) -> int | float:
    """A setting as JSON would give it: an int when whole, else a float of <= 3 decimals."""
    return int(value) if value == value.to_integral_value() else float(value)


@st.composite
def stream_configs(draw: st.DrawFn) -> dict[str, Any]:
    """One valid StreamSlaConfig mapping (OXS-R2)."""
    name = draw(st.sampled_from(tuple(CLASSES)))
    capacity = CLASSES[name][0]
    settings: dict[str, Any] = {"class": name}
    roll = draw(st.integers(0, 9))
    if roll < 5:
        # a whole number of events fills the bucket, so a burst can empty it exactly (OXS-R8)
        settings["token_cost"] = _number(Decimal(capacity) / draw(st.sampled_from((1, 2, 4, 5, 8))))
    elif roll < 7:
        settings["token_cost"] = draw(st.sampled_from((0.5, 2.5, 0.125, 1.5, 0.001)))
    if draw(st.integers(0, 9)) < 4:
        settings["max_events_per_sec"] = draw(st.sampled_from((0.5, 1, 2, 2.5, 4, 10, 0.75, 10**9)))
    roll = draw(st.integers(0, 9))
    if roll == 0:
        settings["max_lag"] = None  # null means the class default (OXS-R2)
    elif roll < 6:
        settings["max_lag"] = draw(st.sampled_from((0, 50, 100, 250, 500, 1000, 3000)))
    roll = draw(st.integers(0, 19))
    if roll == 0:
        settings["jitter_budget_ms"] = None
    elif roll < 13:
        settings["jitter_budget_ms"] = draw(st.sampled_from((0, 50, 100, 250, 1000, 2000)))
    return settings


@st.composite
def shedder_configs(draw: st.DrawFn) -> dict[str, int]:
    """Valid shedder settings (OXS-R14); each is sometimes left to its default."""
    options = {
        "seed": (0, 1, -7, 2**40),
        "threshold": (0, 500, 800, 900, 999),
        "max_drop": (1000, 500, 250, 0),
        "queue_capacity": (1, 100, 1000),
        "latency_target_ms": (1, 200, 1000),
    }
    return {name: draw(st.sampled_from(values)) for name, values in options.items() if draw(st.booleans())}


@st.composite
def sla_admission_configs(draw: st.DrawFn) -> dict[str, Any]:
    """Valid trace settings (OXS-R14): 1..4 streams, a policy, a shedder more often than not."""
    names = draw(st.lists(st.sampled_from(STREAM_NAMES), min_size=1, max_size=4, unique=True))
    config: dict[str, Any] = {"streams": {n: draw(stream_configs()) for n in names}}
    policy = draw(
        st.sampled_from(
            (None, "Strict", "PreferThrottle", "PreferThrottle", "BypassShedder", "BypassShedder")
        )
    )
    if policy is not None:
        config["policy"] = policy
    if draw(st.integers(0, 9)) < 7:
        config["shedder"] = draw(shedder_configs())
    return config


def _stream(settings: dict[str, Any]) -> dict[str, Any]:
    return {"streams": {"orders": settings}}


#: one configuration per refusal rule of OXS-R2, R3 and R14, each JSON-safe (the committed
#: vectors hold them); NaN and the infinities are the invariant test's own
INVALID_CONFIGS = st.sampled_from((
    _stream({"class": "Diamond"}),
    _stream({"class": "gold"}),
    _stream({"max_lag": 100}),
    _stream({"class": "Gold", "burst": 5}),
    {"streams": {"orders": "Gold"}},
    _stream({"class": "Gold", "max_events_per_sec": 0}),
    _stream({"class": "Gold", "max_events_per_sec": -2}),
    _stream({"class": "Gold", "max_events_per_sec": True}),
    _stream({"class": "Gold", "max_events_per_sec": "5"}),
    _stream({"class": "Gold", "max_events_per_sec": 10**9 + 1}),
    _stream({"class": "Gold", "max_events_per_sec": 0.0005}),
    _stream({"class": "Gold", "max_events_per_sec": 2.5001}),
    _stream({"class": "Bronze", "token_cost": 0}),
    _stream({"class": "Bronze", "token_cost": -1}),
    _stream({"class": "Bronze", "token_cost": False}),
    _stream({"class": "Bronze", "token_cost": "1"}),
    _stream({"class": "Bronze", "token_cost": 1.2345}),
    _stream({"class": "Bronze", "token_cost": 5.001}),
    _stream({"class": "Silver", "token_cost": 21}),
    _stream({"class": "Platinum", "token_cost": 10**9 + 1}),
    _stream({"class": "Gold", "max_lag": -1}),
    _stream({"class": "Gold", "max_lag": 1.5}),
    _stream({"class": "Gold", "max_lag": True}),
    _stream({"class": "Gold", "max_lag": "100"}),
    _stream({"class": "Gold", "jitter_budget_ms": -1}),
    _stream({"class": "Gold", "jitter_budget_ms": 2.5}),
    _stream({"class": "Gold", "jitter_budget_ms": False}),
    {"streams": [["orders", {"class": "Gold"}]]},
    {"streams": {"orders": {"class": "Gold"}}, "policy": "Lenient"},
    {"streams": {"orders": {"class": "Gold"}}, "policy": "strict"},
    {"streams": {"orders": {"class": "Gold"}}, "deadline": 5},
    {"streams": {"orders": {"class": "Gold"}}, "shedder": 5},
    {"streams": {"orders": {"class": "Gold"}}, "shedder": {"noise": 1}},
    {"streams": {"orders": {"class": "Gold"}}, "shedder": {"threshold": 1000}},
    {"streams": {"orders": {"class": "Gold"}}, "shedder": {"threshold": -1}},
    {"streams": {"orders": {"class": "Gold"}}, "shedder": {"max_drop": 1001}},
    {"streams": {"orders": {"class": "Gold"}}, "shedder": {"queue_capacity": 0}},
    {"streams": {"orders": {"class": "Gold"}}, "shedder": {"latency_target_ms": 0}},
    {"streams": {"orders": {"class": "Gold"}}, "shedder": {"seed": 1.5}},
    {"streams": {"orders": {"class": "Gold"}}, "shedder": {"seed": True}},
    {"streams": {"orders": {"class": "Gold"}}, "shedder": {"threshold": "800"}},
))  # fmt: skip


# ---- traces ---------------------------------------------------------------------------


@dataclass
class _Bucket:
    """The generator's view of one registered stream: enough of OXS-R5..R8 to aim bursts."""

    figures: Figures
    level: int
    last: int | None = None
    reference: int | None = None

    def refilled(self, now: int) -> int:
        if self.last is None or now <= self.last:
            return self.level
        return min(self.figures.capacity_nano, self.level + self.figures.refill_per_ms * (now - self.last))


@dataclass
class _Model:
    buckets: dict[str, _Bucket]
    clock: int = 0
    items: list[Item] = field(default_factory=list)

    def step(self, gap: int) -> None:
        """A clock item ``gap`` ms after the current clock (OXS-R16: inside batches too)."""
        self.clock += max(0, gap)
        self.items.append(Item("clock", time=self.clock))


def _judge(bucket: _Bucket, now: int, lag: int) -> None:
    """The generator's guess of OXS-R5..R8, so the next burst knows the bucket's level."""
    fig = bucket.figures
    if lag > fig.max_lag:
        return
    if (
        fig.jitter_budget is not None
        and bucket.reference is not None
        and now - bucket.reference > fig.jitter_budget
    ):
        bucket.reference = now
        return
    bucket.level = bucket.refilled(now)
    if bucket.last is None or now > bucket.last:
        bucket.last = now
    if bucket.level >= fig.cost_nano:
        bucket.level -= fig.cost_nano
        bucket.reference = now


PRIORITIES = st.sampled_from((None, None, None, None, None, 0, 1, 2, 3, 3))


def _event(draw: st.DrawFn, model: _Model, stream: str, back: int | None = None) -> None:
    """An event ``back`` ms before the clock (drawn near the lag budget when not given)."""
    bucket = model.buckets.get(stream)
    if back is None:
        max_lag = bucket.figures.max_lag if bucket else 500
        back = draw(st.sampled_from((0, 0, 0, 1, max_lag // 2, max_lag, max_lag, -draw(st.integers(1, 50)))))
    event_time = max(0, model.clock - back)
    model.items.append(Item("event", key=stream, event_time=event_time, priority=draw(PRIORITIES)))
    if bucket is not None:
        _judge(bucket, model.clock, max(0, model.clock - event_time))


def _pick(draw: st.DrawFn, names: list[str]) -> str:
    """Stream skew: half of the picks take the first stream."""
    return names[0] if len(names) == 1 or draw(st.booleans()) else draw(st.sampled_from(names))


def _burst(draw: st.DrawFn, model: _Model, stream: str) -> None:
    """Events at one instant, as many as the bucket holds or one more (OXS-R8 at its edge),
    sometimes after a silence that refills it."""
    bucket = model.buckets[stream]
    fig = bucket.figures
    if draw(st.integers(0, 2)) == 0:
        model.step(min(LONGEST_SILENCE, fig.full_refill_ms) + draw(st.sampled_from((0, 1, 250))))
    fits = bucket.refilled(model.clock) // fig.cost_nano
    jitter_first = (
        fig.jitter_budget is not None
        and bucket.reference is not None
        and model.clock - bucket.reference > fig.jitter_budget
    )
    if 1 <= fits <= 12:
        n = fits + int(jitter_first) + draw(st.sampled_from((0, 0, 1, 1, -1)))
    else:
        n = draw(st.integers(2, 8))
    for _ in range(max(1, n)):
        _event(draw, model, stream, back=draw(st.sampled_from((0, 0, 1, fig.max_lag // 4))))


def _steady(draw: st.DrawFn, model: _Model, stream: str) -> None:
    """Events one refill interval apart, or a little faster or slower (OXS-R8)."""
    fig = model.buckets[stream].figures
    interval = min(LONGEST_SILENCE // 8, fig.token_interval_ms)
    gap = interval + draw(st.sampled_from((0, 0, 1, -1, -(interval // 2))))
    for _ in range(draw(st.integers(2, 6))):
        model.step(gap)
        _event(draw, model, stream)


def _jitter_probe(draw: st.DrawFn, model: _Model, stream: str) -> None:
    """A clock step to exactly the jitter budget after the reference, or one past it (OXS-R7)."""
    bucket = model.buckets[stream]
    budget = bucket.figures.jitter_budget
    if budget is None or bucket.reference is None:
        model.step(draw(st.sampled_from((1, 10, 100))))
    else:
        target = bucket.reference + budget + draw(st.sampled_from((0, 0, 1, 1, -1)))
        model.step(target - model.clock)
    for _ in range(draw(st.integers(1, 3))):
        _event(draw, model, stream, back=draw(st.sampled_from((0, 1))))


def _silence(draw: st.DrawFn, model: _Model, stream: str) -> None:
    """A silence longer than the jitter budget and long enough to refill, then events."""
    fig = model.buckets[stream].figures
    longest = max(fig.full_refill_ms, fig.jitter_budget or 0)
    model.step(min(LONGEST_SILENCE, longest) + draw(st.sampled_from((1, 100, 1000))))
    for _ in range(draw(st.integers(1, 3))):
        _event(draw, model, stream, back=0)


def _lag_probe(draw: st.DrawFn, model: _Model, stream: str) -> None:
    """An event exactly at its lag budget, one past it, one inside, or stamped in the future (OXS-R6)."""
    max_lag = model.buckets[stream].figures.max_lag
    if model.clock < max_lag + 1:
        model.step(max_lag + 1 - model.clock + draw(st.sampled_from((0, 100))))
    _event(draw, model, stream, back=max_lag + draw(st.sampled_from((0, 0, 1, 1, -1, -max_lag - 30))))


def _metrics(draw: st.DrawFn) -> dict[str, int]:
    """A valid load report: one to four metrics, often enough to pass a shedder's threshold."""
    values = {
        "cpu": (0, 50, 85, 90, 95, 100, 100),
        "memory": (0, 60, 90, 100),
        "queue_depth": (0, 500, 900, 1000, 5000),
        "latency": (0, 100, 950, 2000),
    }
    names = draw(st.lists(st.sampled_from(METRIC_NAMES), min_size=1, max_size=4, unique=True))
    return {n: draw(st.sampled_from(values[n])) for n in names}


def load_item(metrics: Mapping[str, int]) -> Item:
    """A ``load`` item (OXS-R15); the trace model keeps metrics as sorted pairs."""
    return Item("load", metrics=tuple(sorted(metrics.items())))


def _invalid_load(draw: st.DrawFn) -> Item:
    return draw(st.sampled_from((
        Item("load"),
        load_item({}),
        load_item({"disk": 50}),
        load_item({"cpu": 101}),
        load_item({"memory": -1, "cpu": 20}),
        load_item({"queue_depth": -5}),
        load_item({"latency": -1}),
    )))  # fmt: skip


def _malformed(draw: st.DrawFn, model: _Model, stream: str) -> Item:
    """One item an engine must answer with an error row of each reason of OXS-R15."""
    reasons = list(
        ERROR_REASONS if model.clock > 0 else [r for r in ERROR_REASONS if r != "clock_went_backwards"]
    )
    reason = draw(st.sampled_from(reasons))
    if reason == "unsupported_item":
        return draw(st.sampled_from((
            Item("watermark", source=0, time=model.clock),
            Item("idle", key=stream),
            Item("remove_key", key=stream),
        )))  # fmt: skip
    if reason == "missing_stream":
        return Item("event", event_time=model.clock, priority=draw(st.sampled_from((None, 9))))
    if reason == "missing_event_time":
        return Item("event", key=stream, priority=draw(st.sampled_from((None, -1))))
    if reason == "invalid_priority":
        return Item("event", key=stream, event_time=model.clock, priority=draw(st.sampled_from((-1, 4, 7))))
    if reason == "missing_time":
        return Item("clock")
    if reason == "clock_went_backwards":
        return Item("clock", time=model.clock - draw(st.integers(1, min(model.clock, 1000))))
    return _invalid_load(draw)


def _episode(draw: st.DrawFn, model: _Model, malformed: bool) -> None:
    names = list(model.buckets)
    stream = _pick(draw, names)
    if malformed and draw(st.integers(0, 4)) == 0:
        for _ in range(draw(st.integers(1, 3))):
            model.items.append(_malformed(draw, model, stream))
        return
    roll = draw(st.integers(0, 99))
    if roll < 20:
        _burst(draw, model, stream)
    elif roll < 34:
        _steady(draw, model, stream)
    elif roll < 48:
        _jitter_probe(draw, model, stream)
    elif roll < 54:
        _silence(draw, model, stream)
    elif roll < 64:
        _lag_probe(draw, model, stream)
    elif roll < 76:
        if draw(st.integers(0, 5)):
            model.items.append(load_item(_metrics(draw)))
        else:
            model.items.append(_invalid_load(draw))
    elif roll < 81:
        _event(
            draw, model, draw(st.sampled_from((UNREGISTERED, *[n for n in STREAM_NAMES if n not in names])))
        )
    elif roll < 88:
        model.step(draw(st.sampled_from((0, 1, 10, 100, 1000))))
        _event(draw, model, draw(st.sampled_from(names)))
    else:
        _event(draw, model, stream)


def _large_batch(draw: st.DrawFn, model: _Model) -> None:
    """LARGE_BATCH or more events of one stream, LONG_TIE_RUN or more of one event time, with
    a few clock steps among them: the order inside the batch decides every decision."""
    stream = _pick(draw, list(model.buckets))
    fig = model.buckets[stream].figures
    tie_back = draw(st.sampled_from((0, fig.max_lag, fig.max_lag // 2)))
    tie_time = max(0, model.clock - tie_back)  # fixed before the clock steps, so the tie holds
    ties: list[int | None] = [None] * draw(st.integers(LONG_TIE_RUN, LONG_TIE_RUN + 4))
    n_others = LARGE_BATCH - len(ties) + draw(st.integers(0, 6))
    others: list[int | None] = [
        draw(st.sampled_from((0, 1, 5, fig.max_lag, fig.max_lag + 1))) for _ in range(n_others)
    ]
    for back in draw(st.permutations(ties + others)):
        if draw(st.integers(0, 5)) == 0:
            model.step(draw(st.sampled_from((1, fig.token_interval_ms, 50))))
        if back is None:
            model.items.append(Item("event", key=stream, event_time=tie_time, priority=draw(PRIORITIES)))
            _judge(model.buckets[stream], model.clock, max(0, model.clock - tie_time))
        else:
            _event(draw, model, stream, back=back)


@st.composite
def sla_admission_traces(draw: st.DrawFn, invalid_config_rate: int = 0, large_batch_rate: int = 0) -> Trace:
    """A trace of 1..5 batches of 0..4 episodes; ``invalid_config_rate`` and ``large_batch_rate``
    (one batch of LARGE_BATCH or more events with a tie run) are percentages."""
    if invalid_config_rate and draw(st.integers(0, 99)) < invalid_config_rate:
        config = draw(INVALID_CONFIGS)
        # a varied item keeps equal refused configurations from collapsing when traces are deduplicated
        return Trace(AREA, config, ((Item("event", key="orders", event_time=draw(st.integers(0, 10**6))),),))
    config = draw(sla_admission_configs())
    model = _Model(
        {n: _Bucket(figures(s), CLASSES[s["class"]][0] * NANO) for n, s in config["streams"].items()}
    )
    malformed = draw(st.booleans())
    start = draw(st.sampled_from((0, 0, 1000, 10_000)))
    n_batches = draw(st.integers(1, 5))
    large_at = draw(st.integers(0, n_batches - 1)) if draw(st.integers(0, 99)) < large_batch_rate else None
    batches: list[tuple[Item, ...]] = []
    for b in range(n_batches):
        model.items = []
        if b == 0 and start:
            model.step(start)
        if b == 0 and draw(st.booleans()):
            model.items.append(load_item(_metrics(draw)))  # the shedder has a load from the start
        if b == large_at:
            _large_batch(draw, model)
        elif draw(st.integers(0, 9)):
            for _ in range(draw(st.integers(1, 4))):
                _episode(draw, model, malformed)
        batches.append(tuple(model.items))
    return Trace(AREA, config, tuple(batches), draw(restart_points(n_batches)))


# ---- the differential mix and the cases it must reach (spec/traces.md TR-13) ----------

DIFFERENTIAL = ((sla_admission_traces(invalid_config_rate=20, large_batch_rate=12), 1.0),)

CASES: dict[str, str] = {
    "lag_at_max_lag": "an event whose lag equals max_lag passes the lag check (OXS-R6)",
    "lag_just_over": "an event whose lag is max_lag + 1 is rejected for lag (OXS-R5, R6)",
    "event_from_the_future": "an event stamped after its arrival has lag 0 (OXS-R6)",
    "jitter_gap_at_budget": "an event exactly jitter_budget_ms after the reference passes (OXS-R7)",
    "jitter_rejection": "an event past the jitter budget is rejected for jitter (OXS-R5, R7)",
    "jitter_recovery": "the stream's next judged event after a jitter rejection is admitted (OXS-R7)",
    "rate_rejection": "an event finding less than its cost in the bucket is rejected (OXS-R8)",
    "bucket_emptied_exactly": "an admission leaves exactly 0 tokens (OXS-R3, R8)",
    "refill_to_capacity": "a later admission finds the bucket refilled to its capacity (OXS-R8)",
    "fractional_tokens": "an admission leaves a fractional token level (OXS-R3, R8)",
    "capped_refill": "a stream whose rate cap lowers the refill is admitted on refilled tokens (OXS-R3, R4)",
    "shed": "an event the SLA admits is shed under Strict (OXS-R11, R12, R13)",
    "throttle": "an event the SLA admits is throttled under PreferThrottle (OXS-R13)",
    "spared_by_the_draw": "an event kept with a drop probability above 0 and below 1000 (OXS-R11, R12)",
    "critical_under_load": "a critical event is admitted while the load is over the threshold (OXS-R11)",
    "bypass_under_load": "BypassShedder admits while the load is over the threshold (OXS-R13)",
    "load_without_shedder": "a valid load item in a trace without a shedder (OXS-R14, R17)",
    "unregistered_stream": "an event of an unregistered stream is rejected (OXS-R9, R15)",
    "clock_inside_batch": "events of one batch judged at different instants (OXS-R16)",
    **{f"error_{r}": f"an item refused with {r} (OXS-R15, TR-7)" for r in ERROR_REASONS},
    "restart": "a restart point between batches (OXS-R18, TR-5)",
    "empty_batch": "an empty batch still has its progress row (OXS-R17, TR-5)",
    "large_batch": f">= {LARGE_BATCH} events in one batch (OXS-R16, R18)",
    "tied_event_times": "two events of one batch with the same event time (OXS-R16)",
    "long_tie_run": f">= {LONG_TIE_RUN} events of one time in a batch of >= {LARGE_BATCH} (OXS-R16, R18)",
    "invalid_config": "a refused configuration (OXS-R2, R3, R14, TR-6)",
}

RARE: dict[str, str] = {}


def _decision_rows(output: dict[str, Any]) -> list[dict[str, Any]]:
    columns = TABLES[AREA]["decisions"]
    return sorted(
        (dict(zip(columns, r, strict=True)) for r in output["decisions"]),
        key=lambda r: (r["batch"], r["seq"]),
    )


def cases_reached(trace: Trace, output: Any) -> set[str]:
    """The CASES one trace reaches, from the trace and the oracle's canonical output."""
    if isinstance(output, InvalidConfig):
        return {"invalid_config"}
    if not isinstance(output, dict):
        return set()
    error_at = {(b, s) for b, s, _ in output["errors"]}
    reached = batch_shape_cases(trace, error_at)
    reached |= {f"error_{reason}" for _, _, reason in output["errors"]}
    streams = {name: figures(s) for name, s in trace.config.get("streams", {}).items()}
    shedder = shedder_settings(trace.config)
    policy = trace.config.get("policy", "Strict")
    decisions = {(r["batch"], r["seq"]): r for r in _decision_rows(output)}
    nows_of_batch: dict[int, set[int]] = {}
    reference: dict[str, int] = {}  # OXS-R7: the last admitted or jitter-rejected arrival
    last_admit: dict[str, tuple[int, float]] = {}  # the stream's last SLA admission: (now, tokens_left)
    jitter_pending: set[str] = set()
    for b, s, item, now, metrics in arrivals(trace, error_at):
        if item.kind == "load" and shedder is None:
            reached.add("load_without_shedder")
        if item.kind != "event":
            continue
        row = decisions[(b, s)]
        nows_of_batch.setdefault(b, set()).add(now)
        fig = streams.get(row["stream"])
        if fig is None:
            reached.add("unregistered_stream")
            continue
        lag, reason, name = row["lag"], row["reason"], row["stream"]
        if lag == fig.max_lag and reason != "lag":
            reached.add("lag_at_max_lag")
        if lag == fig.max_lag + 1 and reason == "lag":
            reached.add("lag_just_over")
        if row["event_time"] > now and reason != "lag":
            reached.add("event_from_the_future")
        if reason == "lag":
            continue
        if fig.jitter_budget is not None and name in reference and now - reference[name] == fig.jitter_budget:
            reached.add("jitter_gap_at_budget")
        admitted = row["decision"] in SLA_ADMITTED
        if name in jitter_pending and admitted:
            reached.add("jitter_recovery")
        jitter_pending.discard(name)
        if reason == "jitter":
            reached.add("jitter_rejection")
            jitter_pending.add(name)
            reference[name] = now
        if reason == "rate":
            reached.add("rate_rejection")
        if not admitted:
            continue
        if fig.jitter_budget is not None:
            reference[name] = now
        level = row["tokens_left"]
        if level == 0:
            reached.add("bucket_emptied_exactly")
        if level != int(level):
            reached.add("fractional_tokens")
        before = last_admit.get(name)
        if before is not None and level == (fig.capacity_nano - fig.cost_nano) / NANO:
            reached.add("refill_to_capacity")
        if before is not None and fig.capped and now > before[0]:
            refilled = round(before[1] * NANO) + fig.refill_per_ms * (now - before[0])
            if refilled < fig.capacity_nano:
                reached.add("capped_refill")
        last_admit[name] = (now, level)
        if shedder is None:
            continue
        priority = 1 if item.priority is None else item.priority
        score = load_score(metrics, shedder)
        if row["decision"] == "shed":
            reached.add("shed")
        if row["decision"] == "throttle":
            reached.add("throttle")
        over = score > shedder["threshold"]
        if over and policy == "BypassShedder":
            reached.add("bypass_under_load")
        elif over and priority == 3:
            reached.add("critical_under_load")
        elif row["decision"] == "admit" and 0 < drop_probability(score, priority, shedder) < 1000:
            reached.add("spared_by_the_draw")
    if any(len(nows) >= 2 for nows in nows_of_batch.values()):
        reached.add("clock_inside_batch")
    return reached


__all__ = [
    "AREA",
    "CASES",
    "CLASSES",
    "DIFFERENTIAL",
    "ERROR_REASONS",
    "INVALID_CONFIGS",
    "METRIC_NAMES",
    "NANO",
    "RARE",
    "SHEDDER_DEFAULTS",
    "SLA_ADMITTED",
    "UNREGISTERED",
    "Figures",
    "arrivals",
    "cases_reached",
    "drop_probability",
    "figures",
    "load_item",
    "load_score",
    "shedder_draw",
    "shedder_settings",
    "sla_admission_configs",
    "sla_admission_traces",
    "thousandths_of",
]
