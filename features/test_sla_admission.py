"""SLA admission and backpressure (oxirs): features/sla_admission.feature on every engine.

The shared steps come from harness.steps (installed by features/conftest.py). This module
adds the area's own nouns:

* the agreement: ``SLA admission with these streams:`` (a table, one row per stream, that
  fills the ``streams`` setting), ``the policy is ...`` and ``a load shedder with ...``;
* the stream: bursts (``N events of stream S at T ms arrive ...``) and load reports
  (``the load is reported as cpu 90, memory 40``);
* the outputs: ``the decisions ... are:`` and ``the stream statistics ... are:``, whose
  ``stream``, ``decision`` and ``reason`` columns hold text and ``tokens_left``/``tokens``
  fractions, which the shared table steps would read as milliseconds;
* the object API of the ``@oracle-only`` scenarios (TR-10): ``StreamSlaConfig`` built from a
  mapping, and a ``StreamAdmissionController`` called directly (registering a stream again,
  ``SlaExceeded`` and ``UnregisteredStream``), which no trace can express.
"""

from __future__ import annotations

import re
from typing import Any

from pytest_bdd import scenarios

from harness.steps import (
    LIBRARY,
    DataTable,
    ScenarioState,
    StepUsageError,
    assert_rows,
    parse_key,
    parse_setting_value,
    parse_time,
    project,
)
from harness.traces import InvalidConfig, Item
from reference.sla_admission import (
    SlaExceeded,
    StreamAdmissionController,
    StreamSlaConfig,
    UnregisteredStream,
)

scenarios("sla_admission.feature")

AREA = "sla_admission"
_SAME = r"(?P<same> in the same batch)?"
_SCOPE = r"(?: in (?P<scope>the last batch|batch (?P<n>\d+)))?"
_WHERE = r"(?P<where>in one batch|in the next batch|in the same batch)"
TEXT_COLUMNS = {"stream", "decision", "reason", "answer", "check"}
NULL_CELLS = {"", "-", "none", "null"}


def _expected(column: str, text: str) -> Any:
    """An expected cell: text columns as text, token levels as numbers with decimals,
    every other column as milliseconds or a count."""
    t = text.strip()
    if t.lower() in NULL_CELLS:
        return None
    if column in TEXT_COLUMNS:
        return parse_key(t)
    try:
        return parse_time(t)
    except StepUsageError:
        if column not in ("tokens_left", "tokens"):
            raise
    try:
        return float(t)
    except ValueError:
        raise StepUsageError(f"{t!r} in column {column} is not a number of tokens") from None


def _header(datatable: DataTable | None, step: str, allowed: tuple[str, ...]) -> list[str]:
    if not datatable:
        raise StepUsageError(f"step {step!r} needs a table")
    header = [h.strip() for h in datatable[0]]
    unknown = [h for h in header if h not in allowed]
    if unknown:
        raise StepUsageError(f"{step}: unknown columns {unknown}; allowed: {list(allowed)}")
    return header


def _require_area(state: ScenarioState, step: str) -> None:
    if state.require_area() != AREA:
        raise StepUsageError(f"{step!r} belongs to sla_admission, not {state.area}")


def _pairs(text: str, step: str) -> list[tuple[str, str]]:
    """``seed 1, threshold 700 and max_drop 0`` -> [("seed", "1"), ...]."""
    out = []
    for part in re.split(r",\s*(?:and\s+)?|\s+and\s+", text.strip()):
        name, _, value = part.strip().partition(" ")
        if not name or not value.strip():
            raise StepUsageError(f"{step}: {part!r} is not 'name value'")
        out.append((name, value.strip()))
    return out


# ---- Given: the agreement ---------------------------------------------------------------


@LIBRARY.given(r"SLA admission with these streams:")
def streams_registered(state: ScenarioState, datatable: DataTable | None = None) -> None:
    """| stream | class | max_events_per_sec | max_lag | jitter_budget_ms | token_cost |: the
    ``streams`` setting (OXS-R14), one stream per row. Only ``stream`` is required; any other
    column is a setting of the stream (an unknown one is passed on, to be refused). An empty
    cell leaves the setting out, ``null`` gives it the value null, and every other cell is
    typed as in ``configured with:`` (``Gold``, ``0.5``, ``true``, ``"5"``)."""
    state.start(AREA)
    if not datatable or [h.strip() for h in datatable[0]][:1] != ["stream"]:
        raise StepUsageError("the streams table starts with a 'stream' column")
    header = [h.strip() for h in datatable[0]]
    streams: dict[str, dict[str, Any]] = {}
    for row in datatable[1:]:
        name = parse_key(row[0])
        if name is None or name in streams:
            raise StepUsageError(f"the streams table names stream {row[0]!r} twice or not at all")
        streams[name] = {
            c: parse_setting_value(v) for c, v in zip(header[1:], row[1:], strict=True) if v.strip()
        }
    state.config["streams"] = streams


@LIBRARY.given(r"the policy is (?P<policy>.+)")
def policy_is(state: ScenarioState, policy: str) -> None:
    """The ``policy`` setting (OXS-R13, R14): ``Strict``, ``PreferThrottle`` or ``BypassShedder``."""
    _require_area(state, "the policy is")
    state.config["policy"] = parse_setting_value(policy)


@LIBRARY.given(r"a load shedder with (?:the default settings|(?P<settings>.+))")
def shedder_with(state: ScenarioState, settings: str | None) -> None:
    """The ``shedder`` setting (OXS-R14): ``the default settings``, or ``name value`` pairs
    joined by ``,`` or ``and`` (``seed 1, threshold 700 and max_drop 1000``), values typed
    as in ``configured with:``."""
    _require_area(state, "a load shedder with")
    pairs = _pairs(settings, "a load shedder with") if settings else []
    state.config["shedder"] = {name: parse_setting_value(value) for name, value in pairs}


# ---- When: the stream -------------------------------------------------------------------


@LIBRARY.when(rf"(?P<n>\d+) events of stream (?P<stream>\S+) at (?P<time>.+?) ms arrive {_WHERE}")
def burst_arrives(state: ScenarioState, n: str, stream: str, time: str, where: str) -> None:
    """A burst: N events of the stream, all with this event time, in arrival order (OXS-R8)."""
    _require_area(state, "N events of stream S arrive")
    t = parse_time(time)
    state.add([Item("event", key=parse_key(stream), event_time=t) for _ in range(int(n))], where)


@LIBRARY.when(rf"the load is reported as (?P<metrics>.+?){_SAME}")
def load_reported(state: ScenarioState, metrics: str, same: str | None) -> None:
    """A ``load`` item (OXS-R10, R15): ``cpu 90, memory 40 and latency 5``; metrics left out
    keep their value. Names are passed on as written, so an unknown one is an error row."""
    _require_area(state, "the load is reported as")
    values = tuple((name, parse_time(value)) for name, value in _pairs(metrics, "the load is reported as"))
    state.add([Item("load", metrics=values)], "in the same batch" if same else "in one batch")


# ---- Then: the outputs ------------------------------------------------------------------


def _compare(state: ScenarioState, table: str, title: str, datatable: DataTable | None, scope: Any) -> None:
    __tracebackhide__ = True
    _require_area(state, title)
    columns, rows = state.table(table)
    header = _header(datatable, title, columns)
    assert datatable is not None
    expected = [tuple(_expected(c, v) for c, v in zip(header, r, strict=True)) for r in datatable[1:]]
    if scope is not None:
        rows = [r for r in rows if r[0] == scope]
    assert_rows(f"Then {title}", header, expected, project(columns, rows, header), state)


def _batch(state: ScenarioState, scope: str | None, n: str | None) -> int | None:
    if scope is None:
        return None
    return state.last_batch if n is None else int(n)


@LIBRARY.then(rf"the decisions{_SCOPE} are:")
def decisions_are(
    state: ScenarioState, scope: str | None, n: str | None, datatable: DataTable | None = None
) -> None:
    """| batch | seq | stream | event_time | now | decision | reason | tokens_left | lag |: the
    ``decisions`` table (all of it, or one batch), any subset of its columns (OXS-R17)."""
    title = f"the decisions in {scope} are" if scope else "the decisions are"
    _compare(state, "decisions", title, datatable, _batch(state, scope, n))


@LIBRARY.then(rf"the stream statistics{_SCOPE} are:")
def stream_statistics_are(
    state: ScenarioState, scope: str | None, n: str | None, datatable: DataTable | None = None
) -> None:
    """| batch | stream | admitted | rejected_lag | rejected_jitter | rejected_rate | shed |
    throttled | tokens |: the ``streams`` table (OXS-R17), any subset of its columns: per
    batch, the streams that had events, their counters since the start and their level."""
    title = f"the stream statistics in {scope} are" if scope else "the stream statistics are"
    _compare(state, "streams", title, datatable, _batch(state, scope, n))


# ---- the object API (oracle-only, TR-10) ------------------------------------------------


def _settings(datatable: DataTable | None, step: str) -> dict[str, Any]:
    if not datatable or [h.strip() for h in datatable[0]] != ["setting", "value"]:
        raise StepUsageError(f"{step}: the table has columns | setting | value |")
    return {s.strip(): parse_setting_value(v) for s, v in datatable[1:] if v.strip()}


@LIBRARY.when(r"a StreamSlaConfig is built from:")
def config_built(state: ScenarioState, datatable: DataTable | None = None) -> None:
    """| setting | value |: ``StreamSlaConfig.from_mapping`` (oracle-only); an empty value
    leaves the setting out; the result or the InvalidConfig is kept for the Then steps."""
    settings = _settings(datatable, "a StreamSlaConfig is built from:")
    try:
        state.scratch["built"] = StreamSlaConfig.from_mapping(settings)
    except InvalidConfig as error:
        state.scratch["built"] = error


@LIBRARY.then(r"it is refused with InvalidConfig naming (?P<setting>\S+)")
def config_refused(state: ScenarioState, setting: str) -> None:
    """The StreamSlaConfig was refused with InvalidConfig, and its message names the setting."""
    built = state.scratch.get("built")
    got = (type(built).__name__, isinstance(built, InvalidConfig) and setting in str(built))
    assert_rows(
        f"Then it is refused with InvalidConfig naming {setting} (message: {built})",
        ["outcome", "names the setting"],
        [("InvalidConfig", True)],
        [got],
        None,
    )


def _controller(state: ScenarioState) -> StreamAdmissionController:
    controller = state.scratch.get("controller")
    if not isinstance(controller, StreamAdmissionController):
        raise StepUsageError("start with 'Given a StreamAdmissionController'")
    return controller


@LIBRARY.given(r"a StreamAdmissionController")
def new_controller(state: ScenarioState) -> None:
    """A StreamAdmissionController with no stream registered (oracle-only)."""
    state.scratch["controller"] = StreamAdmissionController()
    state.scratch["answers"] = []


def _register(state: ScenarioState, stream: str, datatable: DataTable | None = None) -> None:
    """| setting | value |: ``register(stream, StreamSlaConfig.from_mapping(...))``; registering
    a stream again replaces its configuration and starts it afresh (OXS-R2)."""
    settings = _settings(datatable, "stream S is registered with:")
    _controller(state).register(parse_key(stream) or "", StreamSlaConfig.from_mapping(settings))


_REGISTER = r"stream (?P<stream>\S+) is registered(?: again)? with:"
LIBRARY.given(_REGISTER)(_register)
LIBRARY.when(_REGISTER)(_register)

ANSWER_COLUMNS = ("stream", "event_ts", "now", "answer", "check", "tokens_left", "lag")


@LIBRARY.when(r"the controller is asked to admit these events:")
def controller_admits(state: ScenarioState, datatable: DataTable | None = None) -> None:
    """| stream | event_ts | now |: calls ``try_admit`` per row, in order; each answer (Admit,
    SlaExceeded or UnregisteredStream) is kept for the Then steps."""
    if not datatable or [h.strip() for h in datatable[0]] != ["stream", "event_ts", "now"]:
        raise StepUsageError("the events have columns | stream | event_ts | now |")
    controller = _controller(state)
    for stream_cell, ts_cell, now_cell in datatable[1:]:
        stream, ts, now = parse_key(stream_cell) or "", parse_time(ts_cell), parse_time(now_cell)
        answer: tuple[Any, ...]
        try:
            admit = controller.try_admit(stream, ts, now)
            answer = (stream, ts, now, "Admit", None, admit.tokens_left, admit.lag_ms, "")
        except SlaExceeded as e:
            answer = (stream, ts, now, "SlaExceeded", e.check, None, e.lag_ms, str(e))
        except UnregisteredStream as e:
            answer = (stream, ts, now, "UnregisteredStream", None, None, None, str(e))
        state.scratch["answers"].append(answer)


@LIBRARY.then(r"the controller's answers are:")
def controller_answers(state: ScenarioState, datatable: DataTable | None = None) -> None:
    """| stream | event_ts | now | answer | check | tokens_left | lag |: every answer so far, in
    order, any subset of the columns; ``answer`` is Admit, SlaExceeded or UnregisteredStream,
    ``check`` the failed check of an SlaExceeded (OXS-R9)."""
    header = _header(datatable, "the controller's answers are:", ANSWER_COLUMNS)
    assert datatable is not None
    expected = [tuple(_expected(c, v) for c, v in zip(header, r, strict=True)) for r in datatable[1:]]
    got = project(ANSWER_COLUMNS, [a[:-1] for a in state.scratch.get("answers", [])], header)
    assert_rows("Then the controller's answers are", header, expected, got, None)


@LIBRARY.then(r'answer (?P<index>\d+) says "(?P<message>[^"]*)"')
def answer_says(state: ScenarioState, index: str, message: str) -> None:
    """The message of the answer at this position (from 0) is exactly this text."""
    answers = state.scratch.get("answers", [])
    i = int(index)
    if i >= len(answers):
        raise StepUsageError(f"there are {len(answers)} answers; no answer {i}")
    assert_rows(f"Then answer {i} says", ["message"], [(message,)], [(answers[i][-1],)], None)


STATISTICS = ("admitted", "rejected_lag", "rejected_jitter", "rejected_rate", "shed", "throttled")


@LIBRARY.then(r"the statistics of stream (?P<stream>\S+) are:")
def statistics_of(state: ScenarioState, stream: str, datatable: DataTable | None = None) -> None:
    """| admitted | rejected_lag | rejected_jitter | rejected_rate | shed | throttled |: the
    controller's counters of the stream since its registration (OXS-R9)."""
    header = _header(datatable, "the statistics of stream S are:", STATISTICS)
    assert datatable is not None
    stats = vars(_controller(state).stats(parse_key(stream) or ""))
    expected = [tuple(_expected(c, v) for c, v in zip(header, r, strict=True)) for r in datatable[1:]]
    assert_rows(
        f"Then the statistics of stream {stream} are",
        header,
        expected,
        [tuple(stats[c] for c in header)],
        None,
    )


@LIBRARY.then(r"the controller's streams are (?P<names>.+)")
def controller_streams(state: ScenarioState, names: str) -> None:
    """The streams the controller knows, comma-separated, in registration order."""
    expected = [n.strip() for n in names.split(",") if n.strip()]
    got = list(_controller(state).streams)
    assert_rows("Then the controller's streams are", ["streams"], [(expected,)], [(got,)], None)


LIBRARY.bind(globals(), owner=__name__)
