"""Exactly-once aggregation (oxirs): invariants of the oracle, and the engine-vs-oracle differential test.

Invariants run on the oracle (reference/exactly_once_aggregation.py) over
generated traces and values. They are derived from the clauses, with the
clauses' own arithmetic (strategies/exactly_once_aggregation.py),
not from the oracle's code:

* every table equals the brute-force definition: verdicts from the whole
  message list with unbounded memory, each key's value from its folded amounts
  (R2, R3, R5..R8, R16..R18);
* exactly once: no id is folded twice, and with a window wider than every
  sequence each distinct id is folded once, at its first delivery (R1, R3);
* batch cuts and restart points change nothing (R19);
* the encodings read back what they wrote and refuse every damage of R14;
* checkpoint and restore, through both backends, give the state of an
  aggregator that never crashed (R13);
* the API refuses malformed arguments and changes nothing (R10); the text of a
  double (R17) and the reading of an amount (R16) by hand.

The differential test feeds every engine chosen with ``--engine`` (except the
reference) the budget's generated traces in ONE ``run`` call and compares each
output with the oracle's; a difference is shrunk and printed as a scenario.
"""

from __future__ import annotations

import math
import re
import struct
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.outputs import TABLES, Row
from harness.traces import InvalidConfig, Item, Trace
from reference.exactly_once_aggregation import (
    AggregateValue,
    Count,
    DedupMemory,
    ExactlyOnceAggregator,
    ExactlyOnceAggregatorConfig,
    FileStateBackend,
    InMemoryStateBackend,
    Max,
    Mean,
    MessageId,
    Min,
    PartitionAggregateState,
    StateBackend,
    StateDecodeError,
    Sum,
    decode_checkpoint,
    double_text,
    encode_checkpoint,
    parse_amount,
    run_trace,
)
from strategies.common import check_generated
from strategies.exactly_once_aggregation import (
    AREA,
    DIFFERENTIAL,
    INVALID_AMOUNTS,
    INVALID_CONFIGS,
    KINDS,
    bits,
    brute_force,
    double_of,
    exactly_once_traces,
    message,
    value_of,
)

TRACES = exactly_once_traces(large_batch_rate=10)

Output = dict[str, list[Row]]


def _rows(output: Output, table: str) -> list[dict[str, Any]]:
    rows = [dict(zip(TABLES[AREA][table], r, strict=True)) for r in output[table]]
    return sorted(rows, key=lambda r: (r["batch"], r.get("seq", 0)))


def _run(trace: Trace) -> Output | None:
    try:
        return run_trace(trace)
    except InvalidConfig:
        return None


def _messages(trace: Trace) -> list[tuple[Item, MessageId, float]]:
    """The well-formed messages of a trace in arrival order, with their ids and doubles."""
    out = []
    for batch in trace.batches:
        for item in batch:
            amount = double_of(item.amount)
            if item.kind != "event" or item.key is None or amount is None:
                continue
            if item.producer is None or item.partition is None or item.sequence is None or item.sequence < 0:
                continue
            out.append((item, MessageId(item.producer, item.partition, item.sequence), amount))
    return out


def _config(trace: Trace) -> ExactlyOnceAggregatorConfig:
    return ExactlyOnceAggregatorConfig(
        trace.config.get("aggregate", "sum"), trace.config.get("dedup_window", 1024)
    )


# ---- the tables against the brute-force definition (OXE-R2..R8, R16..R18) -----------------


@pytest.mark.clauses(
    "OXE-R2", "OXE-R3", "OXE-R4", "OXE-R5", "OXE-R6", "OXE-R7", "OXE-R8", "OXE-R9", "OXE-R16",
    "OXE-R17", "OXE-R18",
)  # fmt: skip
@given(TRACES)
def test_every_table_equals_the_brute_force_definition(trace: Trace) -> None:
    """Verdicts from the whole message list with unbounded memory (a window only decides what
    is outside it); values from each key's folded amounts; totals since the start."""
    out = _run(trace)
    if out is None:
        return
    expected = brute_force(trace)
    assert {(r["batch"], r["seq"]): r["reason"] for r in _rows(out, "errors")} == expected.errors
    assert {(r["batch"], r["seq"]): r["verdict"] for r in _rows(out, "messages")} == expected.verdicts
    for r in _rows(out, "messages"):
        item = trace.batches[r["batch"]][r["seq"]]
        assert (r["producer"], r["partition"], r["sequence"], r["key"]) == (
            item.producer, item.partition, item.sequence, item.key,
        )  # fmt: skip
    assert sorted(out["aggregates"], key=repr) == sorted(expected.aggregates, key=repr)
    assert out["progress"] == expected.progress


@pytest.mark.clauses("OXE-R1", "OXE-R3", "OXE-R19")
@given(TRACES)
def test_no_id_is_folded_twice_and_a_wide_window_folds_each_id_once_at_its_first_delivery(
    trace: Trace,
) -> None:
    out = _run(trace)
    if out is None:
        return
    folded = [(r["producer"], r["partition"], r["sequence"]) for r in _rows(out, "messages")
              if r["verdict"] == "folded"]  # fmt: skip
    assert len(folded) == len(set(folded))
    wide = replace(trace, config={**trace.config, "dedup_window": 1_048_576})
    sequences = [m.sequence for _, m, _ in _messages(trace)]
    if sequences and max(sequences) - min(sequences) >= 1_048_576:
        return  # a channel's span exceeds the widest window
    wide_out = run_trace(wide)
    first: dict[tuple[int, int, int], tuple[int, int]] = {}
    for r in _rows(wide_out, "messages"):
        first.setdefault((r["producer"], r["partition"], r["sequence"]), (r["batch"], r["seq"]))
    assert {(r["batch"], r["seq"]) for r in _rows(wide_out, "messages") if r["verdict"] == "folded"} == set(
        first.values()
    )
    assert not any(r["verdict"] == "outside_window" for r in _rows(wide_out, "messages"))


@pytest.mark.clauses("OXE-R2")
@given(TRACES)
def test_a_channels_memory_holds_at_most_the_window_and_always_its_high(trace: Trace) -> None:
    if _run(trace) is None:
        return
    aggregator = ExactlyOnceAggregator(_config(trace))
    for _, message_id, amount in _messages(trace):
        aggregator.deliver(message_id, "k", amount)
        memory = aggregator.memory.channels[message_id.channel]
        assert memory.high in memory.folded
        assert len(memory.folded) <= aggregator.memory.window
        assert all(memory.high - aggregator.memory.window < s <= memory.high for s in memory.folded)


# ---- batch cuts and restarts (OXE-R19) ---------------------------------------------------


@pytest.mark.clauses("OXE-R19")
@given(TRACES, st.data())
def test_batch_cuts_change_no_verdict_and_no_final_value(trace: Trace, data: st.DataObject) -> None:
    out = _run(trace)
    if out is None:
        return
    flat = [item for batch in trace.batches for item in batch]
    cuts = sorted(data.draw(st.lists(st.integers(0, len(flat)), max_size=6)))
    bounds = list(zip([0, *cuts], [*cuts, len(flat)], strict=True))
    recut = Trace(AREA, trace.config, tuple(tuple(flat[a:z]) for a, z in bounds))
    again = run_trace(recut)

    def summary(o: Output) -> tuple[Any, ...]:
        last = {r["key"]: tuple(r.values())[1:] for r in _rows(o, "aggregates")}
        return (
            [tuple(r.values())[2:] for r in _rows(o, "messages")],
            [r["reason"] for r in _rows(o, "errors")],
            tuple(_rows(o, "progress")[-1].values())[1:],
            sorted(last.items()),
        )

    assert summary(again) == summary(out)


@pytest.mark.clauses("OXE-R13", "OXE-R19")
@given(TRACES)
def test_restart_points_change_nothing(trace: Trace) -> None:
    out = _run(trace)
    if out is None:
        return
    assert run_trace(replace(trace, restart_after=frozenset())) == out
    every = frozenset(range(len(trace.batches) - 1))
    assert run_trace(replace(trace, restart_after=every)) == out


# ---- the encodings (OXE-R9, R11, R12, R14) ------------------------------------------------

KEYS = st.text(st.characters(codec="utf-8"), max_size=6)  # no lone surrogate: keys are UTF-8
DOUBLES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from((0.0, -0.0, math.nan, -math.nan, 0.1, 1e16)),
    st.integers(0, 2**64 - 1).map(lambda n: struct.unpack("<d", n.to_bytes(8, "little"))[0]),  # any bits
)
COUNTS = st.one_of(st.integers(1, 5), st.just(2**64 - 1))


@st.composite
def aggregate_values(draw: st.DrawFn) -> AggregateValue:
    kind = draw(st.sampled_from(KINDS))
    if kind == "count":
        return Count(draw(COUNTS))
    if kind == "mean":
        return Mean(draw(DOUBLES), draw(COUNTS))
    return AggregateValue(kind, draw(DOUBLES))


STATES = st.dictionaries(KEYS, aggregate_values(), max_size=6).map(PartitionAggregateState)


@st.composite
def memories(draw: st.DrawFn) -> DedupMemory:
    """A memory as folds leave it: per channel a high and remembered sequences inside its window."""
    window = draw(st.sampled_from((1, 2, 5, 1024, 1_048_576)))
    memory = DedupMemory(window)
    ids = st.integers(-(2**63), 2**63 - 1)
    for _ in range(draw(st.integers(0, 4))):
        producer, partition = draw(ids), draw(ids)
        high = draw(st.one_of(st.integers(0, 20), st.just(2**64 - 1)))
        others = draw(st.lists(st.integers(max(0, high - window + 1), high), max_size=min(window, 6)))
        for s in [high, *others]:
            memory.remember(MessageId(producer, partition, s))
    return memory


@pytest.mark.clauses("OXE-R9", "OXE-R11", "OXE-R14")
@given(STATES)
def test_the_aggregate_state_reads_back_what_it_wrote_byte_for_byte(state: PartitionAggregateState) -> None:
    data = state.encode()
    again = PartitionAggregateState.decode(data)
    assert again == state and again.encode() == data
    assert [k for k, _ in again] == sorted((k for k, _ in state), key=lambda k: k.encode("utf-8"))
    for _, value in again:  # OXE-R9: one NaN
        assert (
            value.number is None or not math.isnan(value.number) or bits(value.number) == 0x7FF8000000000000
        )


@pytest.mark.clauses("OXE-R11")
def test_the_aggregate_encoding_by_hand() -> None:
    """Keys in UTF-8 byte order: U+E000 (EE 80 80) before U+1F600 (F0 9F 98 80), which UTF-16
    would put first; a Sum of -0.0 keeps its sign; NaN is 0x7FF8000000000000."""
    state = PartitionAggregateState({"\U0001f600": Sum(-0.0), "\ue000": Mean(math.nan, 2), "a": Count(3)})
    expected = (
        b"OXEA" + b"\x01\x00" + b"\x03\x00\x00\x00"
        + b"\x01\x00\x00\x00" + b"a" + b"\x01" + (3).to_bytes(8, "little")
        + b"\x03\x00\x00\x00" + b"\xee\x80\x80" + b"\x05" + bytes.fromhex("000000000000f87f")
        + (2).to_bytes(8, "little")
        + b"\x04\x00\x00\x00" + b"\xf0\x9f\x98\x80" + b"\x02" + bytes.fromhex("0000000000000080")
    )  # fmt: skip
    assert state.encode() == expected


@pytest.mark.clauses("OXE-R12", "OXE-R14")
@given(memories())
def test_the_memory_reads_back_what_it_wrote_byte_for_byte(memory: DedupMemory) -> None:
    data = memory.encode()
    again = DedupMemory.decode(data)
    assert again == memory and again.encode() == data


@pytest.mark.clauses("OXE-R12")
def test_the_memory_encoding_by_hand() -> None:
    memory = DedupMemory(4)
    for producer, partition, s in ((1, -1, 7), (1, -1, 9), (-2, 0, 3), (1, -1, 5)):
        memory.remember(MessageId(producer, partition, s))
    expected = (
        b"OXED" + b"\x01\x00" + (4).to_bytes(8, "little") + (2).to_bytes(4, "little")
        + (-2).to_bytes(8, "little", signed=True) + (0).to_bytes(8, "little") + (3).to_bytes(8, "little")
        + (1).to_bytes(4, "little") + (3).to_bytes(8, "little")
        + (1).to_bytes(8, "little") + (-1).to_bytes(8, "little", signed=True) + (9).to_bytes(8, "little")
        + (2).to_bytes(4, "little") + (7).to_bytes(8, "little") + (9).to_bytes(8, "little")
    )  # fmt: skip  # 5 is at 9 - 4: outside the window, forgotten
    assert memory.encode() == expected


def _key_entry(key: bytes, kind: int, payload: bytes) -> bytes:
    return len(key).to_bytes(4, "little") + key + bytes([kind]) + payload


def _aggregate_bytes(*entries: bytes, version: int = 1, magic: bytes = b"OXEA") -> bytes:
    return magic + version.to_bytes(2, "little") + len(entries).to_bytes(4, "little") + b"".join(entries)


ONE = (1).to_bytes(8, "little")
ZERO = (0).to_bytes(8, "little")
HALF = struct.pack("<d", 0.5)

#: (damaged aggregate encoding, a word its error message names)
AGGREGATE_DAMAGE = (
    (_aggregate_bytes(_key_entry(b"a", 1, ONE), magic=b"OXEB"), "magic"),
    (_aggregate_bytes(_key_entry(b"a", 1, ONE), version=2), "version 2"),
    (_aggregate_bytes(_key_entry(b"a", 1, ONE)) + b"\x00", "left over"),
    (_aggregate_bytes(_key_entry(b"a", 1, ONE))[:-1], "end early"),
    (_aggregate_bytes(_key_entry(b"a", 6, ONE)), "unknown kind"),
    (_aggregate_bytes(_key_entry(b"a", 0, ONE)), "unknown kind"),
    (_aggregate_bytes(_key_entry(b"\xff", 1, ONE)), "UTF-8"),
    (_aggregate_bytes(_key_entry(b"\xed\xa0\x80", 1, ONE)), "UTF-8"),  # an encoded surrogate
    (_aggregate_bytes(_key_entry(b"b", 1, ONE), _key_entry(b"a", 1, ONE)), "ascending"),
    (_aggregate_bytes(_key_entry(b"a", 1, ONE), _key_entry(b"a", 1, ONE)), "ascending"),
    (_aggregate_bytes(_key_entry(b"a", 1, ZERO)), "count 0"),
    (_aggregate_bytes(_key_entry(b"a", 5, HALF + ZERO)), "count 0"),
    (_aggregate_bytes(_key_entry(b"a", 2, bytes.fromhex("010000000000f87f"))), "NaN"),
    (_aggregate_bytes(_key_entry(b"a", 2, bytes.fromhex("000000000000f8ff"))), "NaN"),
    (_aggregate_bytes(_key_entry(b"a", 1, ONE)).replace(b"\x01\x00\x00\x00a", b"\xff\x00\x00\x00a"),
     "end early"),  # a key length past the end
)  # fmt: skip


def _channel(producer: int, partition: int, high: int, *sequences: int) -> bytes:
    head = struct.pack("<qqQI", producer, partition, high, len(sequences))
    return head + b"".join(s.to_bytes(8, "little") for s in sequences)


def _memory_bytes(window: int, *channels: bytes, version: int = 1, magic: bytes = b"OXED") -> bytes:
    return magic + struct.pack("<HQI", version, window, len(channels)) + b"".join(channels)


MEMORY_DAMAGE = (
    (_memory_bytes(4, _channel(0, 0, 3, 3), magic=b"OXEA"), "magic"),
    (_memory_bytes(4, _channel(0, 0, 3, 3), version=0), "version 0"),
    (_memory_bytes(4, _channel(0, 0, 3, 3)) + b"\x00", "left over"),
    (_memory_bytes(4, _channel(0, 0, 3, 3))[:-3], "end early"),
    (_memory_bytes(4, _channel(1, 0, 3, 3), _channel(0, 5, 3, 3)), "ascending"),
    (_memory_bytes(4, _channel(-1, 0, 3, 3), _channel(-1, 0, 4, 4)), "ascending"),
    (_memory_bytes(4, _channel(0, 0, 9, 5, 9)), "outside its window"),
    (_memory_bytes(4, _channel(0, 0, 9, 9, 10)), "outside its window"),
    (_memory_bytes(4, _channel(0, 0, 9, 8, 7, 9)), "ascending"),
    (_memory_bytes(4, _channel(0, 0, 9, 8)), "high 9"),
    (_memory_bytes(4, _channel(0, 0, 9)), "high 9"),
    (_memory_bytes(2, _channel(0, 0, 9, 7, 8, 9)), "more than its window"),
    (_memory_bytes(0), "dedup_window"),
    (_memory_bytes(1_048_577), "dedup_window"),
)  # fmt: skip


@pytest.mark.clauses("OXE-R14")
@pytest.mark.parametrize(("data", "named"), AGGREGATE_DAMAGE)
def test_decoding_refuses_a_damaged_aggregate_state_naming_the_damage(data: bytes, named: str) -> None:
    with pytest.raises(StateDecodeError, match=re.escape(named)):
        PartitionAggregateState.decode(data)


@pytest.mark.clauses("OXE-R14")
@pytest.mark.parametrize(("data", "named"), MEMORY_DAMAGE)
def test_decoding_refuses_a_damaged_memory_naming_the_damage(data: bytes, named: str) -> None:
    with pytest.raises(StateDecodeError, match=re.escape(named)):
        DedupMemory.decode(data)


@pytest.mark.clauses("OXE-R13", "OXE-R14")
@given(STATES, memories(), st.data())
def test_every_cut_or_extended_checkpoint_is_refused(
    state: PartitionAggregateState, memory: DedupMemory, data: st.DataObject
) -> None:
    """A checkpoint reads back whole; each of its proper prefixes, and it with a byte more, is refused."""
    whole = encode_checkpoint(state, memory)
    assert decode_checkpoint(whole) == (state, memory)
    assert issubclass(StateDecodeError, ValueError)  # OXE-R14
    cut = data.draw(st.integers(0, len(whole) - 1))
    with pytest.raises(StateDecodeError):
        decode_checkpoint(whole[:cut])
    with pytest.raises(StateDecodeError, match="left over"):
        decode_checkpoint(whole + b"\x00")
    with pytest.raises(StateDecodeError, match="magic"):
        decode_checkpoint(b"OXEX" + whole[4:])
    with pytest.raises(StateDecodeError, match="version 2"):
        decode_checkpoint(whole[:4] + b"\x02\x00" + whole[6:])


# ---- checkpoint and restore (OXE-R13) ----------------------------------------------------


def _backends(directory: str) -> list[StateBackend]:
    return [InMemoryStateBackend(), FileStateBackend(directory)]


def _deliver_all(
    aggregator: ExactlyOnceAggregator, messages: list[tuple[Item, MessageId, float]]
) -> list[str]:
    return [aggregator.deliver(m, item.key or "", amount)[0] for item, m, amount in messages]


@pytest.mark.clauses("OXE-R10", "OXE-R13", "OXE-R19")
@given(TRACES, st.data())
def test_a_crash_after_a_checkpoint_with_every_later_message_redelivered_ends_as_if_none_happened(
    trace: Trace, data: st.DataObject
) -> None:
    """Checkpoint after message i, fold on to j (lost in the crash), restore into a NEW aggregator
    from the backend, and deliver everything after i again: the values, the memory and the
    verdicts after i are those of an aggregator that never crashed; stats restart at zero."""
    if _run(trace) is None:
        return
    messages = _messages(trace)
    config = _config(trace)
    i = data.draw(st.integers(0, len(messages)))
    j = data.draw(st.integers(i, len(messages)))
    steady = ExactlyOnceAggregator(config)
    steady_verdicts = _deliver_all(steady, messages)
    with tempfile.TemporaryDirectory() as directory:
        for backend in _backends(directory):
            crashed = ExactlyOnceAggregator(config, backend)
            _deliver_all(crashed, messages[:i])
            crashed.checkpoint()
            assert crashed.stats().checkpoints_taken == 1
            _deliver_all(crashed, messages[i:j])  # folded, then lost
            fresh = ExactlyOnceAggregator(config, backend)
            fresh.restore()
            assert fresh.stats() == type(fresh.stats())()
            assert _deliver_all(fresh, messages[i:]) == steady_verdicts[i:]
            assert fresh.aggregates == steady.aggregates and fresh.memory == steady.memory
            assert fresh.aggregates.encode() == steady.aggregates.encode()
            assert fresh.stats().events_folded == steady_verdicts[i:].count("folded")


@pytest.mark.clauses("OXE-R13")
def test_restore_with_nothing_stored_changes_nothing_and_a_checkpoint_is_one_file(tmp_path: Path) -> None:
    config = ExactlyOnceAggregatorConfig("count", 8, state_key="agg/1")
    aggregator = ExactlyOnceAggregator(config, FileStateBackend(tmp_path))
    aggregator.fold(MessageId(0, 0, 1), "k", 1.0)
    aggregator.restore()  # nothing stored: nothing changes, so 0/0#1 stays folded once
    assert aggregator.get("k") == Count(1) and aggregator.stats().events_folded == 1
    assert aggregator.fold(MessageId(0, 0, 1), "k", 1.0) is None
    fresh = ExactlyOnceAggregator(config, FileStateBackend(tmp_path))
    fresh.restore()  # a new aggregator with nothing stored starts fresh
    assert fresh.get("k") is None and fresh.memory == DedupMemory(8)
    aggregator.checkpoint()
    aggregator.fold(MessageId(0, 0, 2), "k", 1.0)
    aggregator.checkpoint()
    assert [p.name for p in tmp_path.iterdir()] == [b"agg/1".hex()]  # no temporary file left behind
    stored = (tmp_path / b"agg/1".hex()).read_bytes()
    assert decode_checkpoint(stored) == (PartitionAggregateState({"k": Count(2)}), aggregator.memory)
    assert aggregator.stats().checkpoints_taken == 2
    other = ExactlyOnceAggregator(ExactlyOnceAggregatorConfig("count", 8), FileStateBackend(tmp_path))
    other.restore()  # another state key: nothing stored under it
    assert other.get("k") is None


@pytest.mark.clauses("OXE-R13", "OXE-R14")
def test_restore_refuses_a_damaged_checkpoint_and_keeps_its_state() -> None:
    backend = InMemoryStateBackend()
    aggregator = ExactlyOnceAggregator(ExactlyOnceAggregatorConfig("sum", 4), backend)
    aggregator.fold(MessageId(0, 0, 1), "k", 2.5)
    aggregator.checkpoint()
    key = b"aggregator/state"
    whole = backend.get(key)
    assert whole is not None
    backend.put(key, whole[:-1])
    aggregator.fold(MessageId(0, 0, 2), "k", 1.0)
    with pytest.raises(StateDecodeError):
        aggregator.restore()
    assert aggregator.get("k") == Sum(3.5)


@pytest.mark.clauses("OXE-R13", "OXE-R15")
def test_restore_refuses_a_checkpoint_of_another_window_or_kind() -> None:
    backend = InMemoryStateBackend()
    writer = ExactlyOnceAggregator(ExactlyOnceAggregatorConfig("max", 4), backend)
    writer.fold(MessageId(0, 0, 1), "k", 2.5)
    writer.checkpoint()
    for config, named in ((ExactlyOnceAggregatorConfig("max", 8), "dedup_window"),
                          (ExactlyOnceAggregatorConfig("min", 4), "max")):  # fmt: skip
        reader = ExactlyOnceAggregator(config, backend)
        with pytest.raises(StateDecodeError, match=named):
            reader.restore()
        assert reader.get("k") is None


# ---- the API (OXE-R5..R10) ---------------------------------------------------------------


@pytest.mark.clauses("OXE-R5", "OXE-R6", "OXE-R7", "OXE-R8", "OXE-R10")
def test_fold_get_and_stats_by_hand() -> None:
    """Sum in fold order: (0.1 + 0.2) + 0.3 is 0.6000000000000001, not 0.6 (OXE-R7)."""
    total = ExactlyOnceAggregator(ExactlyOnceAggregatorConfig("sum", 2))
    assert total.get("k") is None
    assert total.fold(MessageId(1, 0, 10), "k", 0.1) == Sum(0.1)
    assert total.fold(MessageId(1, 0, 12), "k", 0.2) == Sum(0.30000000000000004)
    assert total.fold(MessageId(1, 0, 11), "k", 0.3) == Sum(0.6000000000000001)  # out of order, inside
    assert total.fold(MessageId(1, 0, 12), "k", 9.0) is None  # duplicate
    assert total.fold(MessageId(1, 0, 10), "k", 9.0) is None  # 10 <= 12 - 2: outside the window
    assert total.fold(MessageId(1, 1, 10), "k", 1.0) == Sum(1.6)  # another channel
    stats = total.stats()
    assert (stats.events_folded, stats.duplicates_filtered, stats.outside_window) == (4, 1, 1)
    low, high = (ExactlyOnceAggregator(ExactlyOnceAggregatorConfig(k)) for k in ("min", "max"))
    for n, amount in enumerate((0.0, -0.0, 3.0)):
        low.fold(MessageId(0, 0, n), "k", amount)
        high.fold(MessageId(0, 0, n), "k", -amount)
    assert low.get("k") == Min(-0.0) and low.get("k") != Min(0.0)
    assert high.get("k") == Max(0.0) and high.get("k") != Max(-0.0)  # -(-0.0) is 0.0
    low.fold(MessageId(0, 0, 9), "k", math.nan)
    low.fold(MessageId(0, 0, 10), "k", -math.inf)
    assert low.get("k") == Min(math.nan)  # NaN absorbs
    mean = ExactlyOnceAggregator(ExactlyOnceAggregatorConfig("mean"))
    mean.fold(MessageId(0, 0, 0), "k", math.inf)
    value = mean.fold(MessageId(0, 0, 1), "k", -math.inf)
    assert value == Mean(math.nan, 2) and value is not None and math.isnan(value.mean)
    count = ExactlyOnceAggregator(ExactlyOnceAggregatorConfig("count"))
    assert count.fold(MessageId(0, 0, 0), "k", math.nan) == Count(1)


SPECIAL_AMOUNTS = (
    0.0, -0.0, math.nan, math.inf, -math.inf, 0.1, 0.2, 0.3, 1e308, -1e308, 1e16, 1.0, -0.0, 0.0,
)  # fmt: skip
# two draws in three are the values the clauses single out
AMOUNTS = st.one_of(
    st.sampled_from(SPECIAL_AMOUNTS),
    st.sampled_from(SPECIAL_AMOUNTS),
    st.floats(allow_nan=False, allow_infinity=False, width=16),
)


@pytest.mark.clauses("OXE-R5", "OXE-R6", "OXE-R7", "OXE-R8", "OXE-R9")
@given(st.sampled_from(KINDS), st.lists(AMOUNTS, min_size=1, max_size=8))
def test_a_keys_value_is_its_kind_over_its_folded_amounts_in_fold_order(
    kind: str, amounts: list[float]
) -> None:
    """Sum and Mean add left to right, Min and Max put -0.0 below 0.0 and NaN absorbs, Count counts
    everything: ``value_of`` works each from the whole list."""
    aggregator = ExactlyOnceAggregator(ExactlyOnceAggregatorConfig(kind))
    for n, amount in enumerate(amounts):
        value = aggregator.fold(MessageId(0, 0, n), "k", amount)
    assert value is not None
    text, count = value_of(kind, amounts)
    assert (None if value.number is None else double_text(value.number), value.count) == (text, count)


@pytest.mark.clauses("OXE-R8")
@given(
    st.sampled_from(("min", "max")),
    st.lists(st.sampled_from((0.0, -0.0, 1.0, -1.0, math.inf)), min_size=1),
    st.randoms(use_true_random=False),
)
def test_min_and_max_of_zeros_do_not_depend_on_the_order_they_come_in(
    kind: str, amounts: list[float], rng: Any
) -> None:
    """-0.0 is below 0.0 whichever comes first: any order of the same amounts gives the same bits."""
    values = []
    for order in (amounts, rng.sample(amounts, len(amounts))):
        aggregator = ExactlyOnceAggregator(ExactlyOnceAggregatorConfig(kind))
        for n, amount in enumerate(order):
            value = aggregator.fold(MessageId(0, 0, n), "k", amount)
        assert value is not None and value.number is not None
        values.append(bits(value.number))
    assert values[0] == values[1] == bits(float(value_of(kind, amounts)[0] or "nan"))


@pytest.mark.clauses("OXE-R10", "OXE-R16")
@pytest.mark.parametrize(
    ("message_id", "key", "amount"),
    [
        (MessageId(0, 0, -1), "k", 1.0),
        (MessageId(0, 0, 2**64), "k", 1.0),
        (MessageId(2**63, 0, 1), "k", 1.0),
        (MessageId(0, -(2**63) - 1, 1), "k", 1.0),
        (MessageId(0, 0, True), "k", 1.0),  # type: ignore[arg-type]
        ((0, 0, 1), "k", 1.0),
        (MessageId(0, 0, 1), None, 1.0),
        (MessageId(0, 0, 1), "\ud800", 1.0),
        (MessageId(0, 0, 1), "k", "1.0"),
        (MessageId(0, 0, 1), "k", True),
        (MessageId(0, 0, 1), "k", None),
        (MessageId(0, 0, 1), "k", 10**400),
    ],
)
def test_a_malformed_call_raises_value_error_and_changes_nothing(
    message_id: Any, key: Any, amount: Any
) -> None:
    aggregator = ExactlyOnceAggregator(ExactlyOnceAggregatorConfig("sum", 4))
    aggregator.fold(MessageId(0, 0, 0), "k", 1.0)
    before = (aggregator.aggregates.encode(), aggregator.memory.encode(), aggregator.stats())
    with pytest.raises(ValueError):
        aggregator.fold(message_id, key, amount)
    assert (aggregator.aggregates.encode(), aggregator.memory.encode(), aggregator.stats()) == before


@pytest.mark.clauses("OXE-R17")
@given(DOUBLES)
def test_the_text_of_a_double_reads_back_as_it_in_the_shortest_form(x: float) -> None:
    text = double_text(x)
    if math.isnan(x) or math.isinf(x):
        assert text == {True: "NaN", False: "Infinity" if x > 0 else "-Infinity"}[math.isnan(x)]
        return
    assert bits(float(text)) == bits(x)
    fixed = r"-?\d+\.\d+"
    scientific = r"-?\d(\.\d+)?e[+-]\d{2,3}"
    assert re.fullmatch(fixed, text) or re.fullmatch(scientific, text), text
    mantissa = text.split("e")[0].lstrip("-").replace(".", "").strip("0")
    assert len(mantissa) <= 17


@pytest.mark.clauses("OXE-R17")
def test_the_text_of_a_double_by_hand() -> None:
    cases = {
        1.0: "1.0", -0.0: "-0.0", 0.1: "0.1", 1e16: "1e+16", 1.5e-7: "1.5e-07", 123456789.0: "123456789.0",
        1e15: "1000000000000000.0", 0.0001: "0.0001", 0.00001: "1e-05", math.inf: "Infinity",
        -math.inf: "-Infinity", math.nan: "NaN", 1.7976931348623157e308: "1.7976931348623157e+308",
    }  # fmt: skip
    assert {x: double_text(x) for x in cases} == cases


@pytest.mark.clauses("OXE-R16")
def test_the_amount_of_a_message_by_hand() -> None:
    assert parse_amount(3) == 3.0 and parse_amount(0.1) == 0.1 and bits(parse_amount(-0.0)) == bits(-0.0)
    assert parse_amount(2**53 + 1) == 2.0**53  # the nearest double, ties to even
    assert parse_amount(2**1024 - 2**970 - 1) == 1.7976931348623157e308  # still rounds down
    assert math.isnan(parse_amount("NaN")) and parse_amount("-Infinity") == -math.inf
    wrongs: tuple[Any, ...] = (*INVALID_AMOUNTS, 2**1024 - 2**970, [], {})
    for wrong in wrongs:
        with pytest.raises(ValueError) as caught:
            parse_amount(wrong)
        assert getattr(caught.value, "reason", None) == "invalid_amount", wrong
    with pytest.raises(ValueError) as caught:
        parse_amount(None)
    assert getattr(caught.value, "reason", None) == "missing_amount"


@pytest.mark.clauses("OXE-R16", "OXE-R1")
def test_a_redelivery_is_judged_by_its_id_and_a_malformed_delivery_is_not_remembered() -> None:
    """Batch 0: id 0/0#1 with an invalid amount (an error row, not remembered), then 0/0#1 with
    amount 2 (folded: the corrected re-delivery), then 0/0#1 with amount 5 (a duplicate: the id
    decides, the first folded amount stays); an end item is unsupported, nothing is released."""
    trace = Trace(AREA, {"aggregate": "sum"}, ((
        message(0, 0, 1, "k", "abc"), message(0, 0, 1, "k", 2), message(0, 0, 1, "k", 5), Item("end"),
    ),))  # fmt: skip
    out = run_trace(trace)
    assert out["errors"] == [(0, 0, "invalid_amount"), (0, 3, "unsupported_item")]
    assert [r[-1] for r in out["messages"]] == ["folded", "duplicate"]
    assert out["aggregates"] == [(0, "k", "sum", "2.0", None)]
    assert out["progress"] == [(0, 1, 1, 0, 1)]


@pytest.mark.clauses("OXE-R16", "TR-7")
def test_an_item_with_several_faults_gets_the_first_reason_in_order() -> None:
    items = (
        Item("end", key=None),
        message(None, 0, -1, None, None),
        message(0, 0, -1, None, "abc"),
        message(0, 0, 1, None, None),
        message(0, 0, 1, "k", None),
        message(0, 0, 1, "k", "abc"),
        message(0, 0, 1, "k", 1),
    )
    out = run_trace(Trace(AREA, {}, (items,)))
    reasons = ["unsupported_item", "missing_id", "invalid_sequence", "missing_key", "missing_amount"]
    assert [r[2] for r in out["errors"]] == [*reasons, "invalid_amount"]
    assert out["messages"] == [(0, 6, 0, 0, 1, "k", "folded")]


# ---- configurations (OXE-R15) ------------------------------------------------------------

NOT_JSON_INVALID_CONFIGS = st.sampled_from((
    {"dedup_window": float("nan")},
    {"dedup_window": float("inf")},
    {"aggregate": ["sum"]},
    {7: 1},
))  # fmt: skip


@pytest.mark.clauses("OXE-R15")
@given(st.one_of(INVALID_CONFIGS, NOT_JSON_INVALID_CONFIGS))
def test_invalid_configurations_are_refused(config: dict[Any, Any]) -> None:
    with pytest.raises(InvalidConfig):
        run_trace(Trace(AREA, config, ((),)))


@pytest.mark.clauses("OXE-R15")
def test_the_defaults_are_sum_and_a_window_of_1024() -> None:
    trace = Trace(
        AREA, {}, ((message(0, 0, 2000, "k", 1), message(0, 0, 976, "k", 1), message(0, 0, 977, "k", 1)),)
    )
    out = run_trace(trace)
    assert [r[-1] for r in out["messages"]] == ["folded", "outside_window", "folded"]
    assert out["aggregates"] == [(0, "k", "sum", "2.0", None)]


# ---- differential ---------------------------------------------------------------------------


@pytest.mark.clauses(
    "OXE-R1", "OXE-R2", "OXE-R3", "OXE-R4", "OXE-R5", "OXE-R6", "OXE-R7", "OXE-R8", "OXE-R9", "OXE-R15",
    "OXE-R16", "OXE-R17", "OXE-R18", "OXE-R19",
)  # fmt: skip
def test_engine_agrees_with_the_oracle(engine_under_test: Any) -> None:
    """All generated traces in ONE engine.run call; a difference is shrunk and printed as Gherkin."""
    check_generated(engine_under_test, *DIFFERENTIAL)
