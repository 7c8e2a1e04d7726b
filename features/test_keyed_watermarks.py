"""F065 keyed watermarks: features/keyed_watermarks.feature on every engine.

The shared steps come from harness.steps (installed by features/conftest.py).
This module adds the steps of the object API (``KeyedWatermarkTracker`` and
``CompactKeyedWatermarkTracker``) used by the ``@oracle-only`` scenarios:
calls with no streaming meaning (TR-10), run on the reference only.

It also adds the hash-fact steps of the compact tracker's scenarios
(F065-R27, R34): a digest cannot be worked out by hand, so a scenario states
the facts about its keys that its expected tables rely on ("the keys "a" and
"c" share their cell in every row of a sketch 3 wide and 2 deep"), and the
step checks each fact against the digest rule (SHA-512 words, through
``reference.keyed_watermarks.key_digest_words``) and fails, naming the
fact, when it is false. These steps change no trace.
"""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
from pytest_bdd import scenarios

from harness.steps import (
    LIBRARY,
    DataTable,
    ScenarioState,
    StepUsageError,
    assert_rows,
    parse_key,
    parse_setting_value,
    parse_settings,
    parse_time,
)
from reference.keyed_watermarks import (
    CompactKeyedWatermarkConfig,
    CompactKeyedWatermarkTracker,
    KeyedWatermarkConfig,
    KeyedWatermarkTracker,
    MaxKeysReached,
    key_digest_words,
)

scenarios("keyed_watermarks.feature")


class _Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


class TrackerView:
    """The direct view Then steps read in object-API scenarios (harness.steps.DirectView)."""

    def __init__(self, tracker: KeyedWatermarkTracker | CompactKeyedWatermarkTracker) -> None:
        self.tracker = tracker

    def key_states(self) -> dict[str, tuple[int | None, str]]:
        return {
            str(k): (s.watermark, "idle" if s.is_idle else "active")
            for k, s in self.tracker.key_states.items()
        }

    def global_watermark(self) -> int | None:
        return self.tracker.global_watermark()

    def metrics(self) -> dict[str, int]:
        return dict(vars(self.tracker.metrics()))


def _tracker(state: ScenarioState) -> KeyedWatermarkTracker | CompactKeyedWatermarkTracker:
    if not isinstance(state.direct, TrackerView):
        raise StepUsageError(
            "start with 'Given a KeyedWatermarkTracker with ...' "
            "or 'Given a CompactKeyedWatermarkTracker configured with:'"
        )
    return state.direct.tracker


def _call(state: ScenarioState, fn: Any, *args: Any) -> None:
    try:
        state.scratch["result"] = ("returned", fn(*args))
    except MaxKeysReached as e:
        state.scratch["result"] = ("raised", e)


@LIBRARY.given(r"a KeyedWatermarkTracker with (?P<settings>.+)")
def tracker_with(state: ScenarioState, settings: str) -> None:
    """A KeyedWatermarkTracker (oracle-only) built from setting phrases, on a clock at 0."""
    config = parse_settings(settings)
    state.scratch["clock"] = clock = _Clock()
    state.direct = TrackerView(KeyedWatermarkTracker(KeyedWatermarkConfig(**config), clock))


@LIBRARY.given(r"a CompactKeyedWatermarkTracker configured with:")
def compact_tracker_with(state: ScenarioState, datatable: DataTable | None = None) -> None:
    """| setting | value |: a CompactKeyedWatermarkTracker (oracle-only, F065-R26) on a clock at 0."""
    if not datatable or [h.strip() for h in datatable[0]] != ["setting", "value"]:
        raise StepUsageError("the configuration table has columns | setting | value |")
    config = {name.strip(): parse_setting_value(value) for name, value in datatable[1:]}
    state.scratch["clock"] = clock = _Clock()
    state.scratch["compact_config"] = config  # the hash-fact steps read the sketch's shape from it
    state.direct = TrackerView(CompactKeyedWatermarkTracker(CompactKeyedWatermarkConfig(**config), clock))


@LIBRARY.when(r'the tracker updates key (?P<key>"[^"]*"|\S+) at (?P<time>.+?) ms')
def tracker_update(state: ScenarioState, key: str, time: str) -> None:
    """Calls ``update(key, time)``; the result or MaxKeysReached is kept for the Then steps."""
    _call(state, _tracker(state).update, parse_key(key), parse_time(time))


@LIBRARY.when(r"the tracker updates a batch:")
def tracker_update_batch(state: ScenarioState, datatable: DataTable | None = None) -> None:
    """| key | event_time |: calls ``update_batch`` with the rows as one batch."""
    if not datatable or [h.strip() for h in datatable[0]] != ["key", "event_time"]:
        raise StepUsageError("the batch table has columns | key | event_time |")
    events = [(parse_key(k), parse_time(t)) for k, t in datatable[1:]]
    _call(state, _tracker(state).update_batch, events)


@LIBRARY.when(r'the tracker marks key (?P<key>"[^"]*"|\S+) idle')
def tracker_mark_idle(state: ScenarioState, key: str) -> None:
    """Calls ``mark_idle(key)``."""
    _call(state, _tracker(state).mark_idle, parse_key(key))


@LIBRARY.when(r'the tracker removes key (?P<key>"[^"]*"|\S+)')
def tracker_remove(state: ScenarioState, key: str) -> None:
    """Calls ``remove_key(key)``."""
    _call(state, _tracker(state).remove_key, parse_key(key))


@LIBRARY.when(r"the tracker is cleared")
def tracker_clear(state: ScenarioState) -> None:
    """Calls ``clear()``: every key is forgotten."""
    _call(state, _tracker(state).clear)


@LIBRARY.when(r"recalculate_global is called")
def tracker_recalculate(state: ScenarioState) -> None:
    """Calls ``recalculate_global()``."""
    _call(state, _tracker(state).recalculate_global)


@LIBRARY.then(r"the call returns (?P<value>.+)")
def call_returns(state: ScenarioState, value: str) -> None:
    """The last tracker call returned this watermark (a number, or none)."""
    kind, got = state.scratch["result"]
    expected = None if value.strip().lower() == "none" else parse_time(value)
    actual = got if kind == "returned" else f"raised {got!r}"
    assert_rows("Then the call returns", ["result"], [(expected,)], [(actual,)], None)


@LIBRARY.then(r'the tracker\'s watermark for key (?P<key>"[^"]*"|\S+) is (?P<value>.+)')
def tracker_watermark_for_key(state: ScenarioState, key: str, value: str) -> None:
    """``watermark_for_key(key)`` now (a number, or none); F065-R31: a compact tracker's estimate too."""
    expected = None if value.strip().lower() == "none" else parse_time(value)
    actual = _tracker(state).watermark_for_key(parse_key(key))
    assert_rows(
        f"Then the tracker's watermark for key {key} is", ["watermark"], [(expected,)], [(actual,)], None
    )


@LIBRARY.then(r"the call raises MaxKeysReached for keys: (?P<keys>.+)")
def call_raises(state: ScenarioState, keys: str) -> None:
    """The last tracker call raised MaxKeysReached rejecting exactly these keys (comma-separated)."""
    kind, got = state.scratch["result"]
    expected = [parse_key(k) for k in keys.split(",")]
    actual = got.rejected if kind == "raised" else f"returned {got!r}"
    assert_rows("Then the call raises MaxKeysReached", ["rejected keys"], [(expected,)], [(actual,)], None)


# ---- hash facts of the compact tracker (F065-R27, R34) ------------------------------

_QUOTED = r'"[^"]*"'
_KEY_LIST = rf"{_QUOTED}(?:(?:, | and | or ){_QUOTED})*"


def _names(text: str) -> list[str]:
    return re.findall(r'"([^"]*)"', text)


def _fact_fails(fact: str, detail: str) -> None:
    __tracebackhide__ = True
    pytest.fail(f"the hash fact {fact!r} is false: {detail}", pytrace=False)


def _sketch_shape(state: ScenarioState) -> tuple[int, int, int]:
    """Width, depth and shard count of the scenario's compact configuration (F065-R26, R27)."""
    config = state.config if state.direct is None else state.scratch.get("compact_config", {})
    if "exact_key_count" not in config:
        raise StepUsageError("state hash facts after a configuration that names exact_key_count")
    rate = config.get("sketch_error_rate", 0.01)
    width = math.ceil(math.e / rate)  # F065-R27, in IEEE doubles as the clause says
    return width, config.get("sketch_depth", 4), config.get("shards", 1)


def _cells(key: str, width: int, depth: int) -> list[int]:
    words = key_digest_words(key)
    return [words[2 + row] % width for row in range(depth)]  # F065-R27


def _shard(key: str, shards: int) -> int:
    return key_digest_words(key)[0] % shards  # F065-R27


def _described(keys: list[str], width: int, depth: int, shards: int) -> str:
    return "; ".join(f"{k!r}: shard {_shard(k, shards)}, cells {_cells(k, width, depth)}" for k in keys)


@LIBRARY.given(
    rf"the keys (?P<keys>{_KEY_LIST}) share their cell in every row of a sketch "
    r"(?P<width>\d+) wide and (?P<depth>\d+) deep"
)
def keys_share_every_cell(state: ScenarioState, keys: str, width: str, depth: str) -> None:
    """The keys are in one shard and have one cell in every row of its sketches (checked, F065-R27);
    the width and depth stated must be the scenario's own."""
    w, d, shards = _sketch_shape(state)
    if (int(width), int(depth)) != (w, d):
        raise StepUsageError(
            f"the scenario's sketch is {w} wide and {d} deep, not {width} wide and {depth} deep"
        )
    names = _names(keys)
    places = {(_shard(k, shards), tuple(_cells(k, w, d))) for k in names}
    if len(names) < 2 or len(places) != 1:
        _fact_fails(f"the keys {keys} share their cell in every row", _described(names, w, d, shards))


@LIBRARY.given(
    rf"the keys (?P<first>{_QUOTED}) and (?P<second>{_QUOTED}) share their cell in row (?P<row>\d+) only"
)
def keys_share_one_row(state: ScenarioState, first: str, second: str, row: str) -> None:
    """Same shard, the same cell in that row and a different cell in every other row (F065-R27)."""
    w, d, shards = _sketch_shape(state)
    a, b = _names(first)[0], _names(second)[0]
    r = int(row)
    if not 0 <= r < d:
        raise StepUsageError(f"row {r} is not a row of a sketch {d} deep")
    same = [x == y for x, y in zip(_cells(a, w, d), _cells(b, w, d), strict=True)]
    if _shard(a, shards) != _shard(b, shards) or same != [i == r for i in range(d)]:
        _fact_fails(
            f"the keys {first} and {second} share their cell in row {r} only",
            _described([a, b], w, d, shards),
        )


@LIBRARY.given(rf"the keys? (?P<keys>{_KEY_LIST}) shares? no cell(?: with (?P<others>{_KEY_LIST}))?")
def keys_share_no_cell(state: ScenarioState, keys: str, others: str | None) -> None:
    """With ``with``: no key of the first list shares a cell, in any row, with a key of the second;
    without: no two keys of the list do. Keys of different shards share nothing (F065-R27)."""
    w, d, shards = _sketch_shape(state)
    left = _names(keys)
    pairs = (
        [(a, b) for a in left for b in _names(others)]
        if others
        else [(a, b) for i, a in enumerate(left) for b in left[i + 1 :]]
    )
    for a, b in pairs:
        if _shard(a, shards) == _shard(b, shards) and any(
            x == y for x, y in zip(_cells(a, w, d), _cells(b, w, d), strict=True)
        ):
            subject = f"the key {keys} shares" if len(left) == 1 else f"the keys {keys} share"
            _fact_fails(
                f"{subject} no cell" + (f" with {others}" if others else ""), _described([a, b], w, d, shards)
            )


@LIBRARY.given(rf"the keys? (?P<keys>{_KEY_LIST}) (?:is|are) in shard (?P<n>\d+) of (?P<shards>\d+)")
def keys_in_shard(state: ScenarioState, keys: str, n: str, shards: str) -> None:
    """The first digest word modulo the shard count (F065-R27) is n for every key named."""
    wrong = {k: _shard(k, int(shards)) for k in _names(keys) if _shard(k, int(shards)) != int(n)}
    if wrong:
        _fact_fails(f"{keys} in shard {n} of {shards}", f"their shards of {shards}: {wrong}")


@LIBRARY.given(rf"the keys (?P<keys>{_KEY_LIST}) fall in distinct registers of the key estimate")
def keys_in_distinct_registers(state: ScenarioState, keys: str) -> None:
    """No two of the keys have one HyperLogLog register (``w1 >> 52``, F065-R34), so n such keys
    leave 4096 - n registers at 0 and linear counting gives round(4096 * ln(4096 / (4096 - n)))."""
    registers = {k: key_digest_words(k)[1] >> 52 for k in _names(keys)}
    if len(set(registers.values())) != len(registers):
        _fact_fails(f"the keys {keys} fall in distinct registers", f"registers {registers}")


LIBRARY.bind(globals(), owner=__name__)
