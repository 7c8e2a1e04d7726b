"""Spark's driver-side Python runners forked from a warm interpreter, for the test suites.

Every streaming query start makes the JVM run ``PYSPARK_PYTHON -m MODULE`` for a few of
Spark's own Python programs (the streaming source's reader, one ``transformWithState``
driver worker per stateful stage, the data source planners). Each is a fresh interpreter
that imports pyspark, pandas and pyarrow before it connects back: about 1.3 s of CPU, on
the query start's critical path, several times per query. The suites start hundreds of
queries: these imports took about a tenth of a test run's CPU (310 s of about 50 minutes).

``start()`` launches ``python -m spark_impl.testing.warm_python SOCKET MODULE...`` (the
server: it imports the modules, and with them those libraries, once and waits) and returns
the path of a launcher to use as ``PYSPARK_PYTHON``. The launcher is a ``python -S``
script (no site packages, a few ms):

- for ``-m`` one of ``WARM_MODULES`` it hands its argv, environment, working folder and
  standard streams (the file descriptors themselves) to the server, which forks a
  supervisor that forks the runner; the runner takes the environment, folder and streams,
  puts ``PYTHONPATH`` in front of ``sys.path`` and runs the module as ``__main__``. The
  launcher forwards SIGTERM, SIGINT and SIGHUP to the runner and exits with its status; if
  the launcher dies, the supervisor kills the runner;
- for anything else (PySpark's worker daemon, which forks its own workers already, or a
  server that is gone) it ``exec``s the real interpreter, as Spark would have.

So a runner runs Spark's unchanged module with Spark's environment; what differs from a
fresh start is only that pyspark, pandas and pyarrow were imported before (pyspark from the
installed package rather than the copy in Spark's ``PYTHONPATH``: the same version).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

#: the modules the launcher hands to the server; anything else starts a fresh interpreter
WARM_MODULES = (
    "pyspark.sql.streaming.python_streaming_source_runner",
    "pyspark.sql.streaming.transform_with_state_driver_worker",
    "pyspark.sql.worker.lookup_data_sources",
    "pyspark.sql.worker.create_data_source",
    "pyspark.sql.worker.plan_data_source_read",
    "pyspark.sql.worker.data_source_pushdown_filters",
)

#: set to 0 to run every Spark Python process fresh, as a user's session does
ENV_SWITCH = "CONFORMANCE_WARM_PYTHON"

_LAUNCHER = """#!{python} -S
# PYSPARK_PYTHON of the test suites: spark_impl/testing/warm_python.py says what it does.
import json, os, signal, socket, struct, sys
REAL, WARM, PATH = {python!r}, {modules!r}, {socket!r}
args = sys.argv[1:]
if len(args) != 2 or args[0] != "-m" or args[1] not in WARM:
    os.execv(REAL, [REAL] + args)
conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    conn.connect(PATH)
except OSError:
    os.execv(REAL, [REAL] + args)
request = json.dumps({{"module": args[1], "env": dict(os.environ), "cwd": os.getcwd()}}).encode()
socket.send_fds(conn, [struct.pack("!I", len(request)) + request], [0, 1, 2])
reader = conn.makefile("rb")
line = reader.readline()
if not line:
    sys.exit(1)  # the server could not fork
child = int(line)
def forward(signum, frame):
    try:
        os.kill(child, signum)
    except ProcessLookupError:
        pass
for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(signum, forward)
status = reader.readline()
sys.exit(int(status) if status else 1)
"""


def start(
    folder: Path | None = None, wait: bool = True, modules: tuple[str, ...] = WARM_MODULES
) -> tuple[str, subprocess.Popen[bytes]]:
    """Start the server; return the launcher's path (for ``PYSPARK_PYTHON``) and the server.
    With ``wait`` false it returns at once: until the server listens, the launcher starts
    fresh interpreters."""
    work = Path(folder or tempfile.mkdtemp(prefix="warm-python-"))
    work.mkdir(parents=True, exist_ok=True)
    path = str(work / "server.sock")
    launcher = work / "python"
    launcher.write_text(
        _LAUNCHER.format(python=sys.executable, modules=modules, socket=path), encoding="utf-8"
    )
    launcher.chmod(0o755)
    server = subprocess.Popen([sys.executable, "-m", "spark_impl.testing.warm_python", path, *modules])
    deadline = time.monotonic() + 60
    while wait and not os.path.exists(path):  # the socket appears once the imports are done
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            raise RuntimeError(f"the warm Python server did not start (exit {server.poll()})")
        time.sleep(0.05)
    return str(launcher), server


def _receive(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    head, fds, _flags, _addr = socket.recv_fds(conn, 4, 3)
    size = int.from_bytes(head[:4], "big") if len(head) >= 4 else 0
    body = bytearray()
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            break
        body.extend(chunk)
    return json.loads(bytes(body)), fds


def _run(request: dict[str, Any], fds: list[int]) -> None:
    """In the runner: become the process the launcher would have started, then run the module."""
    import runpy

    for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(signum, signal.SIG_DFL)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:0] = [p for p in extra if p not in sys.path]
    sys.argv = [request["module"]]
    code: Any = 0
    try:
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        code = stop.code
    except BaseException:  # noqa: BLE001 - printed as a fresh interpreter would, then status 1
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001, S110 - a closed stream has nothing to flush
                pass
    os._exit(code if isinstance(code, int) else (0 if code is None else 1))


def _supervise(conn: socket.socket) -> None:
    """In the supervisor: fork the runner, tell the launcher its pid, then its exit status."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # this one waits for its runner's status
    request, fds = _receive(conn)
    runner = os.fork()
    if runner == 0:
        conn.close()
        _run(request, fds)
    for fd in fds:
        os.close(fd)
    conn.sendall(f"{runner}\n".encode())
    exited = os.pidfd_open(runner)

    # Either the runner ends (report its status) or the launcher is gone (kill the runner).
    ready, _, _ = select.select([exited, conn.fileno()], [], [])
    if exited not in ready:
        try:
            os.kill(runner, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _, status = os.waitpid(runner, 0)
    code = os.waitstatus_to_exitcode(status)
    try:
        conn.sendall(f"{code if code >= 0 else 128 - code}\n".encode())
    except OSError:
        pass
    os._exit(0)


def serve(path: str, modules: list[str]) -> None:
    # The imports every warm module needs, done once: importing the modules runs no main.
    import importlib

    for name in modules:
        importlib.import_module(name)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # supervisors reap themselves
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    partial = path + ".binding"
    listener.bind(partial)
    listener.listen(64)
    os.rename(partial, path)  # the launcher's path exists only once the server listens
    parent = os.getppid()
    listener.settimeout(5.0)
    while True:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            if os.getppid() != parent:  # the test run that started it is gone
                return
            continue
        conn.settimeout(None)
        if os.fork() == 0:
            listener.close()
            try:
                _supervise(conn)
            finally:
                os._exit(1)
        conn.close()


_server: subprocess.Popen[bytes] | None = None
_folder: Path | None = None
_launcher: str | None = None


def without_launcher(env: dict[str, str]) -> dict[str, str]:
    """``env`` without this run's launcher as ``PYSPARK_PYTHON``: for a child whose every Spark
    process must be its own (the fault child, whose kills must reach all of them)."""
    if _launcher is not None and env.get("PYSPARK_PYTHON") == _launcher:
        env = {k: v for k, v in env.items() if k != "PYSPARK_PYTHON"}
    return env


@pytest.hookimpl(trylast=True)  # after harness.pytest_plugin has read the chosen engines
def pytest_configure(config: Any) -> None:
    """A pytest plugin (pyproject.toml's addopts): the suites' Spark runs get the launcher,
    unless ``PYSPARK_PYTHON`` is already chosen or ``CONFORMANCE_WARM_PYTHON=0``."""
    global _server, _folder, _launcher
    from harness.pytest_plugin import chosen_engines

    if os.environ.get(ENV_SWITCH, "1") == "0" or os.environ.get("PYSPARK_PYTHON"):
        return
    if not any(e.startswith("spark") for e in chosen_engines(config)):
        return
    _folder = Path(tempfile.mkdtemp(prefix="warm-python-"))
    _launcher, _server = start(_folder, wait=False)
    os.environ["PYSPARK_PYTHON"] = _launcher


def pytest_unconfigure(config: Any) -> None:
    global _server, _launcher
    if _server is not None:
        if os.environ.get("PYSPARK_PYTHON") == _launcher:
            del os.environ["PYSPARK_PYTHON"]
        _launcher = None
        _server.kill()
        _server.wait()
        _server = None
        shutil.rmtree(str(_folder), ignore_errors=True)


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2:])
