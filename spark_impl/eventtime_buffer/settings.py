"""The reorder buffer's settings: the trace's configuration keys, the parser units and their validation
(VELO-R1..R4, R7), and the state layout version.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.traces import I64_MAX, InvalidConfig

LAYOUT_VERSION = 3  # 3: state under each bucket's spread label (scaleout.spread_labels)


# VELO-R3, R4: unit of each parser name as (numerator, denominator) in ms per unit.
BUILTIN_UNITS: dict[str, tuple[int, int]] = {"unixtimestamp_s": (1000, 1), "unixtimestamp_ms": (1, 1)}


CATALOGUE_UNITS: dict[str, tuple[int, int]] = {"unixtimestamp": (1000, 1), "unixtimestamp_us": (1, 1000)}


CONFIG_KEYS = (
    "stream_name", "columns", "eventtime_column", "eventtime_type", "joined_streams",
    "register_parsers", "eventtime_enabled", "late_tolerance",
)  # fmt: skip


# ---- configuration (VELO-R1..R4, R7) -------------------------------------------


@dataclass(frozen=True)
class StreamConfig:
    """A stream's checked settings: mode, tolerance and the unit of every declaring stream."""

    eventtime_enabled: bool = False
    late_tolerance: int = 0
    input_stream: str = "input"
    # stream name -> (num, den) of its event-time parser, or None without a declaration
    units: Mapping[str, tuple[int, int] | None] = field(default_factory=dict)


def _declaration(where: str, conf: Mapping[str, Any], units: Mapping[str, tuple[int, int]]) -> Any:
    """VELO-R1, R2: columns, and the declared parser's unit (None without a declaration)."""
    columns = conf.get("columns", [])
    if not isinstance(columns, list) or any(not isinstance(c, str) or c == "" for c in columns):
        raise InvalidConfig(f"{where}: columns must be a list of non-empty strings, got {columns!r}")
    if len(columns) != len(set(columns)):
        raise InvalidConfig(f"{where}: columns repeat a name: {columns}")
    column, type_name = conf.get("eventtime_column"), conf.get("eventtime_type")
    if column is None and type_name is None:
        return None
    if not isinstance(column, str) or not isinstance(type_name, str):
        raise InvalidConfig(f"{where}: eventtime_column and eventtime_type are two strings, set together")
    if column not in columns:
        raise InvalidConfig(f"{where}: eventtime_column {column!r} is missing from columns {columns}")
    if type_name not in units:
        raise InvalidConfig(f"{where}: eventtime_type {type_name!r} is not registered ({sorted(units)})")
    return units[type_name]


def validate_config(config: Mapping[str, Any]) -> StreamConfig:
    """A trace-style config mapping (spec/eventtime_buffer.md VELO-R1) -> StreamConfig, or InvalidConfig."""
    unknown = set(config) - set(CONFIG_KEYS)
    if unknown:
        raise InvalidConfig(f"unknown eventtime_buffer settings {sorted(unknown)}")
    units = dict(BUILTIN_UNITS)
    extra = config.get("register_parsers", [])
    if not isinstance(extra, list):
        raise InvalidConfig(f"register_parsers must be a list, got {extra!r}")
    for name in extra:
        if not isinstance(name, str) or name not in CATALOGUE_UNITS:
            raise InvalidConfig(
                f"register_parsers: {name!r} is not a catalogue parser ({sorted(CATALOGUE_UNITS)})"
            )
        if name in units:
            raise InvalidConfig(f"register_parsers: {name!r} is registered already")
        units[name] = CATALOGUE_UNITS[name]
    input_name = config.get("stream_name", "input")
    joined = config.get("joined_streams", {})
    if not isinstance(joined, dict):
        raise InvalidConfig(f"joined_streams must be an object, got {joined!r}")
    declared: dict[str, tuple[int, int] | None] = {}
    for name, conf in [(input_name, config), *joined.items()]:
        if not isinstance(name, str) or name == "":
            raise InvalidConfig(f"a stream name must be a non-empty string, got {name!r}")
        if name in declared:
            raise InvalidConfig(f"stream {name!r} is defined twice")
        if conf is not config and (not isinstance(conf, dict) or set(conf) - set(CONFIG_KEYS[1:4])):
            raise InvalidConfig(f"joined stream {name!r}: only columns, eventtime_column, eventtime_type")
        declared[name] = _declaration(f"stream {name!r}", conf, units)
    enabled = config.get("eventtime_enabled", False)
    if not isinstance(enabled, bool):
        raise InvalidConfig(f"eventtime_enabled must be true or false, got {enabled!r}")
    tolerance = config.get("late_tolerance", 0)
    if isinstance(tolerance, bool) or not isinstance(tolerance, int) or not 0 <= tolerance <= I64_MAX:
        raise InvalidConfig(f"late_tolerance must be an integer from 0 to {I64_MAX}, got {tolerance!r}")
    if enabled and all(u is None for u in declared.values()):
        raise InvalidConfig("eventtime_enabled needs a stream with eventtime_column and eventtime_type")
    return StreamConfig(enabled, tolerance, input_name, declared)
