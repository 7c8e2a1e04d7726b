"""How often the generated traces of each area reach the cases that matter (spec/traces.md TR-13).

Each area's strategies module ``properties/<area>_strategies.py`` states:

* ``DIFFERENTIAL``: its differential mix, ``(strategy, share)`` pairs; the
  area's differential test sends exactly these traces to the engines.
* ``CASES``: case name -> what it is and the clauses it exercises (an event
  exactly at the late boundary, a watermark exactly at a close threshold, an
  idle key, a restart, a long run of tied times, ...).
* ``RARE``: case name -> why it cannot reach ``THRESHOLD`` of the traces
  (empty for most areas).
* ``cases_reached(trace, output)``: the cases one trace reaches, judged from
  the trace and the oracle's canonical output (an ``InvalidConfig`` for a
  refused configuration). Counting reads the generated traces themselves;
  it never steers generation (Hypothesis's ``target()`` would).

``count_cases`` draws the same traces as the differential run (same profile
budget, same seed) and counts; ``properties/test_generator_coverage.py``
asserts every case reaches ``THRESHOLD`` and the conformance summary prints
the counts. From the command line, for one area or all:

    .tox/spark/bin/python -m properties.generator_coverage [AREA ...] [--traces N] [--seed S]
"""

from __future__ import annotations

import argparse
import importlib
from collections import Counter
from dataclasses import dataclass, field
from types import ModuleType

from harness.differential import run_safely
from harness.reference_engine import ReferenceEngine

THRESHOLD = 0.05  # every case in at least 5% of an area's generated traces

AREAS = (
    "keyed_watermarks",
    "partitioned_watermarks",
    "eventtime_buffer",
    "session_windows",
    "watermark_propagation",
    "late_data",
)


@dataclass
class CaseCounts:
    area: str
    traces: int
    seed: int
    counts: dict[str, int]
    descriptions: dict[str, str]
    rare: dict[str, str] = field(default_factory=dict)

    def share(self, case: str) -> float:
        return self.counts[case] / self.traces if self.traces else 0.0

    def below_threshold(self) -> dict[str, int]:
        """Cases under THRESHOLD that RARE does not explain."""
        return {c: n for c, n in self.counts.items() if self.share(c) < THRESHOLD and c not in self.rare}

    def lines(self) -> list[str]:
        out = [f"{self.area}: {self.traces} traces (seed {self.seed})"]
        for case, n in self.counts.items():
            flag = ""
            if self.share(case) < THRESHOLD:
                flag = "  (rare: see RARE)" if case in self.rare else "  LOW"
            out.append(f"    {case:<28} {n:>6}  {100 * self.share(case):5.1f}%{flag}")
        return out


def strategies_module(area: str) -> ModuleType:
    return importlib.import_module(f"properties.{area}_strategies")


def count_cases(area: str, traces: int | None = None, seed: int | None = None) -> CaseCounts:
    """Draw the area's differential traces (the profile's budget and the run's seed unless
    given), run the oracle on them and count the cases each trace reaches."""
    from harness.hypothesis_profiles import run_seed
    from properties.strategies import differential_traces

    module = strategies_module(area)
    seed = run_seed() if seed is None else seed
    drawn = differential_traces(module.DIFFERENTIAL, traces, seed)
    outputs = run_safely(ReferenceEngine(), drawn)
    counts: Counter[str] = Counter()
    for trace, output in zip(drawn, outputs, strict=True):
        reached = module.cases_reached(trace, output)
        unknown = reached - set(module.CASES)
        if unknown:
            raise AssertionError(f"{area}.cases_reached names cases outside CASES: {sorted(unknown)}")
        counts.update(reached)
    return CaseCounts(
        area, len(drawn), seed, {c: counts[c] for c in module.CASES}, dict(module.CASES), dict(module.RARE)
    )


#: what this run counted, for the conformance summary (area -> counts)
RECORDED: dict[str, CaseCounts] = {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("areas", nargs="*", default=list(AREAS), help="areas (default: all)")
    parser.add_argument("--traces", type=int, default=None, help="traces per area (default: the profile's)")
    parser.add_argument("--seed", type=int, default=None, help="seed (default: the run's, CONFORMANCE_SEED)")
    args = parser.parse_args(argv)
    from harness.hypothesis_profiles import load_profile

    load_profile()
    low = 0
    for area in args.areas:
        counted = count_cases(area, args.traces, args.seed)
        print("\n".join(counted.lines()))
        low += len(counted.below_threshold())
    return 1 if low else 0


if __name__ == "__main__":
    raise SystemExit(main())
