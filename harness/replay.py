"""Failing generated cases as files, and replaying them (spec/traces.md TR-13).

When a generated case fails (a Hypothesis property or a differential run),
``write_failure`` saves it under ``reports/failures/`` as JSON: the test id,
the run's profile and seed, and either the traces (a differential run: the
shrunk trace first, then the trace as generated) or the test's arguments
(a property: every argument, traces in their JSON form). Beside it goes a
``.feature`` file with the trace as a Gherkin scenario when the area's steps
can say it. ``replay_command`` is the one line the failure message prints:

    .bootstrap-venv/bin/tox -e conformance -- 'TEST ID' --replay reports/failures/NAME.json

With ``--replay FILE`` (an option of harness.pytest_plugin) a differential
test runs the file's traces instead of generating, and a property runs once
on the file's arguments instead of generating examples.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.traces import Trace

FAILURES_DIR = "reports/failures"
TOX = ".bootstrap-venv/bin/tox"
FORMAT = 1  # the file layout below; a file of another layout is refused

_replay: dict[str, Any] | None = None
_replay_path: str | None = None
_failures_root: Path = Path(FAILURES_DIR)
_tox_env: str = "conformance"
_current_test: str | None = None


class ReplayError(ValueError):
    """A replay file that cannot be used (missing, not JSON, another layout, wrong test)."""


def configure(failures_dir: Path, tox_env: str, replay_path: str | None) -> tuple[Any, ...]:
    """Where failure files go, which tox environment the printed command names, and the
    ``--replay`` file (None: generate as usual). Returns the previous settings for
    ``restore`` (a nested pytest run, as the suites' own plugin tests make, must not keep them)."""
    global _failures_root, _tox_env
    previous = (_failures_root, _tox_env, _replay, _replay_path)
    _failures_root, _tox_env = failures_dir, tox_env
    load_replay(replay_path)
    return previous


def restore(previous: tuple[Any, ...]) -> None:
    global _failures_root, _tox_env, _replay, _replay_path
    _failures_root, _tox_env, _replay, _replay_path = previous


@contextlib.contextmanager
def failures_written_to(folder: Path) -> Iterator[None]:
    """Failure files go to ``folder`` for a while (tests of the checker fail on purpose)."""
    global _failures_root
    before, _failures_root = _failures_root, folder
    try:
        yield
    finally:
        _failures_root = before


def set_current_test(test_id: str | None) -> str | None:
    """The test now running (its failure files name it); returns the one before."""
    global _current_test
    before, _current_test = _current_test, test_id
    return before


def current_test() -> str | None:
    return _current_test


def load_replay(path: str | None) -> None:
    """Read ``--replay FILE`` (None: generate as usual)."""
    global _replay, _replay_path
    if path is None:
        _replay, _replay_path = None, None
        return
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise ReplayError(f"--replay {path}: cannot read it ({e.strerror})") from None
    except json.JSONDecodeError as e:
        raise ReplayError(f"--replay {path}: not JSON ({e})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ReplayError(f"--replay {path}: not a failure file of layout {FORMAT} (see {FAILURES_DIR}/)")
    _replay, _replay_path = data, path


def replaying() -> dict[str, Any] | None:
    return _replay


def replay_traces() -> list[Trace] | None:
    """The traces of the replay file, or None when not replaying (a differential test then generates)."""
    if _replay is None:
        return None
    if "traces" not in _replay:
        raise ReplayError(f"--replay {_replay_path}: holds the arguments of a property, not traces")
    return [Trace.from_json(t) for t in _replay["traces"]]


def replay_arguments(names: Sequence[str]) -> dict[str, Any]:
    """The replay file's value of each argument in ``names`` (traces rebuilt)."""
    if _replay is None or "arguments" not in _replay:
        raise ReplayError(f"--replay {_replay_path}: holds the traces of a differential run, not arguments")
    args = _replay["arguments"]
    missing = [n for n in names if n not in args]
    if missing:
        named = ", ".join(missing)
        raise ReplayError(f"--replay {_replay_path}: no value for {named} (a file of another test?)")
    return {n: _decode(args[n]) for n in names}


def _encode(value: Any) -> Any:
    if isinstance(value, Trace):
        return {"trace": value.to_json()}
    json.dumps(value)  # raises TypeError for values a file cannot hold
    return {"value": value}


def _decode(cell: Mapping[str, Any]) -> Any:
    return Trace.from_json(cell["trace"]) if "trace" in cell else cell["value"]


def encodable(arguments: Mapping[str, Any]) -> bool:
    try:
        for v in arguments.values():
            _encode(v)
    except (TypeError, ValueError):
        return False
    return True


def _file_stem(test_id: str, body: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", test_id.split("/")[-1]).strip("_")[:90]
    return f"{name}-{hashlib.sha1(body.encode()).hexdigest()[:8]}"


def write_failure(
    test_id: str,
    *,
    profile: str,
    seed: int,
    traces: Sequence[Trace] = (),
    arguments: Mapping[str, Any] | None = None,
    gherkin: str | None = None,
) -> Path:
    """Save a failing case; returns the JSON file's path (relative when under the working dir)."""
    data: dict[str, Any] = {"format": FORMAT, "test": test_id, "profile": profile, "seed": seed}
    if arguments is not None:
        data["arguments"] = {k: _encode(v) for k, v in arguments.items()}
    else:
        data["traces"] = [t.to_json() for t in traces]
    body = json.dumps(data, indent=1, sort_keys=True)
    _failures_root.mkdir(parents=True, exist_ok=True)
    path = _failures_root / f"{_file_stem(test_id, body)}.json"
    path.write_text(body + "\n", encoding="utf-8")
    if gherkin:
        path.with_suffix(".feature").write_text(gherkin.rstrip() + "\n", encoding="utf-8")
    try:
        return path.resolve().relative_to(Path.cwd())
    except ValueError:
        return path


def replay_command(test_id: str, path: Path) -> str:
    return f"{TOX} -e {_tox_env} -- {shlex.quote(test_id)} --replay {shlex.quote(str(path))}"


def seed_command(test_id: str, seed: int) -> str:
    return f"CONFORMANCE_SEED={seed} {TOX} -e {_tox_env} -- {shlex.quote(test_id)}"


__all__ = [
    "FAILURES_DIR",
    "ReplayError",
    "configure",
    "current_test",
    "encodable",
    "failures_written_to",
    "load_replay",
    "replay_arguments",
    "replay_command",
    "replay_traces",
    "replaying",
    "restore",
    "seed_command",
    "set_current_test",
    "write_failure",
]
