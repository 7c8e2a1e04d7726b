"""Killed Spark queries lose nothing and repeat nothing (spec/traces.md TR-17), per operator.

One child query runs every chosen operator's generated traces together (spark_impl/testing/faults.py:
the Spark engine's combined query writing through ``write_tables``'s per-batch sink); it is
killed with SIGKILL at planned points, each kill interrupting every trace that still has
batches to run, and restarted on the same checkpoint. After every kill each batch folder a
reader sees must hold exactly the oracle's rows, and at the end each trace's output must
equal the oracle's output of the uninterrupted trace. Each operator's test reads the shared
run and fails on its own traces.

| profile | operators | kills | traces interrupted by each kill, per operator |
|---|---|---|---|
| ci, dev | one, chosen from the run's seed | 1 | 3 |
| thorough | every one the Spark engine implements | 6, every kill point once | at least 20 |

The plan (points and batches) is drawn from the run's seed. Only Spark can be killed, so the
tests are ``test_spark_*``: deselected when the run has no Spark engine. In a whole run the
killed run starts in a thread once the session's pre-run is over (``after_prerun``), its
child processes at the lowest CPU priority, and these tests run last: the children take the
core the other Spark tests leave idle, and under thorough they ran 534 s in the foreground.
"""

from __future__ import annotations

import importlib
import random
from dataclasses import dataclass, replace
from typing import Any

import pytest

from harness.hypothesis_profiles import SEED_VAR, profile_name, run_seed
from harness.replay import current_test, replay_command, replay_traces, replaying, seed_command, write_failure
from harness.traces import InvalidConfig, Trace
from spark_impl.engine import area_module, implemented_areas
from spark_impl.testing.faults import (
    KILL_POINTS,
    Expected,
    FaultRun,
    Kill,
    KillsInBackground,
    plan_kills,
    run_with_kills,
)

AREAS = tuple(sorted(implemented_areas()))


@dataclass(frozen=True)
class Budget:
    areas: tuple[str, ...]
    kills: int
    interrupted: int  # traces of each operator every kill must interrupt
    traces_per_area: int
    pool: int  # traces drawn per operator to choose from


def budget() -> Budget:
    if profile_name() == "thorough":
        b = Budget(AREAS, kills=len(KILL_POINTS), interrupted=20, traces_per_area=24, pool=100)
    else:  # ci and dev: one kill on one operator, so the harness cannot rot, at the cost of two child runs
        b = Budget((AREAS[run_seed() % len(AREAS)],), kills=1, interrupted=3, traces_per_area=3, pool=16)
    # --replay: the saved traces, however few, each kill interrupting what it can
    return replace(b, interrupted=1) if replaying() is not None else b


def _valid(traces: list[Trace]) -> list[Trace]:
    valid = []
    for t in traces:
        try:
            area_module(t.area).validate_config(t.config)
        except InvalidConfig:
            continue  # refused before Spark starts (TR-6): nothing to interrupt
        valid.append(t)
    return valid


def _chosen_traces(b: Budget) -> list[Trace]:
    """Per operator, from its differential generator: the longest traces under thorough (so
    that late kills still interrupt enough of them); under ci the shortest of at least 2
    batches, cut to 2 (a kill in batch 1 has state to lose, and each batch costs)."""
    from strategies.common import differential_traces

    replayed = replay_traces()
    if replayed is not None:
        return _valid(replayed)
    chosen = []
    for n, area in enumerate(b.areas):
        parts = importlib.import_module(f"strategies.{area}").DIFFERENTIAL
        pool = _valid(differential_traces(parts, b.pool, run_seed() + 7919 * (n + 1)))
        if b.kills > 1:
            chosen += sorted(pool, key=lambda t: -len(t.batches))[: b.traces_per_area]
        else:
            ranked = sorted(pool, key=lambda t: (len(t.batches) < 2, len(t.batches)))
            chosen += [_first_batches(t, 2) for t in ranked[: b.traces_per_area]]
    return chosen


def _first_batches(trace: Trace, n: int) -> Trace:
    """The trace's first ``n`` batches: still a valid trace, and each batch costs a micro-batch."""
    return replace(
        trace, batches=trace.batches[:n], restart_after=frozenset(r for r in trace.restart_after if r < n - 1)
    )


def _plan(b: Budget, traces: list[Trace], expected: Expected) -> list[Kill]:
    """Kills at batches where every operator still has ``b.interrupted`` traces to run."""
    areas = sorted({t.area for t in traces})
    points = {
        batch: ps
        for batch, ps in expected.points_of_batch().items()
        if all(
            sum(1 for t in traces if t.area == a and len(t.batches) > batch) >= b.interrupted for a in areas
        )
    }
    if not points:
        lengths = {a: sorted((len(t.batches) for t in traces if t.area == a), reverse=True) for a in areas}
        raise AssertionError(
            f"no micro-batch after the first where every operator has {b.interrupted} traces still running "
            f"(batches per trace: {lengths}): the generators draw too few long traces for this budget"
        )
    return plan_kills(random.Random(f"faults {run_seed()}"), b.kills, points)


_RUNS: dict[Budget, FaultRun] = {}


_BACKGROUND: dict[Budget, KillsInBackground] = {}


def start_shared_run() -> None:
    """Start the budget's killed run in the background (``KillsInBackground``), so it takes the
    core the in-process Spark tests leave idle and its tests (run last) find it done. The traces
    and the plan are drawn here, in the caller's thread (Hypothesis is not thread-safe); a draw
    that fails leaves it to the tests, which report it."""
    b = budget()
    if b in _BACKGROUND or b in _RUNS or replaying() is not None:
        return
    try:
        traces = _chosen_traces(b)
        expected = Expected.of(traces)
        plan = _plan(b, traces, expected)
    except Exception:  # noqa: BLE001 - the tests draw again and fail with it
        return
    _BACKGROUND[b] = KillsInBackground(traces, plan, expected=expected)


def _shared_run(b: Budget) -> FaultRun:
    """The budget's one killed run: the background one when started, else made by the first
    operator's test that needs it."""
    if b not in _RUNS:
        if b in _BACKGROUND:
            _RUNS[b] = _BACKGROUND[b].result()
        else:
            traces = _chosen_traces(b)
            expected = Expected.of(traces)
            _RUNS[b] = run_with_kills(traces, _plan(b, traces, expected), expected=expected)
    return _RUNS[b]


def _failure(run: FaultRun, area: str, problems: list[Any]) -> str:
    tids = sorted({p.tid for p in problems if p.tid is not None})
    failing = [run.expected.tids[t] for t in tids]
    test_id = current_test() or ""
    path = write_failure(test_id, profile=profile_name(), seed=run_seed(), traces=failing or run.traces)
    lines = [p.text for p in problems[:8]]
    return (
        f"{area}: {len(problems)} problems after killing the query at {run.plan_text} "
        f"({profile_name()} profile, {SEED_VAR}={run_seed()}; the child logs: {run.workdir}):\n- "
        + "\n- ".join(lines)
        + f"\nTraces saved to {path}. The same run: {seed_command(test_id, run_seed())}\n"
        f"Only these traces, killed by the plan drawn for them: {replay_command(test_id, path)}"
    )


@pytest.mark.clauses("TR-17", "TR-5")
@pytest.mark.after_prerun.with_args(start_shared_run)
@pytest.mark.parametrize("area", budget().areas)
def test_spark_a_killed_query_loses_nothing_and_repeats_nothing(
    area: str, request: pytest.FixtureRequest
) -> None:
    """SIGKILL to the whole query (driver, JVM, Python workers) at planned points; a new query
    on the same checkpoint; after every kill and at the end the sink holds the oracle's rows
    of each uninterrupted trace of this operator, each once."""
    b = budget()
    run = _shared_run(b)
    kills = run.kills_of(area)
    request.node.user_properties += [
        ("kills", [str(k.kill) for k in kills]),
        ("traces_interrupted", [k.interrupted[area] for k in kills]),
        ("child_starts", run.child_starts),
        ("run_seconds", round(run.seconds, 1)),
    ]
    problems = run.problems_of(area)
    if problems:
        raise AssertionError(_failure(run, area, problems))
    assert len(kills) >= b.kills, (
        f"{area}: {len(kills)} kills interrupted its traces, the budget asks {b.kills}"
    )
    short = [(str(k.kill), k.interrupted[area]) for k in kills if k.interrupted[area] < b.interrupted]
    assert not short, f"{area}: kills that interrupted fewer than {b.interrupted} of its traces: {short}"
