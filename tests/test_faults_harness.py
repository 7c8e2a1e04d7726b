"""The fault harness's own parts, without Spark (spec/traces.md TR-17): the kill plans, the
kill of a whole process tree, and the sink checks that must see a row twice or a folder lost."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.outputs import TABLES
from harness.traces import Trace, event
from spark_impl.testing.faults import (
    KILL_POINTS,
    Expected,
    Kill,
    check_sink,
    compare_final,
    kill_tree,
    plan_kills,
    reachable_after,
)

ALL_POINTS = {b: list(KILL_POINTS) for b in (1, 2, 3)}


@pytest.mark.clauses("TR-17")
@pytest.mark.parametrize("seed", range(20))
def test_a_plan_uses_every_point_once_before_any_twice_in_an_order_a_run_reaches(seed: int) -> None:
    rng = random.Random(seed)
    six = plan_kills(rng, len(KILL_POINTS), ALL_POINTS)
    assert sorted(k.point for k in six) == sorted(KILL_POINTS)
    eight = plan_kills(rng, 8, ALL_POINTS)
    assert set(k.point for k in eight) == set(KILL_POINTS) and len(eight) == 8
    for plan in (six, eight):
        assert all(reachable_after(a, b) for a, b in zip(plan, plan[1:]))
    only_one = plan_kills(rng, 3, {2: ["after_sink"]})
    assert only_one == [Kill(2, "after_sink")] * 3  # the same point again: on each replay of batch 2


@pytest.mark.clauses("TR-17")
def test_a_replayed_batch_reaches_every_point_again_but_its_planning() -> None:
    assert not reachable_after(Kill(2, "after_sink"), Kill(2, "reading"))  # the order only goes on
    assert reachable_after(Kill(2, "reading"), Kill(2, "reading"))
    assert reachable_after(Kill(2, "reading"), Kill(2, "after_sink"))
    assert not reachable_after(Kill(2, "reading"), Kill(2, "before_batch"))  # offsets logged: no planning
    assert reachable_after(Kill(2, "before_batch"), Kill(2, "before_batch"))  # nothing logged: planned again
    assert reachable_after(Kill(1, "after_sink"), Kill(2, "before_batch"))
    with pytest.raises(ValueError, match="unknown kill point"):
        Kill(1, "somewhere")


# A session leader with three kinds of descendants: a plain child, a child in a process group
# of its own (as PySpark's daemon makes itself), and an orphan whose parent already exited.
TREE = r"""
import os, sys, time
pids = []
for own_group in (False, True):
    pid = os.fork()
    if pid == 0:
        if own_group:
            os.setpgid(0, 0)
        time.sleep(600)
        os._exit(0)
    if own_group:
        os.setpgid(pid, pid)  # the parent too, so the group is set before its pid is written (no race)
    pids.append(pid)
middle = os.fork()
if middle == 0:
    orphan = os.fork()
    if orphan == 0:
        time.sleep(600)
        os._exit(0)
    with open(sys.argv[1] + ".orphan", "w") as f:
        f.write(str(orphan))
    os._exit(0)
os.waitpid(middle, 0)
pids.append(int(open(sys.argv[1] + ".orphan").read()))
with open(sys.argv[1], "w") as f:
    f.write(" ".join(map(str, pids)))
time.sleep(600)
"""


def _gone(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.clauses("TR-17")
def test_kill_tree_leaves_no_process_of_the_session_not_even_in_another_group_or_orphaned(
    tmp_path: Path,
) -> None:
    pids_file = tmp_path / "pids"
    child = subprocess.Popen([sys.executable, "-c", TREE, str(pids_file)], start_new_session=True)
    deadline = time.monotonic() + 60
    while not pids_file.exists() or not pids_file.read_text().strip():
        assert time.monotonic() < deadline, "the process tree did not start"
        time.sleep(0.05)
    pids = [int(p) for p in pids_file.read_text().split()]
    assert os.getpgid(pids[1]) != os.getpgid(child.pid)  # the own-group child really left the group
    assert not any(_gone(p) for p in [child.pid, *pids])
    killed = kill_tree(child, timeout=30)
    assert killed >= 4
    assert all(_gone(p) for p in [child.pid, *pids])


# ---- the sink checks ----------------------------------------------------------------------


def _trace() -> Trace:
    return Trace(
        "keyed_watermarks",
        {"bounded_delay": 5000},
        ((event("a", 10000), event("b", 5000)), (event("a", 3000),), ()),
        name="three batches",
    )


def _write_sink(sink: Path, expected: Expected) -> None:
    """The sink as the child writes it: one folder per table and batch, stream id first."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for (table, batch), per_tid in expected.folders.items():
        folder = sink / table / f"batch_id={batch}"
        folder.mkdir(parents=True)
        rows = []
        for tid, tid_rows in per_tid.items():
            columns = TABLES[expected.tids[tid].area][table]
            rows += [{"stream_id": tid, **dict(zip(columns, r, strict=True))} for r in tid_rows]
        pq.write_table(pa.Table.from_pylist(rows), folder / "part-00000.parquet")
        (folder / "_SUCCESS").write_text("")


@pytest.mark.clauses("TR-17", "TR-8")
def test_the_sink_check_sees_a_row_twice_a_lost_folder_and_ignores_hidden_files(tmp_path: Path) -> None:
    expected = Expected.of([_trace()])
    sink, checkpoint = tmp_path / "sink", tmp_path / "checkpoint"
    _write_sink(sink, expected)
    (checkpoint / "commits").mkdir(parents=True)
    for b in (0, 1):
        (checkpoint / "commits" / str(b)).write_text("v1\n{}")
    assert check_sink(expected, sink, checkpoint, final=True) == []
    assert compare_final(expected, sink) == {}

    # a half-written attempt under Spark's hidden _temporary folder is not what readers see
    junk = sink / "events" / "batch_id=1" / "_temporary"
    junk.mkdir()
    (junk / "part-9.parquet").write_bytes(b"not parquet")
    assert check_sink(expected, sink, checkpoint, final=True) == []

    # a row twice: the same part file copied into its folder (an append on replay)
    part = sink / "events" / "batch_id=0" / "part-00000.parquet"
    (part.parent / "part-00001.parquet").write_bytes(part.read_bytes())
    [twice] = check_sink(expected, sink, checkpoint)
    assert twice.tid == "t000000" and "events/batch_id=0 holds 4 rows" in twice.text
    assert "t000000" in compare_final(expected, sink)
    (part.parent / "part-00001.parquet").unlink()

    # a committed batch without its progress folder: lost
    progress = sink / "progress" / "batch_id=1"
    for f in progress.iterdir():
        f.unlink()
    progress.rmdir()
    [lost] = check_sink(expected, sink, checkpoint)
    assert "progress/batch_id=1 is missing" in lost.text
    # ... but a batch not yet committed may lack folders until the run ends
    for f in (sink / "progress" / "batch_id=2").iterdir():
        f.unlink()
    (sink / "progress" / "batch_id=2").rmdir()
    assert len(check_sink(expected, sink, checkpoint)) == 1
    assert len(check_sink(expected, sink, checkpoint, final=True)) == 2


@pytest.mark.clauses("TR-17")
def test_expected_points_leave_out_the_first_batch_and_need_two_tables_between(
    tmp_path: Path,
) -> None:
    expected = Expected.of([_trace()])
    points = expected.points_of_batch()
    assert list(points) == [1, 2]  # batch 0 has no state to lose
    for batch in (1, 2):
        tables = {t for (t, b) in expected.folders if b == batch}
        assert ("between_tables" in points[batch]) == (len(tables) > 1)
    assert json.dumps(points)  # plain data: the plan's input is printable
