"""The oxirs pipeline's own rules for its settings (spec/pipeline.md OXP-R13), for every engine.

A pipeline's settings are its operators' settings, one mapping each. What the pipeline itself
rules about them is here: the keys it knows, that ``admission`` is required, which settings of
the generator and of the late-data policy it takes, and what a join's ``left`` and ``right``
lists may name. Each operator's own settings are checked by that operator, through the callables
an engine passes (the oracle its oracles, Spark its operators' validation), in the clause's order,
so every engine refuses a configuration with the same first reason.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from harness.traces import InvalidConfig

CONFIG_KEYS = ("admission", "watermarks", "late", "tumbling_join", "session_join", "aggregation")
JOINS = {"tumbling_join": "tumbling_tumbling", "session_join": "session_session"}  # OXP-R2, R13
GENERATOR_SETTINGS = ("advance_threshold", "max_out_of_order_ms")  # OXW-R4
LATE_SETTINGS = ("policy", "max_lateness", "channel")  # no windows of the late-data area

Admission = TypeVar("Admission")
Generator = TypeVar("Generator")
Late = TypeVar("Late")
Join = TypeVar("Join")
Aggregation = TypeVar("Aggregation")


@dataclass(frozen=True)
class JoinOf(Generic[Join]):
    """One join of the pipeline: its settings as its engine checked them, and the streams of each
    side (OXP-R3)."""

    name: str
    join: Join
    left: tuple[str, ...]
    right: tuple[str, ...]

    def side_of(self, stream: str) -> str | None:
        return "left" if stream in self.left else "right" if stream in self.right else None


@dataclass(frozen=True)
class Settings(Generic[Admission, Generator, Late, Join, Aggregation]):
    """A pipeline's settings, each operator's as its engine's validation made it."""

    admission: Admission
    streams: tuple[str, ...]  # the registered ingress streams (OXP-R2)
    generator: Generator
    late: Late
    joins: tuple[JoinOf[Join], ...]
    aggregation: Aggregation


def mapping(name: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidConfig(f"{name} must be a mapping of settings, got {value!r}")
    return value


def join_sides(join: str, settings: Mapping[str, Any], streams: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    """OXP-R13: left and right, non-empty lists of registered streams, no stream twice in one join."""
    sides = []
    for side in ("left", "right"):
        names = settings.get(side)
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise InvalidConfig(f"{join} {side} must be a non-empty list of stream names, got {names!r}")
        unknown = [n for n in names if n not in streams]
        if unknown:
            raise InvalidConfig(f"{join} {side} names streams admission does not register: {unknown}")
        sides.append(tuple(names))
    named = sides[0] + sides[1]
    twice = sorted({n for n in named if named.count(n) > 1})  # on both sides, or twice on one
    if twice:
        raise InvalidConfig(f"{join} names the streams {twice} more than once")
    return sides[0], sides[1]


def read_settings(
    config: Mapping[str, Any],
    admission: Callable[[Mapping[str, Any]], tuple[Admission, Sequence[str]]],
    generator: Callable[[dict[str, Any]], Generator],
    late: Callable[[dict[str, Any]], Late],
    join: Callable[[dict[str, Any]], Join],
    aggregation: Callable[[dict[str, Any]], Aggregation],
) -> Settings[Admission, Generator, Late, Join, Aggregation]:
    """OXP-R13 before any item: the pipeline's rules, and each operator's settings checked by the
    callable given for it (``admission`` also returns the stream names it registers; ``join``
    gets a join's own settings with its kind under ``join`` and without its lists)."""
    unknown = sorted(set(config) - set(CONFIG_KEYS), key=str)
    if unknown:
        raise InvalidConfig(f"unknown pipeline settings {unknown}; known: {list(CONFIG_KEYS)}")
    if "admission" not in config:
        raise InvalidConfig("the setting admission is required: the SLA streams of the pipeline")
    checked_admission, names = admission(mapping("admission", config["admission"]))
    streams = tuple(names)
    watermarks = dict(mapping("watermarks", config.get("watermarks", {})))
    refused = sorted(set(watermarks) - set(GENERATOR_SETTINGS), key=str)
    if refused:
        raise InvalidConfig(f"unknown watermarks settings {refused}; known: {list(GENERATOR_SETTINGS)}")
    checked_generator = generator(watermarks)
    policy = dict(mapping("late", config.get("late", {})))
    refused = sorted(set(policy) - set(LATE_SETTINGS), key=str)
    if refused:
        raise InvalidConfig(f"late settings {refused} are refused: the pipeline's windows are its consumers")
    checked_late = late(policy)
    joins = []
    for name, kind in JOINS.items():
        if name in config:
            settings = dict(mapping(name, config[name]))
            left, right = join_sides(name, settings, streams)
            own = {k: v for k, v in settings.items() if k not in ("left", "right")}
            joins.append(JoinOf(name, join({"join": kind, **own}), left, right))
    checked_aggregation = aggregation(dict(mapping("aggregation", config.get("aggregation", {}))))
    return Settings(
        checked_admission, streams, checked_generator, checked_late, tuple(joins), checked_aggregation
    )


__all__ = [
    "CONFIG_KEYS",
    "GENERATOR_SETTINGS",
    "JOINS",
    "LATE_SETTINGS",
    "JoinOf",
    "Settings",
    "join_sides",
    "read_settings",
]
