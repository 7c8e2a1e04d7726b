"""Window joins (oxirs): the settings of a join and their validation (OXJ-R18), its sides and counters,
and the state layout version."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.traces import InvalidConfig
from spark_impl.common import (
    require_int,
)

LAYOUT_VERSION = 2  # 2: state under each bucket's spread label (scaleout.spread_labels)
OPERATOR = "window_joins"
JOINS: dict[str, tuple[str, ...]] = {  # OXJ-R18: each join's required settings
    "tumbling_tumbling": ("size_ms",),
    "tumbling_sliding": ("left_size_ms", "right_size_ms", "right_slide_ms"),
    "session_session": ("gap_ms",),
}
LATENESS = "allowed_lateness_ms"
SETTINGS = ("size_ms", "left_size_ms", "right_size_ms", "right_slide_ms", "gap_ms", LATENESS)
MAX_RIGHT_SIZE_IN_LEFT_PANES = 256
SIDES = ("left", "right")
LEFT, RIGHT = 0, 1
COUNTERS = ("left_events", "right_events", "pairs_emitted", "late_events_dropped", "open_windows")


# ---- configuration (OXJ-R18) -------------------------------------------------------------------


@dataclass(frozen=True)
class StreamConfig:
    join: str
    size_ms: int = 0
    left_size_ms: int = 0
    right_size_ms: int = 0
    right_slide_ms: int = 0
    gap_ms: int = 0
    allowed_lateness_ms: int = 0

    def settings(self) -> np.ndarray:
        """The settings a checkpoint is bound to, in ``SETTINGS`` order."""
        return np.array([getattr(self, s) for s in SETTINGS], np.int64)

    @property
    def granularity(self) -> int:
        """The width of a slot of the purge index: a pane, or the gap."""
        return {"tumbling_tumbling": self.size_ms, "tumbling_sliding": self.left_size_ms}.get(
            self.join, self.gap_ms
        )


def validate_config(config: Mapping[str, Any]) -> StreamConfig:
    """A trace-style config mapping (OXJ-R18) -> StreamConfig, or InvalidConfig naming the setting."""
    if "join" not in config:
        raise InvalidConfig(f"the setting join is required: one of {list(JOINS)}")
    join = config["join"]
    if not isinstance(join, str) or join not in JOINS:
        raise InvalidConfig(f"join must be one of {list(JOINS)}, got {join!r}")
    unknown = sorted(set(config) - {"join", *SETTINGS})
    if unknown:
        raise InvalidConfig(f"unknown window_joins settings {unknown}")
    unused = sorted(set(config) - {"join", LATENESS, *JOINS[join]})
    if unused:
        raise InvalidConfig(f"settings {unused} are not used by the join {join}")
    values = {}
    for setting in JOINS[join]:
        if setting not in config:
            raise InvalidConfig(f"the join {join} needs the setting {setting}")
        values[setting] = require_int(setting, config[setting], 1)
    values[LATENESS] = require_int(LATENESS, config.get(LATENESS, 0), 0)
    if join == "tumbling_sliding":
        if values["right_slide_ms"] > values["right_size_ms"]:
            raise InvalidConfig(
                f"right_slide_ms {values['right_slide_ms']} is above right_size_ms {values['right_size_ms']}"
            )
        if values["right_size_ms"] > MAX_RIGHT_SIZE_IN_LEFT_PANES * values["left_size_ms"]:
            raise InvalidConfig(
                f"right_size_ms {values['right_size_ms']} is above {MAX_RIGHT_SIZE_IN_LEFT_PANES} * "
                f"left_size_ms ({values['left_size_ms']})"
            )
    return StreamConfig(join, **values)
