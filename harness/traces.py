"""The trace model of spec/traces.md: the input of one engine run.

A trace is a configuration plus an ordered list of micro-batches; a batch is
an ordered list of items (events and control items). Everything here is plain
data, JSON round-trippable, and validated when it is built so that every
engine receives the same well-formed input.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

I64_MIN = -(2**63)
I64_MAX = 2**63 - 1

# TR-3: the item kinds a trace may hold; an area says which of them it accepts.
ITEM_KINDS = (
    "event",
    "clock",
    "idle",
    "remove_key",
    # partitioned watermarks (F064)
    "watermark",
    "active",
    "register_source",
    "add_partition",
    "remove_partition",
    "assign_core",
    # SLA admission (OXS-R15)
    "load",
    # TR-14: the stream's input has ended (areas that hold data back)
    "end",
    # TR-15: a table row whose (stream, batch, seq) another row shares; an error row in every area
    "duplicate_seq",
)


# TR-3: the fields each item kind needs in a per-partition watermark trace (F064-R22),
# in the order a missing one is reported.
PARTITIONED_REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {
    "event": ("source", "partition", "event_time"),
    "watermark": ("source", "partition", "time"),
    "idle": ("source", "partition"),
    "active": ("source", "partition"),
    "register_source": ("source", "count"),
    "add_partition": ("source", "partition"),
    "remove_partition": ("source", "partition"),
    "assign_core": ("source", "partition", "core"),
    "clock": ("time",),
}


class InvalidConfig(ValueError):
    """A trace or operator configuration that breaks its area's rules (TR-6)."""


class InvalidTrace(ValueError):
    """A trace whose shape breaks spec/traces.md (wrong kinds, non-integer times)."""


def saturating_sub(a: int, b: int) -> int:
    """a - b clamped to the i64 range (TR-2)."""
    return max(I64_MIN, min(I64_MAX, a - b))


def saturating_add(a: int, b: int) -> int:
    """a + b clamped to the i64 range (TR-2)."""
    return max(I64_MIN, min(I64_MAX, a + b))


def _check_i64(name: str, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTrace(f"{name} must be an integer number of milliseconds, got {value!r}")
    if not I64_MIN <= value <= I64_MAX:
        raise InvalidTrace(f"{name}={value} is outside the i64 range")


@dataclass(frozen=True)
class Item:
    """One item of a batch (TR-3).

    ``event``: key, partition, source, event_time, value.
    ``clock``: the processing clock moves to ``time``.
    ``idle``: mark ``key`` idle.  ``remove_key``: stop tracking ``key``.
    A missing field that the kind needs is not a trace error: the engine
    reports it as an error row (TR-7), so malformed input can be tested.
    """

    kind: str
    key: str | None = None
    event_time: int | None = None
    value: int = 0
    partition: int | None = None
    source: int | None = None
    time: int | None = None
    count: int | None = None
    core: int | None = None
    # event-time buffer (VELO-R10, R11): the raw event-time cell of a one-message tuple, or the
    # messages of a tuple that holds several, as [stream name, cell] pairs.
    raw: str | int | float | None = None
    messages: tuple[tuple[str, str | int | float | None], ...] | None = None
    # SLA admission (OXS-R15): an event's priority (0 low .. 3 critical) and a load item's
    # metrics as [name, integer] pairs (given as a mapping or pairs, kept as sorted pairs).
    priority: int | None = None
    metrics: tuple[tuple[str, int], ...] | None = None
    # exactly-once aggregation (OXE-R1, R16): a message's id (producer, partition, sequence)
    # and its amount, a JSON value: a number, "NaN", "Infinity", "-Infinity", or a wrong one
    producer: int | None = None
    sequence: int | None = None
    amount: str | int | float | bool | None = None
    # window joins (OXJ-R1): the input an event arrives on, "left" or "right"; any other
    # string is kept so that the area can report it
    side: str | None = None
    # the oxirs pipeline (OXP-R14): the ingress stream an event or a watermark item belongs to
    stream: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ITEM_KINDS:
            raise InvalidTrace(f"unknown item kind {self.kind!r}; expected one of {ITEM_KINDS}")
        if self.kind == "duplicate_seq":
            carried = [f.name for f in fields(self)[1:] if getattr(self, f.name) != f.default]
            if carried:  # TR-15: the row's content is no part of the item, so the trace cannot carry it
                raise InvalidTrace(f"a duplicate_seq item has no fields, got {carried}")
        if self.key is not None and not isinstance(self.key, str):
            raise InvalidTrace(f"key must be a string, got {self.key!r}")
        if self.side is not None and not isinstance(self.side, str):
            raise InvalidTrace(f"side must be a string, got {self.side!r}")
        if self.stream is not None and not isinstance(self.stream, str):
            raise InvalidTrace(f"stream must be a string, got {self.stream!r}")
        _check_i64("event_time", self.event_time)
        _check_i64("time", self.time)
        # TR-3: values are 32-bit so that any window sum of them fits in i64.
        is_int = isinstance(self.value, int) and not isinstance(self.value, bool)
        if not is_int or not -(2**31) <= self.value < 2**31:
            raise InvalidTrace(f"value must be a 32-bit integer, got {self.value!r}")
        for name in ("partition", "source", "count", "core", "priority", "producer", "sequence"):
            _check_i64(name, getattr(self, name))
        if self.metrics is not None:
            given = self.metrics.items() if isinstance(self.metrics, Mapping) else self.metrics
            try:
                metrics = tuple(sorted((name, value) for name, value in given))
            except (TypeError, ValueError):
                raise InvalidTrace(f"metrics must map names to integers, got {self.metrics!r}") from None
            if len({name for name, _ in metrics}) != len(metrics):
                raise InvalidTrace(f"a metric is named twice in {self.metrics!r}")
            for name, value in metrics:
                if not isinstance(name, str):
                    raise InvalidTrace(f"a metric name is a string, got {name!r}")
                _check_i64(f"metric {name}", value)
            object.__setattr__(self, "metrics", metrics)
        # VELO-R10/R11: cells are JSON scalars (a bool or NaN is no JSON number here); the
        # messages are [stream, cell] pairs, kept as tuples; raw and messages exclude each other.
        cells = [self.raw]
        if self.messages is not None:
            if self.raw is not None:
                raise InvalidTrace("an item carries raw or messages, not both")
            pairs = tuple(tuple(m) for m in self.messages)
            if any(len(m) != 2 or not isinstance(m[0], str) for m in pairs):
                raise InvalidTrace(f"messages must be [stream name, cell] pairs, got {self.messages!r}")
            object.__setattr__(self, "messages", pairs)
            cells += [m[1] for m in pairs]
        for cell in cells:
            if isinstance(cell, bool) or not isinstance(cell, (str, int, float, type(None))):
                raise InvalidTrace(f"an event-time cell is a string, a number or null, got {cell!r}")
            if isinstance(cell, float) and not math.isfinite(cell):
                raise InvalidTrace(f"an event-time cell must be a finite number, got {cell!r}")

        if isinstance(self.amount, float) and not math.isfinite(self.amount):
            raise InvalidTrace(f"a non-finite amount is written as a string (OXE-R16), got {self.amount!r}")
        if self.amount is not None and not isinstance(self.amount, (str, int, float)):
            raise InvalidTrace(f"an amount is a JSON scalar, got {self.amount!r}")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name != "kind" and v is not None and not (f.name == "value" and v == 0):
                out[f.name] = dict(v) if f.name == "metrics" else v
        return out

    def describe(self) -> str:
        """A short human form, used when a shrunk trace is printed."""
        if self.kind == "event" and (self.raw is not None or self.messages is not None):
            cell = json.dumps(self.raw if self.messages is None else self.messages)
            return f"event {self.key} raw={cell}" + (f" v={self.value}" if self.value else "")
        if self.kind == "event" and self.stream is not None:
            value = f" v={self.value}" if self.value else ""
            message = "" if self.sequence is None else f" #{self.producer}/{self.partition}/{self.sequence}"
            return f"{self.stream}:{self.key}@{self.event_time}{value}{message}"
        if self.kind == "watermark" and self.stream is not None:
            return f"watermark {self.stream} time={self.time}"
        if self.kind == "event" and self.side is not None:
            extra = f" v={self.value}" if self.value else ""
            return f"{self.side} {self.key}@{self.event_time}{extra}"
        if self.kind == "event" and self.key is not None:
            extra = (f" v={self.value}" if self.value else "") + (
                f" p={self.priority}" if self.priority is not None else ""
            )
            return f"event {self.key}@{self.event_time}{extra}"
        if self.kind == "event" and (self.producer is not None or self.sequence is not None):
            amount = json.dumps(self.amount)
            return f"message {self.producer}/{self.partition}#{self.sequence} {self.key}={amount}"
        if self.kind == "clock":
            return f"clock->{self.time}"
        if self.kind == "duplicate_seq":
            return "duplicate_seq"
        if self.kind == "load":
            return "load " + (",".join(f"{n}={v}" for n, v in self.metrics) if self.metrics else "(none)")
        if self.source is not None or self.partition is not None:
            extra = "".join(
                f" {n}={getattr(self, n)}"
                for n in ("event_time", "time", "count", "core")
                if getattr(self, n) is not None
            )
            return f"{self.kind} {self.source}/{self.partition}{extra}"
        # OXW-R17: a watermark item names its node by key.
        return f"{self.kind} {self.key}" + (f" time={self.time}" if self.time is not None else "")


def _field_type(annotation: str) -> str:
    base = annotation.replace(" | None", "").strip()
    return base if base in ("int", "str") else "json"


# Every item field but ``kind`` with its type: "int" (milliseconds and ids), "str", or
# "json" for fields an area declares with any other type (kept as JSON text where an
# engine needs one column type, as Spark does).
ITEM_FIELD_TYPES: dict[str, str] = {
    f.name: _field_type(str(f.type)) for f in fields(Item) if f.name != "kind"
}


def event(key: str | None, event_time: int | None, value: int = 0, **extra: Any) -> Item:
    return Item("event", key=key, event_time=event_time, value=value, **extra)


def clock(time: int | None) -> Item:
    return Item("clock", time=time)


def idle(key: str | None) -> Item:
    return Item("idle", key=key)


def remove_key(key: str | None) -> Item:
    return Item("remove_key", key=key)


@dataclass(frozen=True)
class Trace:
    """One run's input (TR-1): area, configuration, batches and restart points.

    ``restart_after`` holds batch indices after which the engine must stop,
    keep only its checkpoint, and continue from it (TR-5).
    """

    area: str
    config: Mapping[str, Any]
    batches: tuple[tuple[Item, ...], ...]
    restart_after: frozenset[int] = field(default_factory=frozenset)
    name: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "batches", tuple(tuple(b) for b in self.batches))
        object.__setattr__(self, "restart_after", frozenset(self.restart_after))
        object.__setattr__(self, "config", dict(self.config))
        for b in self.restart_after:
            if not 0 <= b < len(self.batches) - 1:
                raise InvalidTrace(
                    f"restart_after={b} must name a batch followed by another (0..{len(self.batches) - 2})"
                )

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "area": self.area,
            "config": dict(self.config),
            "batches": [[i.to_json() for i in b] for b in self.batches],
            "restart_after": sorted(self.restart_after),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Trace:
        return cls(
            area=data["area"],
            config=data.get("config", {}),
            batches=tuple(tuple(Item(**i) for i in b) for b in data["batches"]),
            restart_after=frozenset(data.get("restart_after", ())),
            name=data.get("name", ""),
        )

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)

    def describe(self) -> str:
        """Readable, paste-able listing (batch by batch) for failure reports."""
        lines = [f"area={self.area} config={json.dumps(dict(self.config), sort_keys=True)}"]
        for i, b in enumerate(self.batches):
            restart = "  [restart after]" if i in self.restart_after else ""
            lines.append(f"  batch {i}: " + (", ".join(x.describe() for x in b) or "(empty)") + restart)
        return "\n".join(lines)


def batches_of(items: Iterable[Sequence[Item]]) -> tuple[tuple[Item, ...], ...]:
    return tuple(tuple(b) for b in items)
