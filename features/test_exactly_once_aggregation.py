"""Exactly-once aggregation (oxirs): features/exactly_once_aggregation.feature on every engine.

The stream steps are shared (harness.steps: ``these messages arrive ...``, ``the messages
are:``, ``the aggregates are:``, ``the aggregate values are:``). This module adds the object
API of the ``@oracle-only`` scenarios (TR-10), which no trace can express:

* ``an exactly-once aggregator with ...``: an ``ExactlyOnceAggregator`` on an in-memory or
  a file state backend, under a state key;
* calls: ``these messages are folded:``, ``the aggregator is checkpointed``, restores (by the
  same aggregator, or by a new one after a crash), and decoding bytes;
* what they return: fold's results, ``get``, ``stats``, the bytes of the encodings (OXE-R11 to
  R13) written as a table of hex bytes and their meaning, and the refusals of OXE-R14.

A value is written as the spec names it: ``Count(2)``, ``Sum(0.6000000000000001)``,
``Mean(sum=1.5, count=2)``, ``None``; a double inside as its text (OXE-R17).
"""

from __future__ import annotations

import math
import struct
import tempfile
from pathlib import Path
from typing import Any

from pytest_bdd import scenarios

from harness.steps import (
    LIBRARY,
    DataTable,
    ScenarioState,
    StepUsageError,
    assert_rows,
    parse_amount_cell,
    parse_key,
    parse_settings,
    parse_time,
)
from reference.exactly_once_aggregation import (
    AggregateValue,
    DedupMemory,
    ExactlyOnceAggregator,
    ExactlyOnceAggregatorConfig,
    FileStateBackend,
    InMemoryStateBackend,
    MessageId,
    PartitionAggregateState,
    StateBackend,
    double_text,
)

scenarios("exactly_once_aggregation.feature")

NULL_CELLS = {"", "-", "none", "null"}
MESSAGE_COLUMNS = ("producer", "partition", "sequence", "key", "amount")
STATS = ("events_folded", "duplicates_filtered", "outside_window", "checkpoints_taken")
# The API's amount is a double: these JSON strings stand for the doubles they name.
NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def value_text(value: AggregateValue | None) -> str:
    """``Sum(1.5)``, ``Count(2)``, ``Mean(sum=3.0, count=2)`` or ``None``."""
    if value is None:
        return "None"
    if value.kind == "count":
        return f"Count({value.count})"
    assert value.number is not None
    if value.kind == "mean":
        return f"Mean(sum={double_text(value.number)}, count={value.count})"
    return f"{value.kind.capitalize()}({double_text(value.number)})"


def _hex_of_table(datatable: DataTable | None, step: str) -> bytes:
    if not datatable or [h.strip() for h in datatable[0]] != ["bytes", "meaning"]:
        raise StepUsageError(f"{step}: the table has columns | bytes | meaning |")
    return _hex("".join(row[0] for row in datatable[1:]), step)


def _hex(text: str, step: str) -> bytes:
    try:
        return bytes.fromhex("".join(text.split()))
    except ValueError:
        raise StepUsageError(f"{step}: {text!r} is not hex bytes") from None


def _assert_bytes(what: str, expected: bytes, actual: bytes) -> None:
    """Compares byte strings 8 bytes a line, so a difference shows where it starts."""
    __tracebackhide__ = True

    def lines(data: bytes) -> list[tuple[int, str]]:
        return [(at, data[at : at + 8].hex(" ")) for at in range(0, len(data), 8)]

    assert_rows(what, ["offset", "bytes"], lines(expected), lines(actual), None)


# ---- Given: an aggregator --------------------------------------------------------------


def _aggregator(state: ScenarioState) -> ExactlyOnceAggregator:
    aggregator = state.scratch.get("aggregator")
    if not isinstance(aggregator, ExactlyOnceAggregator):
        raise StepUsageError("start with 'Given an exactly-once aggregator with ...'")
    return aggregator


def _config(settings: str, state_key: str | bytes | None) -> ExactlyOnceAggregatorConfig:
    parsed = parse_settings(settings)
    if state_key is not None:
        parsed["state_key"] = state_key
    return ExactlyOnceAggregatorConfig(**parsed)


def _new_backend(state: ScenarioState, kind: str) -> StateBackend:
    if kind == "file":
        # removed with the scenario's state: the pre-pass runs these steps too
        directory = tempfile.TemporaryDirectory(prefix="oxe-backend-")
        state.scratch["directory"] = directory
        return FileStateBackend(directory.name)
    return InMemoryStateBackend()


_STATE_KEY = r'(?:,? and the state key "(?P<state_key>[^"]*)")?'
_BACKEND = r"(?: on (?P<backend>an in-memory|a file) state backend)?"


@LIBRARY.given(rf"an exactly-once aggregator with (?P<settings>.+?){_STATE_KEY}{_BACKEND}")
def aggregator_with(state: ScenarioState, settings: str, state_key: str | None, backend: str | None) -> None:
    """An ``ExactlyOnceAggregator`` (oracle-only): the settings as in a trace (``a mean
    aggregate and a de-duplication window of 4 sequences``), then optionally ``and the
    state key "job-7"`` and ``on a file state backend`` (a new directory; default: in
    memory)."""
    config = _config(settings, state_key)
    kind = "file" if backend == "a file" else "in-memory"
    state.scratch["backend_kind"] = kind
    state.scratch["aggregator"] = ExactlyOnceAggregator(config, _new_backend(state, kind))
    state.scratch["results"] = []
    state.scratch["call"] = None


@LIBRARY.given(r'the backend holds under "(?P<key>[^"]*)" the bytes (?P<data>[0-9a-fA-F ]+)')
def backend_holds(state: ScenarioState, key: str, data: str) -> None:
    """Puts these bytes (hex, spaces ignored) under the key in the aggregator's backend."""
    _aggregator(state).backend.put(key.encode("utf-8"), _hex(data, "the backend holds"))


# ---- When: calls -----------------------------------------------------------------------


def _api_amount(cell: str | None) -> Any:
    """A fold's amount: a JSON cell, the strings of NON_FINITE as doubles, or ``bits:<16 hex>``
    for the double of those bits (a NaN of another sign or payload); an empty cell is None."""
    if cell is None:
        return None
    if cell.startswith("bits:"):
        return struct.unpack(">d", _hex(cell[5:], "bits:"))[0]
    value = parse_amount_cell(cell)
    return NON_FINITE.get(value, value) if isinstance(value, str) else value


def _message(row: dict[str, str]) -> tuple[tuple[Any, ...], MessageId, str | None, Any]:
    def cell(name: str) -> str | None:
        text = row.get(name, "").strip()
        return None if text == "" else text

    ids = tuple(
        None if cell(n) is None else parse_time(cell(n) or "") for n in ("producer", "partition", "sequence")
    )
    key, amount = parse_key(cell("key")), _api_amount(cell("amount"))
    return (*ids, key), MessageId(*ids), key, amount  # type: ignore[arg-type]


def _fold_rows(
    aggregator: ExactlyOnceAggregator, datatable: DataTable | None, step: str
) -> list[tuple[Any, ...]]:
    if not datatable:
        raise StepUsageError(f"{step} needs a table")
    header = [h.strip() for h in datatable[0]]
    if [h for h in header if h not in MESSAGE_COLUMNS]:
        raise StepUsageError(f"{step}: the columns are {list(MESSAGE_COLUMNS)}")
    out = []
    for cells in datatable[1:]:
        echo, message_id, key, amount = _message(dict(zip(header, cells, strict=True)))
        try:
            result = value_text(aggregator.fold(message_id, key, amount))  # type: ignore[arg-type]
        except ValueError as error:
            result = type(error).__name__
        out.append((*echo, result))
    return out


@LIBRARY.when(r"these messages are folded:")
def messages_folded(state: ScenarioState, datatable: DataTable | None = None) -> None:
    """| producer | partition | sequence | key | amount |: ``fold`` per row, in order; each
    result (the value, None, or ValueError) is kept for ``the folds returned``."""
    state.scratch["results"] = _fold_rows(_aggregator(state), datatable, "these messages are folded")


@LIBRARY.when(r"the aggregator is checkpointed")
def aggregator_checkpointed(state: ScenarioState) -> None:
    """``checkpoint()``: the whole state, one value under the state key (OXE-R13)."""
    _aggregator(state).checkpoint()


def _call(state: ScenarioState, call: Any) -> Any:
    """Runs a call that may be refused; the outcome is kept for ``the call is refused``."""
    try:
        result = call()
    except ValueError as error:
        state.scratch["call"] = error
        return None
    state.scratch["call"] = result
    return result


@LIBRARY.when(r"the aggregator restores from its backend")
def aggregator_restores(state: ScenarioState) -> None:
    """``restore()`` on the same aggregator."""
    _call(state, _aggregator(state).restore)


def _restarted(state: ScenarioState, config: ExactlyOnceAggregatorConfig) -> None:
    old = _aggregator(state)
    if state.scratch["backend_kind"] == "file":
        # a new process sees only the directory
        backend: StateBackend = FileStateBackend(state.scratch["directory"].name)
    else:
        backend = old.backend
    aggregator = ExactlyOnceAggregator(config, backend)
    state.scratch["aggregator"] = aggregator
    _call(state, aggregator.restore)


@LIBRARY.when(r"the process crashes and a new aggregator restores from the same backend")
def crash_and_restore(state: ScenarioState) -> None:
    """Everything but the backend is lost: a new aggregator of the same configuration (a file
    backend: a new one on the same directory) calls ``restore()``."""
    _restarted(state, _aggregator(state).config)


@LIBRARY.when(r"the process restarts with (?P<settings>.+) and restores from the same backend")
def restart_with(state: ScenarioState, settings: str) -> None:
    """As a crash, but the new aggregator has these settings (and the same state key)."""
    _restarted(state, _config(settings, _aggregator(state).config.state_key))


_DECODERS = {
    "an aggregate state": PartitionAggregateState.decode,
    "a de-duplication memory": DedupMemory.decode,
}


@LIBRARY.when(
    r"the bytes (?P<data>[0-9a-fA-F ]+?) are decoded as (?P<what>an aggregate state|a de-duplication memory)"
)
def bytes_decoded(state: ScenarioState, data: str, what: str) -> None:
    """``PartitionAggregateState.decode`` or the memory's decode of these bytes (hex, spaces
    ignored); the state or the refusal is kept for the Then steps."""
    raw = _hex(data, "the bytes are decoded")
    _call(state, lambda: _DECODERS[what](raw))


# ---- Then: what the calls returned -----------------------------------------------------


def _header(datatable: DataTable | None, step: str, allowed: tuple[str, ...]) -> list[str]:
    if not datatable:
        raise StepUsageError(f"{step} needs a table")
    header = [h.strip() for h in datatable[0]]
    unknown = [h for h in header if h not in allowed]
    if unknown:
        raise StepUsageError(f"{step}: unknown columns {unknown}; allowed: {list(allowed)}")
    return header


def _expected(column: str, text: str) -> Any:
    t = text.strip()
    if column in ("result", "value"):
        return t
    if t.lower() in NULL_CELLS:
        return None
    return parse_key(t) if column == "key" else parse_time(t)


RESULT_COLUMNS = ("producer", "partition", "sequence", "key", "result")


@LIBRARY.then(r"the folds returned:")
def folds_returned(state: ScenarioState, datatable: DataTable | None = None) -> None:
    """| producer | partition | sequence | key | result |: the last ``these messages are
    folded`` call's results, in order, any subset of the columns; ``result`` is the value
    fold returned, ``None``, or ``ValueError`` (OXE-R10)."""
    header = _header(datatable, "the folds returned:", RESULT_COLUMNS)
    assert datatable is not None
    expected = [tuple(_expected(c, v) for c, v in zip(header, r, strict=True)) for r in datatable[1:]]
    index = [RESULT_COLUMNS.index(c) for c in header]
    actual = [tuple(r[i] for i in index) for r in state.scratch.get("results", [])]
    if actual != expected:
        assert_rows("Then the folds returned", header, expected, actual, None)


def _values_are(step: str, datatable: DataTable | None, get: Any) -> None:
    __tracebackhide__ = True
    header = _header(datatable, step, ("key", "value"))
    if header != ["key", "value"]:
        raise StepUsageError(f"{step}: the table has columns | key | value |")
    assert datatable is not None
    expected = [(parse_key(k) or "", v.strip()) for k, v in datatable[1:]]
    actual = [(k, value_text(get(k))) for k, _ in expected]
    assert_rows(f"Then {step.rstrip(':')}", header, expected, actual, None)


@LIBRARY.then(r"get returns:")
def get_returns(state: ScenarioState, datatable: DataTable | None = None) -> None:
    """| key | value |: ``get(key)`` of the aggregator for each key (``None``: no value, OXE-R5)."""
    _values_are("get returns:", datatable, _aggregator(state).get)


@LIBRARY.then(r"the aggregator's stats are:")
def stats_are(state: ScenarioState, datatable: DataTable | None = None) -> None:
    """| events_folded | duplicates_filtered | outside_window | checkpoints_taken |: ``stats()``
    (OXE-R10), any subset of the columns."""
    header = _header(datatable, "the aggregator's stats are:", STATS)
    assert datatable is not None
    expected = [tuple(parse_time(v) for v in r) for r in datatable[1:]]
    stats = _aggregator(state).stats()
    assert_rows(
        "Then the aggregator's stats are", header, expected, [tuple(getattr(stats, c) for c in header)], None
    )


@LIBRARY.then(r"the aggregate state encodes as:")
def aggregate_state_encodes(state: ScenarioState, datatable: DataTable | None = None) -> None:
    """| bytes | meaning |: ``PartitionAggregateState.encode()`` of the aggregator's values is
    these bytes (hex; ``meaning`` is for the reader) (OXE-R11)."""
    expected = _hex_of_table(datatable, "the aggregate state encodes as")
    _assert_bytes("Then the aggregate state encodes as", expected, _aggregator(state).aggregates.encode())


@LIBRARY.then(r"the de-duplication memory encodes as:")
def memory_encodes(state: ScenarioState, datatable: DataTable | None = None) -> None:
    """| bytes | meaning |: the encoding of the aggregator's de-duplication memory (OXE-R12)."""
    expected = _hex_of_table(datatable, "the de-duplication memory encodes as")
    _assert_bytes("Then the de-duplication memory encodes as", expected, _aggregator(state).memory.encode())


@LIBRARY.then(r'the backend holds under "(?P<key>[^"]*)" the bytes:')
def backend_bytes(state: ScenarioState, key: str, datatable: DataTable | None = None) -> None:
    """| bytes | meaning |: the value the backend holds under the key (OXE-R13)."""
    expected = _hex_of_table(datatable, "the backend holds under K the bytes")
    stored = _aggregator(state).backend.get(key.encode("utf-8"))
    if stored is None:
        assert_rows(f"Then the backend holds under {key!r}", ["stored"], [("a value",)], [("nothing",)], None)
    assert stored is not None
    _assert_bytes(f"Then the backend holds under {key!r} the bytes", expected, stored)


@LIBRARY.then(r"the backend directory holds exactly the files:")
def directory_files(state: ScenarioState, datatable: DataTable | None = None) -> None:
    """| file |: every file of the file backend's directory, hidden ones included (a temporary
    file left behind would show)."""
    header = _header(datatable, "the backend directory holds exactly the files:", ("file",))
    assert datatable is not None
    directory = state.scratch.get("directory")
    if directory is None:
        raise StepUsageError("the aggregator has no file backend: say 'on a file state backend'")
    expected = sorted((r[0].strip().lower(),) for r in datatable[1:])
    actual = sorted((p.name.lower(),) for p in Path(directory.name).iterdir())
    assert_rows("Then the backend directory holds exactly the files", header, expected, actual, None)


@LIBRARY.then(r"its state is the state of an aggregator that folded each message once:")
def state_as_without_crash(state: ScenarioState, datatable: DataTable | None = None) -> None:
    """| producer | partition | sequence | key | amount |: a new aggregator of the same
    configuration folds these messages, with no crash and no checkpoint; both encodings of
    the aggregator's state equal that one's (OXE-R13)."""
    aggregator = _aggregator(state)
    reference = ExactlyOnceAggregator(aggregator.config, InMemoryStateBackend())
    _fold_rows(reference, datatable, "its state is the state of an aggregator")
    _assert_bytes(
        "Then its aggregate state is", reference.aggregates.encode(), aggregator.aggregates.encode()
    )
    _assert_bytes("Then its de-duplication memory is", reference.memory.encode(), aggregator.memory.encode())


@LIBRARY.then(r'the call is refused with (?P<error>StateDecodeError|ValueError) naming "(?P<named>[^"]+)"')
def call_refused(state: ScenarioState, error: str, named: str) -> None:
    """The last restore or decode raised this error (StateDecodeError is a ValueError), and its
    message holds the text (case ignored): the message names what is wrong (OXE-R14)."""
    outcome = state.scratch.get("call")
    got_type = type(outcome).__name__ if isinstance(outcome, Exception) else "no error"
    names = isinstance(outcome, Exception) and named.lower() in str(outcome).lower()
    assert_rows(
        f"Then the call is refused with {error} naming {named!r} (got: {outcome!r})",
        ["error", "names it"],
        [(error, True)],
        [(got_type, names)],
        None,
    )


@LIBRARY.then(r"the decoded aggregate state holds:")
def decoded_state_holds(state: ScenarioState, datatable: DataTable | None = None) -> None:
    """| key | value |: the state the last decode returned holds exactly these keys and values."""
    decoded = state.scratch.get("call")
    if not isinstance(decoded, PartitionAggregateState):
        assert_rows(
            "Then the decoded aggregate state holds", ["decoded"], [("a state",)], [(repr(decoded),)], None
        )
    assert isinstance(decoded, PartitionAggregateState)
    _values_are("the decoded aggregate state holds:", datatable, decoded.get)
    keys = sorted(k for k, _ in decoded)
    assert datatable is not None
    expected_keys = sorted(parse_key(r[0]) or "" for r in datatable[1:])
    assert_rows(
        "Then the decoded aggregate state holds (keys)", ["keys"], [(expected_keys,)], [(keys,)], None
    )


LIBRARY.bind(globals(), owner=__name__)
