"""Session windows' settings: the strategies and configuration keys, their validation, the engine's
bucket, block and chunk sizes, and the state layout version.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.traces import I64_MAX, InvalidConfig
from spark_impl.common import require_int

LAYOUT_VERSION = 3  # 3: state under each bucket's spread label (scaleout.spread_labels)


STRATEGIES = ("OnWindowClose", "Final")


CONFIG_KEYS = ("gap", "allowed_lateness", "bounded_delay", "emit_strategy")


DEFAULT_BLOCK_SESSIONS = 128


CHUNK_ROWS_PER_BUCKET = 64  # the default chunk: its summary rows (one per bucket) are 1/64 of its rows


CHUNK_TIME_BITS = 16  # without seq_col a chunk of the order stage is an event-time range of 2**16 ms


# The harness's engine: a trace has a handful of keys and items per batch, and every group costs
# a Python call; three buckets, blocks split past two sessions and chunks of four arrival
# positions still spread each trace over chunks, buckets and blocks, and split blocks as it runs.
ENGINE_BUCKETS = 3


ENGINE_BLOCK_SESSIONS = 2


ENGINE_CHUNK_ROWS = 4


# ---- configuration (F017E-R18) ----------------------------------------------------------


@dataclass(frozen=True)
class StreamConfig:
    gap: int
    allowed_lateness: int = 0
    bounded_delay: int = 0
    emit_strategy: str = "OnWindowClose"


def validate_config(config: Mapping[str, Any]) -> StreamConfig:
    """A trace-style config mapping (F017E-R18) -> StreamConfig, or InvalidConfig."""
    unknown = set(config) - set(CONFIG_KEYS)
    if unknown:
        raise InvalidConfig(f"unknown session_windows settings {sorted(unknown)}")
    if config.get("gap") is None:
        raise InvalidConfig("gap is required")
    strategy = config.get("emit_strategy", "OnWindowClose")
    strategy = getattr(strategy, "value", strategy)  # an enum member is accepted by its value
    if not isinstance(strategy, str) or strategy not in STRATEGIES:
        raise InvalidConfig(f"emit_strategy must be one of {list(STRATEGIES)}, got {strategy!r}")
    return StreamConfig(
        gap=require_int("gap", config["gap"], 1),
        allowed_lateness=require_int("allowed_lateness", config.get("allowed_lateness", 0), 0),
        bounded_delay=require_int("bounded_delay", config.get("bounded_delay", 0), 0),
        emit_strategy=strategy,
    )


def _sat_add(a: np.ndarray, s: int) -> np.ndarray:
    """min(i64 max, a + s) for s >= 0, without wrapping."""
    with np.errstate(over="ignore"):
        return np.where(a > I64_MAX - s, np.int64(I64_MAX), a + np.int64(s))
