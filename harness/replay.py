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

import hashlib
import json
import re
import shlex
from collections.abc import Mapping, Sequence
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


class ReplayError(ValueError):
    """A replay file that cannot be used (missing, not JSON, another layout, wrong test)."""


def configure(failures_dir: Path, tox_env: str) -> None:
    """Where failure files go and which tox environment the printed command names."""
    global _failures_root, _tox_env
    _failures_root = failures_dir
    _tox_env = tox_env


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
        raise ReplayError(f"--replay {_replay_path}: no value for {', '.join(missing)} (a file of another test?)")
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
    "encodable",
    "load_replay",
    "replay_arguments",
    "replay_command",
    "replay_traces",
    "replaying",
    "seed_command",
    "write_failure",
]
