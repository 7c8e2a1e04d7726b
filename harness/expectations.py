"""Known deviations and what an engine shows: ``expectations/<engine>.toml`` (spec/traces.md TR-11).

The file holds an optional ``[shows]`` table and a list of ``[[deviation]]`` tables::

    [shows.session_windows]                 # the tables and columns the engine answers
    sessions = ["key", "session_start", "session_end", "count", "sum"]
    late = "all"
    config_checked_by = "adapter"           # its refusals come from the adapter, not the engine

    [declined]                              # optional: why the engine answers no case of an area
    late_data = "the engine reports no verdict per event"

    [[deviation]]
    clause = "F017E-R7"                     # the clause it breaks, deciding every place named
    table = "sessions"                      # where the difference lies: a table of the clause's area
    columns = ["batch"]                     # its columns, or "rows" for which rows exist
                                            # ("extra_rows", "missing_rows": one way only)
    config = { gap_ms = 10 }                # optional: only traces with these settings
    cases = ["session_windows/some-case"]   # optional: only these cases (or tests)
    witness = "session_windows/some-case"   # a case (or test) that shows exactly this difference
    reason = "sessions are emitted a micro-batch late"
    link = "https://github.com/org/repo/issues/12"

    [[deviation]]
    scenario = "session_windows/generated/seed-0/0"   # one test or case, a strict expected failure
    clause = "F017E-R10"                               # optional: the clause it is charged to
    reason = "..."

The file of an engine is found by the engine's ``name`` (``expectations/<name>.toml``),
else by the ``--engine`` string it was loaded with (``pkg.mod:Engine`` ->
``pkg.mod_Engine.toml``).

* ``shows``: without it the engine shows every table and column. With it, both answers
  are cut to what it declares before they are compared; an area it does not declare, or
  whose result tables (``RESULT_TABLES``) it leaves out, is declined; a clause no shown
  place decides is ``not observable``.
* A place entry excuses a difference only in its table and columns: the table is compared
  again without them (a key column left out pairs the rows without it; ``rows`` excuses
  rows only one side has; ``extra_rows`` only rows the engine adds to every row expected,
  ``missing_rows`` only rows it leaves out of them, so that an entry for an engine that emits
  too much never excuses one that loses results), and what still differs fails. Its witness
  must show it on every run that includes the witness, else the entry is reported like an
  unexpected pass.
* ``scenario`` names one test: a Gherkin scenario's name exactly, a property test's function
  name, or a vector case's id. That test is a strict expected failure: when it passes, the
  pass is reported as unexpected and the run fails.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.clauses import clause_sort_key
from harness.output_clauses import (
    ONE_WAY_ROWS,
    REFUSAL,
    ROWS,
    SHOWN,
    Difference,
    clause_areas,
    differences,
    place_clauses,
    table_places,
)
from harness.outputs import TABLES, Output

PLACEHOLDER_REASON = "TODO: say why this engine deviates, and link the issue"

#: per area, the tables that carry its results: an engine that answers the area must show each
#: of them (a column at least), so an engine that loses results cannot pass by showing less.
#: Not required: progress (counters), errors, and the tables of an operator's own bookkeeping
#: (keys: a key's tracked watermark; timers: pending timers; streams: per-stream counters;
#: partitions and sources: each partition's and source's tracked watermark and state). The
#: per-partition tracker's result is the combined watermark downstream operators read, which
#: progress carries batch by batch, so there progress is the result table. Propagation's result
#: is the operators' output watermarks (watermarks) and the regressions refused (violations); its
#: generated table is the generators' own record (repeats included, which change no output).
RESULT_TABLES: dict[str, tuple[str, ...]] = {
    "keyed_watermarks": ("events", "windows"),
    "partitioned_watermarks": ("progress",),
    "session_windows": ("sessions", "late"),
    "watermark_propagation": ("watermarks", "violations"),
    "late_data": ("events", "side_outputs", "windows"),
    "eventtime_buffer": ("emitted", "late"),
    "sla_admission": ("decisions",),
    "exactly_once_aggregation": ("messages", "aggregates"),
    "window_joins": ("pairs", "late"),
    # what became of each event, what came out, and how event time moved (spec/pipeline.md OXP-R10)
    "pipeline": ("ingress", "watermarks", "pairs", "join_late", "messages", "aggregates"),
}
CHECKED_BY = ("engine", "adapter")


class ExpectationFileError(ValueError):
    pass


@dataclass(frozen=True)
class Deviation:
    reason: str
    link: str = ""
    clause: str | None = None
    scenario: str | None = None
    table: str | None = None
    columns: tuple[str, ...] = ()
    config: tuple[tuple[str, Any], ...] = ()  # the trace settings the entry is limited to
    cases: tuple[str, ...] = ()  # the cases (or tests) the entry is limited to
    witness: str | None = None

    @property
    def area(self) -> str | None:
        return clause_areas().get(self.clause or "")

    @property
    def where(self) -> str:
        """``sessions.batch``: the places a place entry excuses."""
        return f"{self.table}.{'+'.join(self.columns)}" if self.table else ""

    @property
    def key(self) -> str:
        """What names the entry in a run's summary and in messages."""
        if self.scenario is not None:
            return f"scenario {self.scenario!r}"
        limit = f" when {', '.join(f'{k}={v}' for k, v in self.config)}" if self.config else ""
        cases = f" in {len(self.cases)} case{'s' if len(self.cases) != 1 else ''}" if self.cases else ""
        return f"{self.clause} at {self.where}{limit}{cases}"

    def describe(self) -> str:
        link = f" ({self.link})" if self.link else ""
        return f"known deviation, {self.key}: {self.reason}{link}"

    def names_test(self, name: str | None) -> bool:
        return self.scenario is not None and name is not None and name == self.scenario

    def applies(self, area: str, config: Mapping[str, Any] | None, case: str | None = None) -> bool:
        """A place entry of this area whose settings the trace has, and whose cases name it."""
        if self.table is None or self.area != area or (self.cases and case not in self.cases):
            return False
        return all(config is not None and k in config and config[k] == v for k, v in self.config)


@dataclass(frozen=True)
class AreaShown:
    """What an engine answers of one area: tables and their columns, and who refuses settings."""

    tables: Mapping[str, tuple[str, ...]]
    config_checked_by: str = "engine"


@dataclass
class Expectations:
    """One engine's entries and declaration, the file they came from and what is wrong with it."""

    engine: str
    path: Path | None = None
    deviations: list[Deviation] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    shows: dict[str, AreaShown] | None = None  # None: every table and column of every area
    declines: dict[str, str] = field(default_factory=dict)  # area -> why the engine does not answer it

    @property
    def clauses(self) -> set[str]:
        return {d.clause for d in self.deviations if d.clause is not None}

    @property
    def places(self) -> list[Deviation]:
        return [d for d in self.deviations if d.table is not None]

    def for_test(self, name: str | None) -> list[Deviation]:
        return [d for d in self.deviations if d.names_test(name)]

    def declined(self, area: str) -> str | None:
        """Why the engine does not answer ``area`` by its declaration, or None when it does."""
        if area in self.declines:
            return self.declines[area]
        if self.shows is None:
            return None
        mine = self.shows.get(area)
        if mine is None:
            return f"{self.path or self.engine} declares nothing it shows of {area}"
        missing = [t for t in RESULT_TABLES[area] if t not in mine.tables]
        if missing:
            return f"{self.path or self.engine} shows no {', '.join(missing)} table of {area}"
        return None

    def shown(self, area: str) -> Mapping[str, tuple[str, ...]] | None:
        """The tables and columns compared in ``area``: None for all of them."""
        return None if self.shows is None or area not in self.shows else self.shows[area].tables

    def refusals_by_adapter(self, area: str) -> bool:
        return (
            self.shows is not None and area in self.shows and self.shows[area].config_checked_by == "adapter"
        )

    def observable(self, area: str) -> set[str]:
        """The clauses some place the engine shows in ``area`` decides."""
        return observable_clauses(area, self.shown(area), not self.refusals_by_adapter(area))


def observable_clauses(
    area: str, shown: Mapping[str, Sequence[str]] | None, refusals: bool = True
) -> set[str]:
    if area not in SHOWN:
        return set()
    decl = SHOWN[area]
    out = set(decl.refusal) if refusals else set()
    for table, t in decl.tables.items():
        if shown is not None and table not in shown:
            continue
        out.update(t.rows)
        for column, cs in t.columns.items():
            if shown is None or column in shown[table]:
                out.update(cs)
    return out


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
    whole = expectations_from(found[0], out.engine)
    out.deviations, out.shows, out.declines = whole.deviations, whole.shows, whole.declines
    out.problems += whole.problems
    return out


def expectations_from(path: Path, engine: str) -> Expectations:
    """Everything one file says of ``engine``: its entries, its [shows] and its [declined]."""
    deviations, shows, declines = _parse(path)
    out = Expectations(engine, path, deviations, shows=shows, declines=declines)
    out.problems += [f"{path}: {p}" for p in placeholder_problems(deviations)]
    return out


def parse_file(path: Path) -> list[Deviation]:
    return _parse(path)[0]


def read_file(path: Path) -> tuple[list[Deviation], dict[str, AreaShown] | None]:
    """The entries and the ``shows`` declaration of one file, every field checked."""
    deviations, shows, _ = _parse(path)
    return deviations, shows


def _parse(path: Path) -> tuple[list[Deviation], dict[str, AreaShown] | None, dict[str, str]]:
    """The entries, the ``shows`` declaration and the ``declined`` reasons of one file, every
    field checked."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ExpectationFileError(f"{path}: {e}") from None
    unknown = set(data) - {"deviation", "shows", "declined"}
    if unknown:
        raise ExpectationFileError(
            f"{path}: unknown top-level keys {sorted(unknown)}; use [[deviation]], [shows] and [declined]"
        )
    declines = data.get("declined", {})
    _check_declines(declines, data.get("shows"), path)
    shows = _read_shows(data["shows"], path) if "shows" in data else None
    out = []
    for i, entry in enumerate(data.get("deviation", [])):
        out.append(_read_entry(entry, f"{path} entry {i + 1}", shows))
    return out, shows, {str(a): str(r) for a, r in declines.items()}


def _check_declines(data: Any, shows: Any, path: Path) -> None:
    if not isinstance(data, dict):
        raise ExpectationFileError(f'{path}: [declined] holds one reason per area, area = "why"')
    for area, reason in data.items():
        if area not in TABLES:
            raise ExpectationFileError(
                f"{path} [declined]: {area!r} is not an area; areas: {', '.join(TABLES)}"
            )
        if not isinstance(reason, str) or not reason.strip():
            raise ExpectationFileError(f'{path} [declined]: {area} needs its reason, {area} = "why"')
        if isinstance(shows, dict) and area in shows:
            raise ExpectationFileError(f"{path}: {area} is both declined and shown")


def _read_shows(data: Any, path: Path) -> dict[str, AreaShown]:
    if not isinstance(data, dict):
        raise ExpectationFileError(f"{path}: [shows] holds one table per area, [shows.<area>]")
    out = {}
    for area, tables in data.items():
        where = f"{path} [shows.{area}]"
        if area not in TABLES:
            raise ExpectationFileError(f"{where}: not an area; areas: {', '.join(TABLES)}")
        if not isinstance(tables, dict):
            raise ExpectationFileError(f'{where}: give its tables, table = [columns] or "all"')
        tables = dict(tables)
        checked_by = tables.pop("config_checked_by", "engine")
        if checked_by not in CHECKED_BY:
            raise ExpectationFileError(f"{where}: config_checked_by is one of {', '.join(CHECKED_BY)}")
        cut: dict[str, tuple[str, ...]] = {}
        for table, columns in tables.items():
            if table not in TABLES[area]:
                raise ExpectationFileError(f"{where}: no table {table!r}; tables: {', '.join(TABLES[area])}")
            every = TABLES[area][table]
            if columns == "all":
                columns = list(every)
            if not isinstance(columns, list) or not columns or not all(isinstance(c, str) for c in columns):
                raise ExpectationFileError(f'{where}: {table} = a non-empty list of its columns, or "all"')
            wrong = [c for c in columns if c not in every]
            if wrong:
                raise ExpectationFileError(
                    f"{where}: {table} has no columns {wrong}; columns: {', '.join(every)}"
                )
            cut[table] = tuple(c for c in every if c in columns)
        out[area] = AreaShown(cut, checked_by)
    return out


ENTRY_FIELDS = {"clause", "scenario", "table", "columns", "config", "cases", "witness", "reason", "link"}


def _read_entry(entry: Mapping[str, Any], where: str, shows: dict[str, AreaShown] | None) -> Deviation:
    extra = set(entry) - ENTRY_FIELDS
    if extra:
        raise ExpectationFileError(f"{where}: unknown fields {sorted(extra)}")
    if not str(entry.get("reason", "")).strip():
        raise ExpectationFileError(f"{where}: 'reason' is required")
    common: dict[str, Any] = {"reason": str(entry["reason"]), "link": str(entry.get("link", ""))}
    if "scenario" in entry:
        wrong = sorted(set(entry) & {"table", "columns", "config", "cases", "witness"})
        if wrong:
            raise ExpectationFileError(f"{where}: a scenario entry names one test; it takes no {wrong}")
        return Deviation(**common, clause=entry.get("clause"), scenario=str(entry["scenario"]))
    missing = [f for f in ("clause", "table", "columns", "witness") if f not in entry]
    if missing:
        raise ExpectationFileError(
            f"{where}: give 'scenario' (one test), or 'clause' with 'table', 'columns' and 'witness' "
            f"(missing: {', '.join(missing)})"
        )
    clause, table = str(entry["clause"]), str(entry["table"])
    area = clause_areas().get(clause)
    if area is None:
        raise ExpectationFileError(
            f"{where}: clause {clause} decides no table of any area; use a scenario entry"
        )
    if table not in TABLES[area]:
        raise ExpectationFileError(
            f"{where}: {area} has no table {table!r}; tables: {', '.join(TABLES[area])}"
        )
    columns = entry["columns"]
    if isinstance(columns, str):
        columns = [columns]
    if not isinstance(columns, list) or not columns:
        raise ExpectationFileError(
            f"{where}: 'columns' is a non-empty list of columns of {table}, or \"rows\""
        )
    for c in columns:
        if c not in (ROWS, *ONE_WAY_ROWS) and c not in TABLES[area][table]:
            raise ExpectationFileError(
                f"{where}: {table} has no column {c!r}; columns: {', '.join(TABLES[area][table])}"
            )
        if clause not in place_clauses(area, table, c):
            raise ExpectationFileError(
                f"{where}: {clause} does not decide {table}.{c} (harness/output_clauses.py: "
                f"{', '.join(sorted(place_clauses(area, table, c), key=clause_sort_key))})"
            )
    shown = shows.get(area) if shows is not None else None
    if shows is not None and (shown is None or table not in shown.tables):
        raise ExpectationFileError(f"{where}: the file's [shows.{area}] does not show {table}")
    if shown is not None:
        hidden = [c for c in columns if c not in (ROWS, *ONE_WAY_ROWS) and c not in shown.tables[table]]
        if hidden:
            raise ExpectationFileError(f"{where}: {hidden} of {table} are not shown: nothing to excuse")
    config = entry.get("config", {})
    if not isinstance(config, dict):
        raise ExpectationFileError(
            f"{where}: 'config' is a table of trace settings, config = {{ key = value }}"
        )
    cases = entry.get("cases", [])
    if not isinstance(cases, list) or not all(isinstance(c, str) for c in cases):
        raise ExpectationFileError(f"{where}: 'cases' is a list of case ids (or test names)")
    witness = str(entry["witness"])
    if cases and witness not in cases:
        raise ExpectationFileError(f"{where}: the witness {witness!r} is not one of its cases")
    return Deviation(
        **common, clause=clause, table=table, columns=tuple(dict.fromkeys(columns)),
        config=tuple(sorted(config.items())), cases=tuple(cases), witness=witness,
    )  # fmt: skip


def placeholder_problems(deviations: Sequence[Deviation]) -> list[str]:
    return [
        f"the entry {d.key} still has the placeholder reason"
        for d in deviations
        if d.reason == PLACEHOLDER_REASON
    ]


def unknown_clause_problems(exp: Expectations, known: set[str]) -> list[str]:
    """Entries naming a clause that spec/ does not define (a typo would excuse nothing)."""
    if not known:
        return []
    where = exp.path or exp.engine
    return [f"{where}: clause {c} is not a clause of spec/" for c in sorted(exp.clauses - known)]


# ---- the rule: judging one answer ---------------------------------------------------------------


@dataclass(frozen=True)
class Judged:
    """Two answers of one trace compared through what the engine shows, its entries applied."""

    differences: list[Difference]  # every place they differ
    unexcused: list[Difference]  # what no entry excuses: a failure when not empty
    excused_by: tuple[Deviation, ...] = ()  # the place entries that excuse the rest


def judge(
    area: str,
    config: Mapping[str, Any] | None,
    expected: Output | Exception,
    actual: Output | Exception,
    exp: Expectations | None = None,
    case: str | None = None,
) -> Judged | None:
    """The differences of two answers of the trace of ``case`` (a case id or test name), and
    which of the engine's place entries excuse them; None when an answer is a crash (no place
    to put it)."""
    shown = exp.shown(area) if exp is not None else None
    found = differences(area, expected, actual, shown)
    if found is None:
        return None
    entries = [d for d in exp.places if d.applies(area, config, case)] if exp is not None else []
    if not found or not entries or isinstance(expected, Exception) or isinstance(actual, Exception):
        return Judged(found, found, ())
    unexcused: list[Difference] = []
    used: list[Deviation] = []
    for table in dict.fromkeys(d.table for d in found):
        mine = [d for d in entries if d.table == table]
        rest = _left(area, table, expected, actual, shown, mine)
        unexcused += rest
        if mine and not rest:
            used += _needed(area, table, expected, actual, shown, mine)
    return Judged(found, unexcused, tuple(dict.fromkeys(used)))


def _left(
    area: str, table: str, expected: Output, actual: Output,
    shown: Mapping[str, Sequence[str]] | None, entries: Sequence[Deviation],
) -> list[Difference]:  # fmt: skip
    """What still differs in ``table`` with the entries' columns left out of the comparison."""
    excused = {c for d in entries for c in d.columns}
    columns = [c for c in (shown[table] if shown is not None else TABLES[area][table]) if c not in excused]
    one_way = [w for w in ONE_WAY_ROWS if w in excused]
    both_ways = ROWS in excused or len(one_way) == len(ONE_WAY_ROWS)  # entries of both ways: any rows
    rest = table_places(
        area, table, expected.get(table, []), actual.get(table, []), columns,
        rows_excused=both_ways, rows_one_way=None if both_ways or not one_way else one_way[0],
    )  # fmt: skip
    return [d for d in rest if d.place != ROWS] if both_ways else rest


def _needed(
    area: str, table: str, expected: Output, actual: Output,
    shown: Mapping[str, Sequence[str]] | None, entries: Sequence[Deviation],
) -> list[Deviation]:  # fmt: skip
    """The entries the table's excuse rests on: each without which something would differ (all
    of them when they overlap so that none is needed alone)."""
    needed = [
        d for d in entries if _left(area, table, expected, actual, shown, [e for e in entries if e != d])
    ]
    return needed or list(entries)


def charged(judged: Judged | None, named: Sequence[str]) -> list[str]:
    """The clauses a failure or deviation is charged to: a deviation to its entries' clauses; a
    failure to the clauses of what is left unexcused among those its test names, else to every
    clause it names (a difference it cannot place, or a crash)."""
    if judged is not None and not judged.unexcused and judged.excused_by:
        return sorted({d.clause for d in judged.excused_by if d.clause}, key=clause_sort_key)
    attributed = set().union(*(d.clauses for d in judged.unexcused)) if judged is not None else set()
    mine = attributed & set(named)
    return sorted(mine, key=clause_sort_key) if mine else list(named)


# ---- the test being run: what a differential run may excuse ------------------------------------


@dataclass(frozen=True)
class Active:
    expectations: Expectations | None = None  # the file of the engine under test
    named: tuple[str, ...] = ()  # the clauses the running test names
    test: str = ""  # its name, as an entry's ``cases`` names it


_ACTIVE: ContextVar[Active | None] = ContextVar("active_expectations", default=None)


def active() -> Active:
    return _ACTIVE.get() or Active()


@contextmanager
def activated(exp: Expectations | None, named: Iterable[str], test: str = "") -> Iterator[None]:
    token = _ACTIVE.set(Active(exp, tuple(named), test))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


# ---- what a run made of each entry ------------------------------------------------------------------


@dataclass(frozen=True)
class Ran:
    """One test or case of a run, as the entry statuses need it."""

    id: str
    name: str  # what a ``scenario`` entry or a witness names
    clauses: Sequence[str]  # the clauses it names
    outcome: str  # passed | failed | deviation | unexpected-pass | anything else
    excused_by: Sequence[str] = ()  # the keys of the place entries that excuse it
    area: str = ""


def entry_statuses(
    exp: Expectations, ran: Sequence[Ran], areas: Iterable[str] | None = None
) -> list[dict[str, Any]]:
    """What a run made of each entry, with the tests it applied to:

    * ``applied``: a place entry excused a failure and its witness, if the run has it, is one;
      a scenario entry's test failed;
    * ``unexpected-pass``: the witness no longer differs there (it passes, or other entries
      excuse all it differs in), or the test a scenario entry names passed;
    * ``witness differs elsewhere``: the witness fails, and not where this entry excuses;
    * ``witness missing``: the run covers the entry's area (``areas``, for a run of every case)
      and has no case of that name;
    * ``matches nothing``: nothing of the run touched it."""
    areas = set(areas) if areas is not None else None
    out = []
    for d in exp.deviations:
        if d.scenario is None:
            tests = [r.id for r in ran if d.key in r.excused_by]
            witness = [r for r in ran if r.name == d.witness]
            status = "applied" if tests else "matches nothing"
            if witness and not any(d.key in r.excused_by for r in witness):
                # the witness passes, or fails somewhere no entry excuses, or only where others do
                failing = any(r.outcome == "failed" for r in witness)
                status = "witness differs elsewhere" if failing else "unexpected-pass"
            elif not witness and areas is not None and d.area in areas:
                status = "witness missing"
        else:
            hits = [r for r in ran if r.name == d.scenario]
            tests = [r.id for r in hits]
            fixed = any(r.outcome == "unexpected-pass" for r in hits)
            status = "unexpected-pass" if fixed else "applied" if hits else "matches nothing"
        out.append({"clause": d.clause, "scenario": d.scenario, "table": d.table, "columns": list(d.columns),
                    "config": dict(d.config), "witness": d.witness, "key": d.key, "reason": d.reason,
                    "link": d.link, "status": status, "tests": tests})  # fmt: skip
    return out


#: entry statuses that fail a run: a fixed deviation, or an entry whose witness cannot show it
FAILING_ENTRY = ("unexpected-pass", "witness differs elsewhere", "witness missing")


# ---- writing a file from a run --------------------------------------------------------------------


def _toml_string(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)  # a JSON string is a valid TOML basic string


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    return _toml_string(str(v))


def render(
    engine: str,
    deviations: Sequence[Deviation],
    shows: Mapping[str, AreaShown] | None = None,
    declines: Mapping[str, str] | None = None,
) -> str:
    lines = [
        f"# Known deviations of the {engine!r} engine from the specification (spec/traces.md TR-11).",
        "#",
        "# A place entry (clause, table, columns, witness) excuses a difference from the oracle only",
        "# in that table and those columns ('rows': which rows exist); its witness, a case or test",
        "# that shows it, is checked on every run that has it. 'scenario' names one test (a",
        "# scenario, a property test's function or a vector case id), a strict expected failure.",
        "# An entry whose witness stops differing is reported as an unexpected pass: remove it then.",
        "# Written by `eventtime-conformance expectations`; replace every placeholder reason.",
    ]
    if declines:
        lines += ["", "[declined]"] + [f"{area} = {_toml_string(why)}" for area, why in declines.items()]
    for area, shown in (shows or {}).items():
        lines += ["", f"[shows.{area}]"]
        lines += [f"{t} = [{', '.join(_toml_string(c) for c in cs)}]" for t, cs in shown.tables.items()]
        if shown.config_checked_by != "engine":
            lines.append(f"config_checked_by = {_toml_string(shown.config_checked_by)}")
    for d in deviations:
        lines += ["", "[[deviation]]"]
        if d.scenario is not None:
            lines.append(f"scenario = {_toml_string(d.scenario)}")
        if d.clause is not None:
            lines.append(f"clause = {_toml_string(d.clause)}")
        if d.table is not None:
            lines.append(f"table = {_toml_string(d.table)}")
            lines.append(f"columns = [{', '.join(_toml_string(c) for c in d.columns)}]")
            if d.config:
                lines.append(f"config = {{ {', '.join(f'{k} = {_toml_value(v)}' for k, v in d.config)} }}")
            if d.cases:
                lines.append("cases = [")
                lines += [f"  {_toml_string(c)}," for c in d.cases]
                lines.append("]")
            lines.append(f"witness = {_toml_string(d.witness or '')}")
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
    exercised, removed when the run reported them as unexpected passes, and one new place
    entry with the placeholder reason for the places failures differ in unexcused: the clauses
    deciding the most of them first, one entry per clause and table, its witness the first such
    test by name."""
    status: dict[str, str] = {}
    for block in summary.get("expectations", []):
        if block.get("engine") == engine:
            for e in block.get("entries", []):
                status[str(e.get("key"))] = e.get("status", "")
    kept, removed = [], []
    for d in existing:
        if status.get(d.key) in FAILING_ENTRY:
            removed.append(d.key)
        else:
            kept.append(d)
    have = {(d.table, c) for d in kept for c in d.columns}
    failed = [
        t for t in summary.get("tests", []) if t.get("engine") == engine and t.get("outcome") == "failed"
    ]
    # per (test, place) the clauses deciding the place; a clause many of them share is the likeliest
    # single cause, so one entry per (clause, table) gathers its columns
    candidates: list[tuple[str, str, str, list[str]]] = []
    for t in sorted(failed, key=lambda t: str(t.get("name"))):
        for place in t.get("unexcused") or []:
            table, column = place["table"], place["place"]
            if table != REFUSAL and (table, column) not in have:  # a refusal is a scenario entry's job
                candidates.append((str(t.get("name")), table, column, list(place["clauses"])))
    grouped: dict[tuple[str, str], tuple[list[str], str]] = {}
    while candidates:  # greedy cover: the clause deciding the most of what is left, first
        shared = Counter(c for *_, mine in candidates for c in mine)
        clause = min(shared, key=lambda c: (-shared[c], clause_sort_key(c)))
        for name, table, column, _ in [x for x in candidates if clause in x[3]]:
            columns, _witness = grouped.setdefault((clause, table), ([], name))
            if column not in columns:
                columns.append(column)
        candidates = [x for x in candidates if clause not in x[3]]
    added = [
        Deviation(reason=PLACEHOLDER_REASON, clause=c, table=table, columns=tuple(cols), witness=w)
        for (c, table), (cols, w) in sorted(
            grouped.items(), key=lambda x: (clause_sort_key(x[0][0]), x[0][1])
        )
    ]
    return Update(kept + added, [d.key for d in added], removed)
