"""The oracle: a deliberately simple pure-Python model of every clause in spec/."""

from harness.traces import InvalidConfig
from reference.eventtime_buffer import (
    DuplicateEventtimeType,
    EventtimeParseError,
    EventtimeTypeRegistry,
    PhysicalEventtimeWatermark,
    PhysicalProcessTimeWatermark,
    UnknownEventtimeType,
    plan_watermark_stage,
)
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
from reference.late_data import (
    AllowedLatenessTracker,
    LateDataHandler,
    LateDataPolicy,
    SideOutputRouter,
)
from reference.partitioned_watermarks import (
    CoreWatermarkState,
    InvalidPartition,
    PartitionedWatermarkMetrics,
    PartitionedWatermarkTracker,
    PartitionId,
    PartitionWatermarkState,
    SourceNotFound,
    UnknownPartition,
    collect_watermarks,
)

__all__ = [
    "DuplicateEventtimeType",
    "EventtimeParseError",
    "EventtimeTypeRegistry",
    "PhysicalEventtimeWatermark",
    "PhysicalProcessTimeWatermark",
    "UnknownEventtimeType",
    "plan_watermark_stage",
    "AllowedLatenessTracker",
    "LateDataHandler",
    "LateDataPolicy",
    "SideOutputRouter",
    "CoreWatermarkState",
    "InvalidConfig",
    "InvalidPartition",
    "PartitionId",
    "PartitionWatermarkState",
    "PartitionedWatermarkMetrics",
    "PartitionedWatermarkTracker",
    "SourceNotFound",
    "UnknownPartition",
    "collect_watermarks",
    "KeyEvictionPolicy",
    "KeyWatermarkState",
    "KeyedTumblingWindowOperator",
    "KeyedWatermarkConfig",
    "KeyedWatermarkMetrics",
    "KeyedWatermarkTracker",
    "MaxKeysReached",
    "WindowResult",
]
