"""Hypothesis strategies for out-of-order streams, cut into micro-batches.

The building blocks are area-neutral (keys with skew, event times around an
advancing base time with bounded disorder, a processing clock with idle
gaps, malformed items, restart points); ``keyed_watermark_traces`` puts them
together with the F065 configuration into ``harness.traces.Trace`` objects; a
third of its valid traces use the compact tracker (F065-R26..R37), with small
exact sets, narrow sketches and keys chosen to collide (``compact_keys``).
Other areas reuse the blocks with their own configuration and control items.

Two time ranges:

* ``BOUNDED`` (0 .. 10**7 ms, the default): what every engine, Spark
  included, must handle natively (TR-2).
* ``near_i64_bounds_traces``: event times and delays at the i64 bounds, for
  the oracle only (saturation, F065-R2 / TR-2).

Numbers are often drawn on a grid (multiples of 1, 100 or 1000 ms) and
bounded delays from the same grid, so that an event lands exactly on its
key's watermark, a clock gap equals the idle timeout, and so on: the
boundaries (``<`` versus ``<=``) are hit often, not by luck.

``partitioned_watermark_traces`` (F064) reuses the same blocks for
multi-source, multi-partition streams: registration first, partitions at
their own rates, stalls, idle gaps, idle/active marks, rebalances, core
assignments and malformed items (see its docstring).
"""

from __future__ import annotations

import functools
import gzip
import itertools
import json
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from harness.differential import Report, check_against_reference
from harness.engine import Engine
from harness.hypothesis_profiles import SEED_VAR, differential_budget, profile_name, run_seed
from harness.replay import replay_traces
from harness.traces import I64_MAX, I64_MIN, PARTITIONED_REQUIRED_FIELDS, InvalidConfig, Item, Trace
from reference.keyed_watermarks import CompactKeyedWatermarkConfig, config_from_trace, key_digest_words
from strategies.provenance import draw_conditions, stale_sources

AREA = "keyed_watermarks"

#: a few hot keys get most of the events; a long tail gets the rest (key skew)
HOT_KEYS = ("a", "b", "c")
TAIL_KEYS = tuple(f"t{i:02d}" for i in range(16))

#: a key that never appears in generated traces; idling it is a no-op control item
ABSENT_KEY = "__absent__"

#: TR-3: event values are 32-bit, so that any window sum fits in i64
I32_MIN, I32_MAX = -(2**31), 2**31 - 1

POLICIES = ("LeastRecentlyActive", "LowestWatermark", "RejectNew")


@dataclass(frozen=True)
class TimeRange:
    low: int
    high: int

    def clamp(self, t: int) -> int:
        return max(self.low, min(self.high, t))


BOUNDED = TimeRange(0, 10**7)


# ---- area-neutral building blocks ------------------------------------------


def skewed_keys(hot: tuple[str, ...] = HOT_KEYS, tail: tuple[str, ...] = TAIL_KEYS) -> st.SearchStrategy[str]:
    """Three quarters of the draws hit a hot key, the rest the long tail (shrinks to ``hot[0]``)."""

    @st.composite
    def draw_key(draw: st.DrawFn) -> str:
        if draw(st.integers(0, 3)) < 3:
            return hot[draw(st.integers(0, len(hot) - 1))]
        return tail[draw(st.integers(0, len(tail) - 1))]

    return draw_key()


def grids() -> st.SearchStrategy[int]:
    """The granularity of the numbers of one trace."""
    return st.sampled_from((1000, 100, 1))


def delays(grid: int, high: int = 10_000) -> st.SearchStrategy[int]:
    """A duration >= 0 (bounded delay, idle timeout), often 0 and often on the grid."""
    return st.one_of(
        st.just(0),
        st.integers(0, max(1, high // grid)).map(lambda n: n * grid),
        st.integers(0, high),
    )


@dataclass
class StreamState:
    """The advancing quantities of a generated stream."""

    base: int  # the event-time frontier events are drawn around
    clock: int = 0  # the processing clock (TR-4)


def out_of_order_time(
    draw: st.DrawFn,
    state: StreamState,
    grid: int,
    disorder: int,
    max_step: int,
    times: TimeRange,
    boundary: int | None = None,
) -> int:
    """Advance the base time by a bounded step, then go back by at most ``disorder``.

    With ``boundary`` (the bounded delay), one event in four goes back by
    about exactly that much: it lands on or next to the watermark of the
    keys that have seen the base time, where ``<`` and ``<=`` differ.
    """
    state.base = times.clamp(state.base + draw(st.integers(0, max_step)) * grid)
    if boundary is not None and draw(st.integers(0, 3)) == 0:
        back = boundary + draw(st.sampled_from((0, grid, -grid, 1, 1, -1)))  # 1: just below, late
    else:
        back = draw(st.integers(0, max(0, disorder // grid))) * grid
    return times.clamp(state.base - back)


def clock_advance(draw: st.DrawFn, state: StreamState, idle_timeout: int, grid: int, times: TimeRange) -> int:
    """A new processing-clock time: a small step, exactly the idle timeout, or an idle gap past it."""
    kind = draw(st.integers(0, 3))
    if kind == 0:
        gap = draw(st.integers(0, max(1, idle_timeout // 2)))
    elif kind == 1:
        gap = idle_timeout  # the strict '>' of F065-R10: not idle yet
    else:
        gap = idle_timeout + draw(st.sampled_from((1, grid, 10 * grid)))  # past the timeout
    state.clock = max(0, min(times.high, state.clock + gap))
    return state.clock


#: a burst batch holds this many events of the stream (F065-R16, F064-R20: large update steps)
BURST_SIZES = st.integers(20, 28)

#: a batch with at least this many events of one stream is large (generator coverage, TR-13)
LARGE_BATCH = 20

#: a burst ties at least this many events to one time: numpy sorts up to 16 elements stably
#: (insertion sort), so only a longer input with a long tied run exposes an unstable sort
LONG_TIE_RUN = 8


def burst_shape(draw: st.DrawFn) -> tuple[int, frozenset[int]]:
    """The size of a burst batch and the positions of its tied events (none in one burst of four)."""
    size = draw(BURST_SIZES)
    if draw(st.integers(0, 3)) == 0:
        return size, frozenset()
    tied = draw(st.lists(st.integers(0, size - 1), min_size=LONG_TIE_RUN, max_size=12, unique=True))
    return size, frozenset(tied)


def burst_batch_index(draw: st.DrawFn, n_batches: int, rate: int) -> int | None:
    """One trace in ``rate`` gets one burst batch (large steps stay few, so Spark runs stay fast)."""
    if rate and draw(st.integers(0, rate - 1)) == 0:
        return draw(st.integers(0, n_batches - 1))
    return None


def wake_up_clocks(
    draw: st.DrawFn, state: StreamState, idle_timeout: int, grid: int, times: TimeRange
) -> int:
    """A clock time past the idle timeout, after which everything tracked has been silent too long;
    ``within_timeout_clock`` then gives the clock step that must not idle what woke up in between."""
    gap = idle_timeout + draw(st.sampled_from((1, grid, 10 * grid)))
    state.clock = max(0, min(times.high, state.clock + gap))
    return state.clock


def within_timeout_clock(draw: st.DrawFn, state: StreamState, idle_timeout: int, times: TimeRange) -> int:
    """A clock step of at most the idle timeout (F065-R10, F064-R10, R11: not idle yet)."""
    gap = draw(st.sampled_from((0, idle_timeout // 2, idle_timeout)))
    state.clock = max(0, min(times.high, state.clock + gap))
    return state.clock


def restart_points(n_batches: int) -> st.SearchStrategy[frozenset[int]]:
    """About one batch boundary in six becomes a restart point (TR-5)."""
    if n_batches < 2:
        return st.just(frozenset())
    return st.lists(st.integers(0, 5), min_size=n_batches - 1, max_size=n_batches - 1).map(
        lambda picks: frozenset(i for i, p in enumerate(picks) if p == 0)
    )


def malformed_item(draw: st.DrawFn, state: StreamState, key: str, event_time: int) -> Item:
    """One item an engine must answer with an error row (TR-7, F065-R23)."""
    choices = ["event_no_key", "event_no_time", "idle_no_key", "remove_no_key", "clock_no_time"]
    if state.clock > 0:
        choices.append("clock_backwards")
    kind = draw(st.sampled_from(choices))
    if kind == "event_no_key":
        return Item("event", key=None, event_time=event_time)
    if kind == "event_no_time":
        return Item("event", key=key, event_time=None)
    if kind == "idle_no_key":
        return Item("idle", key=None)
    if kind == "remove_no_key":
        return Item("remove_key", key=None)
    if kind == "clock_no_time":
        return Item("clock", time=None)
    return Item("clock", time=state.clock - draw(st.integers(1, state.clock)))


# ---- F065 ------------------------------------------------------------------


@st.composite
def keyed_watermark_configs(draw: st.DrawFn, grid: int = 1000, max_delay: int = 10_000) -> dict[str, Any]:
    """Valid F065-R20 configurations; a setting is sometimes left out (its default applies)."""
    config: dict[str, Any] = {}
    config["bounded_delay"] = draw(delays(grid, max_delay))  # always set: it is in every Given step
    if draw(st.integers(0, 4)) > 0:
        config["idle_timeout"] = draw(delays(grid, 20_000))
    if draw(st.integers(0, 1)) == 0:  # one in two: refusals reach TR-13's floor beside the compact third
        config["max_keys"] = draw(st.integers(1, 4))
        if draw(st.integers(0, 5)) > 0:  # else the default policy
            # RejectNew twice: a refusal needs one more key than max_keys, an eviction does not
            config["eviction_policy"] = draw(st.sampled_from((*POLICIES, "RejectNew")))
    if draw(st.integers(0, 2)) > 0:  # two in three: window cases reach TR-13's floor beside the compact third
        # mostly a few grid steps, so that a key's watermark lands exactly on a window end (R21)
        size = draw(
            st.one_of(
                st.integers(1, 3).map(lambda n: n * grid),
                st.integers(1, 10).map(lambda n: n * grid),
                st.integers(1, 10_000),
            )
        )
        config["window_size"] = size
        if draw(st.booleans()):  # a delay of a few windows: short traces close windows too
            config["bounded_delay"] = min(max_delay, draw(st.sampled_from((0, size, 2 * size))))
    return config


#: one valid generated trace in this many uses the compact tracker (F065-R26)
COMPACT_RATE = 3

#: a compact trace's key alphabet has this many tail keys, each with a partner (``compact_keys``)
COMPACT_TAILS = 3


def compact_shape(config: dict[str, Any]) -> tuple[int, int, int] | None:
    """Width, depth and shards of a valid compact configuration (F065-R26, R27), else None."""
    try:
        parsed, _ = config_from_trace(config)
    except InvalidConfig:
        return None
    if not isinstance(parsed, CompactKeyedWatermarkConfig):
        return None
    return parsed.width, parsed.sketch_depth, parsed.shards


#: a partner is searched for only among about this many names per place (sketch shapes beyond it:
#: a wide default sketch 2 or more deep, where keys collide only by luck, as in a real stream)
PARTNER_SEARCH_LIMIT = 100_000


@functools.lru_cache(maxsize=64)
def compact_keys(width: int, depth: int, shards: int) -> tuple[str, ...]:
    """A compact trace's key alphabet: the hot keys, ``COMPACT_TAILS`` tail keys picked so that every
    shard gets keys, and after each tail key a partner in its shard with its cell in every row
    (F065-R27). Few keys come back often (demotions, promotions, F065-R30), and a key's estimate is
    raised by another key's events, the case of F065-R33, in every narrow sketch and not by luck."""

    def place(key: str) -> tuple[int, ...]:
        words = key_digest_words(key)
        return (words[0] % shards, *(words[2 + row] % width for row in range(depth)))

    per_shard = Counter(place(key)[0] for key in HOT_KEYS)
    tails: list[str] = []
    for _ in range(COMPACT_TAILS):
        # the first tail key of the emptiest shard (min keeps the first of equals)
        tail = min((k for k in TAIL_KEYS if k not in tails), key=lambda k: per_shard[place(k)[0]])
        tails.append(tail)
        per_shard[place(tail)[0]] += 1
    if shards * width**depth > PARTNER_SEARCH_LIMIT:
        spare = [k for k in TAIL_KEYS if k not in tails][: len(tails)]
        return (*HOT_KEYS, *tails, *spare)
    keys = list(HOT_KEYS)
    for tail in tails:
        partner = next(f"{tail}x{n}" for n in itertools.count() if place(f"{tail}x{n}") == place(tail))
        keys += [tail, partner]
    return tuple(keys)


#: a compact stream's batches hold up to this many more items
COMPACT_EXTRA_ITEMS = 4


@st.composite
def compact_keyed_watermark_configs(
    draw: st.DrawFn, grid: int = 1000, max_delay: int = 10_000
) -> dict[str, Any]:
    """Valid F065-R26 configurations of the compact tracker, small enough that its shards fill,
    demote and promote keys, and that keys collide in a sketch 3 to 10 wide and 1 to 3 deep;
    a setting is sometimes left out (its default applies)."""
    config: dict[str, Any] = {"bounded_delay": draw(delays(grid, max_delay))}
    if draw(st.integers(0, 4)) > 0:
        config["idle_timeout"] = draw(delays(grid, 20_000))
    exact = draw(st.sampled_from((1, 1, 1, 2, 2, 3, 4)))  # mostly full shards: demotions and promotions
    config["exact_key_count"] = exact
    if draw(st.integers(0, 9)) > 0:  # else the default 0.01: 272 wide, where keys rarely collide
        # two decimals: width ceil(e / rate) from 10 (0.28) down to 3 (0.99), mostly 6 or less (F065-R27)
        config["sketch_error_rate"] = draw(st.integers(46 if draw(st.integers(0, 3)) else 28, 99)) / 100
    if draw(st.integers(0, 9)) > 0:  # else the default depth of 4
        config["sketch_depth"] = draw(st.sampled_from((1, 1, 1, 2, 3)))  # one row: neighbours collide
    if exact >= 2 and draw(st.booleans()):
        config["shards"] = draw(st.integers(2, min(3, exact)))
    elif draw(st.booleans()):
        config["shards"] = 1
    return config


@st.composite
def invalid_keyed_watermark_configs(draw: st.DrawFn) -> dict[str, Any]:
    """Configurations an engine must refuse with InvalidConfig (F065-R20, R26, TR-6)."""
    bad = draw(
        st.sampled_from(
            [
                {"bounded_delay": -1},
                {"idle_timeout": -5},
                {"max_keys": 0},
                {"eviction_policy": "Oldest"},
                {"window_size": 0},
                {"no_such_setting": 1},
                {"bounded_delay": 1.5},
                # F065-R26: the compact tracker's own refusals
                {"exact_key_count": 2, "max_keys": 2},
                {"exact_key_count": 2, "window_size": 1000},
                {"exact_key_count": 2, "shards": 3},
                {"exact_key_count": 2, "sketch_depth": 7},
                {"exact_key_count": 2, "sketch_error_rate": 1},
                {"exact_key_count": 2, "sketch_error_rate": 0},
                {"exact_key_count": 0},
                {"sketch_depth": 2},
            ]
        )
    )
    return {"bounded_delay": 1000, **bad}


@st.composite
def keyed_watermark_traces(
    draw: st.DrawFn,
    *,
    max_batches: int = 6,
    max_items: int = 8,
    times: TimeRange = BOUNDED,
    malformed: bool = True,
    control: bool = True,
    restarts: bool = True,
    config: dict[str, Any] | None = None,
    invalid_config_rate: int = 0,
    burst_rate: int = 7,
    compact_rate: int = COMPACT_RATE,
) -> Trace:
    """An out-of-order multi-key stream cut into micro-batches, with the F065 control items.

    ``invalid_config_rate``: one trace in that many (0: never) gets a refused configuration.
    ``burst_rate``: one trace in that many (0: never) gets one batch of 20 to 28 events, most
    of them with a run of 8 to 12 events at one event time.
    ``compact_rate``: one trace with a valid drawn configuration in that many (0: never) uses
    the compact tracker (F065-R26), over its own small key alphabet (``compact_keys``).
    """
    grid = draw(grids())
    if config is None:
        if invalid_config_rate and draw(st.integers(0, invalid_config_rate - 1)) == 0:
            config = draw(invalid_keyed_watermark_configs())
        elif compact_rate and draw(st.integers(0, compact_rate - 1)) == compact_rate - 1:
            config = draw(compact_keyed_watermark_configs(grid))  # shrinks towards the keyed tracker
        else:
            config = draw(keyed_watermark_configs(grid))
    delay = config.get("bounded_delay", 5000) if isinstance(config.get("bounded_delay"), int) else 1000
    window = config.get("window_size")
    on_window_grid = isinstance(window, int) and window >= 1 and delay in (0, window, 2 * window)
    if on_window_grid and draw(st.booleans()):
        grid = window  # times on the window grid: a key's watermark lands exactly on a window end (R21)
    else:
        on_window_grid = False
    idle_timeout = config.get("idle_timeout", 60_000)
    if not isinstance(idle_timeout, int):
        idle_timeout = 60_000
    # the disorder bound: none, within the delay (nothing late), exactly it, or beyond it
    shape = compact_shape(config)
    compact = shape is not None
    beyond = (delay + grid, 2 * delay + 3 * grid, 4 * delay + 10 * grid)
    if compact:
        # mostly beyond the delay: an estimate raised by another key then makes on-time events late (R33)
        disorder = draw(st.sampled_from((delay // 2, delay, *beyond, *beyond)))
    else:
        disorder = draw(st.sampled_from((0, delay // 2, delay, *beyond)))
    # on the window grid, steps of one window: a key's next window end is often its exact watermark
    max_step = 1 if on_window_grid else draw(st.sampled_from((0, 1, 3, 10)))
    # start past the delay and the disorder, so that watermarks are not all below the time range
    state = StreamState(base=times.clamp(times.low + delay + disorder + draw(st.integers(0, 20)) * grid))
    keys = st.sampled_from(compact_keys(*shape)) if shape is not None else skewed_keys()
    seen: list[str] = []

    def event(key: str | None = None) -> Item:
        key = draw(keys) if key is None else key
        t = out_of_order_time(draw, state, grid, disorder, max_step, times, boundary=delay)
        if compact and draw(st.integers(0, 3)) == 0:
            # just behind a watermark at the frontier: late only if the key's own events or, in the
            # compact tracker, the keys sharing its cells put its estimate there (F065-R32, R33)
            t = times.clamp(state.base - delay - draw(st.sampled_from((1, grid))))
        seen.append(key)
        return Item("event", key=key, event_time=t, value=draw(st.integers(-2, 9)))

    # a compact stream needs events enough to fill its shards and write its sketch (F065-R30)
    compact_extra = COMPACT_EXTRA_ITEMS if compact else 0
    # a compact stream removes more than it idles: a removed key's cells outlive it (F065-R31)
    idle_until = 89 if compact else 92
    n_batches = draw(st.integers(2 if compact else 1, max_batches))
    burst_at = burst_batch_index(draw, n_batches, burst_rate)
    batches = []
    for b in range(n_batches):
        if b == burst_at:
            size, tied = burst_shape(draw)
            tie_time = event().event_time
            burst = [event() for _ in range(size)]
            batches.append(
                tuple(replace(e, event_time=tie_time) if n in tied else e for n, e in enumerate(burst))
            )
            continue
        size = draw(st.integers(compact_extra // 2, max_items + compact_extra))
        batch = []
        for _ in range(size):
            roll = draw(st.integers(0, 99)) if (control or malformed) else 0
            if roll < 76 or (roll < 96 and not control) or (roll >= 96 and not malformed):
                batch.append(event())
            elif roll < 86 and seen and draw(st.integers(0, 3)) == 0:
                # a key wakes after a silence past the timeout; the next clock step must not idle it
                batch.append(Item("clock", time=wake_up_clocks(draw, state, idle_timeout, grid, times)))
                batch.append(event(draw(st.sampled_from(seen))))
                batch.append(Item("clock", time=within_timeout_clock(draw, state, idle_timeout, times)))
            elif roll < 86:
                batch.append(Item("clock", time=clock_advance(draw, state, idle_timeout, grid, times)))
            elif roll < idle_until:
                # mostly a key that has events, sometimes an unknown one (a no-op, F065-R9)
                key = draw(st.sampled_from(seen)) if seen and draw(st.integers(0, 4)) else draw(keys)
                batch.append(Item("idle", key=key))
            elif roll < 96:
                key = draw(st.sampled_from(seen)) if seen and draw(st.integers(0, 4)) else draw(keys)
                batch.append(Item("remove_key", key=key))
            else:
                batch.append(malformed_item(draw, state, draw(keys), state.base))
        batches.append(tuple(batch))
    restart_after = draw(restart_points(n_batches)) if restarts else frozenset()
    return Trace(AREA, config, tuple(batches), restart_after)


def i64_edge_times() -> st.SearchStrategy[int]:
    """Event times at and near both ends of the i64 range."""
    return st.one_of(
        st.sampled_from((I64_MIN, I64_MIN + 1, I64_MAX - 1, I64_MAX, 0, -1)),
        st.integers(I64_MIN, I64_MIN + 10_000),
        st.integers(I64_MAX - 10_000, I64_MAX),
    )


@st.composite
def near_i64_bounds_traces(draw: st.DrawFn, max_batches: int = 3, max_items: int = 6) -> Trace:
    """Oracle-only traces: times and durations at the i64 bounds (saturation, TR-2, F065-R2)."""
    config: dict[str, Any] = {
        "bounded_delay": draw(
            st.one_of(st.sampled_from((0, 1, I64_MAX)), st.integers(0, 10_000), st.integers(2**62, I64_MAX))
        ),
        "idle_timeout": draw(st.sampled_from((0, I64_MAX))),
    }
    if draw(st.booleans()):
        config["window_size"] = draw(st.one_of(st.integers(1, 10), st.sampled_from((1000, 2**62, I64_MAX))))
    keys = skewed_keys()
    batches = []
    clock_now = 0
    for _ in range(draw(st.integers(1, max_batches))):
        batch = []
        for _ in range(draw(st.integers(0, max_items))):
            if draw(st.integers(0, 5)) == 0:
                clock_now = draw(st.sampled_from((clock_now, min(I64_MAX, clock_now + 1), I64_MAX)))
                batch.append(Item("clock", time=clock_now))
            else:
                batch.append(
                    Item(
                        "event",
                        key=draw(keys),
                        event_time=draw(i64_edge_times()),
                        value=draw(st.sampled_from((0, 1, I32_MIN, I32_MAX))),
                    )
                )
        batches.append(tuple(batch))
    return Trace(AREA, config, tuple(batches), draw(restart_points(len(batches))))


def generate(strategy: st.SearchStrategy[Trace], n: int, seed_value: int = 0) -> list[Trace]:
    """``n`` distinct traces drawn by Hypothesis (generate phase only), deterministic for a seed.

    For differential runs: the traces go to an engine all at once, and a
    failure is shrunk by harness.differential, not by Hypothesis.
    """
    out: dict[str, Trace] = {}
    attempt = 0
    while len(out) < n and attempt < 20:

        @settings(
            # not the loaded profile's: derandomize (ci) makes the draws depend on earlier runs
            parent=settings.get_profile("default"),
            max_examples=n,
            database=None,
            phases=[Phase.generate],
            deadline=None,
            suppress_health_check=list(HealthCheck),
        )
        @seed(seed_value * 1000 + attempt)
        @given(strategy)
        def collect(trace: Trace) -> None:
            if len(out) < n:
                out.setdefault(trace.dumps(), trace)

        collect()
        attempt += 1
    return [replace(t, name=f"generated #{i} (seed {seed_value})") for i, t in enumerate(out.values())]


#: an area's differential mix: (strategy, share of the traces) pairs
Parts = tuple[tuple[st.SearchStrategy[Trace], float], ...]

_DRAWN: dict[tuple[str, int, int], list[Trace]] = {}


def differential_traces(
    parts: Parts, n: int | None = None, seed_value: int | None = None, *, every_restart: bool = False
) -> list[Trace]:
    """The traces a differential run of ``parts`` sends to an engine: the profile's number
    (``n``), drawn from the run's seed, their restart points on the profile's boundaries
    (``every_restart``: where they were drawn, whatever the profile); the same arguments give
    the same traces, cached, so the generator-coverage count sees exactly what the engines are
    given."""
    n = differential_budget().traces if n is None else n
    seed_value = run_seed() if seed_value is None else seed_value
    positions = None if every_restart else differential_budget().restart_positions
    key = draw_key(parts, n, seed_value, positions)
    if key not in _DRAWN:
        _DRAWN[key] = committed_draw(key) or draw(parts, n, seed_value, positions)
    return _DRAWN[key]


def draw_key(parts: Parts, n: int, seed_value: int, positions: Sequence[int] | None) -> tuple[Any, ...]:
    return (repr(parts), n, seed_value, positions)  # a composite strategy's repr names its arguments


def draw(parts: Parts, n: int, seed_value: int, positions: Sequence[int] | None) -> list[Trace]:
    """``differential_traces`` drawn now, neither cached nor read from the committed draws."""
    traces: list[Trace] = []
    for i, (strategy, share) in enumerate(parts):
        count = n - len(traces) if i == len(parts) - 1 else max(1, round(n * share))
        traces += generate(strategy, count, seed_value + i)
    return [fold_restarts(t, positions) for t in traces] if positions else traces


#: The ci run's draws (seed 0) of every area's differential test, written beside the committed
#: coverage counts (``python -m strategies.generator_coverage --write-committed``) with the same
#: conditions and the hash of every source the draw ran: read while all of it is unchanged, so the
#: pre-run need not wait for about a minute of drawing on one core.
COMMITTED_DRAWS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "differential_draws.json.gz")
_COMMITTED_DRAWS: dict[str, list[dict[str, Any]]] | None = None


def draw_key_text(key: tuple[Any, ...]) -> str:
    return json.dumps([key[0], key[1], key[2], list(key[3]) if key[3] else None])


def committed_draws(path: str = COMMITTED_DRAWS) -> dict[str, list[dict[str, Any]]]:
    """The committed draws by ``draw_key_text``, when they were drawn under this run's conditions
    (Hypothesis and Python versions) from the project's sources as they are now; else none."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    if data.get("conditions") != draw_conditions() or stale_sources(data):
        return {}
    return dict(data.get("draws", {}))


def committed_draw(key: tuple[Any, ...]) -> list[Trace] | None:
    """The committed traces of the draw ``key`` (``differential_traces``), or None."""
    global _COMMITTED_DRAWS
    if _COMMITTED_DRAWS is None:
        _COMMITTED_DRAWS = committed_draws()
    found = _COMMITTED_DRAWS.get(draw_key_text(key))
    return None if found is None else [Trace.from_json(t) for t in found]


def fold_restarts(trace: Trace, positions: Sequence[int]) -> Trace:
    """``trace`` with each restart point moved to the nearest of ``positions`` (which hold 0) at
    or before it: a trace that restarts still does, on fewer distinct boundaries."""
    if not trace.restart_after:
        return trace
    folded = frozenset(max(p for p in positions if p <= r) for r in trace.restart_after)
    return replace(trace, restart_after=folded)


def check_generated(engine: Engine, *parts: tuple[st.SearchStrategy[Trace], float]) -> Report:
    """An area's differential test: the profile's number of traces, drawn from ``parts``
    (strategy, share of the traces), run through ``engine`` in ONE call and compared with
    the oracle; a difference is shrunk and printed as Gherkin (harness.differential).
    With ``--replay FILE`` the traces of that file run instead (TR-13)."""
    replayed = replay_traces()
    if replayed is not None:
        return check_against_reference(engine, replayed, shrink_seconds=0.0, context="replayed")
    budget = differential_budget()
    traces = differential_traces(tuple(parts))
    report = check_against_reference(
        engine,
        traces,
        shrink_seconds=budget.shrink_seconds,
        context=f"profile {profile_name()}, {SEED_VAR}={run_seed()}",
    )
    if report.traces != budget.traces:
        raise AssertionError(f"{report.traces} traces were checked, the profile asks for {budget.traces}")
    return report


__all__ = [
    "BURST_SIZES",
    "LONG_TIE_RUN",
    "burst_batch_index",
    "burst_shape",
    "wake_up_clocks",
    "within_timeout_clock",
    "check_generated",
    "differential_traces",
    "generate",
    "NEVER_SOURCE",
    "PARTITIONED_AREA",
    "PARTITION_MAX",
    "SOURCES",
    "invalid_partitioned_watermark_configs",
    "malformed_partitioned_item",
    "partitioned_watermark_configs",
    "partitioned_watermark_traces",
    "ABSENT_KEY",
    "BOUNDED",
    "COMPACT_RATE",
    "COMPACT_TAILS",
    "compact_keyed_watermark_configs",
    "compact_keys",
    "compact_shape",
    "HOT_KEYS",
    "POLICIES",
    "StreamState",
    "TAIL_KEYS",
    "TimeRange",
    "clock_advance",
    "delays",
    "grids",
    "i64_edge_times",
    "invalid_keyed_watermark_configs",
    "keyed_watermark_configs",
    "keyed_watermark_traces",
    "malformed_item",
    "near_i64_bounds_traces",
    "out_of_order_time",
    "restart_points",
    "skewed_keys",
]


# ---- F064 ------------------------------------------------------------------
#
# Multi-source, multi-partition streams. The generator keeps a small model of
# the sources and partitions it has registered (F064-R2, R12, R13), so that
# most items name a tracked partition and the malformed ones are malformed on
# purpose: an unknown source or partition, a partition added twice, numbers out
# of range, a missing field, a clock going back (F064-R22).

PARTITIONED_AREA = "partitioned_watermarks"

#: source ids the generator registers (0 and 1 are hot)
SOURCES = (0, 1, 2, 7)

#: a source the generator never registers: items that name it are unknown_source errors, and
#: ``remove_partition`` of it is the no-op control item (F064-R13)
NEVER_SOURCE = 99

#: F064-R1: the partition numbers are u32
PARTITION_MAX = 2**32 - 1


@st.composite
def partitioned_watermark_configs(draw: st.DrawFn, grid: int = 1000) -> dict[str, Any]:
    """Valid F064-R24 configurations; a setting is sometimes left out (its default applies)."""
    config: dict[str, Any] = {}
    if draw(st.integers(0, 5)) > 0:
        config["idle_timeout"] = draw(delays(grid, 20_000))
    if draw(st.integers(0, 3)) > 0:
        config["max_lateness"] = draw(delays(grid, 10_000))  # 0 often
    return config


@st.composite
def invalid_partitioned_watermark_configs(draw: st.DrawFn) -> dict[str, Any]:
    """Configurations an engine must refuse with InvalidConfig (F064-R24, TR-6)."""
    return dict(
        draw(
            st.sampled_from(
                [
                    {"idle_timeout": -1},
                    {"max_lateness": -5},
                    {"idle_timeout": 1.5},
                    {"max_lateness": True},
                    {"idle_timeout": I64_MAX + 1},
                    {"bounded_delay": 1000},  # an F065 setting, unknown here
                    {"idle_timeout": 1000, "no_such_setting": 1},
                ]
            )
        )
    )


@dataclass
class _PartitionGen:
    """What the generator knows of one partition: its event-time frontier and its pace."""

    state: StreamState
    max_step: int  # partitions advance at different rates
    stalled: bool = False  # a stalled partition stops reporting (events and watermarks)


@dataclass
class _PartitionedModel:
    """The generator's view of the tracker: registered sources and tracked partitions."""

    sources: dict[int, int]  # source -> its registered count
    partitions: dict[tuple[int, int], _PartitionGen]
    clock: StreamState = field(default_factory=lambda: StreamState(base=0))  # .clock: TR-4


def _hot_first(draw: st.DrawFn, options: list[Any]) -> Any:
    """Partition skew: half of the draws take the first option, the rest any (shrinks to the first)."""
    if len(options) == 1 or draw(st.booleans()):
        return options[0]
    return options[draw(st.integers(0, len(options) - 1))]


def malformed_partitioned_item(draw: st.DrawFn, model: _PartitionedModel, t: int) -> Item:
    """One item an engine must answer with an error row (F064-R22)."""
    tracked = sorted(model.partitions)
    registered = sorted(model.sources)
    choices = ["missing_field", "unknown_source", "out_of_range", "negative_core", "bad_count"]
    if registered:
        choices += ["unknown_partition"]
    if tracked:
        choices += ["add_tracked"]
    if model.clock.clock > 0:
        choices.append("clock_backwards")
    kind = draw(st.sampled_from(choices))
    s, p = tracked[0] if tracked else (NEVER_SOURCE, 0)
    if kind == "missing_field":
        item_kind = draw(st.sampled_from(sorted(PARTITIONED_REQUIRED_FIELDS)))
        full = Item(item_kind, source=s, partition=p, event_time=t, time=t, count=2, core=0)
        # keep only the fields the kind has, then drop one of them
        fields_ = {n: getattr(full, n) for n in PARTITIONED_REQUIRED_FIELDS[item_kind]}
        if item_kind == "clock":
            fields_["time"] = model.clock.clock
        missing = draw(st.sampled_from(PARTITIONED_REQUIRED_FIELDS[item_kind]))
        fields_[missing] = None
        return Item(item_kind, **fields_)
    if kind == "unknown_source":
        item_kind = draw(
            st.sampled_from(("event", "watermark", "idle", "active", "add_partition", "assign_core"))
        )
        return Item(
            item_kind,
            source=NEVER_SOURCE,
            partition=0,
            event_time=t if item_kind == "event" else None,
            time=t if item_kind == "watermark" else None,
            core=0 if item_kind == "assign_core" else None,
        )
    if kind == "unknown_partition":
        src = draw(st.sampled_from(registered))
        item_kind = draw(st.sampled_from(("event", "watermark", "idle", "active", "assign_core")))
        return Item(
            item_kind,
            source=src,
            partition=model.sources[src] + draw(st.integers(0, 3)) + 10,
            event_time=t if item_kind == "event" else None,
            time=t if item_kind == "watermark" else None,
            core=1 if item_kind == "assign_core" else None,
        )
    if kind == "add_tracked":
        s, p = draw(st.sampled_from(tracked))
        return Item("add_partition", source=s, partition=p)
    if kind == "out_of_range":
        item_kind = draw(st.sampled_from(("event", "watermark", "idle", "add_partition", "remove_partition")))
        src, part = draw(st.sampled_from(((s, PARTITION_MAX + 1), (-1, 0), (s, -1))))
        return Item(
            item_kind,
            source=src,
            partition=part,
            event_time=t if item_kind == "event" else None,
            time=t if item_kind == "watermark" else None,
        )
    if kind == "negative_core":
        return Item("assign_core", source=s, partition=p, core=-1)
    if kind == "bad_count":
        return Item("register_source", source=s, count=draw(st.sampled_from((-1, PARTITION_MAX + 2))))
    return Item("clock", time=model.clock.clock - draw(st.integers(1, model.clock.clock)))


def _register(model: _PartitionedModel, source: int, count: int, fresh: Any) -> None:
    """F064-R2 in the generator's model: the source's partitions become exactly 0..count-1."""
    model.sources[source] = count
    for key in [k for k in model.partitions if k[0] == source and k[1] >= count]:
        del model.partitions[key]
    for n in range(count):
        if (source, n) not in model.partitions:
            model.partitions[(source, n)] = fresh()


@st.composite
def partitioned_watermark_traces(
    draw: st.DrawFn,
    *,
    max_batches: int = 6,
    max_items: int = 10,
    times: TimeRange = BOUNDED,
    malformed: bool = True,
    rebalances: bool = True,
    idle_marks: bool = True,
    cores: bool = True,
    restarts: bool = True,
    config: dict[str, Any] | None = None,
    invalid_config_rate: int = 0,
    burst_rate: int = 7,
) -> Trace:
    """A multi-source, multi-partition stream cut into micro-batches (F064-R20).

    Registration comes first (one to three sources, zero to four partitions
    each); then partitions advance at their own rates with bounded disorder,
    some stall (stop reporting) and some resume, the clock moves in steps,
    exactly to and past the idle timeout, partitions are marked idle and
    active, sources are rebalanced (add, remove, re-registration that grows
    or shrinks), partitions are assigned to cores; batches may be empty,
    restart points fall between batches, and a few items are malformed.
    ``invalid_config_rate``: one trace in that many (0: never) gets a refused configuration.
    ``burst_rate``: one trace in that many (0: never) gets one batch of 20 to 28 events, most
    of them with a run of 8 to 12 events at one event time.
    """
    grid = draw(grids())
    if config is None:
        if invalid_config_rate and draw(st.integers(0, invalid_config_rate - 1)) == 0:
            config = draw(invalid_partitioned_watermark_configs())
        else:
            config = draw(partitioned_watermark_configs(grid))
    lateness = config.get("max_lateness", 0)
    lateness = (
        lateness if isinstance(lateness, int) and not isinstance(lateness, bool) and lateness >= 0 else 0
    )
    idle_timeout = config.get("idle_timeout", 60_000)
    if not isinstance(idle_timeout, int) or isinstance(idle_timeout, bool) or not 0 <= idle_timeout <= 10**7:
        idle_timeout = 60_000
    disorder = draw(st.sampled_from((0, grid, lateness // 2, lateness, lateness + grid, 5 * grid)))
    origin = times.clamp(times.low + lateness + disorder)

    def fresh() -> _PartitionGen:
        start = times.clamp(origin + draw(st.integers(0, 20)) * grid)
        return _PartitionGen(StreamState(base=start), max_step=draw(st.sampled_from((0, 1, 3, 10))))

    model = _PartitionedModel({}, {})

    # registration first
    first: list[Item] = []
    for source in draw(st.lists(st.sampled_from(SOURCES), min_size=1, max_size=3, unique=True)):
        count = draw(st.integers(1, 4)) if draw(st.integers(0, 5)) else 0
        first.append(Item("register_source", source=source, count=count))
        _register(model, source, count, fresh)

    def event(source_partition: tuple[int, int]) -> Item:
        gen = model.partitions[source_partition]
        t = out_of_order_time(draw, gen.state, grid, disorder, gen.max_step, times)
        return Item("event", source=source_partition[0], partition=source_partition[1], event_time=t)

    n_batches = draw(st.integers(1, max_batches))
    burst_at = burst_batch_index(draw, n_batches, burst_rate)
    batches: list[tuple[Item, ...]] = []
    for b in range(n_batches):
        batch: list[Item] = list(first) if b == 0 else []
        # between batches a partition may stall (stop reporting) or resume
        if model.partitions and draw(st.integers(0, 3)) == 0:
            gen = model.partitions[draw(st.sampled_from(sorted(model.partitions)))]
            gen.stalled = not gen.stalled
        reporting = [k for k in sorted(model.partitions) if not model.partitions[k].stalled]
        if b == burst_at and reporting:
            size, tied = burst_shape(draw)
            tie = event(_hot_first(draw, reporting)).event_time
            for n in range(size):
                item = event(_hot_first(draw, reporting))
                batch.append(replace(item, event_time=tie) if n in tied else item)
            batches.append(tuple(batch))
            continue
        size = 0 if draw(st.integers(0, 7)) == 0 else draw(st.integers(1, max_items))
        for _ in range(size):
            tracked = sorted(model.partitions)
            reporting = [k for k in tracked if not model.partitions[k].stalled]
            roll = draw(st.integers(0, 99))
            if roll < 64 and reporting:
                item = event(_hot_first(draw, reporting))
                if draw(st.integers(0, 4)) == 0:  # an explicit watermark, sometimes behind (F064-R4)
                    back = draw(st.sampled_from((0, lateness, disorder + grid)))
                    t = times.clamp(item.event_time - back)  # type: ignore[operator]
                    batch.append(Item("watermark", source=item.source, partition=item.partition, time=t))
                else:
                    batch.append(item)
            elif roll < 73 and tracked and draw(st.integers(0, 3)) == 0:
                # a partition wakes (data, or an active mark) after a silence past the timeout;
                # the next clock step must not idle it (F064-R4, R10, R11)
                batch.append(Item("clock", time=wake_up_clocks(draw, model.clock, idle_timeout, grid, times)))
                if idle_marks and draw(st.booleans()):
                    s, p = draw(st.sampled_from(tracked))
                    batch.append(Item("active", source=s, partition=p))
                else:
                    batch.append(event(draw(st.sampled_from(tracked))))
                batch.append(Item("clock", time=within_timeout_clock(draw, model.clock, idle_timeout, times)))
            elif roll < 73:
                batch.append(Item("clock", time=clock_advance(draw, model.clock, idle_timeout, grid, times)))
            elif roll < 80 and idle_marks and tracked:
                if draw(st.booleans()):
                    s, p = draw(st.sampled_from(tracked))
                    batch.append(Item("idle", source=s, partition=p))
                else:
                    # mostly a stalled partition: silent past its timeout, its wake-up is the F064-R10 path
                    stalled = [k for k in tracked if k not in reporting]
                    s, p = draw(st.sampled_from(stalled if stalled and draw(st.integers(0, 2)) else tracked))
                    batch.append(Item("active", source=s, partition=p))
            elif roll < 89 and rebalances:
                batch.append(_rebalance(draw, model, fresh))
            elif roll < 92 and cores and tracked:
                s, p = draw(st.sampled_from(tracked))
                batch.append(Item("assign_core", source=s, partition=p, core=draw(st.integers(0, 3))))
            elif roll >= 92 and malformed:
                t = max((g.state.base for g in model.partitions.values()), default=origin)
                batch.append(malformed_partitioned_item(draw, model, t))
            else:
                batch.append(Item("clock", time=clock_advance(draw, model.clock, idle_timeout, grid, times)))
        batches.append(tuple(batch))
    restart_after = draw(restart_points(n_batches)) if restarts else frozenset()
    return Trace(PARTITIONED_AREA, config, tuple(batches), restart_after)


def _rebalance(draw: st.DrawFn, model: _PartitionedModel, fresh: Any) -> Item:
    """add_partition, remove_partition (tracked or not), or a (re-)registration that resizes a source."""
    kind = draw(st.sampled_from(("add", "remove", "remove", "register")))
    registered = sorted(model.sources)
    if kind == "add" and registered:
        s = draw(st.sampled_from(registered))
        taken = {p for (src, p) in model.partitions if src == s}
        p = min(set(range(len(taken) + 2)) - taken) if draw(st.integers(0, 3)) else max(taken, default=0) + 5
        model.partitions[(s, p)] = fresh()
        return Item("add_partition", source=s, partition=p)
    if kind == "remove" and model.partitions:
        if draw(st.integers(0, 4)):
            s, p = draw(st.sampled_from(sorted(model.partitions)))
            del model.partitions[(s, p)]
        else:  # untracked: a no-op (F064-R13)
            s, p = draw(st.sampled_from(((NEVER_SOURCE, 0), (registered[0] if registered else 0, 40))))
        return Item("remove_partition", source=s, partition=p)
    # re-registration grows or shrinks a source; sometimes a new source arrives
    s = draw(st.sampled_from(SOURCES))
    old = model.sources.get(s, 0)
    count = draw(st.sampled_from(sorted({0, max(0, old - 1), old, old + 1, old + 2})))
    _register(model, s, count, fresh)
    return Item("register_source", source=s, count=count)


def check_state_layouts(
    bucket_class: Any, bucket: tuple[Any, ...], stream_class: Any, stream: tuple[Any, ...], buckets: int = 8
) -> None:
    """The stored forms of a scale-out operator's two state values (both written with ``buckets``):
    they read back unchanged, and a value of a newer layout version or of another bucket count is
    refused with both values named, never misread (the layout clauses of every area)."""
    import pytest

    version = bucket[0]
    assert bucket_class.from_tuple(bucket, buckets).to_tuple() == bucket
    assert stream_class.from_tuple(stream, buckets).to_tuple() == stream
    newer = version + 1
    for cls, value in ((bucket_class, bucket), (stream_class, stream)):
        with pytest.raises(RuntimeError, match=f"version {newer}.*version {version} only"):
            cls.from_tuple((newer, *value[1:]), buckets)
    for cls, value, other in ((bucket_class, bucket, buckets + 1), (stream_class, stream, 2 * buckets)):
        with pytest.raises(RuntimeError, match=f"buckets {buckets}.*buckets {other} only"):
            cls.from_tuple(value, other)
