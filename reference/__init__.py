"""The oracle: a deliberately simple pure-Python model of every clause in spec/."""

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
from harness.traces import InvalidConfig

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
