"""Re-cut twins: one trace's items cut into other batches, for every area's batching clause.

Each area's spec says what moving items between micro-batches may change and what it may not
(its "Batch cuts" clause). Its properties run a trace and its twin and compare the answers the
clause names; the helpers here do the cutting and the renumbering those comparisons share:

* ``recut``: the same items, the same config, cut after other numbers of items (empty batches
  where two cuts coincide), with restart points on the new batches;
* ``item_places``: each (batch, seq) of a trace as the item's place in the whole trace, so two
  cuts' rows can be compared item for item;
* ``batch_ends``: how many items a trace has seen at the end of each batch, so per-batch rows
  can be compared wherever both cuts end a batch after the same items;
* ``recut_pairs``: generated traces and their twins, the same on every call of a run, for the
  on-engine properties that join the session's pre-run;
* ``kept_differences``: where two cuts' projections differ, tables whole and per-batch rows at
  the batch ends both cuts share;
* ``check_twins_on_the_engine``: one engine run of every pair, each pair's answers compared.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from hypothesis import strategies as st

from harness.engine import Engine, run_canonical
from harness.hypothesis_profiles import differential_budget, run_seed
from harness.outputs import Output
from harness.traces import Trace
from strategies.common import fold_restarts, generate

#: the most cuts a twin gets: enough to split a batch, merge two and leave an empty one
MAX_CUTS = 6


def recut(trace: Trace, cuts: Sequence[int], restarts: frozenset[int] = frozenset()) -> Trace:
    """``trace``'s items cut after each number of items in ``cuts`` (sorted; a repeated number
    makes an empty batch), restarted after the given batches of the new cut (a restart after the
    last batch is dropped: there is nothing after it)."""
    items = [item for batch in trace.batches for item in batch]
    if any(not 0 <= cut <= len(items) for cut in cuts) or list(cuts) != sorted(cuts):
        raise ValueError(f"cuts {list(cuts)} are not sorted places in {len(items)} items")
    bounds = [0, *cuts, len(items)]
    batches = tuple(tuple(items[a:b]) for a, b in zip(bounds, bounds[1:], strict=False))
    return replace(trace, batches=batches, restart_after=restarts - {len(cuts)}, name=f"{trace.name} re-cut")


def draw_cuts(data: st.DataObject, trace: Trace) -> Trace:
    """A twin of ``trace`` drawn by Hypothesis: up to MAX_CUTS cuts anywhere, restarts anywhere."""
    items = sum(len(batch) for batch in trace.batches)
    cuts = sorted(data.draw(st.lists(st.integers(0, items), max_size=MAX_CUTS), label="cuts"))
    restarts = data.draw(st.frozensets(st.integers(0, len(cuts))), label="restarts after")
    return recut(trace, cuts, restarts)


def item_places(trace: Trace) -> dict[tuple[int, int], int]:
    """(batch, seq) of every item -> its place in the whole trace, counting from 0."""
    out: dict[tuple[int, int], int] = {}
    for b, batch in enumerate(trace.batches):
        for s in range(len(batch)):
            out[(b, s)] = len(out)
    return out


def batch_ends(trace: Trace) -> list[int]:
    """For each batch, how many items the trace has seen when it ends."""
    ends, seen = [], 0
    for batch in trace.batches:
        seen += len(batch)
        ends.append(seen)
    return ends


def recut_pairs(strategy: st.SearchStrategy[Trace], count: int, salt: int) -> list[tuple[Trace, Trace]]:
    """``count`` generated traces and each one's twin (one to MAX_CUTS cuts, a restart after
    about a third of the new batches), the same on every call of a run. Restart points move to
    the profile's restart positions, as the differential traces' do: each other boundary would
    cost the engine's query of the area a restart. ``salt`` keeps areas' draws apart."""
    positions = differential_budget().restart_positions
    pairs = []
    for trace in generate(strategy, count, run_seed() + salt):
        rng = random.Random(trace.dumps())
        items = sum(len(batch) for batch in trace.batches)
        cuts = sorted(rng.randint(0, items) for _ in range(rng.randint(1, MAX_CUTS)))
        twin = recut(trace, cuts, frozenset(b for b in range(len(cuts)) if rng.random() < 0.3))
        if positions:
            trace, twin = fold_restarts(trace, positions), fold_restarts(twin, positions)
        pairs.append((trace, twin))
    return pairs


def kept_differences(
    one: Mapping[str, Any], other: Mapping[str, Any], whole: Sequence[str], at_ends: Sequence[str] = ()
) -> list[str]:
    """Where two cuts' projections differ: each table of ``whole`` compared entire, each of
    ``at_ends`` (a dict from items seen at a batch end to what the table says there) compared
    only at the ends both cuts have."""
    problems = [f"{t}: {one[t]} against {other[t]}" for t in whole if one[t] != other[t]]
    for table in at_ends:
        common = sorted(one[table].keys() & other[table].keys())
        problems += [
            f"{table} after {n} items: {one[table][n]} against {other[table][n]}"
            for n in common
            if one[table][n] != other[table][n]
        ]
    return problems


def check_twins_on_the_engine(
    engine: Engine,
    pairs: Sequence[tuple[Trace, Trace]],
    differences: Callable[[Trace, Output, Trace, Output], list[str]],
) -> None:
    """Runs every trace and twin of ``pairs`` in one engine run and fails at the first pair whose
    answers ``differences`` tells apart (a refusal must be the same error type in both)."""
    outputs = run_canonical(engine, [t for pair in pairs for t in pair])
    for (trace, twin), out, again in zip(pairs, outputs[::2], outputs[1::2], strict=True):
        if isinstance(out, Exception) or isinstance(again, Exception):
            assert type(out) is type(again), f"{trace.describe()}\n{out!r} against {again!r}"
            continue
        problems = differences(trace, out, twin, again)
        assert not problems, f"{trace.describe()}\nre-cut:\n{twin.describe()}\n" + "\n".join(problems)


__all__ = [
    "MAX_CUTS",
    "batch_ends",
    "check_twins_on_the_engine",
    "draw_cuts",
    "item_places",
    "kept_differences",
    "recut",
    "recut_pairs",
]
