"""SLA admission's settings: the classes, policies and shedder ranges, the decisions, reasons and
counters as codes, an agreement's validation and the state layout version.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from harness.traces import I64_MAX, I64_MIN, InvalidConfig

LAYOUT_VERSION = 2  # 2: state under each bucket's spread label (scaleout.spread_labels)


NANO = 10**9  # nano-tokens per token (OXS-R3)


# OXS-R1: class -> (capacity in tokens, refill in tokens per second, default max_lag in ms)
SLA_CLASSES: dict[str, tuple[int, int, int]] = {
    "Bronze": (5, 1, 5000),
    "Silver": (20, 5, 2000),
    "Gold": (50, 20, 500),
    "Platinum": (200, 100, 100),
}


STREAM_KEYS = ("class", "max_events_per_sec", "max_lag", "jitter_budget_ms", "token_cost")


CONFIG_KEYS = ("streams", "policy", "shedder")


POLICIES = ("Strict", "PreferThrottle", "BypassShedder")


SHEDDER_RANGES: dict[str, tuple[int, int, int]] = {  # setting -> (lowest, highest, default), OXS-R14
    "seed": (I64_MIN, I64_MAX, 0),
    "threshold": (0, 999, 800),
    "max_drop": (0, 1000, 1000),
    "queue_capacity": (1, I64_MAX, 1000),
    "latency_target_ms": (1, I64_MAX, 1000),
}


METRIC_NAMES = ("cpu", "memory", "queue_depth", "latency")  # OXS-R10


DECISIONS = ("admit", "reject", "shed", "throttle")


ADMIT, REJECT, SHED, THROTTLE = range(4)


REASONS = (None, "lag", "jitter", "rate", "unregistered_stream")


NO_REASON, BY_LAG, BY_JITTER, BY_RATE, UNREGISTERED = range(5)


COUNTERS = ("admitted", "rejected_lag", "rejected_jitter", "rejected_rate", "shed", "throttled")


# ---- configuration (OXS-R1..R4, R14) ---------------------------------------------------


@dataclass(frozen=True)
class Agreement:
    """One SLA stream's bucket in integers (OXS-R3, R4): nano-tokens and milliseconds."""

    capacity: int
    refill_per_ms: int
    cost: int
    max_lag: int
    jitter_budget: int | None

    @property
    def fill_ms(self) -> int:
        """Milliseconds an empty bucket takes to fill: a longer gap refills no more (OXS-R8)."""
        return -(-self.capacity // self.refill_per_ms)


@dataclass(frozen=True)
class Shedder:
    seed: int = 0
    threshold: int = 800
    max_drop: int = 1000
    queue_capacity: int = 1000
    latency_target_ms: int = 1000


@dataclass(frozen=True)
class SlaConfig:
    streams: Mapping[str, Agreement] = field(default_factory=dict)
    policy: str = "Strict"
    shedder: Shedder | None = None

    @property
    def asks_shedder(self) -> bool:
        """OXS-R13: BypassShedder never asks; without a shedder there is nothing to ask."""
        return self.shedder is not None and self.policy != "BypassShedder"


def _in_thousandths(name: str, value: Any) -> int:
    """OXS-R2, R3: a number in (0, 10^9] with at most three decimals, as thousandths."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidConfig(f"{name} must be a finite number, got {value!r}")
    if value <= 0 or value > 10**9:
        raise InvalidConfig(f"{name} must be above 0 and at most 1000000000, got {value!r}")
    try:
        scaled = Decimal(repr(value)).scaleb(3)  # repr: the float's shortest decimal form
    except InvalidOperation:  # pragma: no cover - finite numbers always parse
        raise InvalidConfig(f"{name} is not a decimal number: {value!r}") from None
    if scaled != scaled.to_integral_value():
        raise InvalidConfig(f"{name} has more than three decimals: {value!r}")
    return int(scaled)


def _milliseconds(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value > I64_MAX:
        raise InvalidConfig(f"{name} must be an integer number of milliseconds >= 0, got {value!r}")
    return value


def agreement_of(name: str, settings: Any) -> Agreement:
    """OXS-R2: one stream's settings, checked; the message names the stream and the setting."""
    where = f"stream {name!r}: "
    if not isinstance(settings, Mapping):
        raise InvalidConfig(f"{where}a stream's configuration is a mapping, got {settings!r}")
    unknown = sorted(set(settings) - set(STREAM_KEYS))
    if unknown:
        raise InvalidConfig(f"{where}unknown settings {unknown}; known: {list(STREAM_KEYS)}")
    sla_class = settings.get("class")
    if not isinstance(sla_class, str) or sla_class not in SLA_CLASSES:
        raise InvalidConfig(f"{where}class must be one of {list(SLA_CLASSES)}, got {sla_class!r}")
    capacity, refill_per_sec, default_lag = SLA_CLASSES[sla_class]
    try:
        rate = settings.get("max_events_per_sec")
        rate_k = None if rate is None else _in_thousandths("max_events_per_sec", rate)
        cost_k = _in_thousandths("token_cost", settings.get("token_cost", 1))
        if cost_k * 10**6 > capacity * NANO:
            raise InvalidConfig(
                f"token_cost {settings.get('token_cost')} exceeds the {sla_class} capacity of {capacity} "
                "tokens: no event could ever be admitted"
            )
        lag = settings.get("max_lag")
        jitter = settings.get("jitter_budget_ms")
        max_lag = default_lag if lag is None else _milliseconds("max_lag", lag)
        jitter_budget = None if jitter is None else _milliseconds("jitter_budget_ms", jitter)
    except InvalidConfig as error:
        raise InvalidConfig(f"{where}{error}") from None
    refill = refill_per_sec * 10**6  # nano-tokens per ms
    if rate_k is not None:
        refill = min(refill, rate_k * cost_k)  # OXS-R4: the cap only lowers the class's rate
    return Agreement(capacity * NANO, refill, cost_k * 10**6, max_lag, jitter_budget)


def validate_config(config: Mapping[str, Any]) -> SlaConfig:
    """A trace-style config mapping (OXS-R14) -> SlaConfig, or InvalidConfig naming the setting."""
    unknown = sorted(set(config) - set(CONFIG_KEYS))
    if unknown:
        raise InvalidConfig(f"unknown sla_admission settings {unknown}; known: {list(CONFIG_KEYS)}")
    given = config.get("streams", {})
    if not isinstance(given, Mapping):
        raise InvalidConfig(f"streams must map stream names to their configuration, got {given!r}")
    streams: dict[str, Agreement] = {}
    for name, settings in given.items():
        if not isinstance(name, str):
            raise InvalidConfig(f"a stream name is a string, got {name!r}")
        streams[name] = agreement_of(name, settings)
    policy = config.get("policy", "Strict")
    if not isinstance(policy, str) or policy not in POLICIES:
        raise InvalidConfig(f"policy must be one of {list(POLICIES)}, got {policy!r}")
    shedder = None
    if "shedder" in config:
        raw = config["shedder"]
        if not isinstance(raw, Mapping):
            raise InvalidConfig(f"shedder must be a mapping of settings, got {raw!r}")
        extra = sorted(set(raw) - set(SHEDDER_RANGES))
        if extra:
            raise InvalidConfig(f"unknown shedder settings {extra}; known: {list(SHEDDER_RANGES)}")
        values: dict[str, int] = {}
        for name, (low, high, default) in SHEDDER_RANGES.items():
            v = raw.get(name, default)
            if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
                raise InvalidConfig(f"shedder {name} must be an integer from {low} to {high}, got {v!r}")
            values[name] = v
        shedder = Shedder(**values)
    return SlaConfig(streams, policy, shedder)
