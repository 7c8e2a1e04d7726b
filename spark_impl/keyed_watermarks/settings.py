"""Keyed watermarks (F065): the settings, their defaults and their validation (F065-R20, R26)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.traces import InvalidConfig
from spark_impl.common import require_int as _require_int

LAYOUT_VERSION = 5  # 5: state under each bucket's spread label (scaleout.spread_labels)
POLICIES = ("LeastRecentlyActive", "LowestWatermark", "RejectNew")
DEFAULT_POLICY = POLICIES[0]
CONFIG_KEYS = ("bounded_delay", "idle_timeout", "max_keys", "eviction_policy", "window_size")
COMPACT_KEYS = ("exact_key_count", "sketch_error_rate", "sketch_depth", "shards")  # F065-R26
DEFAULT_BLOCK_KEYS = 128
DEFAULT_SKETCH_ERROR_RATE = 0.01
DEFAULT_SKETCH_DEPTH = 4
MAX_SKETCH_DEPTH = 6  # F065-R27: digest words w2..w7 give the cells of six rows at most
COMPACT_DOMAIN = b"F065-compact\x00"  # F065-R27: prefixes every key's digest
HLL_REGISTERS = 4096  # F065-R34: precision 12
HLL_INDEX_SHIFT = 52

# ---- configuration (F065-R20, R26) -----------------------------------------


@dataclass(frozen=True)
class StreamConfig:
    bounded_delay: int = 5000
    idle_timeout: int = 60000
    max_keys: int | None = None
    eviction_policy: str = DEFAULT_POLICY
    window_size: int | None = None
    # F065-R26: the compact tracker when exact_key_count is set.
    exact_key_count: int | None = None
    sketch_error_rate: float = DEFAULT_SKETCH_ERROR_RATE
    sketch_depth: int = DEFAULT_SKETCH_DEPTH
    shards: int = 1

    @property
    def compact(self) -> bool:
        return self.exact_key_count is not None

    @property
    def width(self) -> int:
        return math.ceil(math.e / self.sketch_error_rate)  # F065-R27: the count-min width

    @property
    def exact_per_shard(self) -> int:
        return (self.exact_key_count or 0) // self.shards  # F065-R27

    @property
    def aging_period(self) -> int:
        return 10 * self.exact_per_shard  # F065-R28


_COMPACT_DEFAULTS: dict[str, Any] = {
    "sketch_error_rate": DEFAULT_SKETCH_ERROR_RATE, "sketch_depth": DEFAULT_SKETCH_DEPTH, "shards": 1,
}  # fmt: skip


def validate_config(config: Mapping[str, Any]) -> StreamConfig:
    """A trace-style config mapping (F065-R20, R26) -> StreamConfig, or InvalidConfig."""
    unknown = set(config) - set(CONFIG_KEYS) - set(COMPACT_KEYS)
    if unknown:
        raise InvalidConfig(f"unknown keyed_watermarks settings {sorted(unknown)}")
    if set(COMPACT_KEYS) & set(config):
        return _validate_compact(config)
    policy = config.get("eviction_policy", DEFAULT_POLICY)
    policy = getattr(policy, "value", policy)  # an enum member is accepted by its value
    if policy not in POLICIES:
        raise InvalidConfig(f"eviction_policy must be one of {list(POLICIES)}, got {policy!r}")
    max_keys = config.get("max_keys")
    window_size = config.get("window_size")
    return StreamConfig(
        bounded_delay=_require_int("bounded_delay", config.get("bounded_delay", 5000), 0),
        idle_timeout=_require_int("idle_timeout", config.get("idle_timeout", 60000), 0),
        max_keys=None if max_keys is None else _require_int("max_keys", max_keys, 1),
        eviction_policy=policy,
        window_size=None if window_size is None else _require_int("window_size", window_size, 1),
    )


def _validate_compact(config: Mapping[str, Any]) -> StreamConfig:
    """F065-R26: the compact tracker's settings; max_keys and window_size cannot join them."""
    if "exact_key_count" not in config:
        named = sorted(set(COMPACT_KEYS) & set(config))
        raise InvalidConfig(f"{named} need exact_key_count (the compact tracker, F065-R26)")
    # A null max_keys or window_size is "not set" (R20); an eviction policy has nothing to apply to.
    clash = sorted(k for k in ("max_keys", "window_size") if config.get(k) is not None)
    clash += ["eviction_policy"] if "eviction_policy" in config else []
    if clash:
        raise InvalidConfig(
            "the compact tracker (exact_key_count) bounds its own memory, picks its exact keys by its own "
            f"rule and keeps no windows; drop {clash}"
        )
    exact = _require_int("exact_key_count", config["exact_key_count"], 1)
    rate = config.get("sketch_error_rate", DEFAULT_SKETCH_ERROR_RATE)
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.00001 <= rate < 1:
        raise InvalidConfig(f"sketch_error_rate must be a number from 0.00001 to below 1, got {rate!r}")
    depth = _require_int("sketch_depth", config.get("sketch_depth", DEFAULT_SKETCH_DEPTH), 1)
    if depth > MAX_SKETCH_DEPTH:
        raise InvalidConfig(f"sketch_depth must be at most {MAX_SKETCH_DEPTH}, got {depth}")
    shards = _require_int("shards", config.get("shards", 1), 1)
    if shards > exact:
        raise InvalidConfig(
            f"shards ({shards}) must be at most exact_key_count ({exact}): every shard holds at least one "
            "exact key"
        )
    return StreamConfig(
        bounded_delay=_require_int("bounded_delay", config.get("bounded_delay", 5000), 0),
        idle_timeout=_require_int("idle_timeout", config.get("idle_timeout", 60000), 0),
        exact_key_count=exact, sketch_error_rate=float(rate), sketch_depth=depth, shards=shards,
    )  # fmt: skip
