"""Hypothesis profiles of the property suites: ``dev``, ``ci`` (default), ``thorough``.

Chosen with the environment variable ``HYPOTHESIS_PROFILE`` (or Hypothesis's
own ``--hypothesis-profile`` option, which wins when given). Besides the
Hypothesis settings, each profile says how many generated traces one
differential run feeds to an engine (all of them in ONE ``engine.run`` call)
and how long the shrinker may spend on a failing trace.

| profile | oracle examples | differential traces | shrink cap | restart points |
|---|---|---|---|---|
| dev | 25 | 50 | 30 s | after batch 0 or 2 |
| ci | 100 | 200 | 120 s | after batch 0 or 2 |
| thorough | 1000 | 1000 | 300 s | after any batch |

Restart points: an engine that runs many traces in one query (Spark) restarts that
query at every batch boundary where any of its traces restarts, and each restart
costs a query start (about 3 s on Spark). Under ``dev`` and ``ci`` every drawn
restart point moves to the nearest of the listed boundaries at or before it, so
a differential query restarts at most twice; every trace that restarts still
does. ``thorough`` (the conformance job) keeps every boundary.

One seed drives a whole run (spec/traces.md TR-13): ``run_seed()`` is
``$CONFORMANCE_SEED`` when set, else 0 under ``ci`` and a fresh random seed
under the other profiles, drawn once per process. The pytest plugin hands it
to Hypothesis (as ``--hypothesis-seed`` would) and prints it; the differential
traces are drawn from it too. The ``ci`` profile is also derandomized, so its
property examples do not depend on the seed at all.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass

from hypothesis import HealthCheck, settings

ENV_VAR = "HYPOTHESIS_PROFILE"
DEFAULT_PROFILE = "ci"


@dataclass(frozen=True)
class DifferentialBudget:
    traces: int  # traces generated and run in one engine.run call
    shrink_seconds: float  # time cap of the shrinker on the failing trace
    # the batch boundaries a restart point may fall on (None: any); must hold 0
    restart_positions: tuple[int, ...] | None = None


_BASE = settings(
    deadline=None,  # the oracle is fast, but generation of long traces is not timed work
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)


def _without_local_constants() -> None:
    """Hypothesis mixes literals of every local module imported so far into its draws, so one seed
    drew other traces depending on what a run had imported (one test alone, or after another
    area's); TR-13 wants the same draws, so the pool of local literals stays empty."""
    try:
        from hypothesis.internal.conjecture import providers
        from hypothesis.internal.constants_ast import Constants
    except ImportError:  # pragma: no cover - a Hypothesis without the feature
        return
    if hasattr(providers, "_get_local_constants"):
        empty = Constants()
        providers._get_local_constants = lambda: empty  # type: ignore[attr-defined]


_without_local_constants()

settings.register_profile("dev", _BASE, max_examples=25)
# ci is derandomized: the same examples on every run, so a red CI is reproducible.
settings.register_profile("ci", _BASE, max_examples=100, database=None, derandomize=True)
settings.register_profile("thorough", _BASE, max_examples=1000, database=None)

BUDGETS = {
    "dev": DifferentialBudget(traces=50, shrink_seconds=30.0, restart_positions=(0, 2)),
    # ci: seed 0's draw of 100 traces reaches no duplicate of a message folded before a restart
    # (exactly-once) and no admitted event shed (SLA); its 200 reach them 43 and 7 times (generator_coverage)
    "ci": DifferentialBudget(traces=200, shrink_seconds=120.0, restart_positions=(0, 2)),
    "thorough": DifferentialBudget(traces=1000, shrink_seconds=300.0),
}


def profile_name() -> str:
    """The active profile: the one Hypothesis loaded if it is ours, else the environment's."""
    getter = getattr(settings, "get_current_profile_name", None)
    current = getter() if getter is not None else getattr(settings, "_current_profile", None)
    if current in BUDGETS:
        return current
    return os.environ.get(ENV_VAR, DEFAULT_PROFILE)


def load_profile(name: str | None = None) -> str:
    """Load ``name`` (default: ``$HYPOTHESIS_PROFILE`` or ``ci``) and return it."""
    name = name or os.environ.get(ENV_VAR) or DEFAULT_PROFILE
    if name not in BUDGETS:
        raise ValueError(f"{ENV_VAR}={name!r}: choose one of {sorted(BUDGETS)}")
    settings.load_profile(name)
    return name


SEED_VAR = "CONFORMANCE_SEED"
_seed: int | None = None


def run_seed() -> int:
    """The seed of this run: ``$CONFORMANCE_SEED``, else 0 under ``ci``, else drawn once."""
    global _seed
    if _seed is None:
        if os.environ.get(SEED_VAR, "").strip():
            try:
                _seed = int(os.environ[SEED_VAR])
            except ValueError:
                raise ValueError(f"{SEED_VAR}={os.environ[SEED_VAR]!r} is not a whole number") from None
        else:
            _seed = 0 if profile_name() == "ci" else random.randrange(2**31)
    return _seed


def set_run_seed(value: int) -> None:
    """Fix the run's seed (the plugin does, from ``--hypothesis-seed`` when that is given)."""
    global _seed
    _seed = value


def differential_budget() -> DifferentialBudget:
    return BUDGETS.get(profile_name(), BUDGETS[DEFAULT_PROFILE])


__all__ = [
    "BUDGETS",
    "DEFAULT_PROFILE",
    "SEED_VAR",
    "DifferentialBudget",
    "differential_budget",
    "load_profile",
    "run_seed",
    "set_run_seed",
]
