"""Runs an engine over test vectors: in process (``module:attr``) or as a command (spec/engine-protocol.md).

Every case ends with a ``CaseResult``: the engine's answer, or a failure
(``timeout``, ``crash``, ``malformed``, ``engine_error``) that names what went
wrong. A run never hangs on an engine and never ends in a stack trace: a
command that stops answering is killed after the timeout, a command that
dies or writes a bad line costs the case it was on, and the cases after it
go to a fresh process.
"""

from __future__ import annotations

import contextlib
import os
import queue
import shlex
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from harness.differential import run_safely
from harness.engine import Engine, Unsupported
from harness.traces import InvalidConfig
from harness.vectors import (
    CaseResult,
    ExpectedError,
    Vector,
    VectorFormatError,
    answer_from_json,
    case_input_json,
    dumps_line,
    loads_strict,
    write_case_inputs,
)

Progress = Callable[[int], None]  # called with the number of cases just finished

#: in a command, the paths of the cases file it reads and of the answers file it writes
CASES_PLACEHOLDER, ANSWERS_PLACEHOLDER = "{cases}", "{answers}"

#: a command that answers nothing this many starts in a row is not started again
MAX_FRUITLESS_STARTS = 3
TRAILER_SECONDS = 5.0  # how long the tool reads on after the last answer, for a provenance line
STDERR_TAIL_LINES = 15


class EngineStartError(RuntimeError):
    """The engine could not be loaded or its command could not be started at all."""


# ---- in process --------------------------------------------------------------------------


def run_in_process(
    engine: Engine, vectors: Sequence[Vector], batch_size: int = 200, progress: Progress | None = None
) -> dict[str, CaseResult]:
    """``engine.run`` over the cases in groups of ``batch_size`` (one call each; an engine such as
    Spark runs a group as one job); a raising run is split until the raising case is found."""
    results: dict[str, CaseResult] = {}
    runnable = []
    for v in vectors:
        if v.area in engine.areas:
            runnable.append(v)
        else:
            results[v.id] = CaseResult(v.id, unsupported=f"engine {engine.name} does not implement {v.area}")
    if progress and len(results):
        progress(len(results))
    for start in range(0, len(runnable), max(1, batch_size)):
        group = runnable[start : start + batch_size]
        answers = run_safely(engine, [v.trace for v in group])
        for v, answer in zip(group, answers, strict=True):
            results[v.id] = _in_process_result(v.id, answer)
        if progress:
            progress(len(group))
    return results


def _in_process_result(case_id: str, answer: Any) -> CaseResult:
    if isinstance(answer, Unsupported):
        return CaseResult(case_id, unsupported=str(answer) or "unsupported")
    if isinstance(answer, InvalidConfig):
        return CaseResult(case_id, error=ExpectedError("InvalidConfig", str(answer)))
    if isinstance(answer, Exception):  # run_safely: the engine raised on this case alone
        return CaseResult(case_id, failure=("engine_error", str(answer)))
    return CaseResult(case_id, output=answer)


# ---- as a command ------------------------------------------------------------------------

_EOF = object()


class CommandEngine:
    """An engine that is a command: cases as JSON Lines on its standard input, one answer line
    per case on its standard output, in any order (spec/engine-protocol.md)."""

    def __init__(
        self,
        command: str | Sequence[str],
        timeout: float = 60.0,
        cwd: str | Path | None = None,
        env: Mapping[str, str] | None = None,
        case_format: str = "jsonl",
    ) -> None:
        self.argv = shlex.split(command) if isinstance(command, str) else list(command)
        if not self.argv:
            raise EngineStartError("the engine command is empty")
        self.name = shlex.join(self.argv)
        self.timeout = timeout
        self.cwd = cwd
        self.env = {**os.environ, **(env or {})}
        self.case_format = case_format
        self.starts = 0  # processes started, for the run's summary
        self.provenance: dict[str, str] = {}  # what the engine said of itself (its provenance lines)

    @property
    def uses_files(self) -> bool:
        """A command naming ``{cases}`` reads the cases from a file and writes ``{answers}``."""
        return any(CASES_PLACEHOLDER in arg for arg in self.argv)

    def run(self, vectors: Sequence[Vector], progress: Progress | None = None) -> dict[str, CaseResult]:
        if self.uses_files:
            return self._run_with_files(vectors, progress)
        results: dict[str, CaseResult] = {}
        pending = list(vectors)
        fruitless = 0
        while pending:
            answered = self._one_process(pending, results, progress)
            pending = [v for v in pending if v.id not in results]
            fruitless = 0 if answered else fruitless + 1
            if pending and fruitless >= MAX_FRUITLESS_STARTS:
                last = next(r for r in reversed(list(results.values())) if r.failure is not None)
                detail = (
                    f"not run: the engine failed {fruitless} times in a row without answering a case "
                    f"(last: {last.failure[1] if last.failure else ''})"
                )
                for v in pending:
                    results[v.id] = CaseResult(v.id, failure=("crash", detail))
                if progress:
                    progress(len(pending))
                pending = []
        return results

    def _start(self, stderr: IO[bytes]) -> subprocess.Popen[bytes]:
        try:
            proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                cwd=self.cwd,
                env=self.env,
            )
        except OSError as e:
            raise EngineStartError(f"cannot start {self.name}: {e}") from None
        self.starts += 1
        return proc

    def _one_process(
        self, pending: Sequence[Vector], results: dict[str, CaseResult], progress: Progress | None
    ) -> int:
        """Sends every pending case to one process and collects answers until all are answered or
        the process times out, exits or writes a bad line; returns the number of good answers."""
        areas = {v.id: v.area for v in pending}
        outstanding = dict.fromkeys(v.id for v in pending)  # insertion-ordered: the engine's likely order
        answered = 0
        with tempfile.TemporaryFile() as stderr:
            proc = self._start(stderr)
            lines: queue.Queue[Any] = queue.Queue()
            threading.Thread(target=_feed, args=(proc, pending), daemon=True).start()
            threading.Thread(target=_read, args=(proc, lines), daemon=True).start()
            line_number = 0

            def settle(case_id: str, result: CaseResult) -> None:
                results[case_id] = result
                outstanding.pop(case_id, None)
                if progress:
                    progress(1)

            try:
                while outstanding:
                    first = next(iter(outstanding))
                    try:
                        line = lines.get(timeout=self.timeout)
                    except queue.Empty:
                        settle(first, CaseResult(first, failure=("timeout", self._timeout_text(answered))))
                        break
                    if line is _EOF:
                        code = _wait(proc, 5.0)
                        settle(first, CaseResult(first, failure=("crash", _crash_text(code, stderr))))
                        break
                    line_number += 1
                    try:
                        result = _parse_answer(line, areas, outstanding, line_number)
                    except _BadLine as bad:
                        settle(
                            bad.case_id or first,
                            CaseResult(bad.case_id or first, failure=("malformed", str(bad))),
                        )
                        break  # the stream can no longer be trusted: the rest go to a fresh process
                    if isinstance(result, Provenance):
                        self.provenance.update(result.fields)
                        continue
                    settle(result.id, result)
                    answered += 1
                if not outstanding:
                    self._read_trailer(lines, line_number)
            finally:
                _stop(proc)
        return answered

    def _read_trailer(self, lines: queue.Queue[Any], line_number: int) -> None:
        """After the last answer, what the engine writes until it exits (a provenance line may
        come last); waits at most ``TRAILER_SECONDS`` for it, and ignores what answers no case."""
        deadline = time.monotonic() + TRAILER_SECONDS
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = lines.get(timeout=left)
            except queue.Empty:
                return
            if line is _EOF:
                return
            line_number += 1
            with contextlib.suppress(_BadLine):
                result = _parse_answer(line, {}, {}, line_number)
                if isinstance(result, Provenance):
                    self.provenance.update(result.fields)

    def _run_with_files(self, vectors: Sequence[Vector], progress: Progress | None) -> dict[str, CaseResult]:
        """One process for all cases: they go to a file (JSON Lines or Arrow IPC), the answers come
        back in a JSON Lines file; ``--timeout`` bounds the whole run."""
        results: dict[str, CaseResult] = {}
        areas = {v.id: v.area for v in vectors}
        with tempfile.TemporaryDirectory(prefix="engine-io-") as folder, tempfile.TemporaryFile() as stderr:
            cases = Path(folder) / ("cases.arrow" if self.case_format == "arrow" else "cases.jsonl")
            answers = Path(folder) / "answers.jsonl"
            write_case_inputs(cases, vectors)
            argv = [
                a.replace(CASES_PLACEHOLDER, str(cases)).replace(ANSWERS_PLACEHOLDER, str(answers))
                for a in self.argv
            ]
            try:
                proc = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr, cwd=self.cwd, env=self.env
                )
            except OSError as e:
                raise EngineStartError(f"cannot start {self.name}: {e}") from None
            self.starts += 1
            code = _wait(proc, self.timeout)
            if code is None:
                _stop(proc)
            stray: list[str] = []  # bad lines that name no unanswered case
            lines = answers.read_bytes().splitlines() if answers.is_file() else []
            for number, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                outstanding = {i: None for i in areas if i not in results}
                try:
                    result = _parse_answer(line, areas, outstanding, number, "answers file line")
                except _BadLine as bad:
                    if bad.case_id:
                        results[bad.case_id] = CaseResult(bad.case_id, failure=("malformed", str(bad)))
                    else:
                        stray.append(str(bad))
                    continue
                if isinstance(result, Provenance):
                    self.provenance.update(result.fields)
                    continue
                results[result.id] = result
            for v in vectors:
                if v.id in results:
                    continue
                if stray:
                    results[v.id] = CaseResult(v.id, failure=("malformed", stray.pop(0)))
                elif code is None:
                    detail = f"the engine did not finish within {self.timeout:g} s and was killed"
                    results[v.id] = CaseResult(v.id, failure=("timeout", detail))
                elif code != 0:
                    results[v.id] = CaseResult(v.id, failure=("crash", _crash_text(code, stderr)))
                else:
                    detail = "the engine finished without answering this case"
                    results[v.id] = CaseResult(v.id, failure=("missing", detail))
        if progress:
            progress(len(vectors))
        return results

    def _timeout_text(self, answered: int) -> str:
        return (
            f"no answer within {self.timeout:g} s (the engine is killed; {answered} cases were answered "
            "by this process before)"
        )


@dataclass(frozen=True)
class Provenance:
    """A line that answers no case: what the engine says it is and how it ran."""

    fields: dict[str, str]


def provenance_fields(obj: Mapping[str, Any], place: str, shown: str) -> dict[str, str]:
    """The fields of a provenance line (spec/engine-protocol.md): an object of names to strings
    or numbers, nothing else on the line."""
    fields = obj["provenance"]
    if set(obj) != {"provenance"} or not isinstance(fields, dict) or not fields:
        form = '{"provenance": {name: value, ...}}'
        raise _BadLine(f"{place}: a provenance line is {form} alone: {shown}", None)
    bad = [k for k, v in fields.items() if isinstance(v, bool) or not isinstance(v, (str, int, float))]
    if bad:
        raise _BadLine(
            f"{place}: provenance values are strings or numbers, not those of {bad}: {shown}", None
        )
    return {str(k): str(v) for k, v in fields.items()}


class _BadLine(Exception):
    def __init__(self, message: str, case_id: str | None) -> None:
        super().__init__(message)
        self.case_id = case_id


def _parse_answer(
    line: bytes,
    areas: Mapping[str, str],
    outstanding: Mapping[str, None],
    number: int,
    where: str = "engine output line",
) -> CaseResult | Provenance:
    place = f"{where} {number}"
    shown = line[:200].decode("utf-8", "replace").rstrip()
    try:
        obj = loads_strict(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise _BadLine(f"{place} is not a JSON answer ({e}): {shown}", None) from None
    if isinstance(obj, dict) and "provenance" in obj and "id" not in obj:
        return Provenance(provenance_fields(obj, place, shown))
    case_id = obj.get("id") if isinstance(obj, dict) else None
    owner = case_id if isinstance(case_id, str) and case_id in outstanding else None
    if isinstance(case_id, str) and case_id in areas and owner is None:
        raise _BadLine(f"{place} answers case {case_id!r} a second time", None)
    try:
        return answer_from_json(obj, areas, place, allow_failure=False)
    except VectorFormatError as e:
        raise _BadLine(str(e), owner) from None


def _feed(proc: subprocess.Popen[bytes], vectors: Sequence[Vector]) -> None:
    """Writes the cases on the engine's stdin, then closes it (the engine sees EOF)."""
    assert proc.stdin is not None
    try:
        for v in vectors:
            proc.stdin.write((dumps_line(case_input_json(v)) + "\n").encode("utf-8"))
        proc.stdin.close()
    except (BrokenPipeError, OSError, ValueError):
        pass  # the engine stopped reading: its answers (or their absence) tell the story


def _read(proc: subprocess.Popen[bytes], lines: queue.Queue[Any]) -> None:
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            if line.strip():
                lines.put(line)
    except (OSError, ValueError):
        pass
    lines.put(_EOF)


def _wait(proc: subprocess.Popen[bytes], seconds: float) -> int | None:
    try:
        return proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return None


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    _wait(proc, 10.0)
    for stream in (proc.stdin, proc.stdout):
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass


def _crash_text(code: int | None, stderr: IO[bytes]) -> str:
    how = "closed its output" if code is None else f"exited with code {code}"
    stderr.seek(0)
    tail = stderr.read().decode("utf-8", "replace").strip().splitlines()[-STDERR_TAIL_LINES:]
    said = ("; its stderr ends:\n" + "\n".join(tail)) if tail else " (nothing on stderr)"
    return f"the engine {how} before answering this case{said}"
