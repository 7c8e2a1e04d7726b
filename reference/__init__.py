"""The oracle: a deliberately simple pure-Python model of every clause in spec/."""

from harness.traces import InvalidConfig
from reference.keyed_watermarks import (
    KeyedTumblingWindowOperator,
    KeyedWatermarkConfig,
    KeyedWatermarkMetrics,
    KeyedWatermarkTracker,
    KeyEvictionPolicy,
    KeyWatermarkState,
    MaxKeysReached,
    WindowResult,
)

__all__ = [
    "InvalidConfig",
    "KeyEvictionPolicy",
    "KeyWatermarkState",
    "KeyedTumblingWindowOperator",
    "KeyedWatermarkConfig",
    "KeyedWatermarkMetrics",
    "KeyedWatermarkTracker",
    "MaxKeysReached",
    "WindowResult",
]
