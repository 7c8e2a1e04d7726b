"""Per-engine known deviations: ``expectations/<engine>.toml`` (spec/traces.md TR-11).

The file is a list of ``[[deviation]]`` tables::

    [[deviation]]
    clause = "F065-R21"            # or: scenario = "A slow key's windows ..."
    reason = "windows fire one batch late"
    link = "https://github.com/org/repo/issues/12"

The file of an engine is found by the engine's ``name`` (``expectations/<name>.toml``),
else by the ``--engine`` string it was loaded with (``pkg.mod:Engine`` ->
``pkg.mod_Engine.toml``).

* ``scenario`` names one test: a Gherkin scenario's name exactly, a property test's
  function name, or a vector case's id. That test is a strict expected failure:
  when it passes, the pass is reported as unexpected and the run fails.
* ``clause`` excuses failures that the clause explains, and nothing else
  (``excuses``): a failure is a list of differences between the engine's answer and
  the oracle's, each attributed to the clauses of the tables and columns where it
  lies (harness/output_clauses.py); it is excused when every difference is
  attributed to a clause with an entry. A failure with no attributed difference (a
  crash, an assertion of a property) is excused only when every clause the test
  names has an entry. Passing tests stay passes. An entry that no failure of the run
  involves, while tests naming its clause ran, is reported as an unexpected pass and
  the run fails; one that matches no test of the run is reported.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterable, Iterator, Sequence, Set
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.clauses import clause_sort_key

PLACEHOLDER_REASON = "TODO: say why this engine deviates, and link the issue"


class ExpectationFileError(ValueError):
    pass


@dataclass(frozen=True)
class Deviation:
    reason: str
    link: str = ""
    clause: str | None = None
    scenario: str | None = None

    def describe(self) -> str:
        what = f"clause {self.clause}" if self.clause else f"scenario {self.scenario!r}"
        link = f" ({self.link})" if self.link else ""
        return f"known deviation, {what}: {self.reason}{link}"

    def names_test(self, name: str | None) -> bool:
        return self.scenario is not None and name is not None and name == self.scenario


@dataclass
class Expectations:
    """One engine's entries, the file they came from and what is wrong with it."""

    engine: str
    path: Path | None = None
    deviations: list[Deviation] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def clauses(self) -> set[str]:
        return {d.clause for d in self.deviations if d.clause is not None}

    def for_test(self, name: str | None) -> list[Deviation]:
        return [d for d in self.deviations if d.names_test(name)]

    def for_clauses(self, clauses: Iterable[str]) -> list[Deviation]:
        wanted = set(clauses)
        return [d for d in self.deviations if d.clause in wanted]


def file_name(engine_id: str) -> str:
    """``reference`` -> ``reference.toml``; ``pkg.mod:Engine`` -> ``pkg.mod_Engine.toml``."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", engine_id) + ".toml"


def load_expectations(directory: str | Path, engine_id: str, engine_name: str | None = None) -> Expectations:
    """The entries of the engine's file: ``<name>.toml`` first, then the one named after
    ``engine_id``; none when neither exists. Both existing is reported as a problem."""
    found = []
    for stem in dict.fromkeys(n for n in (engine_name, engine_id) if n):
        path = Path(directory) / file_name(stem)
        if path.is_file() and path not in found:
            found.append(path)
    out = Expectations(engine_name or engine_id)
    if not found:
        return out
    out.path = found[0]
    if len(found) > 1:
        out.problems.append(
            f"{found[0]} and {found[1]} both exist for engine {engine_id!r}; only {found[0]} applies"
        )
    out.deviations = parse_file(found[0])
    out.problems += [f"{found[0]}: {p}" for p in placeholder_problems(out.deviations)]
    return out


def parse_file(path: Path) -> list[Deviation]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ExpectationFileError(f"{path}: {e}") from None
    unknown = set(data) - {"deviation"}
    if unknown:
        raise ExpectationFileError(f"{path}: unknown top-level keys {sorted(unknown)}; use [[deviation]]")
    out = []
    for i, entry in enumerate(data.get("deviation", [])):
        where = f"{path} entry {i + 1}"
        extra = set(entry) - {"clause", "scenario", "reason", "link"}
        if extra:
            raise ExpectationFileError(f"{where}: unknown fields {sorted(extra)}")
        if ("clause" in entry) == ("scenario" in entry):
            raise ExpectationFileError(f"{where}: give exactly one of 'clause' or 'scenario'")
        if not str(entry.get("reason", "")).strip():
            raise ExpectationFileError(f"{where}: 'reason' is required")
        out.append(
            Deviation(
                reason=str(entry["reason"]),
                link=str(entry.get("link", "")),
                clause=entry.get("clause"),
                scenario=entry.get("scenario"),
            )
        )
    return out


def placeholder_problems(deviations: Sequence[Deviation]) -> list[str]:
    return [
        f"the entry for {d.clause or repr(d.scenario)} still has the placeholder reason"
        for d in deviations
        if d.reason == PLACEHOLDER_REASON
    ]


def unknown_clause_problems(exp: Expectations, known: set[str]) -> list[str]:
    """Entries naming a clause that spec/ does not define (a typo would excuse nothing)."""
    if not known:
        return []
    where = exp.path or exp.engine
    return [f"{where}: clause {c} is not a clause of spec/" for c in sorted(exp.clauses - known)]


# ---- the test being run: what a differential run may excuse ------------------------------------


@dataclass(frozen=True)
class Active:
    clauses: frozenset[str] = frozenset()  # clauses with an entry for the engine under test
    named: tuple[str, ...] = ()  # the clauses the running test names


_ACTIVE: ContextVar[Active | None] = ContextVar("active_expectations", default=None)


def active() -> Active:
    return _ACTIVE.get() or Active()


@contextmanager
def activated(clauses: Iterable[str], named: Iterable[str]) -> Iterator[None]:
    token = _ACTIVE.set(Active(frozenset(clauses), tuple(named)))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


# ---- the rule -----------------------------------------------------------------------------------


def excuses(
    entry_clauses: Set[str], differences: Sequence[set[str]] | None, named: Sequence[str]
) -> set[str]:
    """The clauses whose entries excuse a failure, or an empty set when it is not excused.

    ``differences``: per difference, the clauses it is attributed to; None or empty
    when the failure could not be attributed, and then every clause the test names
    (``named``) must have an entry."""
    if not entry_clauses:
        return set()
    if not differences:
        return set(named) if named and set(named) <= entry_clauses else set()
    used: set[str] = set()
    for d in differences:
        mine = d & entry_clauses
        if not mine:
            return set()
        used |= mine
    return used


def charged_clauses(differences: Sequence[set[str]] | None, named: Sequence[str]) -> list[str]:
    """The clauses the summary charges a failure to: the attributed ones the test names,
    else every clause it names (a difference it cannot place, or none attributed)."""
    attributed = set().union(*differences) if differences else set()
    mine = attributed & set(named)
    return sorted(mine) if mine else list(named)


@dataclass(frozen=True)
class Ran:
    """One test or case of a run, as the entry statuses need it."""

    id: str
    name: str  # what a ``scenario`` entry names
    clauses: Sequence[str]  # the clauses it names
    involved: Set[str]  # for a failure: the clauses its differences are attributed to
    outcome: str  # passed | failed | deviation | unexpected-pass | anything else


def entry_statuses(exp: Expectations, ran: Sequence[Ran]) -> list[dict[str, Any]]:
    """What a run made of each entry: ``applied`` (a failure involves it), ``unexpected-pass``
    (tests naming its clause ran and passed, none failed through it; or the test it names
    passed) or ``matches nothing``, with the tests it applied to."""
    out = []
    for d in exp.deviations:
        if d.clause is not None:
            tests = [r.id for r in ran if r.outcome in ("failed", "deviation") and d.clause in r.involved]
            passed = any(r.outcome == "passed" and d.clause in r.clauses for r in ran)
            status = "applied" if tests else "unexpected-pass" if passed else "matches nothing"
        else:
            hits = [r for r in ran if r.name == d.scenario]
            tests = [r.id for r in hits]
            fixed = any(r.outcome == "unexpected-pass" for r in hits)
            status = "unexpected-pass" if fixed else "applied" if hits else "matches nothing"
        out.append({"clause": d.clause, "scenario": d.scenario, "reason": d.reason, "link": d.link,
                    "status": status, "tests": tests})  # fmt: skip
    return out


# ---- writing a file from a run --------------------------------------------------------------------


def _toml_string(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)  # a JSON string is a valid TOML basic string


def render(engine: str, deviations: Sequence[Deviation]) -> str:
    lines = [
        f"# Known deviations of the {engine!r} engine from the specification (spec/traces.md TR-11).",
        "#",
        "# 'clause' excuses a failing test only when every difference from the oracle lies in a",
        "# table or column that the clause decides; 'scenario' names one test (a scenario, a",
        "# property test's function or a vector case id), a strict expected failure. An entry",
        "# that stops failing is reported as an unexpected pass: remove it then.",
        "# Written by `eventtime-conformance expectations`; replace every placeholder reason.",
    ]
    for d in deviations:
        lines += ["", "[[deviation]]"]
        if d.clause is not None:
            lines.append(f"clause = {_toml_string(d.clause)}")
        else:
            lines.append(f"scenario = {_toml_string(d.scenario or '')}")
        lines.append(f"reason = {_toml_string(d.reason)}")
        if d.link:
            lines.append(f"link = {_toml_string(d.link)}")
    return "\n".join(lines) + "\n"


@dataclass
class Update:
    deviations: list[Deviation]
    added: list[str]
    removed: list[str]


def update_from_summary(existing: Sequence[Deviation], summary: dict, engine: str) -> Update:
    """The engine's entries after a run: kept while they still match a failure or were not
    exercised, removed when the run reported them as unexpected passes, and one new
    ``clause`` entry with the placeholder reason for each clause that failed unexcused."""
    status: dict[str, str] = {}
    for block in summary.get("expectations", []):
        if block.get("engine") == engine:
            for e in block.get("entries", []):
                status[e.get("clause") or f"scenario:{e.get('scenario')}"] = e.get("status", "")
    kept, removed = [], []
    for d in existing:
        key = d.clause or f"scenario:{d.scenario}"
        if status.get(key) == "unexpected-pass":
            removed.append(d.clause or repr(d.scenario))
        else:
            kept.append(d)
    have = {d.clause for d in kept if d.clause}
    failing = sorted(
        {
            r["clause"]
            for r in summary.get("rows", [])
            if r.get("engine") == engine and r.get("status") == "FAIL"
        }
        - have,
        key=clause_sort_key,
    )
    added = [Deviation(reason=PLACEHOLDER_REASON, clause=c) for c in failing]
    return Update(kept + added, [d.clause or "" for d in added], removed)
