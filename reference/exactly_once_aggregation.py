"""Exactly-once aggregation (oxirs): the oracle of spec/exactly_once_aggregation.md.

Deliberately simple: dictionaries, sets and one loop over the items of a
batch. Every rule names its clause id. Amounts are Python floats (IEEE 754
doubles, additions rounded to nearest, ties to even); counts are Python ints.
A restart point of a trace checkpoints the aggregator into an in-memory state
backend and restores a new aggregator from it: the bytes of OXE-R13 are all
that crosses.
"""

from __future__ import annotations

import math
import os
import struct
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from harness.traces import I64_MAX, I64_MIN, InvalidConfig, Item, Trace
from reference.traces import Row, play

U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1

KINDS = ("count", "sum", "min", "max", "mean")  # OXE-R4
KIND_CODES = {"count": 1, "sum": 2, "min": 3, "max": 4, "mean": 5}  # OXE-R11
VERDICTS = ("folded", "duplicate", "outside_window")  # OXE-R3
MAX_DEDUP_WINDOW = 1_048_576  # OXE-R15
CANONICAL_NAN_BITS = 0x7FF8000000000000  # OXE-R9
LAYOUT_VERSION = 1
AGGREGATE_MAGIC, MEMORY_MAGIC, CHECKPOINT_MAGIC = b"OXEA", b"OXED", b"OXEC"  # OXE-R11..R13


class StateDecodeError(ValueError):
    """OXE-R14: bytes that ``encode`` did not write; the message names what is wrong."""


class AmountError(ValueError):
    """OXE-R16: an amount that is no double; ``reason`` is missing_amount or invalid_amount."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


# ---- doubles (OXE-R7..R9, R16, R17) ----------------------------------------------------------


def _bits(x: float) -> int:
    """OXE-R9: every NaN has the canonical bits."""
    if math.isnan(x):
        return CANONICAL_NAN_BITS
    return int.from_bytes(struct.pack("<d", x), "little")


def _canonical(x: float) -> float:
    return math.nan if math.isnan(x) else x


def double_text(x: float) -> str:
    """OXE-R17: NaN, Infinity, -Infinity, else the shortest decimal that reads back (Python's repr)."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return repr(float(x))


NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}  # OXE-R16


def parse_amount(value: Any) -> float:
    """OXE-R16: a message's amount (a JSON value) as a double, or AmountError with its reason."""
    if value is None:
        raise AmountError("missing_amount", "the amount is absent or null")
    if isinstance(value, bool):
        raise AmountError("invalid_amount", f"{value!r} is no number")
    if isinstance(value, int):
        try:
            return float(value)  # the double nearest to the exact value
        except OverflowError:
            raise AmountError("invalid_amount", f"{value} rounds beyond the largest double") from None
    if isinstance(value, float):
        if not math.isfinite(value):
            raise AmountError("invalid_amount", "a non-finite amount is written as a string")
        return value
    if isinstance(value, str) and value in NON_FINITE:
        return NON_FINITE[value]
    raise AmountError("invalid_amount", f"{value!r} is no JSON number and none of {list(NON_FINITE)}")


def _amount_of_call(amount: Any) -> float:
    """OXE-R10: the API's amount is a number; NaN becomes the canonical NaN (R9)."""
    if isinstance(amount, bool) or not isinstance(amount, (int, float)):
        raise ValueError(f"an amount is a number, got {amount!r}")
    try:
        return _canonical(float(amount))
    except OverflowError:
        raise ValueError(f"the amount {amount} rounds beyond the largest double") from None


def _below(a: float, b: float) -> bool:
    """OXE-R8: a < b in IEEE 754's total order for non-NaN doubles: -0.0 below +0.0."""
    return a < b or (a == b and math.copysign(1.0, a) < math.copysign(1.0, b))


# ---- message ids (OXE-R1) --------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class MessageId:
    """OXE-R1: (producer, partition, sequence); (producer, partition) is the channel."""

    producer: int
    partition: int
    sequence: int

    @property
    def channel(self) -> tuple[int, int]:
        return (self.producer, self.partition)

    def check(self) -> None:
        """OXE-R10, R16: signed 64-bit producer and partition, a non-negative 64-bit sequence."""
        for name in ("producer", "partition", "sequence"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"a message id's {name} is an integer, got {v!r}")
        for name in ("producer", "partition"):
            if not I64_MIN <= getattr(self, name) <= I64_MAX:
                raise ValueError(f"{name} {getattr(self, name)} is outside the signed 64-bit range")
        if not 0 <= self.sequence <= U64_MAX:
            raise ValueError(f"sequence {self.sequence} is not a non-negative 64-bit integer")


# ---- aggregate values (OXE-R4..R9) -----------------------------------------------------------


@dataclass(frozen=True, eq=False)
class AggregateValue:
    """OXE-R4..R8: ``kind`` is count, sum, min, max or mean; ``number`` is the double of
    Sum, Min and Max and the sum of Mean; ``count`` the count of Count and Mean.
    Two values are equal when their kinds, counts and doubles' bits are (NaN is one value, R9;
    -0.0 is not +0.0, R8)."""

    kind: str
    number: float | None = None
    count: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"an aggregate's kind is one of {KINDS}, got {self.kind!r}")
        has_number, has_count = self.kind != "count", self.kind in ("count", "mean")
        if has_number != (self.number is not None) or has_count != (self.count is not None):
            holds = {"count": "a count", "mean": "a double and a count"}.get(self.kind, "a double")
            raise ValueError(f"a {self.kind} value holds {holds} only (OXE-R11)")
        if self.number is not None:
            object.__setattr__(self, "number", _canonical(float(self.number)))  # OXE-R9
        if self.count is not None and (isinstance(self.count, bool) or not 1 <= self.count <= U64_MAX):
            raise ValueError(f"a count is from 1 to 2**64 - 1 (OXE-R5), got {self.count!r}")

    def _identity(self) -> tuple[str, int | None, int | None]:
        return (self.kind, None if self.number is None else _bits(self.number), self.count)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AggregateValue) and self._identity() == other._identity()

    def __hash__(self) -> int:
        return hash(self._identity())

    def __repr__(self) -> str:
        if self.number is None:
            return f"Count({self.count})"
        if self.kind == "mean":
            return f"Mean(sum={double_text(self.number)}, count={self.count})"
        return f"{self.kind.capitalize()}({double_text(self.number)})"

    @property
    def mean(self) -> float:
        """OXE-R7: sum / count, computed, never stored."""
        if self.kind != "mean" or self.number is None or not self.count:
            raise ValueError(f"{self!r} is no Mean")
        return self.number / self.count

    @staticmethod
    def first(kind: str, amount: float) -> AggregateValue:
        """OXE-R5: the value the key's first folded message gives."""
        if kind == "count":
            return Count(1)
        if kind == "mean":
            return Mean(amount, 1)
        return AggregateValue(kind, amount)

    def folded(self, amount: float) -> AggregateValue:
        """OXE-R6..R8: the value after one more folded amount."""
        if self.kind == "count":
            assert self.count is not None
            return Count(self.count + 1)  # OXE-R6: every amount counts, NaN too
        assert self.number is not None
        if self.kind == "sum":
            return Sum(self.number + amount)  # OXE-R7: one IEEE addition in fold order
        if self.kind == "mean":
            assert self.count is not None
            return Mean(self.number + amount, self.count + 1)
        if math.isnan(self.number) or math.isnan(amount):
            return AggregateValue(self.kind, math.nan)  # OXE-R8: NaN absorbs
        if self.kind == "min":
            return Min(amount if _below(amount, self.number) else self.number)
        return Max(amount if _below(self.number, amount) else self.number)


def Count(n: int) -> AggregateValue:  # noqa: N802 - the spec's constructor names
    return AggregateValue("count", count=n)


def Sum(x: float) -> AggregateValue:  # noqa: N802
    return AggregateValue("sum", x)


def Min(x: float) -> AggregateValue:  # noqa: N802
    return AggregateValue("min", x)


def Max(x: float) -> AggregateValue:  # noqa: N802
    return AggregateValue("max", x)


def Mean(sum: float, count: int) -> AggregateValue:  # noqa: N802, A002 - the spec's field name
    return AggregateValue("mean", sum, count)


# ---- reading bytes (OXE-R14) -----------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes, what: str) -> None:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise StateDecodeError(f"{what}: bytes expected, got {type(data).__name__}")
        self.data, self.at, self.what = bytes(data), 0, what

    def take(self, n: int, of: str) -> bytes:
        if self.at + n > len(self.data):
            raise StateDecodeError(
                f"{self.what}: the bytes end early: {of} needs {n} bytes at offset {self.at}, "
                f"{len(self.data) - self.at} are left"
            )
        out = self.data[self.at : self.at + n]
        self.at += n
        return out

    def unpack(self, fmt: str, of: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), of))[0]

    def header(self, magic: bytes) -> None:
        got = self.take(4, "the magic")
        if got != magic:
            raise StateDecodeError(f"{self.what}: wrong magic {got!r}, expected {magic!r}")
        version = self.unpack("<H", "the layout version")
        if version != LAYOUT_VERSION:
            raise StateDecodeError(f"{self.what}: layout version {version}, this reader reads version 1 only")

    def double(self, of: str) -> float:
        raw = self.take(8, of)
        x: float = struct.unpack("<d", raw)[0]
        if math.isnan(x) and int.from_bytes(raw, "little") != CANONICAL_NAN_BITS:
            raise StateDecodeError(f"{self.what}: {of} is a NaN other than the canonical one (OXE-R9)")
        return x

    def end(self) -> None:
        if self.at != len(self.data):
            left = len(self.data) - self.at
            raise StateDecodeError(f"{self.what}: {left} bytes left over after the last entry")


def _double_bytes(x: float) -> bytes:
    return _bits(x).to_bytes(8, "little")  # OXE-R9, R11


# ---- the aggregate state (OXE-R11) -----------------------------------------------------------


class PartitionAggregateState:
    """OXE-R5, R11: each key's value; iteration gives (key, value) in the order of the keys' UTF-8 bytes."""

    def __init__(self, values: Mapping[str, AggregateValue] | None = None) -> None:
        self._values: dict[str, AggregateValue] = {}
        for key, value in (values or {}).items():
            self.put(key, value)

    def get(self, key: str) -> AggregateValue | None:
        return self._values.get(key)

    def put(self, key: str, value: AggregateValue) -> None:
        if not isinstance(key, str):
            raise ValueError(f"a key is a string, got {key!r}")
        key.encode("utf-8")  # a lone surrogate is no UTF-8 key: UnicodeEncodeError, a ValueError
        if not isinstance(value, AggregateValue):
            raise ValueError(f"a value is an AggregateValue, got {value!r}")
        self._values[key] = value

    def __iter__(self) -> Iterator[tuple[str, AggregateValue]]:
        for key in sorted(self._values, key=lambda k: k.encode("utf-8")):
            yield key, self._values[key]

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PartitionAggregateState) and self._values == other._values

    def __repr__(self) -> str:
        return f"PartitionAggregateState({dict(self)!r})"

    def copy(self) -> PartitionAggregateState:
        return PartitionAggregateState(self._values)

    def encode(self) -> bytes:
        """OXE-R11: magic, version, key count, then per key in UTF-8 byte order its length,
        bytes, kind and payload."""
        out = [AGGREGATE_MAGIC, struct.pack("<HI", LAYOUT_VERSION, len(self._values))]
        for key, value in self:
            raw = key.encode("utf-8")
            out += [struct.pack("<I", len(raw)), raw, bytes([KIND_CODES[value.kind]])]
            if value.number is not None:
                out.append(_double_bytes(value.number))
            if value.count is not None:
                out.append(struct.pack("<Q", value.count))
        return b"".join(out)

    @classmethod
    def decode(cls, data: bytes) -> PartitionAggregateState:
        """OXE-R14: exactly what ``encode`` writes, else StateDecodeError."""
        r = _Reader(data, "aggregate state")
        r.header(AGGREGATE_MAGIC)
        n = r.unpack("<I", "the key count")
        state = cls()
        previous: bytes | None = None
        kinds = {code: kind for kind, code in KIND_CODES.items()}
        for i in range(n):
            raw = r.take(r.unpack("<I", f"key {i}'s length"), f"key {i}")
            try:
                key = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise StateDecodeError(f"aggregate state: key {i} ({raw!r}) is not UTF-8") from None
            if previous is not None and raw <= previous:
                raise StateDecodeError(
                    f"aggregate state: key {key!r} is not above the key before it ({previous!r}): "
                    "keys are in strictly ascending order of their bytes"
                )
            previous = raw
            code = r.take(1, f"key {key!r}'s kind")[0]
            if code not in kinds:
                raise StateDecodeError(f"aggregate state: key {key!r} has an unknown kind {code}")
            kind = kinds[code]
            number = r.double(f"key {key!r}'s double") if kind != "count" else None
            count = r.unpack("<Q", f"key {key!r}'s count") if kind in ("count", "mean") else None
            if count == 0:
                raise StateDecodeError(
                    f"aggregate state: key {key!r} holds a {kind} of count 0: a value exists only "
                    "after a folded message (OXE-R5)"
                )
            state._values[key] = AggregateValue(kind, number, count)
        r.end()
        return state


# ---- the de-duplication memory (OXE-R2, R3, R12) ---------------------------------------------


@dataclass
class ChannelMemory:
    """OXE-R2: the greatest folded sequence and the folded sequences in (high - window, high]."""

    high: int
    folded: set[int] = field(default_factory=set)


class DedupMemory:
    """OXE-R2, R3: per channel what was folded, within the window."""

    def __init__(self, window: int) -> None:
        _check_window(window, ValueError)
        self.window = window
        self.channels: dict[tuple[int, int], ChannelMemory] = {}

    def verdict(self, message_id: MessageId) -> str:
        """OXE-R3: folded, duplicate or outside_window; changes nothing."""
        memory = self.channels.get(message_id.channel)
        s = message_id.sequence
        if memory is None or s > memory.high:
            return "folded"
        if s <= memory.high - self.window:
            return "outside_window"
        return "duplicate" if s in memory.folded else "folded"

    def remember(self, message_id: MessageId) -> None:
        """OXE-R3.1: the sequence is remembered, high moves up, what leaves the window is forgotten."""
        memory = self.channels.setdefault(message_id.channel, ChannelMemory(message_id.sequence))
        memory.high = max(memory.high, message_id.sequence)
        memory.folded.add(message_id.sequence)
        memory.folded = {s for s in memory.folded if s > memory.high - self.window}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DedupMemory) and (self.window, self.channels) == (
            other.window,
            other.channels,
        )

    def __repr__(self) -> str:
        channels = {c: (m.high, sorted(m.folded)) for c, m in sorted(self.channels.items())}
        return f"DedupMemory(window={self.window}, channels={channels})"

    def copy(self) -> DedupMemory:
        out = DedupMemory(self.window)
        out.channels = {c: ChannelMemory(m.high, set(m.folded)) for c, m in self.channels.items()}
        return out

    def encode(self) -> bytes:
        """OXE-R12: magic, version, window, channel count, then per channel in (producer,
        partition) order: both, high, the count of remembered sequences and those, ascending."""
        out = [MEMORY_MAGIC, struct.pack("<HQI", LAYOUT_VERSION, self.window, len(self.channels))]
        for (producer, partition), memory in sorted(self.channels.items()):
            sequences = sorted(memory.folded)
            out.append(struct.pack("<qqQI", producer, partition, memory.high, len(sequences)))
            out.append(struct.pack(f"<{len(sequences)}Q", *sequences))
        return b"".join(out)

    @classmethod
    def decode(cls, data: bytes) -> DedupMemory:
        """OXE-R14: exactly what ``encode`` writes, else StateDecodeError."""
        r = _Reader(data, "de-duplication memory")
        r.header(MEMORY_MAGIC)
        window = r.unpack("<Q", "the window")
        _check_window(window, StateDecodeError)
        memory = cls(window)
        n = r.unpack("<I", "the channel count")
        previous: tuple[int, int] | None = None
        for _ in range(n):
            channel = (r.unpack("<q", "a producer"), r.unpack("<q", "a partition"))
            where = f"de-duplication memory: channel {channel}"
            if previous is not None and channel <= previous:
                raise StateDecodeError(f"{where} is not above the channel before it {previous}: "
                                       "channels are in strictly ascending order")  # fmt: skip
            previous = channel
            high = r.unpack("<Q", f"channel {channel}'s high")
            m = r.unpack("<I", f"channel {channel}'s sequence count")
            if m > window:
                raise StateDecodeError(f"{where} remembers {m} sequences, more than its window {window}")
            sequences = [r.unpack("<Q", f"channel {channel}'s sequence") for _ in range(m)]
            if any(b <= a for a, b in zip(sequences, sequences[1:])):
                raise StateDecodeError(f"{where}: sequences not in strictly ascending order: {sequences}")
            outside = [s for s in sequences if not high - window < s <= high]
            if outside:
                raise StateDecodeError(
                    f"{where}: sequence {outside[0]} is outside its window ({high - window}, {high}]"
                )
            if not sequences or sequences[-1] != high:
                raise StateDecodeError(
                    f"{where}: its high {high} is not among its remembered sequences "
                    "(the greatest folded sequence is always remembered, OXE-R2)"
                )
            memory.channels[channel] = ChannelMemory(high, set(sequences))
        r.end()
        return memory


def _check_window(window: Any, error: type[ValueError]) -> None:
    if isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= MAX_DEDUP_WINDOW:
        raise error(f"dedup_window is an integer from 1 to {MAX_DEDUP_WINDOW}, got {window!r}")


# ---- checkpoints and state backends (OXE-R13) ------------------------------------------------


def encode_checkpoint(aggregates: PartitionAggregateState, memory: DedupMemory) -> bytes:
    """OXE-R13: magic, version, the aggregate encoding's length, it, then the memory's encoding."""
    state = aggregates.encode()
    return CHECKPOINT_MAGIC + struct.pack("<HI", LAYOUT_VERSION, len(state)) + state + memory.encode()


def decode_checkpoint(data: bytes) -> tuple[PartitionAggregateState, DedupMemory]:
    """OXE-R13, R14: the two states of one checkpoint value, refused as a whole when damaged."""
    r = _Reader(data, "checkpoint")
    r.header(CHECKPOINT_MAGIC)
    length = r.unpack("<I", "the aggregate encoding's length")
    aggregates = PartitionAggregateState.decode(r.take(length, "the aggregate encoding"))
    return aggregates, DedupMemory.decode(r.data[r.at :])


@runtime_checkable
class StateBackend(Protocol):
    """OXE-R13: where checkpoints live: one value per key, written whole."""

    def get(self, key: bytes) -> bytes | None: ...

    def put(self, key: bytes, value: bytes) -> None: ...


class InMemoryStateBackend:
    """OXE-R13: a dictionary."""

    def __init__(self) -> None:
        self.values: dict[bytes, bytes] = {}

    def get(self, key: bytes) -> bytes | None:
        return self.values.get(bytes(key))

    def put(self, key: bytes, value: bytes) -> None:
        self.values[bytes(key)] = bytes(value)

    def copy(self) -> InMemoryStateBackend:
        out = InMemoryStateBackend()
        out.values = dict(self.values)
        return out


class FileStateBackend:
    """OXE-R13: one file per key, named by the key's hex digits; a value is written to a
    temporary file of the same directory and renamed over the old one, so a reader sees
    the old value or the new one, whole."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def _path(self, key: bytes) -> Path:
        if not key:
            raise ValueError("a state key has at least one byte (its file is named by its hex digits)")
        return self.directory / bytes(key).hex()

    def get(self, key: bytes) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None

    def put(self, key: bytes, value: bytes) -> None:
        path = self._path(key)
        fd, temporary = tempfile.mkstemp(prefix=".tmp-", dir=self.directory)  # hex names never start with "."
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(bytes(value))
                f.flush()
                os.fsync(f.fileno())
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise


# ---- the aggregator (OXE-R10, R13, R15) ------------------------------------------------------

CONFIG_KEYS = ("aggregate", "dedup_window")  # OXE-R15: a trace's settings


@dataclass(frozen=True)
class ExactlyOnceAggregatorConfig:
    """OXE-R13, R15: the kind, the window, and the backend key checkpoints go under."""

    aggregate: str = "sum"
    dedup_window: int = 1024
    state_key: str | bytes = "aggregator/state"

    def __post_init__(self) -> None:
        if not isinstance(self.aggregate, str) or self.aggregate not in KINDS:
            raise InvalidConfig(f"aggregate is one of {list(KINDS)}, got {self.aggregate!r}")
        _check_window(self.dedup_window, InvalidConfig)
        if not isinstance(self.state_key, (str, bytes)) or not self.state_key:
            raise InvalidConfig(f"state_key is a non-empty string or bytes, got {self.state_key!r}")

    @property
    def state_key_bytes(self) -> bytes:
        key = self.state_key
        return key.encode("utf-8") if isinstance(key, str) else key


def validate_config(config: Any) -> ExactlyOnceAggregatorConfig:
    """OXE-R15: a trace's settings, refused with InvalidConfig before any item (TR-6)."""
    if not isinstance(config, Mapping):
        raise InvalidConfig(f"the configuration is a mapping of settings, got {config!r}")
    unknown = sorted(set(config) - set(CONFIG_KEYS), key=str)
    if unknown:
        raise InvalidConfig(f"unknown settings {unknown}; exactly_once_aggregation knows {list(CONFIG_KEYS)}")
    return ExactlyOnceAggregatorConfig(
        aggregate=config.get("aggregate", "sum"), dedup_window=config.get("dedup_window", 1024)
    )


@dataclass(frozen=True)
class ExactlyOnceAggregatorStats:
    """OXE-R10: messages of each verdict since the aggregator was created or restored."""

    events_folded: int = 0
    duplicates_filtered: int = 0
    outside_window: int = 0
    checkpoints_taken: int = 0


class ExactlyOnceAggregator:
    """OXE-R3, R10, R13: folds each message once, checkpoints and restores its whole state."""

    def __init__(
        self, config: ExactlyOnceAggregatorConfig | None = None, backend: StateBackend | None = None
    ) -> None:
        self.config = config or ExactlyOnceAggregatorConfig()
        self.backend: StateBackend = InMemoryStateBackend() if backend is None else backend
        self.aggregates = PartitionAggregateState()
        self.memory = DedupMemory(self.config.dedup_window)
        self._stats = dict.fromkeys(VERDICTS, 0)
        self._checkpoints = 0

    def deliver(self, message_id: MessageId, key: str, amount: float) -> tuple[str, AggregateValue | None]:
        """OXE-R3, R10: the message's verdict, and the key's new value when it was folded."""
        if not isinstance(message_id, MessageId):
            raise ValueError(f"a message id is a MessageId, got {message_id!r}")
        message_id.check()
        if not isinstance(key, str):
            raise ValueError(f"a key is a string, got {key!r}")
        key.encode("utf-8")  # UnicodeEncodeError (a ValueError) for a lone surrogate
        amount = _amount_of_call(amount)
        verdict = self.memory.verdict(message_id)
        self._stats[verdict] += 1
        if verdict != "folded":
            return verdict, None
        self.memory.remember(message_id)
        before = self.aggregates.get(key)
        if before is None:
            value = AggregateValue.first(self.config.aggregate, amount)  # OXE-R5
        else:
            value = before.folded(amount)
        self.aggregates.put(key, value)
        return verdict, value

    def fold(self, message_id: MessageId, key: str, amount: float) -> AggregateValue | None:
        """OXE-R10: the key's new value, or None for a duplicate or a message outside the window."""
        return self.deliver(message_id, key, amount)[1]

    def get(self, key: str) -> AggregateValue | None:
        return self.aggregates.get(key)  # OXE-R5: None before the key's first folded message

    def stats(self) -> ExactlyOnceAggregatorStats:
        return ExactlyOnceAggregatorStats(
            self._stats["folded"], self._stats["duplicate"], self._stats["outside_window"], self._checkpoints
        )

    def checkpoint(self) -> None:
        """OXE-R13: the whole state as ONE value under the state key: never half of it."""
        self.backend.put(self.config.state_key_bytes, encode_checkpoint(self.aggregates, self.memory))
        self._checkpoints += 1

    def restore(self) -> None:
        """OXE-R13: the stored state replaces this one and the stats restart; with nothing stored it
        does nothing (a new aggregator starts fresh). A checkpoint of another window or kind than
        the configuration's is refused."""
        data = self.backend.get(self.config.state_key_bytes)
        if data is None:
            return  # OXE-R13: forgetting what was folded would fold it again
        aggregates, memory = decode_checkpoint(data)
        if memory.window != self.config.dedup_window:
            expected = self.config.dedup_window
            raise StateDecodeError(f"the checkpoint's dedup_window is {memory.window}, this one's {expected}")
        foreign = sorted({v.kind for _, v in aggregates} - {self.config.aggregate})
        if foreign:
            raise StateDecodeError(
                f"the checkpoint holds {foreign} values, this aggregator computes {self.config.aggregate}"
            )
        self.aggregates, self.memory = aggregates, memory
        self._stats = dict.fromkeys(VERDICTS, 0)
        self._checkpoints = 0


# ---- the stream (OXE-R16, R18, R19) ----------------------------------------------------------

ID_FIELDS = ("producer", "partition", "sequence")


def item_error(item: Item) -> str | None:
    """OXE-R16: the reasons, in this order."""
    if item.kind == "duplicate_seq":
        return "duplicate_seq"  # TR-15
    if item.kind != "event":
        return "unsupported_item"  # `end` included: nothing is held back
    if any(getattr(item, name) is None for name in ID_FIELDS):
        return "missing_id"
    assert item.sequence is not None
    if item.sequence < 0:
        return "invalid_sequence"
    if item.key is None:
        return "missing_key"
    try:
        parse_amount(item.amount)
    except AmountError as error:
        return error.reason
    return None


def aggregate_row(batch: int, key: str, value: AggregateValue) -> Row:
    """OXE-R18: (batch, key, kind, number: the double as text (R17) or null, count or null)."""
    text = None if value.number is None else double_text(value.number)
    return (batch, key, value.kind, text, value.count)


class ExactlyOnceAggregationStream:
    """Plays an exactly_once_aggregation trace batch by batch and collects its output tables;
    what another cut of the same items into batches may change: OXE-R19."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = validate_config(config)
        self.backend = InMemoryStateBackend()
        self.aggregator = ExactlyOnceAggregator(self.config, self.backend)
        self.totals = dict.fromkeys(VERDICTS, 0)  # OXE-R18: since the start, across restarts (R19)
        self.out: dict[str, list[Row]] = {t: [] for t in ("messages", "aggregates", "progress", "errors")}

    def run_batch(self, b: int, batch: Sequence[Item]) -> None:
        touched: dict[str, None] = {}
        for seq, item in enumerate(batch):
            error = item_error(item)
            if error is not None:
                self.out["errors"].append((b, seq, error))  # OXE-R16: changes nothing
                continue
            assert item.producer is not None and item.partition is not None and item.sequence is not None
            assert item.key is not None
            message_id = MessageId(item.producer, item.partition, item.sequence)
            verdict, _ = self.aggregator.deliver(message_id, item.key, parse_amount(item.amount))
            self.totals[verdict] += 1
            row = (b, seq, item.producer, item.partition, item.sequence, item.key, verdict)
            self.out["messages"].append(row)
            if verdict == "folded":
                touched.setdefault(item.key)
        for key in touched:  # OXE-R18: the key's value at the end of the batch
            value = self.aggregator.get(key)
            assert value is not None
            self.out["aggregates"].append(aggregate_row(b, key, value))
        self.out["progress"].append((b, *(self.totals[v] for v in VERDICTS), len(self.aggregator.aggregates)))

    def checkpoint(self) -> dict[str, Any]:
        """OXE-R13, R19: the aggregator's bytes in a backend, and the progress totals."""
        self.aggregator.checkpoint()
        return {"backend": self.backend.copy(), "totals": dict(self.totals)}

    def restore(self, snapshot: dict[str, Any]) -> None:
        """A NEW aggregator reads the checkpoint back: a crash loses everything else."""
        self.backend = snapshot["backend"].copy()
        self.aggregator = ExactlyOnceAggregator(self.config, self.backend)
        self.aggregator.restore()
        self.totals = dict(snapshot["totals"])


def run_trace(trace: Trace) -> dict[str, list[Row]]:
    """Plays an exactly_once_aggregation trace and returns its observable output tables."""
    return play(trace, ExactlyOnceAggregationStream)


__all__ = [
    "AggregateValue",
    "AmountError",
    "ChannelMemory",
    "Count",
    "DedupMemory",
    "ExactlyOnceAggregationStream",
    "ExactlyOnceAggregator",
    "ExactlyOnceAggregatorConfig",
    "ExactlyOnceAggregatorStats",
    "FileStateBackend",
    "InMemoryStateBackend",
    "KINDS",
    "Max",
    "Mean",
    "MessageId",
    "Min",
    "PartitionAggregateState",
    "StateBackend",
    "StateDecodeError",
    "Sum",
    "VERDICTS",
    "aggregate_row",
    "decode_checkpoint",
    "double_text",
    "encode_checkpoint",
    "item_error",
    "parse_amount",
    "run_trace",
    "validate_config",
]
