"""One trace, one answer, however Spark lays out the work (spec/traces.md TR-18).

The session's Spark pre-run answers every trace at the suites' layout: 2 shuffle partitions,
each area's ``ENGINE_BUCKETS`` buckets, Spark's default Arrow chunks and one input partition,
no restart but those a trace names. Here the scenarios' traces run again on a ``SparkEngine``
with one factor of that layout changed (``LAYOUTS``), all areas in one ``engine.run`` call, and
every table of every trace must equal the pre-run's answer, row for row. The pre-run's answers
are the scenarios' own, which the scenarios compare with the oracle, so an answer that changes
with a layout fails here even where the oracle was never asked about that layout.

| profile | layouts |
|---|---|
| ci, dev | chunks of one row: every group reaches its operator one row at a time |
| thorough | every layout of ``LAYOUTS`` |

Chunks of one row are the test job's layout because the pre-run itself runs at Spark's default
of 10,000 rows, where almost every group of a trace arrives as one chunk: without this run the
code that joins a group's chunks would go untried in the test job.

The traces: each selected scenario's trace with at most ``MOST_BATCHES`` batches and, for the
restart layout, with restart points after every batch. A trace with restart points of its own
is left to TR-5's tests (a query of this run restarts wherever any of its traces asks). Only
Spark has a physical layout to change, so the test is ``test_spark_*``.

Where it runs: in a Spark of its own (``spark_impl.engine_child``, at nice 19), started
once the session's pre-run is over (``after_prerun``), so it takes the CPU the serial Spark tests
leave idle; the tests run near the end (properties/conftest.py) and find its answers written.
A process of its own also keeps its settings away from the other tests' queries.

The same traces also run once on a multi-process Spark with one executor killed in the middle of
a task (spec/traces.md TR-17, "A lost executor"; conformance job only): a child on
``local-cluster`` (``spark_impl.testing.lost_executor``) started beside the layout child, and
its answers must equal the pre-run's too.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from harness.hypothesis_profiles import profile_name
from harness.pytest_plugin import prerun_engine, session_scenario_traces
from harness.replay import replaying
from harness.traces import Trace

#: a layout: the SparkEngine settings it changes (TR-18's factors, one at a time), or the restarts
LAYOUTS: dict[str, dict[str, Any]] = {
    "arrow-chunks-of-1-row": {"arrow_chunk_rows": 1},
    "arrow-chunks-of-2-rows": {"arrow_chunk_rows": 2},
    "1-shuffle-partition": {"shuffle_partitions": 1},
    "8-shuffle-partitions": {"shuffle_partitions": 8},
    "1-bucket": {"buckets": 1},
    # "many": the operators' own default at 8 shuffle partitions (scaleout.BUCKETS_PER_PARTITION x 8)
    "32-buckets": {"buckets": 32},
    "3-input-partitions": {"partitions": 3},
    "a-restart-after-every-batch": {},
}
TEST_JOB_LAYOUTS = ("arrow-chunks-of-1-row",)
RESTART_EVERY_BATCH = "a-restart-after-every-batch"
#: traces with more batches make every query of the run as long as they are
MOST_BATCHES = 3


def layouts() -> tuple[str, ...]:
    return tuple(LAYOUTS) if profile_name() == "thorough" else TEST_JOB_LAYOUTS


def layout_traces(config: pytest.Config) -> list[Trace]:
    """The selected scenarios' traces this file runs again: valid or not (a refused config
    must stay refused), at most MOST_BATCHES batches, no restart points of their own."""
    return [
        t for t in session_scenario_traces(config, "spark")
        if not t.restart_after and len(t.batches) <= MOST_BATCHES
    ]  # fmt: skip


def restarted_after_every_batch(trace: Trace) -> Trace:
    return replace(trace, restart_after=frozenset(range(len(trace.batches) - 1)))


def refusal(answer: Any) -> tuple[str, str] | None:
    """A refused trace's error as (type's full name, message); None for an output."""
    from spark_impl.engine_child import Refusal

    if isinstance(answer, Refusal):
        return answer.type_name, answer.message
    if isinstance(answer, BaseException):
        as_seen = Refusal.of(answer)
        return as_seen.type_name, as_seen.message
    return None


def differences(base: Any, got: Any) -> list[str]:
    """What differs between two answers to one trace, table by table (rows as sorted lists)."""
    if refusal(base) is not None or refusal(got) is not None:
        same = refusal(base) == refusal(got)
        return [] if same else [f"answer: {base!r} at the suites' layout, {got!r} here"]
    out = []
    for table in sorted(set(base) | set(got)):
        want, have = sorted(base.get(table, []), key=repr), sorted(got.get(table, []), key=repr)
        if want != have:
            missing = [r for r in want if r not in have][:3]
            extra = [r for r in have if r not in want][:3]
            out.append(f"{table}: {len(want)} rows at the suites' layout, {len(have)} here; "
                       f"missing here {missing}, only here {extra}")  # fmt: skip
    return out


_RUNS: list[Any] = []  # the session's one EngineChild, once started


def start_layout_runs(config: pytest.Config) -> None:
    """Starts the child that answers the layout traces under every layout of this profile."""
    from spark_impl.engine_child import EngineChild
    from spark_impl.testing.faults import child_env

    traces = layout_traces(config)
    if _RUNS or not traces or replaying() is not None:
        return
    work = Path(tempfile.mkdtemp(prefix="layout-runs-"))
    runs = EngineChild(
        work, {name: (LAYOUTS[name], sent_traces(name, traces)) for name in layouts()}, env=child_env(work)
    )
    _RUNS.append(runs)
    atexit.register(lambda: (runs.stop(), shutil.rmtree(work, ignore_errors=True)))


def sent_traces(layout: str, traces: list[Trace]) -> list[Trace]:
    return [restarted_after_every_batch(t) for t in traces] if layout == RESTART_EVERY_BATCH else traces


# properties/conftest.py gives these tests start_layout_runs, with the session's config, as their
# after_prerun function
@pytest.mark.clauses("TR-18")
@pytest.mark.parametrize("layout", layouts())
def test_spark_an_answer_does_not_depend_on_the_layout(layout: str, request: pytest.FixtureRequest) -> None:
    traces = layout_traces(request.config)
    if not traces:
        pytest.fail("no selected scenario has a trace for this run: select a feature file with it")
    base = prerun_engine(request.config, "spark").run(traces)
    start_layout_runs(request.config)  # not started yet when the run began with this test
    done = _RUNS[0].answers(layout)
    failures: list[str] = []
    first: Trace | None = None
    for trace, want, have in zip(traces, base, done.answers, strict=True):
        found = differences(want, have)
        if found:
            failures.append(f"{trace.area} / {trace.name}:\n    " + "\n    ".join(found))
            first = first or trace
    request.node.user_properties += [("traces", len(traces)), ("seconds", done.seconds)]
    assert not failures, (
        f"{len(failures)} of {len(traces)} traces answer differently with {layout} (TR-18):\n"
        + "\n".join(failures[:10])
        + ("" if first is None else f"\nThe first of them, to run alone: {first.describe()}")
    )


# ---- a lost executor (TR-17): the same traces on a multi-process Spark, one executor killed mid-task ----

LOST_EXECUTOR_RUN = "an-executor-lost-mid-task"
LOST_EXECUTOR_TEST = "test_spark_an_executor_lost_mid_task_changes_no_answer"
_LOST: list[tuple[Any, Any]] = []  # the session's lost-executor child and its killer, once started


def start_lost_executor_run(config: pytest.Config) -> None:
    """Starts the child that answers the layout traces on ``local-cluster`` and the thread that
    kills one of its executors once a task runs on it."""
    from spark_impl.engine_child import EngineChild, answers_path
    from spark_impl.testing.faults import child_env
    from spark_impl.testing.lost_executor import ExecutorKiller, lost_executor_env

    traces = layout_traces(config)
    if _LOST or not traces or replaying() is not None:
        return
    work = Path(tempfile.mkdtemp(prefix="lost-executor-"))
    child = EngineChild(work, {LOST_EXECUTOR_RUN: ({}, traces)}, env=lost_executor_env(child_env(work)))
    killer = ExecutorKiller(child.proc.pid, until=answers_path(work, LOST_EXECUTOR_RUN))
    _LOST.append((child, killer))
    atexit.register(lambda: (child.stop(), shutil.rmtree(work, ignore_errors=True)))


# properties/conftest.py gives this test start_lost_executor_run as its after_prerun function
@pytest.mark.clauses("TR-17")
@pytest.mark.conformance_job(
    "none in the test job: it has no multi-process Spark. There test_faults.py kills a whole query "
    "and this file's layout test reruns the work cut otherwise; here the driver lives and Spark "
    "reruns a dead executor's tasks elsewhere (a Spark of its own on local-cluster, minutes of CPU)"
)
def test_spark_an_executor_lost_mid_task_changes_no_answer(request: pytest.FixtureRequest) -> None:
    """On local-cluster (two executors, each a JVM with Python workers of its own), one executor
    is killed with SIGKILL while a Python task runs on it; the query goes on, Spark reruns the
    lost tasks on the other executor, and every table of every trace equals the pre-run's."""
    from spark_impl.engine_child import LOG_FILE
    from spark_impl.testing.lost_executor import LOCAL_CLUSTER, lost_tasks

    traces = layout_traces(request.config)
    if not traces:
        pytest.fail("no selected scenario has a trace for this run: select a feature file with it")
    base = prerun_engine(request.config, "spark").run(traces)
    start_lost_executor_run(request.config)  # not started yet when the run began with this test
    child, killer = _LOST[0]
    done = child.answers(LOST_EXECUTOR_RUN)
    kill = killer.result()
    log = (child.work / LOG_FILE).read_text(encoding="utf-8", errors="replace")
    request.node.user_properties += [("traces", len(traces)), ("seconds", done.seconds), ("kill", repr(kill))]
    assert kill is not None, f"no executor of {LOCAL_CLUSTER} was seen busy before the run ended"
    assert lost_tasks(log) > 0, (
        f"the executor killed ({kill}) ran no task the driver lost: the kill missed a task\n"
        + child.log_tail()
    )
    failures = [
        f"{trace.area} / {trace.name}:\n    " + "\n    ".join(found)
        for trace, want, have in zip(traces, base, done.answers, strict=True)
        if (found := differences(want, have))
    ]
    assert not failures, (
        f"{len(failures)} of {len(traces)} traces answer differently after {kill} (TR-17):\n"
        + "\n".join(failures[:10])
    )
