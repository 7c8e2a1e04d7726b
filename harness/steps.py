"""The shared, engine-agnostic Gherkin step library.

One registry (``LIBRARY``) maps step patterns to handler functions that work
on a ``ScenarioState``. pytest-bdd runs them through ``LIBRARY.bind`` (see
``features/conftest.py``), and the harness replays the same handlers before
any test runs to collect every scenario's trace, so an expensive engine runs
all scenarios of a session in one ``engine.run`` call (``harness.pytest_plugin``).

Given and When steps only build the trace. Then steps look at the engine's
output for the trace built so far; they never change it.

How batches are counted
-----------------------
A trace is a list of micro-batches (spec/traces.md TR-5), numbered from 0 as
in every output table: the first batch a scenario creates is batch 0.

* Every When step that adds items creates ONE new batch holding its items in
  table order, unless it says ``in the same batch``, which appends to the
  latest batch instead. So::

      When these events arrive in one batch:          <- batch 0
      When the processing clock advances to 500 ms    <- batch 1 (just the clock item)
      When key a is marked idle in the same batch     <- still batch 1
      When these events arrive in the next batch:     <- batch 2

* ``in one batch`` and ``in the next batch`` both create a new batch; ``next``
  reads better after an earlier batch and is refused for the very first one.
  ``one per batch`` creates one batch per table row.
* ``When these items arrive in one batch:`` takes a ``kind`` column
  (event, clock, idle, remove_key, end; for F064 also watermark, active,
  register_source, add_partition, remove_partition, assign_core) to mix events
  and control items inside one batch, which is how segments (F065-R22, F064-R20)
  and error rows are written. The columns present decide the item fields
  (key, event_time, value, time, source, partition, count, core).
* F064 names a partition ``S/P`` (source/partition): ``When partition 0/3 is
  marked idle``, ``When source 0 is registered with 4 partitions``.
* Window joins give each event its input in a ``side`` column (``left`` or
  ``right``) of the events or items table, and the join's watermark with
  ``When the join watermark reaches 30 ms`` or a ``watermark`` item.
* ``When an empty batch passes`` creates a batch without items.
* ``When the input ends`` adds an ``end`` item (TR-14), in a new batch or, with
  ``in the same batch``, after the latest batch's items.
* ``When the engine restarts from its checkpoint`` creates no batch: it puts a
  restart point after the latest batch (TR-5).
* A Then step sees the output of the trace built up to that step; "the last
  batch" is the latest batch created so far.

Cells: numbers are milliseconds (``10_000``, ``I64_MAX``, ``I64_MIN + 5`` are
accepted); an empty cell is a missing field (an item without a key, an event
without a time), ``-`` or ``none`` in an expected table is null.
"""

from __future__ import annotations

import inspect
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal, NoReturn, Protocol, cast

from harness.engine import Unsupported
from harness.outputs import TABLES, Output, format_table
from harness.traces import I64_MAX, I64_MIN, ITEM_FIELD_TYPES, InvalidConfig, Item, Trace

DataTable = list[list[str]]


class StepUsageError(Exception):
    """A step used in a way the library cannot turn into a trace (a scenario bug)."""


# ---- values -----------------------------------------------------------------

_TIME_RE = re.compile(r"^\s*(?:(I64_MAX|I64_MIN)\s*(?:([+-])\s*([0-9_]+))?|(-?[0-9_]+))\s*$", re.IGNORECASE)

# Columns that hold text; every other column holds an integer or null.
# (``source`` is a number: F064 sources are integers, TR-3.)
STRING_COLUMNS = {"key", "verdict", "state", "reason", "kind", "metric", "setting", "channel"}
# Columns that hold text in one area only: an aggregate's double is text (OXE-R17), while the
# reorder buffer's ``value`` is an integer.
AREA_STRING_COLUMNS = {
    "exactly_once_aggregation": {"number"},
    "window_joins": {"side"},
    "pipeline": {"number", "side", "stream", "decision", "join", "node"},
}
NULL_CELLS = {"", "-", "none", "null"}


def parse_time(text: str) -> int:
    """``10000``, ``10_000``, ``-5``, ``I64_MAX``, ``I64_MIN + 3`` -> int (milliseconds)."""
    m = _TIME_RE.match(text)
    if not m:
        raise StepUsageError(f"{text!r} is not a number of milliseconds")
    if m.group(4) is not None:
        return int(m.group(4))
    base = I64_MAX if m.group(1).upper() == "I64_MAX" else I64_MIN
    if m.group(2):
        offset = int(m.group(3))
        base = base + offset if m.group(2) == "+" else base - offset
    return base


def parse_key(text: str | None) -> str | None:
    if text is None:
        return None
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1]
    return text or None


def parse_expected_cell(column: str, text: str, area: str | None = None) -> Any:
    """A cell of an expected (Then) table, typed by its column (and the area, for the
    columns that hold text in one area only)."""
    t = text.strip()
    if t.lower() in NULL_CELLS:
        return None
    if column == "verdict":
        return t.replace(" ", "_")  # "on time" reads as "on_time"
    if column in STRING_COLUMNS or column in AREA_STRING_COLUMNS.get(area or "", ()):
        return parse_key(t)
    return parse_time(t)


def _json_int(text: str) -> int | float:
    # "-0" is the double -0.0, as a number parser reads it; Python's int has no negative zero
    return -0.0 if text.lstrip("-") == "0" and text.startswith("-") else int(text)


def parse_amount_cell(text: str) -> Any:
    """An amount cell (OXE-R16) as the JSON value it writes: ``1.5``, ``"NaN"``, ``true``,
    ``null``. A number beyond the doubles (``1e400``) is kept as its exact integer, which
    JSON writes back as the same number, since Python would read it as an infinity."""
    try:
        value = json.loads(text, parse_float=Decimal, parse_int=_json_int)
    except ValueError:
        raise StepUsageError(f'{text!r} is not a JSON value (write text as "...")') from None
    if not isinstance(value, Decimal):
        return value
    as_double = float(value)
    # a magnitude this large has no fraction left, so the integer is the number written
    return as_double if math.isfinite(as_double) else int(value)


def parse_setting_value(text: str) -> Any:
    """A configuration cell: int, none, true/false, a float, "quoted text", a JSON list
    or object (``[["a", "b"]]``), or bare text."""
    t = text.strip()
    if t.lower() in ("none", "null"):
        return None
    if t.lower() in ("true", "false"):
        return t.lower() == "true"
    try:
        return parse_time(t)
    except StepUsageError:
        pass
    if len(t) >= 2 and t[0] == t[-1] == '"':
        return t[1:-1]
    if t[:1] in ("[", "{"):
        return parse_json_cell(t)
    try:
        return float(t)
    except ValueError:
        return t


def _table_dicts(datatable: DataTable | None, step: str) -> tuple[list[str], list[dict[str, str]]]:
    if not datatable:
        raise StepUsageError(f"step {step!r} needs a table")
    header = [h.strip() for h in datatable[0]]
    return header, [dict(zip(header, row, strict=True)) for row in datatable[1:]]


# ---- the scenario state (a trace builder) -----------------------------------


class EngineHandle(Protocol):
    """What Then steps need from the engine fixture (harness.pytest_plugin.EngineHandle)."""

    @property
    def name(self) -> str: ...

    def output(self, trace: Trace) -> Output | Exception: ...


class DirectView(Protocol):
    """An object-API view (oracle-only scenarios): what Then steps can ask it."""

    def key_states(self) -> dict[str, tuple[int | None, str]]: ...

    def global_watermark(self) -> int | None: ...

    def metrics(self) -> dict[str, int]: ...


@dataclass
class ScenarioState:
    """A scenario's trace under construction, and where its Then steps look."""

    engine: EngineHandle | None = None
    name: str = ""
    area: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    batches: list[list[Item]] = field(default_factory=list)
    restart_after: set[int] = field(default_factory=set)
    direct: DirectView | None = None  # set by object-API (oracle-only) Given steps
    scratch: dict[str, Any] = field(default_factory=dict)  # free room for area steps

    # -- building
    def start(self, area: str) -> None:
        if self.area is not None and self.area != area:
            raise StepUsageError(f"scenario already configures {self.area!r}, cannot add {area!r}")
        if area not in TABLES:
            raise StepUsageError(f"unknown area {area!r}; known: {sorted(TABLES)}")
        self.area = area

    def require_area(self) -> str:
        if self.area is None:
            raise StepUsageError("configure the area first, e.g. 'Given keyed watermarks with ...'")
        return self.area

    def add(self, items: Sequence[Item], where: str = "in one batch") -> None:
        """Places items per the batching rules of the module docstring."""
        self.require_area()
        if where == "in the same batch":
            if not self.batches:
                raise StepUsageError("'in the same batch' needs an earlier batch")
            self.batches[-1].extend(items)
        elif where in ("in one batch", "in the next batch", ""):
            if where == "in the next batch" and not self.batches:
                raise StepUsageError("'in the next batch' needs an earlier batch; say 'in one batch'")
            self.batches.append(list(items))
        elif where == "one per batch":
            for item in items:
                self.batches.append([item])
        else:
            raise StepUsageError(f"unknown batch placement {where!r}")

    def restart(self) -> None:
        if not self.batches:
            raise StepUsageError("a restart point needs a batch before it")
        self.restart_after.add(len(self.batches) - 1)

    @property
    def last_batch(self) -> int:
        if not self.batches:
            raise StepUsageError("no batch has run yet")
        return len(self.batches) - 1

    def trace(self) -> Trace:
        """The trace built so far. A restart point after the latest batch has nothing
        after it yet and cannot change what is observed so far, so it is left out."""
        area = self.require_area()
        last = len(self.batches) - 1
        return Trace(
            area=area,
            config=dict(self.config),
            batches=tuple(tuple(b) for b in self.batches),
            restart_after=frozenset(b for b in self.restart_after if b < last),
            name=self.name,
        )

    # -- observing
    def output(self) -> Output:
        """The engine's output for the trace so far; fails the step on InvalidConfig."""
        result = self.raw_output()
        if isinstance(result, Unsupported):  # the engine declines this case: a skip, never a pass
            import pytest

            pytest.skip(f"the engine {self.engine_name} declines this case: {result}")
        if isinstance(result, Exception):
            _fail(
                f"the engine {self.engine_name} rejected the configuration "
                f"{self.config!r}: {type(result).__name__}: {result}",
                self,
            )
        return result

    def raw_output(self) -> Output | Exception:
        if self.engine is None:
            raise StepUsageError("no engine: Then steps run only under pytest")
        return self.engine.output(self.trace())

    @property
    def engine_name(self) -> str:
        return repr(getattr(self.engine, "name", "?"))

    def table(self, name: str) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
        area = self.require_area()
        if name not in TABLES[area]:
            raise StepUsageError(f"area {area!r} has no {name!r} table")
        return TABLES[area][name], list(self.output()[name])


# ---- the registry -----------------------------------------------------------


@dataclass
class StepDef:
    type: str  # given | when | then
    pattern: str
    func: Callable[..., Any]
    regex: re.Pattern[str]
    owner: str  # module that defined it (what ``bind`` installs)

    def call(self, state: ScenarioState, text: str, datatable: DataTable | None) -> Any:
        m = self.regex.fullmatch(text)
        assert m is not None
        kwargs = dict(m.groupdict())
        if "datatable" in inspect.signature(self.func).parameters:
            kwargs["datatable"] = datatable
        return self.func(state, **kwargs)


class StepLibrary:
    """Pattern -> handler; one instance (LIBRARY) serves pytest-bdd and the pre-pass."""

    def __init__(self) -> None:
        self.defs: list[StepDef] = []

    def _register(self, type_: str, pattern: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def decorator(func: Callable[..., Any]) -> Callable[..., Any]:
            self.defs.append(StepDef(type_, pattern, func, re.compile(pattern), func.__module__))
            return func

        return decorator

    def given(self, pattern: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        return self._register("given", pattern)

    def when(self, pattern: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        return self._register("when", pattern)

    def then(self, pattern: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        return self._register("then", pattern)

    def find(self, type_: str, text: str) -> StepDef | None:
        found = [d for d in self.defs if d.type == type_ and d.regex.fullmatch(text)]
        if len(found) > 1:
            raise StepUsageError(f"step {text!r} matches several patterns: {[d.pattern for d in found]}")
        return found[0] if found else None

    def bind(self, namespace: dict[str, Any], owner: str | None = None) -> list[str]:
        """Installs the steps defined by module ``owner`` (default: this library's
        shared steps) as pytest-bdd step fixtures in ``namespace``: call it at module
        level of a conftest or test module as ``LIBRARY.bind(globals())``."""
        from pytest_bdd import parsers
        from pytest_bdd import step as bdd_step

        owner = owner or __name__
        before = set(namespace)
        for d in self.defs:
            if d.owner != owner:
                continue
            wrapper = _bdd_wrapper(d)
            # pytest-bdd writes the fixture into the locals of the frame two levels
            # up from its decorator: bind's caller, the module being set up.
            step_type = cast(Literal["given", "when", "then"], d.type)
            bdd_step(parsers.re(d.pattern), step_type, stacklevel=2)(wrapper)
        added = sorted(set(namespace) - before)
        if not added:
            raise RuntimeError("LIBRARY.bind must be called at module level with that module's globals()")
        return added


def _bdd_wrapper(d: StepDef) -> Callable[..., Any]:
    def wrapper(scenario_state: ScenarioState, datatable: DataTable | None = None, **groups: Any) -> Any:
        __tracebackhide__ = True
        kwargs = dict(groups)
        if "datatable" in inspect.signature(d.func).parameters:
            kwargs["datatable"] = datatable
        return d.func(scenario_state, **kwargs)

    params = [inspect.Parameter("scenario_state", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    params += [inspect.Parameter(g, inspect.Parameter.KEYWORD_ONLY, default=None) for g in d.regex.groupindex]
    params.append(inspect.Parameter("datatable", inspect.Parameter.KEYWORD_ONLY, default=None))
    wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    wrapper.__name__ = f"step_{d.func.__name__}"
    wrapper.__doc__ = d.pattern
    return wrapper


LIBRARY = StepLibrary()
given, when, then = LIBRARY.given, LIBRARY.when, LIBRARY.then


def traces_of_scenario(steps: Iterable[Any], name: str, library: StepLibrary = LIBRARY) -> list[Trace]:
    """The pre-pass: replays a parsed scenario's Given/When steps (pytest_bdd.parser.Step)
    through the library and returns the trace each Then step will look at (deduplicated)."""
    state = ScenarioState(name=name)
    traces: list[Trace] = []
    seen: set[str] = set()
    for step in steps:
        if step.type == "then":
            if state.area is not None and state.direct is None:
                t = state.trace()
                if t.dumps() not in seen:
                    seen.add(t.dumps())
                    traces.append(t)
            continue
        d = library.find(step.type, step.name)
        if d is None:
            raise StepUsageError(f"no step definition for {step.type} {step.name!r}")
        d.call(state, step.name, step.datatable.raw() if step.datatable is not None else None)
    return traces


# ---- Given: configuration ---------------------------------------------------

# Setting phrases: "a bounded delay of 5000 ms" -> {"bounded_delay": 5000}. Areas add theirs.
SETTING_PHRASES: list[tuple[re.Pattern[str], Callable[[re.Match[str]], dict[str, Any]]]] = [
    (re.compile(r"an? bounded delay of (?P<v>.+?) ms"), lambda m: {"bounded_delay": parse_time(m["v"])}),
    (re.compile(r"an? idle timeout of (?P<v>.+?) ms"), lambda m: {"idle_timeout": parse_time(m["v"])}),
    (
        re.compile(r"at most (?P<n>-?\d+) keys? (?:evicting|under) (?P<p>\w+)"),
        lambda m: {"max_keys": int(m["n"]), "eviction_policy": m["p"]},
    ),
    (re.compile(r"tumbling windows of (?P<v>.+?) ms"), lambda m: {"window_size": parse_time(m["v"])}),
    (
        re.compile(r"an? max(?:imum)? lateness of (?P<v>.+?) ms"),
        lambda m: {"max_lateness": parse_time(m["v"])},
    ),
    (
        re.compile(r"(?:an?|the) (?P<kind>count|sum|min|max|mean) aggregate"),
        lambda m: {"aggregate": m["kind"]},
    ),
    (
        re.compile(r"an? de-duplication window of (?P<n>.+?) sequences?"),
        lambda m: {"dedup_window": parse_time(m["n"])},
    ),
    (re.compile(r"the default configuration"), lambda m: {}),
    # window joins (OXJ-R18): one phrase names the join and its pane sizes
    (
        re.compile(r"a tumbling-tumbling join of (?P<v>.+?) ms panes"),
        lambda m: {"join": "tumbling_tumbling", "size_ms": parse_time(m["v"])},
    ),
    (
        re.compile(r"a tumbling-sliding join of (?P<v>.+?) ms left panes"),
        lambda m: {"join": "tumbling_sliding", "left_size_ms": parse_time(m["v"])},
    ),
    (
        re.compile(r"right windows of (?P<size>.+?) ms sliding every (?P<slide>.+?) ms"),
        lambda m: {"right_size_ms": parse_time(m["size"]), "right_slide_ms": parse_time(m["slide"])},
    ),
    (
        re.compile(r"a session-session join with a gap of (?P<v>.+?) ms"),
        lambda m: {"join": "session_session", "gap_ms": parse_time(m["v"])},
    ),
    (
        re.compile(r"an allowed lateness of (?P<v>.+?) ms"),
        lambda m: {"allowed_lateness_ms": parse_time(m["v"])},  # window joins' name for it
    ),
]
_PHRASE_STARTS = r"(?:an? bounded delay|an? idle timeout|at most|tumbling windows|an? max(?:imum)? lateness)"


def parse_settings(text: str) -> dict[str, Any]:
    """ "a bounded delay of 0 ms, an idle timeout of 10 ms and at most 2 keys evicting X"."""
    out: dict[str, Any] = {}
    for part in re.split(r",\s*(?:and\s+)?|\s+and\s+", text.strip()):
        part = part.strip()
        for regex, make in SETTING_PHRASES:
            m = regex.fullmatch(part)
            if m:
                out.update(make(m))
                break
        else:
            phrases = ", ".join(r.pattern for r, _ in SETTING_PHRASES)
            raise StepUsageError(f"unknown setting phrase {part!r}; known: {phrases}")
    return out


def area_of(noun: str) -> str:
    noun = noun.strip().lower()
    return _AREA_SPELLINGS.get(noun, noun.replace(" ", "_").replace("-", "_"))


# Area nouns: the areas of harness/outputs.py TABLES, underscores read as spaces, and the
# spellings English hyphenates.
_AREA_SPELLINGS = {"exactly-once aggregation": "exactly_once_aggregation"}
_AREAS = "|".join(
    sorted(
        (re.escape(a) for a in [*(t.replace("_", " ") for t in TABLES), *_AREA_SPELLINGS]),
        key=len,
        reverse=True,
    )
)


@given(rf"(?P<area>{_AREAS}) with (?P<settings>(?!.*:$).+)")
def configure_area(state: ScenarioState, area: str, settings: str) -> None:
    """Given keyed watermarks with a bounded delay of 5000 ms and an idle timeout of 1000 ms"""
    state.start(area_of(area))
    state.config.update(parse_settings(settings))


@given(rf"(?:and |with )?(?P<settings>{_PHRASE_STARTS} .+)")
def configure_more(state: ScenarioState, settings: str) -> None:
    """And an idle timeout of 1000 ms"""
    state.require_area()
    state.config.update(parse_settings(settings))


@given(r"the setting (?P<name>[a-z_]+) is (?:left out|(?P<value>.+))")
def setting_is(state: ScenarioState, name: str, value: str | None) -> None:
    """And the setting size_ms is 0 / is left out: changes one setting of the configuration
    given so far (a value typed as in ``configured with:``), to write refusals as outlines."""
    state.require_area()
    if value is None:
        state.config.pop(name, None)
    else:
        state.config[name] = parse_setting_value(value)


@given(rf"(?P<area>{_AREAS}) configured with:")
def configure_table(state: ScenarioState, area: str, datatable: DataTable | None = None) -> None:
    """Given keyed watermarks configured with: | setting | value | (values typed as written)"""
    state.start(area_of(area))
    header, rows = _table_dicts(datatable, "configured with:")
    if header != ["setting", "value"]:
        raise StepUsageError(f"the configuration table has columns | setting | value |, got {header}")
    for row in rows:
        state.config[row["setting"].strip()] = parse_setting_value(row["value"])


# ---- When: the stream -------------------------------------------------------

_WHERE = r"(?P<where>in one batch|in the next batch|in the same batch|one per batch)"
_SAME = r"(?P<same> in the same batch)?"
_KEY = r'(?P<key>"[^"]*"|\S+)'


def _cell(row: Mapping[str, str], column: str) -> str | None:
    v = row.get(column)
    return None if v is None or v.strip() == "" else v.strip()


def _item_from_row(row: Mapping[str, str], kind: str) -> Item:
    """An item whose fields are the row's columns: integer fields read as milliseconds,
    ``key`` as text, and fields of other types as JSON (``1.5``, ``"12"``, ``null``)."""
    values: dict[str, Any] = {}
    for name, type_name in ITEM_FIELD_TYPES.items():
        cell = _cell(row, name)
        if cell is None:
            continue
        if type_name == "int":
            values[name] = parse_time(cell)
        elif type_name == "str":
            values[name] = parse_key(cell)
        elif name == "amount":
            values[name] = parse_amount_cell(cell)
        else:
            values[name] = parse_json_cell(cell)
    return Item(kind=kind, **values)


def parse_json_cell(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise StepUsageError(f'{text!r} is not a JSON value (write text as "...")') from None


# The columns of an item table; the columns present decide which fields the items carry.
_ITEM_COLUMNS = {"kind", *ITEM_FIELD_TYPES}


def _check_columns(header: Sequence[str], allowed: set[str], step: str) -> None:
    unknown = [h for h in header if h not in allowed]
    if unknown:
        raise StepUsageError(f"{step.rstrip(':')}: unknown columns {unknown}; allowed: {sorted(allowed)}")


@when(rf"these events arrive {_WHERE}:")
def events_arrive(state: ScenarioState, where: str, datatable: DataTable | None = None) -> None:
    """When these events arrive in one batch: | key | event_time | value |
    (F064: | source | partition | event_time |)"""
    header, rows = _table_dicts(datatable, "these events arrive")
    _check_columns(header, _ITEM_COLUMNS - {"kind", "time", "count", "core"}, "these events arrive")
    state.add([_item_from_row(r, "event") for r in rows], where)


@when(rf"these items arrive {_WHERE}:")
def items_arrive(state: ScenarioState, where: str, datatable: DataTable | None = None) -> None:
    """When these items arrive in one batch: | kind | key | event_time | value | time |
    (F064: | kind | source | partition | event_time | time | count | core |)"""
    header, rows = _table_dicts(datatable, "these items arrive")
    _check_columns(header, _ITEM_COLUMNS, "these items arrive")
    if "kind" not in header:
        raise StepUsageError("these items arrive: the table needs a 'kind' column")
    state.add([_item_from_row(r, r["kind"].strip()) for r in rows], where)


# The columns of a message (OXE-R1): its id, its key and its amount as JSON text.
MESSAGE_COLUMNS = ("producer", "partition", "sequence", "key", "amount")


@when(rf"these messages arrive {_WHERE}:")
def messages_arrive(state: ScenarioState, where: str, datatable: DataTable | None = None) -> None:
    """When these messages arrive in one batch: | producer | partition | sequence | key | amount |
    (exactly-once aggregation, OXE-R1): ``event`` items. The amount is JSON text (``1.5``,
    ``"NaN"``, ``"Infinity"``, ``-0.0``; ``true`` or ``"abc"`` to be refused); an empty
    cell leaves the field out."""
    header, rows = _table_dicts(datatable, "these messages arrive")
    _check_columns(header, set(MESSAGE_COLUMNS), "these messages arrive")
    state.add([_item_from_row(r, "event") for r in rows], where)


@when(rf"the processing clock (?:advances|moves|goes back) to (?P<time>.+?) ms{_SAME}")
def clock_moves(state: ScenarioState, time: str, same: str | None) -> None:
    """A ``clock`` item: the processing clock (TR-4) moves to the time, in a new batch or the same one."""
    state.add([Item("clock", time=parse_time(time))], "in the same batch" if same else "in one batch")


@when(rf"key {_KEY} is marked idle{_SAME}")
def key_marked_idle(state: ScenarioState, key: str, same: str | None) -> None:
    """An ``idle`` item: the key is marked idle now, whatever its last activity (F065-R9)."""
    state.add([Item("idle", key=parse_key(key))], "in the same batch" if same else "in one batch")


@when(rf"key {_KEY} is removed{_SAME}")
def key_removed(state: ScenarioState, key: str, same: str | None) -> None:
    """A ``remove_key`` item: the key stops being tracked (F065-R17)."""
    state.add([Item("remove_key", key=parse_key(key))], "in the same batch" if same else "in one batch")


@when(rf"the input ends{_SAME}")
def input_ends(state: ScenarioState, same: str | None) -> None:
    """An ``end`` item (TR-14): the stream's input is complete, in a new batch or the same one."""
    state.add([Item("end")], "in the same batch" if same else "in one batch")


@when(r"(?:an|(?P<n>\d+)) empty batch(?:es)? pass(?:es)?")
def empty_batches(state: ScenarioState, n: str | None) -> None:
    """One or ``n`` batches with no item: each still reports its progress row."""
    for _ in range(int(n) if n else 1):
        state.add([], "in one batch")


@when(r"the engine restarts from its checkpoint")
def engine_restarts(state: ScenarioState) -> None:
    """The engine stops after the last batch and resumes from its checkpoint (TR-5)."""
    state.restart()


@when(r"the engine keeps running")
def engine_keeps_running(state: ScenarioState) -> None:
    """A no-op, the twin of a restart in a Scenario Outline (restart or not, same output)."""


@when(rf"the join watermark (?:reaches|goes back to) (?P<time>.+?) ms{_SAME}")
def join_watermark(state: ScenarioState, time: str, same: str | None) -> None:
    """A ``watermark`` item of window joins (OXJ-R2): the join's input watermark, one per join."""
    state.add([Item("watermark", time=parse_time(time))], "in the same batch" if same else "in one batch")


# -- partitioned watermarks (F064): sources and partitions, written S/P ("0/3")

_PART = r"(?P<source>[^\s/]+)/(?P<partition>\S+)"


def _placed(state: ScenarioState, item: Item, same: str | None) -> None:
    state.add([item], "in the same batch" if same else "in one batch")


@when(rf"source (?P<source>\S+) is registered with (?P<count>\S+) partitions?{_SAME}")
def source_registered(state: ScenarioState, source: str, count: str, same: str | None) -> None:
    """F064-R2: register_source(S, N) (a re-registration resizes the source)."""
    _placed(state, Item("register_source", source=parse_time(source), count=parse_time(count)), same)


@when(rf"these watermarks arrive {_WHERE}:")
def watermarks_arrive(state: ScenarioState, where: str, datatable: DataTable | None = None) -> None:
    """When these watermarks arrive in one batch: | source | partition | time |"""
    header, rows = _table_dicts(datatable, "these watermarks arrive")
    _check_columns(header, {"source", "partition", "time"}, "these watermarks arrive")
    state.add([_item_from_row(r, "watermark") for r in rows], where)


@when(rf"partition {_PART} reports watermark (?P<time>.+?){_SAME}")
def partition_reports(state: ScenarioState, source: str, partition: str, time: str, same: str | None) -> None:
    """A ``watermark`` item: partition S/P reports a watermark of its own (F064)."""
    item = Item(
        "watermark", source=parse_time(source), partition=parse_time(partition), time=parse_time(time)
    )
    _placed(state, item, same)


_PARTITION_ACTIONS = {
    "marked idle": "idle",
    "marked active": "active",
    "added": "add_partition",
    "removed": "remove_partition",
}


@when(rf"partition {_PART} is (?P<action>marked idle|marked active|added|removed){_SAME}")
def partition_action(
    state: ScenarioState, source: str, partition: str, action: str, same: str | None
) -> None:
    """An ``idle``, ``active``, ``add_partition`` or ``remove_partition`` item for partition S/P."""
    item = Item(_PARTITION_ACTIONS[action], source=parse_time(source), partition=parse_time(partition))
    _placed(state, item, same)


@when(rf"partition {_PART} is assigned to core (?P<core>\S+?){_SAME}")
def partition_assigned(
    state: ScenarioState, source: str, partition: str, core: str, same: str | None
) -> None:
    """An ``assign_core`` item: partition S/P moves to core C (F064 rebalancing)."""
    item = Item(
        "assign_core", source=parse_time(source), partition=parse_time(partition), core=parse_time(core)
    )
    _placed(state, item, same)


# ---- Then: comparing tables -------------------------------------------------


def _fail(message: str, state: ScenarioState | None, row: tuple[int, int] | None = None) -> NoReturn:
    """Fails the step without a traceback. ``row``: (index, count) of the first expected row
    the answer lacks, which the pytest plugin turns into that row's line of the feature file."""
    import pytest

    __tracebackhide__ = True
    if state is not None and state.area is not None and state.direct is None:
        message += f"\n\ntrace (engine {state.engine_name}):\n{state.trace().describe()}"
    failure = pytest.fail.Exception(message, pytrace=False)
    failure.expected_row = row  # type: ignore[attr-defined]
    raise failure


def first_missing_row(expected: Sequence[Any], actual: Sequence[Any]) -> int | None:
    """Index of the first expected row that the actual rows (as a multiset) do not hold."""
    left = list(actual)
    for i, row in enumerate(expected):
        if row not in left:
            return i
        left.remove(row)
    return None


def side_by_side(
    columns: Sequence[str], expected: Sequence[tuple[Any, ...]], actual: Sequence[tuple[Any, ...]]
) -> str:
    """Expected and actual as two tables next to each other; '≠' marks rows that differ."""
    left = format_table(columns, expected).splitlines()
    right = format_table(columns, actual).splitlines()
    width = max(len(x) for x in left)
    lines = [f"{'expected'.ljust(width)}     actual"]
    for i in range(max(len(left), len(right))):
        l_line = left[i] if i < len(left) else ""
        r_line = right[i] if i < len(right) else ""
        differs = i > 0 and (i > len(expected) or i > len(actual) or expected[i - 1] != actual[i - 1])
        lines.append(f"{l_line.ljust(width)}  {'≠' if differs else ' '}  {r_line}")
    return "\n".join(lines)


def _sort_key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((v is not None, v) for v in row)


def assert_rows(
    what: str,
    columns: Sequence[str],
    expected: Sequence[tuple[Any, ...]],
    actual: Sequence[tuple[Any, ...]],
    state: ScenarioState | None,
) -> None:
    """Equal as lists, or as multisets (then row order is not a claim of the step)."""
    __tracebackhide__ = True
    expected, actual = list(expected), list(actual)
    if expected == actual or sorted(expected, key=_sort_key) == sorted(actual, key=_sort_key):
        return
    where = ""
    if state is not None and state.batches:
        where = f" (engine {state.engine_name}, after batch {state.last_batch})"
    missing = first_missing_row(expected, actual)
    _fail(
        f"{what}{where}: expected and actual differ\n{side_by_side(columns, expected, actual)}",
        state,
        None if missing is None else (missing, len(expected)),
    )


def expect_table(
    state: ScenarioState, datatable: DataTable | None, step: str, allowed: Sequence[str]
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Parses an expected table whose header is a subset of ``allowed`` columns."""
    if not datatable:
        raise StepUsageError(f"step {step!r} needs a table")
    header = [h.strip() for h in datatable[0]]
    _check_columns(header, set(allowed), step)

    def typed(row: Sequence[str]) -> tuple[Any, ...]:
        return tuple(parse_expected_cell(c, v, state.area) for c, v in zip(header, row, strict=True))

    return header, [typed(r) for r in datatable[1:]]


def project(
    columns: Sequence[str], rows: Iterable[tuple[Any, ...]], header: Sequence[str]
) -> list[tuple[Any, ...]]:
    idx = [list(columns).index(h) for h in header]
    return [tuple(r[i] for i in idx) for r in rows]


def _compare_table(
    state: ScenarioState,
    table: str,
    datatable: DataTable | None,
    step: str,
    where: Callable[[dict[str, Any]], bool] = lambda r: True,
) -> None:
    __tracebackhide__ = True
    columns, rows = state.table(table)
    header, expected = expect_table(state, datatable, step, columns)
    selected = [r for r in rows if where(dict(zip(columns, r, strict=True)))]
    assert_rows(f"Then {step.rstrip(':')}", header, expected, project(columns, selected, header), state)


# -- current key state, global watermark, metrics (engine output or direct view)


# The progress column that holds each area's stream-wide watermark.
WATERMARK_COLUMN = {"keyed_watermarks": "global_watermark", "partitioned_watermarks": "combined_watermark"}


def _require(state: ScenarioState, area: str, step: str) -> None:
    """Area-specific Then steps refuse other areas (the shared ones dispatch by area)."""
    got = state.require_area() if state.direct is None else getattr(state.direct, "area", area)
    if got != area:
        raise StepUsageError(f"step {step!r} belongs to area {area!r}; this scenario is {got!r}")


class OutputView:
    """What Then steps read from an engine's output tables, by the trace's area."""

    def __init__(self, state: ScenarioState) -> None:
        self.state = state

    def key_states(self) -> dict[str, tuple[int | None, str]]:
        """The current keys, folded from the ``keys`` change table (F065-R22)."""
        columns, rows = self.state.table("keys")
        current: dict[str, tuple[int | None, str]] = {}
        for row in sorted(rows, key=lambda r: r[0]):  # by batch; one row per key per batch
            r = dict(zip(columns, row, strict=True))
            if r["state"] in ("removed", "sketched"):  # F065-R35: a sketched key has no exact state
                current.pop(r["key"], None)
            else:
                current[r["key"]] = (r["watermark"], r["state"])
        return current

    def _last_progress(self) -> dict[str, Any]:
        columns, rows = self.state.table("progress")
        last = self.state.last_batch
        mine = [dict(zip(columns, r, strict=True)) for r in rows if r[0] == last]
        if len(mine) != 1:
            _fail(f"expected one progress row for batch {last}, got {len(mine)}", self.state)
        return mine[0]

    def global_watermark(self) -> int | None:
        return self._last_progress()[WATERMARK_COLUMN[self.state.require_area()]]

    def metrics(self) -> dict[str, int]:
        """The last progress row but its batch and watermark (an area without a stream-wide
        watermark, exactly-once aggregation, has only counters there)."""
        column = WATERMARK_COLUMN.get(self.state.require_area())
        return {k: v for k, v in self._last_progress().items() if k not in ("batch", column)}

    def partition_states(self) -> dict[tuple[int, int], tuple[int | None, str, int | None]]:
        """F064: the current partitions, folded from the ``partitions`` change table (F064-R21)."""
        columns, rows = self.state.table("partitions")
        current: dict[tuple[int, int], tuple[int | None, str, int | None]] = {}
        for row in sorted(rows, key=lambda r: r[0]):  # by batch; one row per partition per batch
            r = dict(zip(columns, row, strict=True))
            p = (r["source"], r["partition"])
            if r["state"] == "removed":
                current.pop(p, None)
            else:
                current[p] = (r["watermark"], r["state"], r["core"])
        return current

    def source_states(self) -> dict[int, tuple[int | None, int]]:
        """F064: the registered sources, folded from the ``sources`` change table (F064-R21)."""
        columns, rows = self.state.table("sources")
        current: dict[int, tuple[int | None, int]] = {}
        for row in sorted(rows, key=lambda r: r[0]):
            r = dict(zip(columns, row, strict=True))
            current[r["source"]] = (r["watermark"], r["active_partitions"])
        return current


def view(state: ScenarioState) -> Any:
    """The engine output (OutputView) or an object-API view (oracle-only scenarios)."""
    return state.direct if state.direct is not None else OutputView(state)


@then(r"the key watermarks are:")
def key_watermarks_are(state: ScenarioState, datatable: DataTable | None = None) -> None:
    """| key | watermark | [state |]: every tracked key, none other (untracked keys are absent)."""
    _require(state, "keyed_watermarks", "the key watermarks are:")
    current = view(state).key_states()
    allowed = ("key", "watermark", "state")
    header, expected = expect_table(state, datatable, "the key watermarks are:", allowed)
    actual_full = [(k, wm, st) for k, (wm, st) in sorted(current.items())]
    actual = project(("key", "watermark", "state"), actual_full, header)
    assert_rows("Then the key watermarks are", header, expected, actual, state)


@then(rf"key {_KEY} is not tracked")
def key_not_tracked(state: ScenarioState, key: str) -> None:
    """The key is absent from the current keys (folded from the ``keys`` change table)."""
    current = view(state).key_states()
    k = parse_key(key)
    if k in current:
        wm, st = current[k]
        _fail(f"key {k!r} is tracked (watermark {wm}, {st}); expected it untracked", state)


@then(r"the (?P<noun>global|combined) watermark is (?P<value>.+)")
def global_watermark_is(state: ScenarioState, noun: str, value: str) -> None:
    """F065 says global, F064 says combined: the stream-wide watermark after the last batch."""
    column = f"{noun}_watermark"
    expected = parse_expected_cell(column, value)
    actual = view(state).global_watermark()
    if expected != actual:
        assert_rows(f"Then the {noun} watermark is", [column], [(expected,)], [(actual,)], state)


@then(r"the partition watermarks are:")
def partition_watermarks_are(state: ScenarioState, datatable: DataTable | None = None) -> None:
    """| source | partition | watermark [| state] [| core] |: every tracked partition, none other."""
    _require(state, "partitioned_watermarks", "the partition watermarks are:")
    current = view(state).partition_states()
    allowed = ("source", "partition", "watermark", "state", "core")
    header, expected = expect_table(state, datatable, "the partition watermarks are:", allowed)
    full = [(s, p, wm, st, core) for (s, p), (wm, st, core) in sorted(current.items())]
    assert_rows("Then the partition watermarks are", header, expected, project(allowed, full, header), state)


@then(rf"partition {_PART} is not tracked")
def partition_not_tracked(state: ScenarioState, source: str, partition: str) -> None:
    """Partition S/P is absent from the current partitions (folded from the change table)."""
    _require(state, "partitioned_watermarks", "partition S/P is not tracked")
    p = (parse_time(source), parse_time(partition))
    current = view(state).partition_states()
    if p in current:
        wm, st, core = current[p]
        _fail(
            f"partition {p[0]}/{p[1]} is tracked (watermark {wm}, {st}, core {core}); expected untracked",
            state,
        )


@then(r"the source watermarks are:")
def source_watermarks_are(state: ScenarioState, datatable: DataTable | None = None) -> None:
    """| source | watermark [| active_partitions] |: every registered source, none other."""
    _require(state, "partitioned_watermarks", "the source watermarks are:")
    current = view(state).source_states()
    allowed = ("source", "watermark", "active_partitions")
    header, expected = expect_table(state, datatable, "the source watermarks are:", allowed)
    full = [(s, wm, n) for s, (wm, n) in sorted(current.items())]
    assert_rows("Then the source watermarks are", header, expected, project(allowed, full, header), state)


@then(r"the metrics are:")
def metrics_are(state: ScenarioState, datatable: DataTable | None = None) -> None:
    """| metric | value |: the metrics after the last batch (any subset)."""
    metrics = view(state).metrics()
    header, rows = _table_dicts(datatable, "the metrics are:")
    if header != ["metric", "value"]:
        raise StepUsageError(f"the metrics table has columns | metric | value |, got {header}")
    unknown = [r["metric"].strip() for r in rows if r["metric"].strip() not in metrics]
    if unknown:
        raise StepUsageError(f"unknown metrics {unknown}; known: {sorted(metrics)}")
    expected = [(r["metric"].strip(), parse_expected_cell("value", r["value"])) for r in rows]
    actual = [(m, metrics[m]) for m, _ in expected]
    assert_rows("Then the metrics are", ["metric", "value"], expected, actual, state)


@then(r"the progress is:")
def progress_is(state: ScenarioState, datatable: DataTable | None = None) -> None:
    """| batch | global_watermark | ... |: one row per batch so far, chosen columns."""
    _compare_table(state, "progress", datatable, "the progress is:")


_BATCH_SCOPE = r"(?: in (?P<scope>the last batch|batch (?P<n>\d+)))?"


def _in_scope(state: ScenarioState, scope: str | None, n: str | None) -> Callable[[dict[str, Any]], bool]:
    if scope is None:
        return lambda r: True
    b = state.last_batch if n is None else int(n)
    return lambda r: r["batch"] == b


@then(rf"the verdicts{_BATCH_SCOPE} are:")
def verdicts_are(
    state: ScenarioState, scope: str | None, n: str | None, datatable: DataTable | None = None
) -> None:
    """| key | event_time | verdict |: the events (all, or of one batch) in arrival order."""
    title = f"the verdicts in {scope} are" if scope else "the verdicts are"
    _compare_table(state, "events", datatable, title, _in_scope(state, scope, n))


@then(rf"the event of key {_KEY} at (?P<time>.+?) ms is (?P<verdict>on time|late|rejected)")
def event_verdict(state: ScenarioState, key: str, time: str, verdict: str) -> None:
    """The latest event of that key and time so far has this verdict."""
    columns, rows = state.table("events")
    k, t = parse_key(key), parse_time(time)
    mine = [
        r
        for r in (dict(zip(columns, row, strict=True)) for row in rows)
        if r["key"] == k and r["event_time"] == t
    ]
    if not mine:
        _fail(f"no event of key {k!r} at {t} in the output", state)
    last = max(mine, key=lambda r: (r["batch"], r["seq"]))
    want = verdict.replace(" ", "_")
    if last["verdict"] != want:
        cols = list(columns)
        expected = [tuple({**last, "verdict": want}[c] for c in cols)]
        assert_rows(
            f"Then the event of key {k} at {t} ms is {verdict}",
            cols,
            expected,
            [tuple(last[c] for c in cols)],
            state,
        )


@then(rf"the messages{_BATCH_SCOPE} are:")
def messages_are(
    state: ScenarioState, scope: str | None, n: str | None, datatable: DataTable | None = None
) -> None:
    """| batch | seq | producer | partition | sequence | key | verdict |: the ``messages`` table
    (all of it, or one batch), any subset of its columns; ``outside window`` reads as
    ``outside_window`` (OXE-R3)."""
    title = f"the messages in {scope} are" if scope else "the messages are"
    _compare_table(state, "messages", datatable, title, _in_scope(state, scope, n))


@then(rf"the aggregates{_BATCH_SCOPE} are:")
def aggregates_are(
    state: ScenarioState, scope: str | None, n: str | None, datatable: DataTable | None = None
) -> None:
    """| batch | key | kind | value | count |: the ``aggregates`` table (all of it, or one
    batch), any subset of its columns; ``value`` is the text of a double (OXE-R17)."""
    title = f"the aggregates in {scope} are" if scope else "the aggregates are"
    _compare_table(state, "aggregates", datatable, title, _in_scope(state, scope, n))


@then(r"the aggregate values are:")
def aggregate_values_are(state: ScenarioState, datatable: DataTable | None = None) -> None:
    """| key | kind | value | count |: every key's value after the last batch (its latest
    ``aggregates`` row, OXE-R18), every key that has one and none other."""
    _require(state, "exactly_once_aggregation", "the aggregate values are:")
    columns, rows = state.table("aggregates")
    latest = {r[1]: r for r in sorted(rows, key=lambda r: r[0])}  # by batch; one row per key and batch
    allowed = columns[1:]  # all but the batch
    header, expected = expect_table(state, datatable, "the aggregate values are:", allowed)
    actual = project(columns, [latest[k] for k in sorted(latest)], header)
    assert_rows("Then the aggregate values are", header, expected, actual, state)


@then(rf"the pairs{_BATCH_SCOPE} are:")
def pairs_are(
    state: ScenarioState, scope: str | None, n: str | None, datatable: DataTable | None = None
) -> None:
    """| batch | seq | key | left_time | right_time | ...: window joins' ``pairs`` table (all of
    it, or one batch), any subset of its columns (OXJ-R3)."""
    title = f"the pairs in {scope} are" if scope else "the pairs are"
    _compare_table(state, "pairs", datatable, title, _in_scope(state, scope, n))


@then(rf"the late events{_BATCH_SCOPE} are:")
def late_events_are(
    state: ScenarioState, scope: str | None, n: str | None, datatable: DataTable | None = None
) -> None:
    """| batch | seq | side | key | event_time | watermark |: the area's ``late`` table (all of
    it, or one batch), any subset of its columns."""
    title = f"the late events in {scope} are" if scope else "the late events are"
    _compare_table(state, "late", datatable, title, _in_scope(state, scope, n))


@then(r"these windows fire in batch (?P<n>\d+):")
def windows_fire_in(state: ScenarioState, n: str, datatable: DataTable | None = None) -> None:
    """| key | window_start | window_end | count | sum |: exactly the windows of batch n."""
    b = int(n)
    title = f"these windows fire in batch {b}"
    _compare_table(state, "windows", datatable, title, lambda r: r["batch"] == b)


@then(r"the windows are:")
def windows_are(state: ScenarioState, datatable: DataTable | None = None) -> None:
    """| batch | key | window_start | window_end | count | sum |: every fired window so far."""
    _compare_table(state, "windows", datatable, "the windows are:")


@then(r"no windows fire(?: in batch (?P<n>\d+))?")
def no_windows(state: ScenarioState, n: str | None) -> None:
    """The ``windows`` table is empty, or has no row of batch N."""
    columns, rows = state.table("windows")
    if n is not None:
        rows = [r for r in rows if r[0] == int(n)]
    if rows:
        assert_rows("Then no windows fire", columns, [], rows, state)


@then(r"the errors are:")
def errors_are(state: ScenarioState, datatable: DataTable | None = None) -> None:
    """| batch | seq | reason |"""
    _compare_table(state, "errors", datatable, "the errors are:")


@then(r"there are no errors")
def no_errors(state: ScenarioState) -> None:
    """The ``errors`` table is empty: no item was malformed."""
    columns, rows = state.table("errors")
    if rows:
        assert_rows("Then there are no errors", columns, [], rows, state)


@then(rf"the key changes{_BATCH_SCOPE} are:")
def key_changes_are(
    state: ScenarioState, scope: str | None, n: str | None, datatable: DataTable | None = None
) -> None:
    """| batch | key | watermark | state |: the raw ``keys`` change table."""
    title = f"the key changes in {scope} are" if scope else "the key changes are"
    _compare_table(state, "keys", datatable, title, _in_scope(state, scope, n))


@then(rf"the (?P<what>partition|source) changes{_BATCH_SCOPE} are:")
def partition_changes_are(
    state: ScenarioState, what: str, scope: str | None, n: str | None, datatable: DataTable | None = None
) -> None:
    """F064: the raw ``partitions`` (| batch | source | partition | watermark | state | core |)
    or ``sources`` (| batch | source | watermark | active_partitions |) change table."""
    title = f"the {what} changes in {scope} are" if scope else f"the {what} changes are"
    _compare_table(state, f"{what}s", datatable, title, _in_scope(state, scope, n))


@then(r"the (?P<name>[a-z_]+) table is:")
def table_is(state: ScenarioState, name: str, datatable: DataTable | None = None) -> None:
    """Any output table of the area (harness/outputs.py), with a subset of its columns:
    the generic form every area understands (shrunk traces are printed with it)."""
    _compare_table(state, name, datatable, f"the {name} table is:")


@then(r"the (?P<name>[a-z_]+) table is empty")
def table_is_empty(state: ScenarioState, name: str) -> None:
    """The named output table of the area has no row."""
    columns, rows = state.table(name)
    if rows:
        assert_rows(f"Then the {name} table is empty", columns, [], rows, state)


@then(r"the configuration is rejected")
def configuration_rejected(state: ScenarioState) -> None:
    """The engine answers the trace with InvalidConfig (TR-6)."""
    result = state.raw_output()
    if not isinstance(result, InvalidConfig):
        got = f"{type(result).__name__}: {result}" if isinstance(result, Exception) else "an output"
        _fail(
            f"expected InvalidConfig for configuration {state.config!r}; the engine "
            f"{state.engine_name} returned {got}",
            state,
        )


@then(r"the configuration is rejected naming (?P<setting>\S+)")
def configuration_rejected_naming(state: ScenarioState, setting: str) -> None:
    """The engine answers the trace with InvalidConfig and its message names the setting (TR-6)."""
    configuration_rejected(state)
    message = str(state.raw_output())
    if setting not in message:
        _fail(f"InvalidConfig for {state.config!r} does not name {setting!r}: {message}", state)


__all__ = [
    "LIBRARY",
    "DirectView",
    "EngineHandle",
    "OutputView",
    "ScenarioState",
    "StepLibrary",
    "StepUsageError",
    "assert_rows",
    "parse_expected_cell",
    "parse_settings",
    "parse_time",
    "side_by_side",
    "traces_of_scenario",
]
