"""Per-partition watermarks (F064): the settings of a stream and their validation (F064-R24), and
the state layout's version."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.traces import InvalidConfig
from spark_impl.common import (
    require_int,
)

LAYOUT_VERSION = 3  # 3: state under each bucket's spread label (scaleout.spread_labels)
DEFAULT_BLOCK_PARTITIONS = 128
U32_MAX = 2**32 - 1
CONFIG_KEYS = ("idle_timeout", "max_lateness")


# ---- configuration (F064-R24) -----------------------------------------------


@dataclass(frozen=True)
class StreamConfig:
    idle_timeout: int = 60000
    max_lateness: int = 0


def validate_config(config: Mapping[str, Any]) -> StreamConfig:
    """A trace-style config mapping (F064-R24) -> StreamConfig, or InvalidConfig."""
    unknown = set(config) - set(CONFIG_KEYS)
    if unknown:
        raise InvalidConfig(f"unknown partitioned_watermarks settings {sorted(unknown)}")
    return StreamConfig(
        idle_timeout=require_int("idle_timeout", config.get("idle_timeout", 60000), 0),
        max_lateness=require_int("max_lateness", config.get("max_lateness", 0), 0),
    )
