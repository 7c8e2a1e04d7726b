"""SLA admission and backpressure (oxirs): the oracle of spec/sla_admission.md.

Deliberately simple: integers, dictionaries and one loop over the items of a
batch. Every rule names its clause id. Times are integer milliseconds; time is
always passed in, never read. Tokens are whole nano-tokens (OXS-R3).
"""

from __future__ import annotations

import copy
import enum
import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from harness.traces import I64_MAX, InvalidConfig, Item, Trace, saturating_sub
from reference.traces import Row, TraceClock, play

NANO = 10**9  # nano-tokens per token (OXS-R3)


# ---- the agreement of a stream (OXS-R1..R4) -------------------------------------------


class SlaClass(enum.Enum):
    """OXS-R1: (bucket capacity in tokens, refill in tokens per second, default max lag in ms)."""

    Bronze = (5, 1, 5000)
    Silver = (20, 5, 2000)
    Gold = (50, 20, 500)
    Platinum = (200, 100, 100)

    @property
    def capacity(self) -> int:
        return self.value[0]

    @property
    def refill_per_sec(self) -> int:
        return self.value[1]

    @property
    def default_max_lag(self) -> int:
        return self.value[2]


STREAM_SETTINGS = ("class", "max_events_per_sec", "max_lag", "jitter_budget_ms", "token_cost")


def thousandths(name: str, value: Any, *, maximum: int) -> int:
    """OXS-R2, R3: a positive number with at most three decimals, as an integer of thousandths."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidConfig(f"{name} must be a finite number, got {value!r}")
    if not 0 < value <= maximum:
        raise InvalidConfig(f"{name} must be above 0 and at most {maximum}, got {value!r}")
    exact = Decimal(repr(value)) * 1000  # repr: the shortest decimal form of a float
    if exact != exact.to_integral_value():
        raise InvalidConfig(f"{name} has more than three decimals: {value!r}")
    return int(exact)


def _millis(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= I64_MAX:
        raise InvalidConfig(f"{name} must be an integer number of milliseconds >= 0, got {value!r}")
    return value


@dataclass(frozen=True)
class StreamSlaConfig:
    """OXS-R2: one stream's agreement, checked when it is built."""

    sla_class: SlaClass
    max_events_per_sec: float | None = None
    max_lag: int | None = None
    jitter_budget_ms: int | None = None
    token_cost: float = 1

    def __post_init__(self) -> None:
        if not isinstance(self.sla_class, SlaClass):
            raise InvalidConfig(f"class must be one of {[c.name for c in SlaClass]}, got {self.sla_class!r}")
        if self.max_events_per_sec is not None:
            thousandths("max_events_per_sec", self.max_events_per_sec, maximum=10**9)
        cost = thousandths("token_cost", self.token_cost, maximum=10**9)
        if cost * 10**6 > self.sla_class.capacity * NANO:
            raise InvalidConfig(
                f"token_cost {self.token_cost} exceeds the {self.sla_class.name} capacity of "
                f"{self.sla_class.capacity} tokens: no event could ever be admitted"
            )
        if self.max_lag is not None:
            _millis("max_lag", self.max_lag)
        if self.jitter_budget_ms is not None:
            _millis("jitter_budget_ms", self.jitter_budget_ms)

    @classmethod
    def from_mapping(cls, settings: Any, stream: str = "") -> StreamSlaConfig:
        """The trace form: ``{"class": "Gold", "max_lag": 500, ...}`` (OXS-R14)."""
        where = f"stream {stream!r}: " if stream else ""
        if not isinstance(settings, Mapping):
            raise InvalidConfig(f"{where}a stream's configuration is a mapping, got {settings!r}")
        unknown = set(settings) - set(STREAM_SETTINGS)
        if unknown:
            raise InvalidConfig(f"{where}unknown settings {sorted(unknown)}; known: {list(STREAM_SETTINGS)}")
        name = settings.get("class")
        if not isinstance(name, str) or name not in SlaClass.__members__:
            raise InvalidConfig(f"{where}class must be one of {list(SlaClass.__members__)}, got {name!r}")
        try:
            return cls(
                SlaClass[name],
                max_events_per_sec=settings.get("max_events_per_sec"),
                max_lag=settings.get("max_lag"),
                jitter_budget_ms=settings.get("jitter_budget_ms"),
                token_cost=settings.get("token_cost", 1),
            )
        except InvalidConfig as error:
            raise InvalidConfig(f"{where}{error}") from None

    # OXS-R3, R4: the bucket in nano-tokens
    @property
    def capacity_nano(self) -> int:
        return self.sla_class.capacity * NANO

    @property
    def cost_nano(self) -> int:
        return thousandths("token_cost", self.token_cost, maximum=10**9) * 10**6

    @property
    def refill_per_ms(self) -> int:
        """Nano-tokens per millisecond: the class's rate, lowered by the rate cap (OXS-R4)."""
        rate = self.sla_class.refill_per_sec * 10**6
        if self.max_events_per_sec is None:
            return rate
        cap = thousandths("max_events_per_sec", self.max_events_per_sec, maximum=10**9)
        return min(rate, cap * thousandths("token_cost", self.token_cost, maximum=10**9))

    @property
    def effective_max_lag(self) -> int:
        return self.sla_class.default_max_lag if self.max_lag is None else self.max_lag


# ---- the controller (OXS-R5..R9) -------------------------------------------------------


class SlaExceeded(Exception):
    """OXS-R9: a check failed; ``check`` is ``lag``, ``jitter`` or ``rate``."""

    def __init__(self, check: str, reason: str, lag_ms: int) -> None:
        super().__init__(reason)
        self.check = check
        self.reason = reason
        self.lag_ms = lag_ms


class UnregisteredStream(KeyError):
    """OXS-R9: an event of a stream that was never registered."""


class StreamAdmissionDecision:
    """OXS-R9: ``StreamAdmissionDecision.Admit(tokens_left, lag_ms)``."""

    @dataclass(frozen=True)
    class Admit:
        tokens_left: float
        lag_ms: int
        level_nano: int = field(default=0, compare=False)


@dataclass
class StreamStats:
    """OXS-R9, R17: a stream's counters since registration."""

    admitted: int = 0
    rejected_lag: int = 0
    rejected_jitter: int = 0
    rejected_rate: int = 0
    shed: int = 0
    throttled: int = 0


@dataclass
class _StreamState:
    config: StreamSlaConfig
    level: int  # nano-tokens (OXS-R8: starts full)
    last_refill: int | None = None
    jitter_reference: int | None = None  # OXS-R7
    arrivals: int = 0  # OXS-R12: n of the next event
    stats: StreamStats = field(default_factory=StreamStats)


def lag_of(event_ts: int, now: int) -> int:
    """OXS-R6: how far behind ``now`` the event is; never negative."""
    return max(0, saturating_sub(now, event_ts))


class StreamAdmissionController:
    """OXS-R5..R9: per stream a lag, a jitter and a rate check, in that order."""

    def __init__(self) -> None:
        self.streams: dict[str, _StreamState] = {}

    def register(self, stream: str, config: StreamSlaConfig) -> None:
        """OXS-R2: registering again starts the stream afresh."""
        self.streams[stream] = _StreamState(config, level=config.capacity_nano)

    def stats(self, stream: str) -> StreamStats:
        return self.streams[stream].stats

    def try_admit(self, stream: str, event_ts: int, now: int) -> StreamAdmissionDecision.Admit:
        st = self.streams.get(stream)
        if st is None:
            raise UnregisteredStream(stream)
        cfg = st.config
        lag = lag_of(event_ts, now)
        if lag > cfg.effective_max_lag:  # OXS-R6: strictly greater fails
            st.stats.rejected_lag += 1
            raise SlaExceeded("lag", f"lag {lag} ms exceeds max_lag {cfg.effective_max_lag} ms", lag)
        if cfg.jitter_budget_ms is not None and st.jitter_reference is not None:
            gap = saturating_sub(now, st.jitter_reference)
            if gap > cfg.jitter_budget_ms:  # OXS-R7
                st.jitter_reference = now  # the event that finds the gap restarts the reference
                st.stats.rejected_jitter += 1
                raise SlaExceeded(
                    "jitter", f"{gap} ms since the jitter reference exceeds jitter_budget_ms "
                    f"{cfg.jitter_budget_ms}", lag,
                )  # fmt: skip
        self._refill(st, now)  # OXS-R8
        if st.level < cfg.cost_nano:
            st.stats.rejected_rate += 1
            raise SlaExceeded(
                "rate", f"bucket holds {st.level / NANO} tokens, below the cost {cfg.token_cost}", lag
            )
        st.level -= cfg.cost_nano
        if cfg.jitter_budget_ms is not None:
            st.jitter_reference = now  # OXS-R7: the last admitted event
        st.stats.admitted += 1
        return StreamAdmissionDecision.Admit(st.level / NANO, lag, st.level)

    @staticmethod
    def _refill(st: _StreamState, now: int) -> None:
        """OXS-R8: refill for the time since the last refill; an earlier ``now`` refills nothing."""
        if st.last_refill is not None and now > st.last_refill:
            gained = st.config.refill_per_ms * (now - st.last_refill)  # Python ints do not overflow
            st.level = min(st.config.capacity_nano, st.level + gained)
        if st.last_refill is None or now > st.last_refill:
            st.last_refill = now


# ---- the load shedder (OXS-R10..R12) ---------------------------------------------------

METRICS = ("cpu", "memory", "queue_depth", "latency")
PRIORITIES = ("low", "normal", "high", "critical")  # OXS-R11, R15: 0..3


def invalid_metrics(metrics: Any) -> bool:
    """OXS-R15: a load report needs at least one known metric, each in its range."""
    if not metrics:
        return True
    for name, value in dict(metrics).items():
        if name not in METRICS or isinstance(value, bool) or not isinstance(value, int):
            return True
        if value < 0 or (name in ("cpu", "memory") and value > 100):
            return True
    return False


@dataclass(frozen=True)
class LoadSheddingConfig:
    """OXS-R14: the shedder's settings."""

    seed: int = 0
    threshold: int = 800
    max_drop: int = 1000
    queue_capacity: int = 1000
    latency_target_ms: int = 1000


def load_score(metrics: Mapping[str, int], config: LoadSheddingConfig) -> int:
    """OXS-R10: the most saturated resource, in thousandths."""
    return max(
        10 * metrics.get("cpu", 0),
        10 * metrics.get("memory", 0),
        min(1000, 1000 * metrics.get("queue_depth", 0) // config.queue_capacity),
        min(1000, 1000 * metrics.get("latency", 0) // config.latency_target_ms),
    )


def drop_probability(score: int, priority: int, config: LoadSheddingConfig) -> int:
    """OXS-R11: thousandths, linear above the threshold, scaled by priority."""
    if score <= config.threshold:
        return 0
    p = (score - config.threshold) * config.max_drop // (1000 - config.threshold)
    return [min(1000, 2 * p), p, p // 2, 0][priority]


def draw(seed: int, stream: str, n: int) -> int:
    """OXS-R12: a counter-based hash in 0..999 of (seed, stream, position in the stream)."""
    digest = hashlib.blake2b(
        stream.encode("utf-8") + b"\x00" + n.to_bytes(8, "big"),
        key=seed.to_bytes(8, "big", signed=True),
        digest_size=8,
    ).digest()
    return int.from_bytes(digest, "big") % 1000


class LoadSheddingManager:
    """OXS-R10..R12: the last reported metrics, and whether an event would be dropped."""

    def __init__(self, config: LoadSheddingConfig | None = None) -> None:
        self.config = config or LoadSheddingConfig()
        self.metrics: dict[str, int] = dict.fromkeys(METRICS, 0)

    def report(self, metrics: Mapping[str, int]) -> None:
        """A metric left out keeps its value (OXS-R15)."""
        self.metrics.update(metrics)

    def load_score(self) -> int:
        return load_score(self.metrics, self.config)

    def should_drop(self, stream: str, n: int, priority: int = 1) -> bool:
        return draw(self.config.seed, stream, n) < drop_probability(self.load_score(), priority, self.config)


# ---- the coordinator (OXS-R13) ---------------------------------------------------------


class SlaBackpressurePolicy(enum.Enum):
    Strict = "Strict"
    PreferThrottle = "PreferThrottle"
    BypassShedder = "BypassShedder"


@dataclass(frozen=True)
class Decision:
    """The coordinator's answer: ``decision`` is admit, reject, shed or throttle (OXS-R13, R17)."""

    decision: str
    reason: str | None = None
    tokens_left: float | None = None
    lag: int | None = None


class SlaBackpressureCoordinator:
    """OXS-R13: SLA rejection first, then the shedder as the policy says."""

    def __init__(
        self,
        controller: StreamAdmissionController,
        shedder: LoadSheddingManager | None = None,
        policy: SlaBackpressurePolicy = SlaBackpressurePolicy.Strict,
    ) -> None:
        self.controller = controller
        self.shedder = shedder
        self.policy = policy

    def decide(self, stream: str, event_ts: int, now: int, priority: int = 1) -> Decision:
        st = self.controller.streams.get(stream)
        n = 0
        if st is not None:
            n = st.arrivals
            st.arrivals += 1  # OXS-R12: every event of the stream counts
        try:
            admit = self.controller.try_admit(stream, event_ts, now)
        except UnregisteredStream:
            return Decision("reject", "unregistered_stream")
        except SlaExceeded as rejected:
            return Decision("reject", rejected.check, lag=rejected.lag_ms)
        assert st is not None
        if self.shedder is None or self.policy is SlaBackpressurePolicy.BypassShedder:
            return Decision("admit", tokens_left=admit.tokens_left, lag=admit.lag_ms)
        if not self.shedder.should_drop(stream, n, priority):
            return Decision("admit", tokens_left=admit.tokens_left, lag=admit.lag_ms)
        # the tokens stay spent: the SLA's answer was final (OXS-R13)
        if self.policy is SlaBackpressurePolicy.PreferThrottle:
            st.stats.throttled += 1
            return Decision("throttle", tokens_left=admit.tokens_left, lag=admit.lag_ms)
        st.stats.shed += 1
        return Decision("shed", tokens_left=admit.tokens_left, lag=admit.lag_ms)


# ---- the stream (OXS-R14..R18) ---------------------------------------------------------

CONFIG_KEYS = {"streams", "policy", "shedder"}
SHEDDER_SETTINGS = {  # name -> (minimum, maximum, default)
    "seed": (-(2**63), I64_MAX, 0),
    "threshold": (0, 999, 800),
    "max_drop": (0, 1000, 1000),
    "queue_capacity": (1, I64_MAX, 1000),
    "latency_target_ms": (1, I64_MAX, 1000),
}
ACCEPTED_KINDS = ("event", "clock", "load")  # OXS-R15
DECISIONS = ("admit", "reject", "shed", "throttle")


@dataclass(frozen=True)
class SlaAdmissionConfig:
    streams: Mapping[str, StreamSlaConfig]
    policy: SlaBackpressurePolicy
    shedder: LoadSheddingConfig | None


def config_from_trace(config: Mapping[str, Any]) -> SlaAdmissionConfig:
    """OXS-R14: the trace's settings, refused with InvalidConfig before any item."""
    unknown = set(config) - CONFIG_KEYS
    if unknown:
        raise InvalidConfig(f"unknown sla_admission settings {sorted(unknown)}; known: {sorted(CONFIG_KEYS)}")
    streams = config.get("streams", {})
    if not isinstance(streams, Mapping):
        raise InvalidConfig(f"streams must map stream names to their configuration, got {streams!r}")
    parsed = {}
    for name, settings in streams.items():
        if not isinstance(name, str):
            raise InvalidConfig(f"a stream name is a string, got {name!r}")
        parsed[name] = StreamSlaConfig.from_mapping(settings, name)
    policy_name = config.get("policy", "Strict")
    if policy_name not in SlaBackpressurePolicy.__members__:
        raise InvalidConfig(
            f"policy must be one of {list(SlaBackpressurePolicy.__members__)}, got {policy_name!r}"
        )
    shedder = None
    if "shedder" in config:
        given = config["shedder"]
        if not isinstance(given, Mapping):
            raise InvalidConfig(f"shedder must be a mapping of settings, got {given!r}")
        extra = set(given) - set(SHEDDER_SETTINGS)
        if extra:
            raise InvalidConfig(
                f"unknown shedder settings {sorted(extra)}; known: {sorted(SHEDDER_SETTINGS)}"
            )
        values = {}
        for name, (low, high, default) in SHEDDER_SETTINGS.items():
            v = given.get(name, default)
            if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
                raise InvalidConfig(f"shedder {name} must be an integer from {low} to {high}, got {v!r}")
            values[name] = v
        shedder = LoadSheddingConfig(**values)
    return SlaAdmissionConfig(parsed, SlaBackpressurePolicy[policy_name], shedder)


class SlaAdmissionStream:
    """Plays an sla_admission trace batch by batch and collects its output tables; what another cut of
    the same items into batches may change: OXS-R18."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config_from_trace(config)
        self.controller = StreamAdmissionController()
        for name, stream_config in self.config.streams.items():
            self.controller.register(name, stream_config)
        # without a shedder settings, load items are still checked and kept (OXS-R14)
        self.shedder = LoadSheddingManager(self.config.shedder)
        self.coordinator = SlaBackpressureCoordinator(
            self.controller, self.shedder if self.config.shedder else None, self.config.policy
        )
        self.clock = TraceClock()
        self.totals = dict.fromkeys(DECISIONS, 0)
        self.out: dict[str, list[Row]] = {t: [] for t in ("decisions", "streams", "progress", "errors")}

    def run_batch(self, b: int, batch: Sequence[Item]) -> None:
        touched: dict[str, None] = {}  # the streams with events, in order of first event
        for seq, item in enumerate(batch):
            error = self._item_error(item)
            if error is not None:
                self.out["errors"].append((b, seq, error))  # OXS-R15: changes nothing
            elif item.kind == "clock":
                assert item.time is not None
                self.clock.now = item.time
            elif item.kind == "load":
                self.shedder.report(dict(item.metrics or ()))
            else:
                self._event(b, seq, item)
                if item.key in self.controller.streams:
                    touched.setdefault(item.key)
        for stream in touched:  # OXS-R17: one row per stream with events in the batch
            st = self.controller.streams[stream]
            s = st.stats
            self.out["streams"].append(
                (b, stream, s.admitted, s.rejected_lag, s.rejected_jitter, s.rejected_rate, s.shed,
                 s.throttled, st.level / NANO)
            )  # fmt: skip
        score = self.shedder.load_score() if self.config.shedder else None
        self.out["progress"].append((b, *(self.totals[d] for d in DECISIONS), score))

    def _item_error(self, item: Item) -> str | None:
        """OXS-R15: the reasons, in this order."""
        if item.kind == "duplicate_seq":
            return "duplicate_seq"  # TR-15
        if item.kind not in ACCEPTED_KINDS:
            return "unsupported_item"
        if item.kind == "event":
            if item.key is None:
                return "missing_stream"
            if item.event_time is None:
                return "missing_event_time"
            if item.priority is not None and not 0 <= item.priority <= 3:
                return "invalid_priority"
            return None
        if item.kind == "clock":
            if item.time is None:
                return "missing_time"
            return "clock_went_backwards" if item.time < self.clock.now else None  # TR-4
        return "invalid_load" if invalid_metrics(item.metrics) else None

    def _event(self, b: int, seq: int, item: Item) -> None:
        assert item.key is not None and item.event_time is not None
        now = self.clock.now  # OXS-R16: the processing clock when the event arrives
        priority = 1 if item.priority is None else item.priority
        d = self.coordinator.decide(item.key, item.event_time, now, priority)
        self.totals[d.decision] += 1
        self.out["decisions"].append(
            (b, seq, item.key, item.event_time, now, d.decision, d.reason, d.tokens_left, d.lag)
        )

    def checkpoint(self) -> dict[str, Any]:
        """OXS-R18: everything that crosses a restart."""
        return copy.deepcopy(
            {
                "clock": self.clock.now,
                "streams": self.controller.streams,
                "metrics": self.shedder.metrics,
                "totals": self.totals,
            }
        )

    def restore(self, snapshot: dict[str, Any]) -> None:
        snapshot = copy.deepcopy(snapshot)
        self.clock = TraceClock(snapshot["clock"])
        self.controller.streams = snapshot["streams"]
        self.shedder.metrics = snapshot["metrics"]
        self.totals = snapshot["totals"]


def run_trace(trace: Trace) -> dict[str, list[Row]]:
    """Plays an sla_admission trace and returns its observable output tables."""
    return play(trace, SlaAdmissionStream)


__all__ = [
    "Decision",
    "LoadSheddingConfig",
    "LoadSheddingManager",
    "SlaAdmissionConfig",
    "SlaAdmissionStream",
    "SlaBackpressureCoordinator",
    "SlaBackpressurePolicy",
    "SlaClass",
    "SlaExceeded",
    "StreamAdmissionController",
    "StreamAdmissionDecision",
    "StreamSlaConfig",
    "StreamStats",
    "UnregisteredStream",
    "config_from_trace",
    "draw",
    "drop_probability",
    "lag_of",
    "load_score",
    "run_trace",
]
