"""F064 per-partition watermarks: features/partitioned_watermarks.feature on every engine.

The shared steps come from harness.steps (installed by features/conftest.py).
This module adds the steps of the object API (``PartitionedWatermarkTracker``,
``CoreWatermarkState``, ``collect_watermarks``) used by the ``@oracle-only``
scenarios: calls with no streaming meaning (TR-10), run on the reference only.
"""

from __future__ import annotations

from typing import Any

from pytest_bdd import scenarios

from harness.steps import (
    LIBRARY,
    DataTable,
    ScenarioState,
    StepUsageError,
    assert_rows,
    parse_settings,
    parse_time,
)
from harness.traces import InvalidConfig
from reference.partitioned_watermarks import (
    CoreWatermarkState,
    InvalidPartition,
    PartitionedWatermarkTracker,
    PartitionId,
    PartitionWatermarkState,
    SourceNotFound,
    UnknownPartition,
    collect_watermarks,
)

scenarios("partitioned_watermarks.feature")

_PART = r"(?P<source>[^\s/]+)/(?P<partition>\S+)"
_ERRORS = {
    "SourceNotFound": SourceNotFound,
    "UnknownPartition": UnknownPartition,
    "InvalidPartition": InvalidPartition,
    "InvalidConfig": InvalidConfig,
}


class _Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


class TrackerView:
    """The direct view Then steps read in object-API scenarios (see harness.steps.OutputView)."""

    area = "partitioned_watermarks"

    def __init__(self, tracker: PartitionedWatermarkTracker) -> None:
        self.tracker = tracker
        self.cores: dict[int, CoreWatermarkState] = {}

    def partition_states(self) -> dict[tuple[int, int], tuple[int | None, str, int | None]]:
        return {
            (p.source_id, p.partition): (s.watermark, "idle" if s.is_idle else "active", s.assigned_core)
            for p, s in self.tracker.partitions.items()
        }

    def source_states(self) -> dict[int, tuple[int | None, int]]:
        t = self.tracker
        return {s: (t.source_watermark(s), t.active_partition_count(s)) for s in t.sources}

    def global_watermark(self) -> int | None:
        return self.tracker.current_watermark()

    def metrics(self) -> dict[str, int]:
        return dict(vars(self.tracker.metrics()))


def _view(state: ScenarioState) -> TrackerView:
    if not isinstance(state.direct, TrackerView):
        raise StepUsageError("start with 'Given a PartitionedWatermarkTracker with ...'")
    return state.direct


def _pid(source: str, partition: str) -> PartitionId:
    return PartitionId(parse_time(source), parse_time(partition))


def _call(state: ScenarioState, fn: Any, *args: Any) -> None:
    try:
        state.scratch["result"] = ("returned", fn(*args))
    except (SourceNotFound, UnknownPartition, InvalidPartition, InvalidConfig) as e:
        state.scratch["result"] = ("raised", e)


def _answer(text: str) -> Any:
    t = text.strip()
    if t.lower() in ("none", "-"):
        return None
    if t.lower() in ("true", "false"):
        return t.lower() == "true"
    return parse_time(t)


# ---- the tracker ------------------------------------------------------------


@LIBRARY.given(r"a PartitionedWatermarkTracker with (?P<settings>.+)")
def tracker_with(state: ScenarioState, settings: str) -> None:
    """Only the tracker's own setting (idle timeout); the clock starts at 0."""
    config = parse_settings(settings)
    unknown = set(config) - {"idle_timeout"}
    if unknown:
        raise StepUsageError(f"the tracker takes only an idle timeout, got {sorted(unknown)}")
    state.scratch["clock"] = clock = _Clock()
    state.direct = TrackerView(PartitionedWatermarkTracker(clock, **config))


@LIBRARY.when(r"the tracker clock is at (?P<time>.+?) ms")
def tracker_clock(state: ScenarioState, time: str) -> None:
    """Sets the tracker's clock (it starts at 0 and moves only here)."""
    _view(state)
    state.scratch["clock"].now = parse_time(time)


@LIBRARY.when(r"the tracker registers source (?P<source>\S+) with (?P<count>\S+) partitions?")
def tracker_register(state: ScenarioState, source: str, count: str) -> None:
    """Calls ``register_source(source, count)``; the result or the error is kept."""
    _call(state, _view(state).tracker.register_source, parse_time(source), parse_time(count))


@LIBRARY.when(rf"the tracker updates partition {_PART} to (?P<wm>.+?) ms")
def tracker_update(state: ScenarioState, source: str, partition: str, wm: str) -> None:
    """Calls ``update_partition(S/P, watermark)``."""
    _call(state, _view(state).tracker.update_partition, _pid(source, partition), parse_time(wm))


@LIBRARY.when(
    rf"the tracker updates partition {_PART} from an event at (?P<t>.+?) ms "
    r"with a max lateness of (?P<lateness>.+?) ms"
)
def tracker_update_from_event(
    state: ScenarioState, source: str, partition: str, t: str, lateness: str
) -> None:
    """Calls ``update_partition_from_event(S/P, event_time, max_lateness)``."""
    tracker = _view(state).tracker
    _call(
        state,
        tracker.update_partition_from_event,
        _pid(source, partition),
        parse_time(t),
        parse_time(lateness),
    )


@LIBRARY.when(rf"the tracker marks partition {_PART} (?P<mark>idle|active)")
def tracker_mark(state: ScenarioState, source: str, partition: str, mark: str) -> None:
    """Calls ``mark_partition_idle`` or ``mark_partition_active`` on S/P."""
    t = _view(state).tracker
    fn = t.mark_partition_idle if mark == "idle" else t.mark_partition_active
    _call(state, fn, _pid(source, partition))


@LIBRARY.when(rf"the tracker (?P<action>adds|removes) partition {_PART}")
def tracker_add_remove(state: ScenarioState, action: str, source: str, partition: str) -> None:
    """Calls ``add_partition`` or ``remove_partition`` on S/P."""
    t = _view(state).tracker
    _call(state, t.add_partition if action == "adds" else t.remove_partition, _pid(source, partition))


@LIBRARY.when(rf"the tracker assigns partition {_PART} to core (?P<core>\S+)")
def tracker_assign(state: ScenarioState, source: str, partition: str, core: str) -> None:
    """Calls ``assign_partition_to_core(S/P, core)``."""
    _call(state, _view(state).tracker.assign_partition_to_core, _pid(source, partition), parse_time(core))


@LIBRARY.when(r"the tracker checks idle partitions")
def tracker_check_idle(state: ScenarioState) -> None:
    """Calls ``check_idle_partitions()`` at the tracker's clock."""
    _call(state, _view(state).tracker.check_idle_partitions)


@LIBRARY.then(r"the result is (?P<value>.+)")
def result_is(state: ScenarioState, value: str) -> None:
    """none, a number, or 'a partition state with watermark N' (what remove_partition returns)."""
    kind, got = state.scratch["result"]
    actual: Any = got if kind == "returned" else f"raised {type(got).__name__}: {got}"
    prefix = "a partition state with watermark "
    if value.startswith(prefix):
        expected: Any = f"partition state, watermark {_answer(value.removeprefix(prefix))}"
        if isinstance(got, PartitionWatermarkState):
            actual = f"partition state, watermark {got.watermark}"
    else:
        expected = _answer(value)
    assert_rows("Then the result is", ["result"], [(expected,)], [(actual,)], None)


@LIBRARY.then(r"the call raises (?P<error>SourceNotFound|UnknownPartition|InvalidPartition|InvalidConfig)")
def call_raises(state: ScenarioState, error: str) -> None:
    """The last tracker call raised this error."""
    kind, got = state.scratch["result"]
    if kind == "raised" and isinstance(got, _ERRORS[error]):
        return
    actual = f"raised {type(got).__name__}: {got}" if kind == "raised" else f"returned {got!r}"
    assert_rows("Then the call raises", ["error"], [(error,)], [(actual,)], None)


_QUERIES = {
    "current_watermark": lambda t, a: t.current_watermark(),
    "partition_watermark": lambda t, a: t.partition_watermark(_pid(*a.split("/"))),
    "is_partition_idle": lambda t, a: t.is_partition_idle(_pid(*a.split("/"))),
    "partition_core": lambda t, a: t.partition_core(_pid(*a.split("/"))),
    "source_watermark": lambda t, a: t.source_watermark(parse_time(a)),
    "active_partition_count": lambda t, a: t.active_partition_count(parse_time(a)),
}


@LIBRARY.then(r"the queries answer:")
def queries_answer(state: ScenarioState, datatable: DataTable | None = None) -> None:
    """| query | argument | answer |: the tracker's read-only calls (argument S/P or S)."""
    if not datatable or [h.strip() for h in datatable[0]] != ["query", "argument", "answer"]:
        raise StepUsageError("the queries table has columns | query | argument | answer |")
    t = _view(state).tracker
    expected, actual = [], []
    for query, argument, answer in datatable[1:]:
        q, a = query.strip(), argument.strip()
        if q not in _QUERIES:
            raise StepUsageError(f"unknown query {q!r}; known: {sorted(_QUERIES)}")
        try:
            got: Any = _QUERIES[q](t, a)
        except Exception as e:  # noqa: BLE001 - F064-R15: queries never raise; show it
            got = f"raised {type(e).__name__}"
        expected.append((q, a, _answer(answer)))
        actual.append((q, a, got))
    assert_rows("Then the queries answer", ["query", "argument", "answer"], expected, actual, None)


# ---- cores (F064-R18, R19) --------------------------------------------------


@LIBRARY.when(r"the cores are built from the tracker's core assignments")
def cores_from_tracker(state: ScenarioState) -> None:
    """One CoreWatermarkState per core named by assign_partition_to_core, with its partitions."""
    view = _view(state)
    view.cores = {}
    for p, s in sorted(view.tracker.partitions.items()):
        if s.assigned_core is not None:
            view.cores.setdefault(
                s.assigned_core, CoreWatermarkState(s.assigned_core)
            ).assigned_partitions.append(p)


@LIBRARY.when(r"these watermarks are reported to the tracker and to the cores:")
def report_to_both(state: ScenarioState, datatable: DataTable | None = None) -> None:
    """| source | partition | watermark |: update_partition on the tracker and on the
    partition's core (if it has one), row by row."""
    view = _view(state)
    if not datatable or [h.strip() for h in datatable[0]] != ["source", "partition", "watermark"]:
        raise StepUsageError("the table has columns | source | partition | watermark |")
    for source, partition, wm in datatable[1:]:
        p = _pid(source, partition)
        view.tracker.update_partition(p, parse_time(wm))
        core = view.tracker.partition_core(p)
        if core is not None:
            view.cores[core].update_partition(p, parse_time(wm))


@LIBRARY.when(rf"core (?P<core>\S+) updates partition {_PART} to (?P<wm>.+?) ms")
def core_update(state: ScenarioState, core: str, source: str, partition: str, wm: str) -> None:
    """Calls ``update_partition(S/P, watermark)`` on one core built before."""
    view = _view(state)
    c = parse_time(core)
    if c not in view.cores:
        raise StepUsageError(f"no core {c}; build the cores first")
    _call(state, view.cores[c].update_partition, _pid(source, partition), parse_time(wm))


@LIBRARY.then(r"the local watermarks of the cores are:")
def local_watermarks(state: ScenarioState, datatable: DataTable | None = None) -> None:
    """| core | partitions | local_watermark |: partitions written as 0/0 0/1."""
    view = _view(state)
    if not datatable or [h.strip() for h in datatable[0]] != ["core", "partitions", "local_watermark"]:
        raise StepUsageError("the table has columns | core | partitions | local_watermark |")
    expected = [(parse_time(c), " ".join(ps.split()), _answer(w)) for c, ps, w in datatable[1:]]
    actual = [
        (c, " ".join(f"{p.source_id}/{p.partition}" for p in cs.assigned_partitions), cs.local_watermark())
        for c, cs in sorted(view.cores.items())
    ]
    assert_rows(
        "Then the local watermarks of the cores are",
        ["core", "partitions", "local_watermark"],
        expected,
        actual,
        None,
    )


@LIBRARY.then(r"collect_watermarks over the cores returns (?P<value>.+)")
def collect_returns(state: ScenarioState, value: str) -> None:
    """``collect_watermarks`` over the built cores returns this (a number, or none)."""
    actual = collect_watermarks(_view(state).cores.values())
    assert_rows("Then collect_watermarks returns", ["watermark"], [(_answer(value),)], [(actual,)], None)


LIBRARY.bind(globals(), owner=__name__)
