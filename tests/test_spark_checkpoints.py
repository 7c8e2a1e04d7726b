"""Checkpoints of another layout, and damaged ones (spec/traces.md TR-5; docs/reliability.md C1-C4).

Without Spark, on every operator's own state classes: a value of another layout version or
bucket count is refused with ``IncompatibleCheckpoint`` naming both values and what to do; a
value that does not decode (a truncated field, a field missing) with ``CorruptCheckpoint``
naming the operator and the state variable, never an error from inside numpy or Arrow; inside
a processor, the error also names the stream and is raised from one frame.

With Spark: a checkpoint written by the real operators in a child process whose state values
are altered as they are written (an import hook in the child's ``sitecustomize``, so every
Python worker of that child stamps ``LAYOUT_VERSION + 1``, or drops a byte of a value (sets
the last number of a value of numbers only to -1), exactly as another release or a damaged
disk would leave them; the operators' code is not touched) is refused by ``check_checkpoint``
before a query starts, and by the running query when it is started without the inspection; a
sound checkpoint passes, and so does an absent one.

| profile | operators | checkpoints written by the child |
|---|---|---|
| ci, dev | one, chosen from the run's seed | sound, another layout |
| thorough | all nine | sound, another layout, damaged |
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import traceback
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.hypothesis_profiles import profile_name, run_seed
from harness.traces import Trace
from spark_impl.checkpoints import (
    PROBLEMS_SHOWN,
    CheckpointError,
    CorruptCheckpoint,
    IncompatibleCheckpoint,
    decoding,
    operators,
    stage_prefix,
)
from spark_impl.engine import area_module, implemented_areas
from spark_impl.scaleout import check_layout, pack_text, unpack_text

ROOT = Path(__file__).resolve().parent.parent
for _area in sorted(implemented_areas()):
    area_module(_area)  # each operator module registers its layout when it is imported
AREAS = tuple(sorted(operators()))
THOROUGH = profile_name() == "thorough"
# Under ci one operator; the seed's next one, so seed 0 does not pick the operator the
# duplicate-seq test picks (both take the seed modulo the eight areas).
CHOSEN = AREAS if THOROUGH else (AREAS[(run_seed() + 1) % len(AREAS)],)
MODES = ("sound", "newer", "damaged") if THOROUGH else ("sound", "newer")
BUCKETS = 3  # ENGINE_BUCKETS of every operator: the harness's query shape


# ---- genuine values of each operator's state, built by its own classes -------------------------


def _pipeline_layout_values() -> dict[tuple[str, str], tuple[Any, ...]]:
    """The pipeline's own values, and those of the operators it runs under prefixed names."""
    from spark_impl import exactly_once_aggregation as eo
    from spark_impl import pipeline as pl
    from spark_impl import sla_admission as sa
    from spark_impl import window_joins as wj

    two = np.array([5, 6], np.int64)
    node = pl.NodeState(BUCKETS, ("orders", "payments"), two, np.array([True, False]))
    join = wj.BucketState(
        BUCKETS, "session_session", np.array([0, 0, 0, 0, 10, 0], np.int64), 5, np.arange(2)
    )
    return {
        ("pipeline", "bucket"): pl.BucketState(
            BUCKETS, {"orders": (3, 9, True, 7, True), "é": (0, 0, False, 0, False)}
        ).to_tuple(),
        ("pipeline", "totals"): pl.StreamState(BUCKETS, list(range(len(pl.PROGRESS))), 4, True).to_tuple(),
        ("pipeline", "tumbling_join_node"): node.to_tuple(),
        ("pipeline", "session_join_node"): node.to_tuple(),
        ("pipeline", "aggregator_node"): node.to_tuple(),
        ("pipeline", "sla_bucket"): sa.BucketState(BUCKETS).to_tuple(),
        ("pipeline", "tumbling_join_bucket"): join.to_tuple(),
        ("pipeline", "session_join_bucket"): join.to_tuple(),
        ("pipeline", "aggregator_bucket"): eo.BucketState(BUCKETS, 1024).to_tuple(),
        ("pipeline", "aggregator_key_bucket"): eo.KeyBucketState(BUCKETS, "sum").to_tuple(),
    }


def _layout_values() -> dict[tuple[str, str], tuple[Any, ...]]:
    """(area, state variable) -> a value as the operator writes it, for every value that carries
    the layout (version, bucket count), each with a binary field of whole int64s."""
    from spark_impl import eventtime_buffer as eb
    from spark_impl import exactly_once_aggregation as eo
    from spark_impl import keyed_watermarks as kw
    from spark_impl import late_data as ld
    from spark_impl import partitioned_watermarks as pw
    from spark_impl import session_windows as sw
    from spark_impl import sla_admission as sa
    from spark_impl import watermark_propagation as wp
    from spark_impl import window_joins as wj

    one = np.array([7], np.int64)
    buffer = eb.Buffer(one, one * 0, one, np.array(["k"], object), one)
    return {
        ("keyed_watermarks", "bucket"): kw.BucketState(
            BUCKETS, subs=np.arange(16, dtype=np.int64).reshape(2, 8)
        ).to_tuple(),
        ("keyed_watermarks", "stream"): kw.StreamState(BUCKETS).to_tuple(),
        ("partitioned_watermarks", "bucket"): pw.BucketState(BUCKETS, 4, sources={1, 2}).to_tuple(),
        ("partitioned_watermarks", "stream"): pw.StreamState(BUCKETS).to_tuple(),
        ("session_windows", "bucket"): sw.BucketState(BUCKETS, blocks=np.ones((1, 3), np.int64)).to_tuple(),
        ("session_windows", "stream"): sw.NarrowState(BUCKETS).to_tuple(),
        ("eventtime_buffer", "bucket"): eb.BucketState(BUCKETS, buffer=buffer).to_tuple(),
        ("eventtime_buffer", "stream"): eb.StreamState(BUCKETS).to_tuple(),
        ("watermark_propagation", "bucket"): wp.BucketState(
            BUCKETS, "g", np.ones((1, 5), np.int64)
        ).to_tuple(),
        ("watermark_propagation", "stream"): wp.StreamState(BUCKETS, ("a", "b")).to_tuple(),
        ("late_data", "bucket"): ld.BucketState(BUCKETS, clock=5).to_tuple(),
        ("late_data", "stream"): ld.StreamState(BUCKETS).to_tuple(),
        ("sla_admission", "bucket"): sa.BucketState(BUCKETS).to_tuple(),
        ("sla_admission", "totals"): sa.StreamState(BUCKETS).to_tuple(),
        ("exactly_once_aggregation", "bucket"): eo.BucketState(BUCKETS, 1024).to_tuple(),
        ("exactly_once_aggregation", "key_bucket"): eo.KeyBucketState(BUCKETS, "sum").to_tuple(),
        ("exactly_once_aggregation", "totals"): eo.StreamState(BUCKETS).to_tuple(),
        ("window_joins", "bucket"): wj.BucketState(
            BUCKETS, "tumbling_tumbling", np.array([10, 0, 0, 0, 0, 0], np.int64), 5, np.arange(2)
        ).to_tuple(),
        ("window_joins", "totals"): wj.StreamState(BUCKETS).to_tuple(),
        **_pipeline_layout_values(),
    }


def _map_values() -> dict[tuple[str, str], tuple[tuple[Any, ...], tuple[Any, ...]]]:
    """(area, MapState variable) -> (map key, a value as the operator writes it)."""
    from spark_impl import exactly_once_aggregation as eo
    from spark_impl import late_data as ld
    from spark_impl import partitioned_watermarks as pw
    from spark_impl import session_windows as sw
    from spark_impl import sla_admission as sa
    from spark_impl import window_joins as wj
    from spark_impl.keyed_watermarks import compact as kw_compact
    from spark_impl.keyed_watermarks import layout as kw
    from spark_impl.keyed_watermarks.settings import HLL_REGISTERS

    keys = kw._Keys(
        np.array(["a", "é"], object),
        idle=np.zeros(2, bool),
        **{n: np.arange(2, dtype=np.int64) for n in kw._Keys.NUMBERS},
    )
    sketch = (
        1,
        2,
        2,
        3,
        9,
        np.zeros(6, np.int64).tobytes(),
        np.zeros(6, np.int64).tobytes(),
        np.ones(6, bool).tobytes(),
        np.zeros(HLL_REGISTERS, np.uint8).tobytes(),
    )
    parts = pw.Partitions(
        *(np.array([1, 1], np.int64) for _ in range(2)),
        np.array([5, 6], np.int64),
        np.ones(2, bool),
        np.zeros(2, np.int64),
        np.zeros(2, bool),
        np.zeros(2, np.int64),
    )
    seven = np.array([7], np.int64).tobytes()
    sessions = sw.Sessions(np.array(["a"], object), *(np.array([i], np.int64) for i in range(6)))
    values = {
        ("keyed_watermarks", "blocks"): (
            (0,),
            kw.pack_block(keys, np.arange(2), kw._no_windows(), np.arange(0)),
        ),
        ("keyed_watermarks", "shard_keys"): ((0,), kw_compact.pack_exact(OrderedDict(a=[1, 2, 3, False]))),
        ("keyed_watermarks", "shard_sketches"): ((0,), sketch),
        ("partitioned_watermarks", "blocks"): ((1, 0), pw.pack_block(parts, np.arange(2))),
        ("partitioned_watermarks", "sources"): (
            (1,),
            (np.array([0], np.int64).tobytes(), np.zeros(6, np.int64).tobytes()),
        ),
        ("session_windows", "blocks"): ((0,), sessions.pack()),
        ("late_data", "sources"): ((4, False), ld.pack_source(9, np.array([[0, 10, 1]], np.int64))),
        ("sla_admission", "sla_streams"): (("s",), sa.SlaEntry(5).to_tuple()),
        ("exactly_once_aggregation", "channels"): ((1, 0), eo.pack_channel(5, np.array([4, 5]), 1024)),
        ("exactly_once_aggregation", "aggregates"): (("k",), (2, 0.5, 0)),
        ("window_joins", "windows"): (
            ("k", 3),
            (wj.pack_events(np.array([[0, 1, 35, 7]], np.int64)), wj.pack_events(np.zeros((0, 4), np.int64))),
        ),
        ("window_joins", "due"): ((4,), (*pack_text(np.array(["k"], object)), seven, seven)),
    }
    # the pipeline runs the operators' processors, their maps under prefixed names
    for prefix, area, names in (
        ("sla_", "sla_admission", ("sla_streams",)),
        ("tumbling_join_", "window_joins", ("windows", "due")),
        ("session_join_", "window_joins", ("windows", "due")),
        ("aggregator_", "exactly_once_aggregation", ("channels", "aggregates")),
    ):
        values.update({("pipeline", prefix + name): values[(area, name)] for name in names})
    return values


def _decoder(area: str, variable: str) -> Callable[[tuple[Any, ...], tuple[Any, ...]], Any]:
    return operators()[area].decoders()[variable]


def _truncated(value: tuple[Any, ...]) -> tuple[Any, ...]:
    """The value with one byte less in its first binary field of whole int64s."""
    for i, part in enumerate(value):
        if isinstance(part, bytes) and len(part) >= 8 and len(part) % 8 == 0:
            return (*value[:i], part[:-1], *value[i + 1 :])
    raise AssertionError(f"no int64 field to damage in {value!r}")


@pytest.mark.clauses("TR-5")
def test_every_operator_the_engine_runs_is_known_to_the_inspection() -> None:
    """C1: the inspection knows the state of every operator the Spark engine runs, every state
    variable that carries the layout has a genuine value above, and every MapState one too."""
    assert set(implemented_areas()) <= set(AREAS)
    stages = {
        a: [s for s in (op.first, op.middle, op.second) if s is not None] for a, op in operators().items()
    }
    layout = {(a, v) for a, ss in stages.items() for s in ss for v in s.layout}
    assert layout == set(_layout_values())
    maps = {(a, v) for a, ss in stages.items() for s in ss for v in s.variables if v not in s.layout}
    assert maps == set(_map_values())
    assert {stage_prefix(a) for a in AREAS} == {"kw", "pw", "sw", "eb", "wp", "ld", "sa", "eoa", "wj", "p"}


@pytest.mark.clauses("TR-5")
@pytest.mark.parametrize(("area", "variable"), sorted(_layout_values()))
def test_a_value_of_another_layout_is_refused_naming_both_versions_and_what_to_do(
    area: str, variable: str
) -> None:
    """C2: a genuine value reads back; stamped with a newer or an older layout version it is
    refused with both versions named, the side of the release and the way out; read with
    another bucket count it is refused with both counts and the ``buckets=`` to pass."""
    value = _layout_values()[(area, variable)]
    decode = _decoder(area, variable)
    decode(value, ())
    version = operators()[area].version
    for other, side in ((version + 1, "a newer"), (version - 1, "an older")):
        with pytest.raises(IncompatibleCheckpoint) as refused:
            decode((other, *value[1:]), ())
        message = str(refused.value)
        assert message.startswith(
            f"{area}: the checkpoint holds state layout version {other}; this release "
            f"reads state layout version {version} only (state {variable!r})"
        )
        assert f"written by {side} release" in message and "new checkpoint location" in message
        assert isinstance(refused.value, RuntimeError)
    with pytest.raises(
        IncompatibleCheckpoint,
        match=rf"holds buckets {BUCKETS}; this release reads buckets 8 only "
        rf"\(state '{variable}'\)\. .*pass buckets={BUCKETS} to {area}",
    ):
        check_layout(area, value, version, 8, variable)


@pytest.mark.clauses("TR-5")
@pytest.mark.parametrize(("area", "variable"), sorted(_layout_values()) + sorted(_map_values()))
def test_a_value_that_does_not_decode_is_refused_as_damaged(area: str, variable: str) -> None:
    """C3: a value with a byte missing from a binary field, or without its last field, is
    refused with ``CorruptCheckpoint`` naming the operator and the variable and saying to restore
    the checkpoint or start anew, never with the error of numpy or Arrow underneath."""
    if (area, variable) in _layout_values():
        key, value = (), _layout_values()[(area, variable)]
    else:
        key, value = _map_values()[(area, variable)]
    decode = _decoder(area, variable)
    decode(value, key)
    damaged = [value[:-1]]
    if any(isinstance(part, bytes) and len(part) >= 8 and len(part) % 8 == 0 for part in value):
        damaged.append(_truncated(value))
    for bad in damaged:
        with pytest.raises(CorruptCheckpoint) as refused:
            decode(bad, key)
        message = str(refused.value)
        assert message.startswith(f"{area}: ") and f"(state {variable!r})" in message, message
        assert (
            "restore the checkpoint folder from a copy, or start the query from a new checkpoint location"
            in message
        )
        assert refused.value.variable == variable and refused.value.operator == area


@pytest.mark.clauses("TR-5")
def test_key_text_whose_lengths_do_not_add_up_is_refused_before_arrow_reads_it() -> None:
    """C3: Arrow trusts a string array's offsets; lengths that overrun or fall short of the bytes
    (or a negative one) are refused instead of read."""
    lengths = np.array([1, 2], np.int32).tobytes()
    assert unpack_text(lengths, "aéb".encode()[:3]).tolist() == ["a", "é"]
    for bad_lengths, data in (
        (lengths, b"ab"),
        (lengths, b"abcd"),
        (np.array([4, -1], np.int32).tobytes(), b"abc"),
    ):
        with pytest.raises(ValueError, match="text lengths adding up to"):
            unpack_text(bad_lengths, data)


@pytest.mark.clauses("TR-5")
def test_decoding_turns_only_decoding_errors_into_a_damaged_checkpoint() -> None:
    """C3: around an unpacking, an error of numpy becomes CorruptCheckpoint with its text; a
    CheckpointError passes unchanged; nothing happens without an error."""
    with decoding("op", "var"):
        pass
    with pytest.raises(
        CorruptCheckpoint, match=r"op: a state value of the checkpoint does not decode: ValueError"
    ):
        with decoding("op", "var"):
            np.frombuffer(b"abc", np.int64)
    refusal = IncompatibleCheckpoint("op: other", "Start anew", "op", "var")
    with pytest.raises(IncompatibleCheckpoint) as passed:
        with decoding("op", "var"):
            raise refusal
    assert passed.value is refusal
    assert str(refusal.in_stream("s1")) == "op: other (state 'var', stream 's1'). Start anew."


@pytest.mark.clauses("TR-5", "VELO-R24")
def test_a_processor_names_the_stream_and_raises_from_one_frame() -> None:
    """C4: the reorder buffer's own processors (wide and narrow stage, state in a MemoryStore):
    after one micro-batch, a stored value of another version, then a damaged one, stops the
    next micro-batch with the error naming the variable and the stream, raised by the stage's
    ``handleInputRows`` with no chained error: what Spark's worker reports is that message."""
    import pandas as pd

    from spark_impl.eventtime_buffer import LAYOUT_VERSION, LocalRun

    config = {
        "columns": ["ts"],
        "eventtime_column": "ts",
        "eventtime_type": "unixtimestamp_ms",
        "eventtime_enabled": True,
        "late_tolerance": 10,
    }
    run = LocalRun(config, mode="long")
    rows = pd.DataFrame(
        {
            "eb_sid": ["s1", "s1"],
            "eb_seq": [0, 1],
            "eb_key": ["a", "b"],
            "eb_raw": ["5", "9"],
            "eb_raw_long": [5, 9],
            "eb_raw_null": [False, False],
        }
    )
    run.micro_batch(rows)
    stored = {k: v for k, v in run.store.values.items() if k[-1] in ("bucket", "stream")}
    assert stored and all(v[0] == LAYOUT_VERSION for v in stored.values())
    damages: list[tuple[Callable[[tuple[Any, ...]], tuple[Any, ...]], type[CheckpointError]]] = [
        (lambda v: (v[0] + 1, *v[1:]), IncompatibleCheckpoint),
        (_truncated, CorruptCheckpoint),
    ]
    for tamper, error in damages:
        key = next(k for k in stored if k[-1] == "stream")
        run.store.values.update(stored)
        run.store.values[key] = tamper(stored[key])
        with pytest.raises(error) as stopped:
            run.micro_batch(rows.assign(eb_batch=1))
        assert "(state 'stream', stream 's1')" in str(stopped.value)
        assert stopped.value.__cause__ is None and stopped.value.__suppress_context__
        last = traceback.extract_tb(stopped.value.__traceback__)[-1]
        assert (Path(last.filename).name, last.name) == ("scaleout.py", "handleInputRows")


# ---- on Spark: real checkpoints, altered as the operators write them -----------------------------


# The child's sitecustomize: after an area module is imported (in the driver and in every Python
# worker), its state classes' to_tuple pass what they return through ``tamper``, which reads the
# mode file on every call (workers are reused between queries of the child).
SITECUSTOMIZE = """
import importlib.abc, importlib.util, os, sys

MODE_FILE = os.environ["CHECKPOINT_TEST_MODE_FILE"]
TARGETS = {"spark_impl." + a for a in os.environ["CHECKPOINT_TEST_AREAS"].split(",")}


def tamper(value):
    with open(MODE_FILE, encoding="utf-8") as f:
        mode = f.read().strip()
    if mode == "newer":
        return (value[0] + 1, *value[1:])
    if mode == "damaged":
        for i, part in enumerate(value):
            if isinstance(part, bytes) and len(part) >= 8 and len(part) % 8 == 0:
                return (*value[:i], part[:-1], *value[i + 1:])
        # a value of numbers only (exactly-once's): its last count or setting below any it can hold
        if len(value) > 2 and all(type(part) is int for part in value):
            return (*value[:-1], -1)
    return value


def patch(module):
    for name in ("BucketState", "StreamState", "NarrowState"):
        cls = getattr(module, name, None)
        if cls is not None and hasattr(cls, "to_tuple"):
            def to_tuple(self, *args, _original=cls.to_tuple, **kwargs):
                return tamper(_original(self, *args, **kwargs))
            cls.to_tuple = to_tuple


class Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in TARGETS:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            patch(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, Finder())
"""

# Without a SparkContext (Spark Connect) the altered checkpoints come from a child process of its
# own: a classic session whose JVM, and so every Python worker, has the shim on its path.
CHILD = """
import sys
from pathlib import Path

sys.path.insert(0, sys.argv[2])
from tests.test_spark_checkpoints import _query, _traces
from spark_impl.session import get_spark

work = Path(sys.argv[1])
for mode in sys.argv[3:]:
    (work / "mode").write_text(mode)
    query = _query(get_spark(), work, mode, _traces(), end_batch=0)
    query.awaitTermination()
    if query.exception() is not None:
        raise SystemExit(f"{mode}: {query.exception()}")
"""


def _traces() -> dict[str, Trace]:
    """Per chosen operator one trace of the feature vectors: the first with two batches and an
    item in the first (so the first micro-batch leaves state, and the second reads it)."""
    from harness.traces import InvalidConfig
    from harness.vectors import loads_strict, vector_from_json
    from spark_impl.engine import area_module

    chosen: dict[str, Trace] = {}
    for area in CHOSEN:
        lines = (ROOT / "vectors" / "features" / f"{area}.jsonl").read_text(encoding="utf-8").splitlines()[1:]
        for line in lines:
            trace = vector_from_json(loads_strict(line), area).trace
            try:
                area_module(area).validate_config(trace.config)
            except InvalidConfig:
                continue
            if len(trace.batches) == 2 and trace.batches[0]:
                chosen[f"t{len(chosen):06d}"] = trace
                break
        else:
            raise AssertionError(f"no two-batch feature vector of {area}")
    return chosen


def _query(spark: Any, work: Path, mode: str, traces: dict[str, Trace], end_batch: int) -> Any:
    """The query the harness engine builds over ``traces`` (spark_impl.engine.combined_output),
    up to micro-batch ``end_batch``, on the mode's checkpoint: started, not awaited."""
    from spark_impl.engine import combined_output
    from spark_impl.trace_source import SOURCE_NAME

    df = (
        spark.readStream.format(SOURCE_NAME)
        .option("path", str(work / "input.parquet"))
        .option("num_batches", "2")
        .option("end_batch", str(end_batch))
        .load()
    )
    configs = {tid: dict(t.config) for tid, t in traces.items()}
    return (
        combined_output(df, {tid: (i, t) for i, (tid, t) in enumerate(traces.items())}, configs)
        .writeStream.format("parquet")
        .option("checkpointLocation", str(work / mode / "checkpoint"))
        .option("path", str(work / mode / "sink"))
        .trigger(availableNow=True)
        .start()
    )


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Trace]]:
    """One checkpoint per mode (the first micro-batch of the traces), under one folder; and the
    traces they hold. On a classic session the altered ones are written by the session itself,
    its queries' Python workers started with the shim on their path (the environment Spark gives
    the workers of a query is the SparkContext's when the query is defined); through Spark
    Connect by a child process."""
    from spark_impl.engine import _rows_table
    from spark_impl.session import get_spark
    from spark_impl.trace_source import write_trace_file

    work = tmp_path_factory.mktemp("checkpoints")
    traces = _traces()
    write_trace_file(
        str(work / "input.parquet"), _rows_table({t: (i, tr) for i, (t, tr) in enumerate(traces.items())})
    )
    shim = work / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    (work / "mode").write_text("sound")
    shim_env = {"CHECKPOINT_TEST_MODE_FILE": str(work / "mode"), "CHECKPOINT_TEST_AREAS": ",".join(CHOSEN)}
    spark = get_spark()
    context = getattr(spark, "sparkContext", None) if not os.environ.get("SPARK_REMOTE") else None
    if context is None:
        # PySpark marks a process that started Spark Connect in its environment: a child must not inherit it.
        connect = ("SPARK_REMOTE", "SPARK_LOCAL_REMOTE", "SPARK_CONNECT_MODE_ENABLED")
        env = {k: v for k, v in os.environ.items() if k not in connect}
        path = [str(shim), str(ROOT), env.get("PYTHONPATH", "")]
        env.update(shim_env, PYTHONPATH=os.pathsep.join(p for p in path if p), SPARK_MASTER="local[1]",
                   SPARK_SHUFFLE_PARTITIONS="1")  # fmt: skip
        done = subprocess.run([sys.executable, "-c", CHILD, str(work), str(ROOT), *MODES], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=900)  # fmt: skip
        assert done.returncode == 0, done.stderr[-4000:]
        return work, traces
    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    for mode in MODES:
        (work / "mode").write_text(mode)
        saved = dict(context.environment)
        if mode != "sound":
            path = [str(shim), saved.get("PYTHONPATH", "")]
            context.environment.update(shim_env, PYTHONPATH=os.pathsep.join(p for p in path if p))
        spark.conf.set("spark.sql.shuffle.partitions", "1")  # the checkpoint keeps it: half the tasks
        try:
            query = _query(spark, work, mode, traces, end_batch=0)
        finally:
            context.environment.clear()
            context.environment.update(saved)
            spark.conf.set("spark.sql.shuffle.partitions", partitions)
        query.awaitTermination()
        assert query.exception() is None, query.exception()
    return work, traces


def _restart(work: Path, mode: str, traces: dict[str, Trace]) -> Any:
    """The second micro-batch on the mode's checkpoint, started without the inspection: the
    query's exception (None when it ran)."""
    from spark_impl.session import get_spark

    query = _query(get_spark(), work, mode, traces, end_batch=1)
    try:
        query.awaitTermination()
    except Exception:  # noqa: BLE001 - the refusal under test; query.exception() holds it
        pass
    return query.exception()


def _python_error(exception: Any) -> tuple[str, list[str]]:
    """The Python error a failed query reports: its last line (``module.Type: message``) and
    the traceback lines before it (empty when Spark hid them)."""
    text = str(getattr(exception, "desc", None) or exception)
    text = text.split("\n\nJVM stacktrace:")[0]
    start = text.find("Traceback (most recent call last):")
    assert start >= 0, f"no Python error in the query's exception:\n{text[:3000]}"
    lines = text[start:].splitlines()
    error = next(
        i for i, line in enumerate(lines) if re.match(r"^[\w.]+(Error|Exception|Checkpoint)\b", line)
    )
    return lines[error], lines[1:error]


@pytest.mark.clauses("TR-5")
def test_spark_an_absent_or_sound_checkpoint_passes_the_inspection(
    written: tuple[Path, dict[str, Trace]],
) -> None:
    """C1: an absent checkpoint folder passes with nothing found; a sound checkpoint of the
    chosen operators passes, every MapState value decoded too (``deep``), every stateful stage
    of theirs recognised, with this release's layout version and the engine's bucket count in
    every layout value."""
    from spark_impl.checkpoints import check_checkpoint
    from spark_impl.session import get_spark

    work, _ = written
    spark = get_spark()
    assert check_checkpoint(spark, str(work / "absent")) == []
    reports = check_checkpoint(spark, str(work / "sound" / "checkpoint"), deep=True)
    ours = [r for r in reports if r.area is not None]
    assert sorted((r.area, r.stage) for r in ours) == sorted(
        (a, s)
        for a in CHOSEN
        for s in ("first", "second", *(("middle",) if operators()[a].middle is not None else ()))
    )
    for r in ours:
        assert set(r.layouts) == {(operators()[r.area].version, BUCKETS)} and r.values > 0, r


@pytest.mark.clauses("TR-5")
@pytest.mark.parametrize("mode", [m for m in MODES if m != "sound"])
def test_spark_a_checkpoint_it_cannot_continue_from_is_refused_before_and_while_running(
    written: tuple[Path, dict[str, Trace]], mode: str
) -> None:
    """C2, C3, C4. ``newer``: values stamped with the next layout version; the inspection
    refuses the checkpoint naming every chosen operator's first stage with both versions and
    what to do. ``damaged`` (thorough): values written with a byte missing from a binary field,
    or with their last number -1 where a value has numbers only; the inspection refuses it as
    damaged, naming operator, state variable and stream. Either way the query started without
    the inspection fails, and the Python error it reports is that refusal, raised by the stage's
    handleInputRows (nothing of numpy, Arrow or Spark above it)."""
    from spark_impl.checkpoints import check_checkpoint
    from spark_impl.session import get_spark

    work, traces = written
    error = IncompatibleCheckpoint if mode == "newer" else CorruptCheckpoint
    with pytest.raises(error) as refused:
        check_checkpoint(get_spark(), str(work / mode / "checkpoint"))
    message, problems = str(refused.value), refused.value.problems
    # The message lists the first problems, one line each, and counts the others.
    assert all(f"\n- {line}" in message for line in problems[:PROBLEMS_SHOWN]), message
    assert (f"- and {len(problems) - PROBLEMS_SHOWN} more." in message) == (len(problems) > PROBLEMS_SHOWN)
    where = r"{area}, {stage} stage \(stateful operator \d+\), state '{variable}', stream 't\d+': "
    if mode == "newer":
        assert "was written by another release of the operators or settings" in message
        assert "start the query from a new checkpoint location" in message
        for area in CHOSEN:
            version = operators()[area].version
            found = where.format(area=area, stage="first", variable="bucket") + (
                f"the checkpoint holds state layout version {version + 1}; this release reads state layout "
                f"version {version} only"
            )
            assert any(re.fullmatch(found, line) for line in problems), problems
        _refused_while_running(work, mode, traces, error, "holds state layout version")
    else:
        assert (
            "holds state this release cannot decode" in message and "restore the checkpoint folder" in message
        )
        for area in CHOSEN:
            found = where.format(area=area, stage="(first|second)", variable=r"\w+")
            assert any(
                re.match(found + "a state value of the checkpoint does not decode: ", p) for p in problems
            ), (area, problems)
        _refused_while_running(work, mode, traces, error, "does not decode")


def _refused_while_running(
    work: Path, mode: str, traces: dict[str, Trace], error: type[CheckpointError], says: str
) -> None:
    exception = _restart(work, mode, traces)
    assert exception is not None, f"the query on the {mode} checkpoint ran"
    line, frames = _python_error(exception)
    assert line.startswith(f"spark_impl.checkpoints.{error.__name__}: "), line
    assert says in line and re.search(r"\(state '\w+', stream 't\d+'\)\. ", line), line
    area = line.split(": ", 2)[1]
    assert area in CHOSEN, line
    # Spark keeps its own worker's frames above; of the project's and the libraries' there is
    # one: the stage that raised the refusal (none when the session hides tracebacks).
    files = [f.strip() for f in frames if f.strip().startswith("File ")]
    below = [f for f in files if "/pyspark/" not in f]
    assert len(below) <= 1 and all(f"{os.sep}scaleout.py" in f and "handleInputRows" in f for f in below), (
        "\n".join(frames)
    )
