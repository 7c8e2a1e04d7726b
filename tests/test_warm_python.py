"""The suites' PYSPARK_PYTHON launcher (spark_impl/testing/warm_python.py) behaves as the
interpreter it stands in for: the module's output, exit status, environment, folder and signals
are a fresh start's, and a module it does not warm runs in a fresh interpreter."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from spark_impl.testing import warm_python

PROBE = """
import os, sys, time
if __name__ == "__main__":
    print("pid", os.getpid(), "parent-warm", "probe_marker" in sys.modules, flush=True)
    print("env", os.environ.get("PROBE_VALUE"), "cwd", os.getcwd(), "argv0", sys.argv[0], flush=True)
    sys.stderr.write("to stderr\\n")
    if os.environ.get("PROBE_SLEEP"):
        time.sleep(60)
    sys.exit(int(os.environ.get("PROBE_EXIT", "0")))
"""


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "probe_warm.py").write_text(PROBE, encoding="utf-8")
    (modules / "probe_cold.py").write_text(PROBE, encoding="utf-8")
    # imported by the server only: a runner forked from it sees it in sys.modules
    (modules / "probe_marker.py").write_text("", encoding="utf-8")
    (modules / "probe_warm_deps.py").write_text("import probe_marker\n", encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(modules), os.environ.get("PYTHONPATH", "")]))
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = env["PYTHONPATH"]  # the server imports the probes
    try:
        path, server = warm_python.start(tmp_path / "warm", modules=("probe_warm_deps", "probe_warm"))
    finally:
        if old is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = old
    yield path, env
    server.kill()
    server.wait()


def test_a_warm_module_runs_forked_with_the_callers_environment_folder_streams_and_status(
    launcher: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    path, env = launcher
    env = dict(env, PROBE_VALUE="seen", PROBE_EXIT="3")
    done = subprocess.run([path, "-m", "probe_warm"], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 3
    first, second = done.stdout.splitlines()
    assert first.endswith("parent-warm True")
    assert second == f"env seen cwd {tmp_path} argv0 {tmp_path / 'modules' / 'probe_warm.py'}"
    assert done.stderr == "to stderr\n"


def test_another_module_runs_in_a_fresh_interpreter(launcher: tuple[str, dict[str, str]]) -> None:
    path, env = launcher
    done = subprocess.run([path, "-m", "probe_cold"], env=env, capture_output=True, text=True)
    assert done.returncode == 0
    assert done.stdout.splitlines()[0].endswith("parent-warm False")
    direct = subprocess.run([path, "-c", "import sys; print(sys.executable)"], capture_output=True, text=True)
    assert direct.stdout.strip() == sys.executable


def _runner_of(launcher_process: subprocess.Popen[str]) -> psutil.Process:
    line = launcher_process.stdout.readline() if launcher_process.stdout else ""
    assert line.startswith("pid "), line
    return psutil.Process(int(line.split()[1]))


def test_sigterm_reaches_the_runner_and_a_killed_launcher_takes_the_runner_with_it(
    launcher: tuple[str, dict[str, str]],
) -> None:
    path, env = launcher
    env = dict(env, PROBE_SLEEP="1")
    terminated = subprocess.Popen([path, "-m", "probe_warm"], env=env, stdout=subprocess.PIPE, text=True)
    runner = _runner_of(terminated)
    terminated.send_signal(signal.SIGTERM)
    assert terminated.wait(timeout=10) == 128 + signal.SIGTERM
    assert _gone(runner)

    killed = subprocess.Popen([path, "-m", "probe_warm"], env=env, stdout=subprocess.PIPE, text=True)
    runner = _runner_of(killed)
    killed.kill()
    killed.wait(timeout=10)
    deadline = time.monotonic() + 10
    while not _gone(runner) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(runner)


def _gone(process: psutil.Process) -> bool:
    """Exited or a zombie; a process that exits between the two questions is gone too."""
    try:
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_without_its_server_the_launcher_starts_a_fresh_interpreter(
    launcher: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    path, env = launcher
    os.remove(tmp_path / "warm" / "server.sock")
    done = subprocess.run([path, "-m", "probe_warm"], env=env, capture_output=True, text=True)
    assert done.returncode == 0
    assert done.stdout.splitlines()[0].endswith("parent-warm False")
