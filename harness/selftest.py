"""The judge tests itself (spec/traces.md TR-11): engines made from the oracle, run through an
engine's expectation file, must get the verdicts a judge that can convict gives them.

For one expectation file, over the committed vectors:

* **correct but mute**: the oracle's answers with only what the file says the engine does not
  show removed (tables left out, columns nulled). Every case it answers passes, and no entry
  excuses anything: a declaration that hid a real answer would show here.
* **loses results**: the same with every row of every shown result table
  (``harness.expectations.RESULT_TABLES``) removed. It fails in every area the file expresses:
  no entry may excuse an engine that loses all its results.
* **planted bugs**: the oracle run with one setting off by one (a lateness bound, a gap, a
  window edge), answered for the unchanged trace: a semantic bug in a shown column. In every
  area the file expresses at least one must fail some case; the share of all of them caught is
  the file's sensitivity (a bug missed hides behind an entry: the engine deviates wherever the
  bug would show).

``eventtime-conformance selftest`` prints the three per file; ``tests/test_judge.py`` asserts
them for every committed file.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.engine import run_canonical
from harness.expectations import RESULT_TABLES, Expectations
from harness.outputs import TABLES, Output
from harness.reference_engine import ReferenceEngine
from harness.traces import Trace
from harness.vector_check import CaseOutcome, apply_expectations, check_all
from harness.vectors import CaseResult, ExpectedError, Vector

Config = dict[str, Any]


def _bump(key: str, by: int) -> Callable[[Config], Config | None]:
    """A setting read ``by`` off: None when the trace has no such integer setting."""

    def change(config: Config) -> Config | None:
        value = config.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value + by < 0:
            return None
        return {**config, key: value + by}

    return change


def _bump_in(section: str, key: str, by: int) -> Callable[[Config], Config | None]:
    """A setting of one operator of a composed configuration (the pipeline's) read ``by`` off."""

    def change(config: Config) -> Config | None:
        inner = config.get(section)
        changed = _bump(key, by)(inner) if isinstance(inner, dict) else None
        return None if changed is None else {**config, section: changed}

    return change


def _token_cost_plus_one(config: Config) -> Config | None:
    streams = config.get("streams")
    if not isinstance(streams, dict) or not streams:
        return None
    changed = copy.deepcopy(streams)
    for spec in changed.values():
        if not isinstance(spec, dict) or not isinstance(spec.get("token_cost"), int):
            return None
        spec["token_cost"] += 1
    return {**config, "streams": changed}


@dataclass(frozen=True)
class PlantedBug:
    area: str
    name: str
    change: Callable[[Config], Config | None]  # the setting the buggy engine misreads


#: per area, bugs an engine could really have: a comparison or a bound one millisecond off
PLANTED: tuple[PlantedBug, ...] = (
    PlantedBug("keyed_watermarks", "an event at its key's watermark judged late (delay read 1 less)",
               _bump("bounded_delay", -1)),
    PlantedBug("keyed_watermarks", "a window's end one ms late", _bump("window_size", 1)),
    PlantedBug("partitioned_watermarks", "a partition idle one ms late", _bump("idle_timeout", 1)),
    PlantedBug("partitioned_watermarks", "an event's partition watermark one ms behind",
               _bump("max_lateness", 1)),
    PlantedBug("session_windows", "an event one ms past the gap still joins the session", _bump("gap", 1)),
    PlantedBug("session_windows", "the watermark one ms behind", _bump("bounded_delay", 1)),
    PlantedBug("watermark_propagation", "the generated watermark one ms behind",
               _bump("max_out_of_order_ms", 1)),
    PlantedBug("late_data", "a window closed one ms late", _bump("allowed_lateness", 1)),
    PlantedBug("late_data", "a window's end one ms late", _bump("window_size", 1)),
    PlantedBug("eventtime_buffer", "the late bound one ms wide", _bump("late_tolerance", 1)),
    PlantedBug("sla_admission", "a token bucket charging one token more", _token_cost_plus_one),
    PlantedBug("exactly_once_aggregation", "the de-duplication window one sequence wide",
               _bump("dedup_window", 1)),
    PlantedBug("window_joins", "a tumbling pane one ms long", _bump("size_ms", 1)),
    PlantedBug("window_joins", "sessions joined one ms past the gap", _bump("gap_ms", 1)),
    PlantedBug("window_joins", "a pane purged one ms late", _bump("allowed_lateness_ms", 1)),
    PlantedBug("pipeline", "the session join's gap one ms long", _bump_in("session_join", "gap_ms", 1)),
    PlantedBug("pipeline", "each stream's watermark one ms behind",
               _bump_in("watermarks", "max_out_of_order_ms", 1)),
)  # fmt: skip


def muted(area: str, output: Output, exp: Expectations) -> Output:
    """``output`` as an engine that shows only what ``exp`` declares answers it."""
    shown = exp.shown(area)
    if shown is None:
        return output
    out: Output = {}
    for table, columns in TABLES[area].items():
        if table in shown:
            keep = [c in shown[table] for c in columns]
            out[table] = [
                tuple(v if k else None for v, k in zip(row, keep, strict=True)) for row in output[table]
            ]
    return out


def lost(area: str, output: Output, exp: Expectations) -> Output:
    """``output`` with every row of every result table gone."""
    return {t: ([] if t in RESULT_TABLES[area] else rows) for t, rows in output.items()}


def _answers(
    vectors: Sequence[Vector], exp: Expectations, shape: Callable[[str, Output, Expectations], Output],
    configs: Mapping[str, Config] | None = None,
) -> dict[str, CaseResult]:  # fmt: skip
    """The oracle's answers, for each case run with ``configs[id]`` where given, then shaped."""
    traces = [
        Trace(v.area, configs[v.id], v.trace.batches, v.trace.restart_after, v.trace.name)
        if configs and v.id in configs else v.trace
        for v in vectors
    ]  # fmt: skip
    out = {}
    for v, answer in zip(vectors, run_canonical(ReferenceEngine(), traces), strict=True):
        if isinstance(answer, Exception):
            out[v.id] = CaseResult(v.id, error=ExpectedError(type(answer).__name__, str(answer)))
        else:
            out[v.id] = CaseResult(v.id, output=shape(v.area, answer, exp))
    return out


def _losing(area: str, output: Output, exp: Expectations) -> Output:
    return lost(area, muted(area, output, exp), exp)


@dataclass
class SelfTest:
    """What one expectation file made of the three engines."""

    file: str
    expressed: list[str]
    mute: Counter[str] = field(default_factory=Counter)  # case statuses before scenario entries
    mute_excused: list[str] = field(default_factory=list)  # cases an entry excused: should be none
    losing_failed: dict[str, int] = field(default_factory=dict)  # per expressed area, failing cases
    planted: dict[PlantedBug, int] = field(default_factory=dict)  # per bug, failing cases of its area

    @property
    def bugs_caught(self) -> int:
        return sum(1 for n in self.planted.values() if n)

    @property
    def sensitivity(self) -> float:
        return self.bugs_caught / len(self.planted) if self.planted else 0.0

    def unconvicted_areas(self) -> list[str]:
        """Expressed areas where no planted bug fails a case."""
        return [a for a in self.expressed if not any(n for b, n in self.planted.items() if b.area == a)]

    @property
    def sound(self) -> bool:
        """Mute passes unexcused, losing fails in every expressed area, and every expressed area
        convicts at least one planted bug (the sensitivity says how many of the rest)."""
        return (
            set(self.mute) <= {"pass", "declined", "adapter"}
            and not self.mute_excused
            and all(self.losing_failed.values())
            and not self.unconvicted_areas()
        )

    def lines(self) -> list[str]:
        losing = sum(1 for n in self.losing_failed.values() if n)
        statuses = ", ".join(f"{n} {s}" for s, n in sorted(self.mute.items()))
        excused = f"{len(self.mute_excused)} EXCUSED by an entry" if self.mute_excused else "none excused"
        out = [
            f"{self.file}: expresses {len(self.expressed)} areas ({', '.join(self.expressed)})",
            f"  correct but mute: {statuses}; {excused}",
            f"  loses results: fails in {losing} of {len(self.losing_failed)} areas",
            f"  planted bugs caught {self.bugs_caught}/{len(self.planted)} "
            f"(sensitivity {self.sensitivity:.0%})",
        ]
        out += [f"    missed: {b.area}: {b.name}" for b, n in self.planted.items() if not n]
        out += [f"  NOT CONVICTED: loses results in {a}" for a, n in self.losing_failed.items() if not n]
        out += [f"  NOT CONVICTED: no planted bug of {a} fails" for a in self.unconvicted_areas()]
        return out


def _failing(outcomes: Iterable[CaseOutcome]) -> Counter[str]:
    """Failing cases per area (an unexpected pass of a scenario entry convicts nothing)."""
    return Counter(o.vector.area for o in outcomes if o.status == "fail")


def selftest(exp: Expectations, vectors: Sequence[Vector]) -> SelfTest:
    """The three engines through ``exp`` over ``vectors``."""
    expressed = sorted({v.area for v in vectors if exp.declined(v.area) is None})
    mine = [v for v in vectors if v.area in expressed]
    result = SelfTest(str(exp.path or exp.engine), expressed)

    mute = check_all(mine, _answers(mine, exp, muted), exp)
    result.mute = Counter(o.status for o in mute)
    result.mute_excused = [o.id for o in mute if o.excused_by]

    losing = _failing(apply_expectations(check_all(mine, _answers(mine, exp, _losing), exp), exp))
    result.losing_failed = {a: losing[a] for a in expressed}

    for bug in PLANTED:
        if bug.area not in expressed:
            continue
        cases = [v for v in mine if v.area == bug.area and not isinstance(v.expected, ExpectedError)]
        configs = {v.id: c for v in cases if (c := bug.change(dict(v.trace.config))) is not None}
        answers = _answers([v for v in cases if v.id in configs], exp, muted, configs)
        # a setting the oracle refuses is no semantic bug: only answered cases count
        changed = [v for v in cases if v.id in answers and answers[v.id].output is not None]
        outcomes = apply_expectations(check_all(changed, answers, exp), exp)
        result.planted[bug] = _failing(outcomes)[bug.area]
    return result
