"""How often the generated traces of each area reach the cases that matter (spec/traces.md TR-13).

Each area's strategies module ``strategies/<area>.py`` states:

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

``count_cases`` draws the same traces as the differential run (the profile's
budget, the run's seed), at least ``MIN_TRACES`` of them (the ``ci`` and
``dev`` profiles send fewer: their count is a larger draw of the same seed),
and counts; ``properties/test_generator_coverage.py`` asserts every case
reaches its floor and the conformance summary prints the counts.

The floor: the strategies are tuned so that every case reaches ``THRESHOLD``
(5%) of the ``MIN_TRACES`` traces drawn with seed 0, the draw of every
``ci`` run, and that draw is held to it exactly. Any other seed's draw is
held to half of it: Hypothesis's draws are not independent, so a share
swings between seeds more than a binomial count would (one case measured
3.9% on one seed and 8.2% on another, before its strategy was raised), and a
random seed must raise no false alarm, while a case the strategy stopped
reaching still fails. The areas that hold data back (the buffer, sessions, keyed windows) put an ``end`` item
(TR-14) in some of their traces with ``with_end`` and count ``END_CASES`` with ``end_cases``
(defined here once for the three).

From the command line, for one area or all:

    .tox/spark/bin/python -m strategies.generator_coverage [AREA ...] [--traces N] [--seed S]

Drawing 1000 traces of every area costs about 100 s of one core, all of it in
Hypothesis. So when a run's count is not the differential draw itself (the
``ci`` and ``dev`` profiles), ``start_background_count`` runs this command
(``--json``) in a process of its own as soon as the tests are collected, at the
lowest CPU priority (``nice 19``: it takes only what the Spark queries leave
idle, where it used to slow the first of them by about 30 s), and the coverage
tests, which read its counts, run last: the same function, seed and number of
traces.

The ``ci`` run's count (seed 0, 1000 traces per area) is the same on every run, so
it is committed: ``strategies/coverage_counts.json`` holds the counts, what they
were counted under (traces, seed, restart positions, Hypothesis and Python
versions) and a hash of every project source file the count ran. A run under
those conditions with those files unchanged reads it and draws nothing;
``properties/test_generator_coverage.py`` fails when a source changed (refresh:
``python -m strategies.generator_coverage --write-committed``, about 2.5 minutes) and
counts one area afresh to compare: a draw of SPOT_TRACES traces, whose counts the
file holds too, and the whole draw in the conformance job.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import importlib
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from types import ModuleType
from typing import Any

from hypothesis import strategies as st

from harness.differential import run_safely
from harness.reference_engine import ReferenceEngine
from harness.traces import Item, Trace
from strategies.common import LARGE_BATCH, LONG_TIE_RUN
from strategies.provenance import PROJECT, draw_conditions, loaded_sources, stale_sources

THRESHOLD = 0.05  # every case in at least 5% of an area's generated traces (seed 0)
TUNED_SEED = 0  # the ci profile's seed: its draw is held to THRESHOLD exactly
MIN_TRACES = 1000  # fewer traces than this are too noisy to judge a 5% share
SPOT_TRACES = 100  # the ci run recounts this many of one area against the committed file

AREAS = (
    "keyed_watermarks",
    "partitioned_watermarks",
    "eventtime_buffer",
    "session_windows",
    "watermark_propagation",
    "late_data",
    "sla_admission",
    "exactly_once_aggregation",
    "window_joins",
    "pipeline",
)


def event_time_of(item: Item) -> int | None:
    return item.event_time if item.kind == "event" else None


def batch_shape_cases(
    trace: Trace, errors: set[tuple[int, int]], times_of: Callable[[Item], int | None] = event_time_of
) -> set[str]:
    """The cases every area shares, over the items that are no error row: ``restart``,
    ``empty_batch``, ``tied_event_times``, ``large_batch`` and ``long_tie_run``."""
    reached: set[str] = set()
    if trace.restart_after:
        reached.add("restart")
    for b, batch in enumerate(trace.batches):
        if not batch:
            reached.add("empty_batch")
        times = [
            t for s, item in enumerate(batch) if (b, s) not in errors and (t := times_of(item)) is not None
        ]
        longest = max(Counter(times).values(), default=0)
        if longest >= 2:
            reached.add("tied_event_times")
        if len(times) >= LARGE_BATCH:
            reached.add("large_batch")
            if longest >= LONG_TIE_RUN:
                reached.add("long_tie_run")
    return reached


# ---- the end of a stream (TR-14), for the areas that hold data back ------------------------


def end_position(trace: Trace) -> tuple[int, int] | None:
    """(batch, seq) of the trace's first ``end`` item, or None."""
    for b, batch in enumerate(trace.batches):
        for s, item in enumerate(batch):
            if item.kind == "end":
                return b, s
    return None


def before_end(trace: Trace) -> Trace:
    """The trace cut just before its first ``end`` item: what the stream saw when the input ended."""
    where = end_position(trace)
    if where is None:
        return trace
    b, s = where
    batches = (*trace.batches[:b], trace.batches[b][:s])
    return replace(trace, batches=batches, restart_after=frozenset(r for r in trace.restart_after if r < b))


@st.composite
def with_end(draw: st.DrawFn, traces: st.SearchStrategy[Trace], rate: int = 40) -> Trace:
    """A trace of ``traces`` that ``rate`` percent of the time holds an ``end`` item (TR-14):
    half of those after the last item of the last batch (everything still held is released,
    nothing follows); the rest inside the last batch or in an earlier one, so that items and
    batches follow it (after_end rows). A quarter get a batch of the trace's own items or a second
    end appended, a third a restart point after the end's batch.

    One draw decides all but the position inside a batch: every extra draw shifts what
    Hypothesis generates for the wrapped strategy, and with it the shares of its other cases."""
    trace = draw(traces)
    roll = draw(st.integers(0, 99))
    if roll >= rate:
        return trace
    batches = [list(batch) for batch in trace.batches]
    last = len(batches) - 1
    if roll % 10 < 5:
        b, s = last, len(batches[last])
    else:
        b = last if roll % 10 < 7 or last == 0 else roll % last
        s = draw(st.integers(0, len(batches[b])))
    batches[b].insert(s, Item("end"))
    if roll % 4 == 1:
        own = [i for batch in trace.batches for i in batch]
        batches.append(draw(st.lists(st.sampled_from([*own, Item("end")]), max_size=3)))
    restarts = set(trace.restart_after)
    if b < len(batches) - 1 and roll % 3 == 0:
        restarts.add(b)  # TR-5: the ended state crosses a restart
    return replace(trace, batches=tuple(tuple(batch) for batch in batches), restart_after=frozenset(restarts))


#: the end cases every area that accepts ``end`` counts (its CASES describe them with its clauses)
END_CASES = ("end_releases_held_data", "item_after_end")


def output_before_end(trace: Trace, output: Any) -> Any:
    """The oracle's output for the trace cut just before its end (``output`` when it has none)."""
    if end_position(trace) is None:
        return output
    [cut] = ReferenceEngine().run([before_end(trace)])
    return cut


def end_cases(trace: Trace, output: Any, released: Callable[[Any, int], int]) -> set[str]:
    """``end_releases_held_data``: the end's batch releases more than the same batch cut before the
    end does (``released(output, batch)`` counts the rows an area releases in a batch);
    ``item_after_end``: some item follows the end and is answered ``after_end``."""
    where = end_position(trace)
    if where is None or not isinstance(output, dict):
        return set()
    reached: set[str] = set()
    if any(reason == "after_end" for _, _, reason in output["errors"]):
        reached.add("item_after_end")
    cut = output_before_end(trace, output)
    if isinstance(cut, dict) and released(output, where[0]) > released(cut, where[0]):
        reached.add("end_releases_held_data")
    return reached


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

    @property
    def floor(self) -> float:
        """THRESHOLD for the tuned draw, half of it for any other seed (sampling noise)."""
        return THRESHOLD if self.seed == TUNED_SEED else THRESHOLD / 2

    def below_floor(self) -> dict[str, int]:
        """Cases under the floor that RARE does not explain."""
        return {c: n for c, n in self.counts.items() if self.share(c) < self.floor and c not in self.rare}

    def lines(self) -> list[str]:
        out = [f"{self.area}: {self.traces} traces (seed {self.seed}, floor {100 * self.floor:g}%)"]
        width = max((len(c) for c in self.counts), default=0)
        for case, n in self.counts.items():
            flag = ""
            if case in self.rare and self.share(case) < THRESHOLD:
                flag = "  (rare: see RARE)"
            elif self.share(case) < self.floor:
                flag = "  LOW"
            elif self.share(case) < THRESHOLD:
                flag = "  under 5%"
            out.append(f"    {case:<{width}} {n:>6}  {100 * self.share(case):5.1f}%{flag}")
        return out


def strategies_module(area: str) -> ModuleType:
    return importlib.import_module(f"strategies.{area}")


def count_cases(area: str, traces: int | None = None, seed: int | None = None) -> CaseCounts:
    """Draw the area's differential traces (the profile's budget and the run's seed unless
    given), run the oracle on them and count the cases each trace reaches."""
    from harness.hypothesis_profiles import differential_budget, run_seed
    from strategies.common import differential_traces

    module = strategies_module(area)
    seed = run_seed() if seed is None else seed
    traces = max(differential_budget().traces, MIN_TRACES) if traces is None else traces
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


# ---- the committed counts of the ci draw ------------------------------------------------------

_PROJECT = PROJECT
#: the counts of every area's ``ci`` draw (seed 0, MIN_TRACES traces), with what they were
#: counted under and a hash of every project source file the count ran; a run uses them only
#: while all of that is unchanged, else it counts (``--write-committed`` writes them again)
COMMITTED = os.path.join(_PROJECT, "strategies", "coverage_counts.json")


def count_conditions(traces: int, seed: int) -> dict[str, Any]:
    """What a count depends on besides the sources: traces, seed, restart positions, versions."""
    import hypothesis

    from harness.hypothesis_profiles import differential_budget

    positions = differential_budget().restart_positions
    return {
        "hypothesis": hypothesis.__version__,
        "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
        "traces": traces,
        "seed": seed,
        "restart_positions": list(positions) if positions else None,
    }


def committed_counts(
    traces: int, seed: int, path: str = COMMITTED, part: str = "areas"
) -> dict[str, CaseCounts] | None:
    """The committed counts, when they were counted under these conditions (traces, seed, restart
    positions, Hypothesis and Python versions) from the project's sources as they are now;
    ``part="spot"``: those of each area's draw of SPOT_TRACES traces, counted with them."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    if data.get("conditions") != count_conditions(traces, seed) or stale_sources(data):
        return None
    return {area: CaseCounts(**counted) for area, counted in data.get(part, {}).items()}


def write_committed(
    counted: dict[str, CaseCounts],
    traces: int,
    seed: int,
    path: str = COMMITTED,
    spot: dict[str, CaseCounts] | None = None,
) -> None:
    """Writes the counts with the hash of every project module this process has loaded: the
    modules the count ran (a module it starts to need is imported by one of them, which changed)."""
    data = {
        "conditions": count_conditions(traces, seed),
        "sources": loaded_sources(),
        "areas": {area: dataclasses.asdict(c) for area, c in counted.items()},
        "spot": {area: dataclasses.asdict(c) for area, c in (spot or {}).items()},
    }
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.write("\n")


def write_committed_draws(seed: int, path: str | None = None) -> int:
    """Draws every area's differential traces as the ci run does (its budget, ``seed``) and writes
    them to strategies/differential_draws.json.gz with the sources the draw ran; returns how many."""
    from harness.hypothesis_profiles import differential_budget
    from strategies.common import COMMITTED_DRAWS, draw, draw_key, draw_key_text

    budget = differential_budget()
    draws = {}
    for area in AREAS:
        parts = strategies_module(area).DIFFERENTIAL
        key = draw_key(parts, budget.traces, seed, budget.restart_positions)
        drawn = draw(parts, budget.traces, seed, budget.restart_positions)
        draws[draw_key_text(key)] = [t.to_json() for t in drawn]
    data = {"conditions": draw_conditions(), "sources": loaded_sources(), "draws": draws}
    # mtime 0: the same draws give the same bytes
    with gzip.GzipFile(path or COMMITTED_DRAWS, "wb", mtime=0) as f:
        f.write((json.dumps(data, sort_keys=True) + "\n").encode("utf-8"))
    return sum(len(t) for t in draws.values())


@dataclass
class BackgroundCount:
    """``python -m strategies.generator_coverage --json`` running beside the tests."""

    areas: tuple[str, ...]
    traces: int
    seed: int
    process: subprocess.Popen[bytes]
    result: str
    log: str

    def counts(self, area: str) -> CaseCounts:
        """The area's counts, once the process has finished (it counts every area in one go)."""
        self.process.wait()
        try:
            with open(self.result, encoding="utf-8") as f:
                return CaseCounts(**json.load(f)[area])
        except (OSError, ValueError, KeyError) as error:
            with open(self.log, encoding="utf-8", errors="replace") as f:
                tail = f.read()[-3000:]
            raise AssertionError(
                f"the background count (exit {self.process.returncode}) gave no counts for {area}: "
                f"{error}\n{tail}"
            ) from None


_BACKGROUND: BackgroundCount | None = None
_COMMITTED: dict[str, CaseCounts] = {}  # the committed counts, when they are this run's


def start_background_count(areas: list[str]) -> None:
    """Count ``areas`` in a child process now, unless this run's count is its differential draw
    (then counting in the test costs nothing extra: the draw is cached for the engines)."""
    global _BACKGROUND
    from harness.hypothesis_profiles import differential_budget, run_seed

    global _COMMITTED
    traces = max(differential_budget().traces, MIN_TRACES)
    if not areas or traces == differential_budget().traces or _BACKGROUND is not None:
        return
    _COMMITTED = committed_counts(traces, run_seed()) or {}
    if set(areas) <= set(_COMMITTED):
        return  # the committed counts are this run's: nothing to draw
    work = tempfile.mkdtemp(prefix="generator-coverage-")
    result, log = os.path.join(work, "counts.json"), os.path.join(work, "log.txt")
    command = [sys.executable, "-m", "strategies.generator_coverage", *areas]
    command += ["--traces", str(traces), "--seed", str(run_seed()), "--json", result]
    with open(log, "wb") as out:
        # niced: it takes only the CPU the engines leave, so it never slows them down
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, cwd=_PROJECT, preexec_fn=lambda: os.nice(19)
        )
    _BACKGROUND = BackgroundCount(tuple(areas), traces, run_seed(), process, result, log)


def stop_background_count() -> None:
    if _BACKGROUND is not None and _BACKGROUND.process.poll() is None:
        _BACKGROUND.process.kill()
        _BACKGROUND.process.wait()


def counted_for_this_run(area: str) -> CaseCounts:
    """The area's counts for this run: from the background count when it covers the area."""
    from harness.hypothesis_profiles import run_seed

    if area in _COMMITTED:
        return _COMMITTED[area]
    bg = _BACKGROUND
    if bg is not None and area in bg.areas and bg.seed == run_seed():
        return bg.counts(area)
    return count_cases(area)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("areas", nargs="*", default=list(AREAS), help="areas (default: all)")
    parser.add_argument("--traces", type=int, default=None, help="traces per area (default: as the suite)")
    parser.add_argument("--seed", type=int, default=None, help="seed (default: the run's, CONFORMANCE_SEED)")
    parser.add_argument("--json", default=None, help="also write the counts of every area to this file")
    parser.add_argument(
        "--write-committed", action="store_true",
        help=f"count the ci draw of every area (seed {TUNED_SEED}, {MIN_TRACES} traces and "
        f"{SPOT_TRACES}) into {COMMITTED}",
    )  # fmt: skip
    args = parser.parse_args(argv)
    from harness.hypothesis_profiles import load_profile

    if args.write_committed:
        load_profile("ci")
        counted = {area: count_cases(area, MIN_TRACES, TUNED_SEED) for area in AREAS}
        spot = {area: count_cases(area, SPOT_TRACES, TUNED_SEED) for area in AREAS}
        write_committed(counted, MIN_TRACES, TUNED_SEED, spot=spot)
        print(f"wrote the counts of {len(counted)} areas to {COMMITTED}")
        drawn = write_committed_draws(TUNED_SEED)
        print(f"wrote the ci run's {drawn} differential traces (seed {TUNED_SEED}) beside them")
        return 0
    load_profile()
    low = 0
    counted_areas: dict[str, Any] = {}
    for area in args.areas:
        counted = count_cases(area, args.traces, args.seed)
        counted_areas[area] = dataclasses.asdict(counted)
        print("\n".join(counted.lines()), flush=True)
        low += len(counted.below_floor())
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(counted_areas, f)
    return 1 if low else 0


if __name__ == "__main__":
    raise SystemExit(main())
