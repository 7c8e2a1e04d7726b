"""Exactly-once aggregation's settings: the aggregates, verdicts and totals, the largest window, the
configuration's validation and the state layout version.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.traces import InvalidConfig

LAYOUT_VERSION = 2  # 2: state under each bucket's spread label (scaleout.spread_labels)


OPERATOR = "exactly_once_aggregation"


AGGREGATES = ("count", "sum", "min", "max", "mean")


KIND_CODES = {name: code for code, name in enumerate(AGGREGATES, start=1)}  # OXE-R11's kind bytes


CONFIG_KEYS = ("aggregate", "dedup_window")


MAX_WINDOW = 1_048_576


VERDICTS = ("folded", "duplicate", "outside_window")


TOTALS = ("folded", "duplicates", "outside_window", "keys")  # progress columns (OXE-R18)


# ---- configuration (OXE-R15) -------------------------------------------------------------------


@dataclass(frozen=True)
class StreamConfig:
    aggregate: str = "sum"
    dedup_window: int = 1024


def validate_config(config: Mapping[str, Any]) -> StreamConfig:
    """A trace-style config mapping (OXE-R15) -> StreamConfig, or InvalidConfig."""
    unknown = set(config) - set(CONFIG_KEYS)
    if unknown:
        raise InvalidConfig(f"unknown exactly_once_aggregation settings {sorted(unknown)}")
    aggregate = config.get("aggregate", "sum")
    if not isinstance(aggregate, str) or aggregate not in AGGREGATES:
        raise InvalidConfig(f"aggregate must be one of {list(AGGREGATES)}, got {aggregate!r}")
    window = config.get("dedup_window", 1024)
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or not 1 <= window <= MAX_WINDOW:
        raise InvalidConfig(f"dedup_window must be an integer from 1 to {MAX_WINDOW:,}, got {window!r}")
    return StreamConfig(aggregate, int(window))
