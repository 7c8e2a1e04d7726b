"""The trace source written in Java (java/eventtime/flink/TraceSource.java), built and handed to PyFlink.

PyFlink cannot give a job a watermark generator of its own (a Python one reaches Flink as a py4j proxy
the job refuses to serialize), so the generator and the FLIP-27 source whose split-local outputs run it
are Java, as Flink documents them. The class is compiled with the JDK's ``javac`` against PyFlink's own
jars the first time it is needed and kept in a jar named by a hash of the source and Flink's version.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import weakref
import zipfile
from pathlib import Path
from typing import Any

JAVA_SOURCE = Path(__file__).resolve().parent / "java" / "eventtime" / "flink" / "TraceSource.java"


class JavaBuildError(RuntimeError):
    pass


def _cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "eventtime-conformance"


def _javac() -> str:
    home = os.environ.get("JAVA_HOME")
    candidate = os.path.join(home, "bin", "javac") if home else None
    found = candidate if candidate and os.path.exists(candidate) else shutil.which("javac")
    if found is None:
        raise JavaBuildError("javac not found (set JAVA_HOME to a JDK 11 or newer): the trace source is Java")
    return found


def jar_path() -> Path:
    """The jar of the trace source, compiled now unless a jar of this source and Flink exists."""
    import pyflink
    from pyflink.version import __version__

    flink_lib = Path(pyflink.__file__).resolve().parent / "lib"
    digest = hashlib.sha256(JAVA_SOURCE.read_bytes() + __version__.encode()).hexdigest()[:16]
    jar = _cache_dir() / f"trace-source-{digest}.jar"
    if jar.exists():
        return jar
    jar.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as classes:
        command = [_javac(), "--release", "11", "-cp", str(flink_lib / "*"), "-d", classes, str(JAVA_SOURCE)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise JavaBuildError(f"javac failed on {JAVA_SOURCE.name}:\n{done.stderr}")
        partial = jar.with_suffix(f".{os.getpid()}.tmp")
        with zipfile.ZipFile(partial, "w") as archive:  # a jar is a zip; no manifest is needed
            for path in sorted(Path(classes).rglob("*.class")):
                archive.write(path, path.relative_to(classes).as_posix())
        partial.replace(jar)  # atomic, so a concurrent run never reads half a jar
    return jar


def add_jar(env: Any) -> None:
    """Gives ``env``'s jobs the trace source's jar, once per environment."""
    if env not in _ADDED:
        env.add_jars(jar_path().as_uri())
        _ADDED.add(env)


_ADDED: weakref.WeakSet[Any] = weakref.WeakSet()


def stream(
    env: Any, script: list[str], type_info: Any, *, hold_open: bool = False, name: str = "trace partitions"
) -> Any:
    """A DataStream replaying ``script`` (TraceSource's lines) through the Java source, each split
    with Flink's watermark generator of the trace's partitions; ``hold_open``: the source stays
    open after the script (TraceSource.holdingOpen)."""
    from pyflink.common import WatermarkStrategy
    from pyflink.datastream.connectors import Source
    from pyflink.java_gateway import get_gateway

    add_jar(env)
    java_class = get_gateway().jvm.eventtime.flink.TraceSource
    text = "\n".join(script)
    source = Source(java_class.holdingOpen(text) if hold_open else java_class(text))
    strategy = WatermarkStrategy(java_class.watermarkStrategy())
    return env.from_source(source, strategy, name, type_info)


def line(action: str, split: str, row: tuple[Any, ...] = ()) -> str:
    """One line of a TraceSource script: an action, a split id and a record's fields (none null)."""
    for value in row:
        if value is None or (isinstance(value, str) and ("\t" in value or "\n" in value)):
            raise ValueError(f"a field of the trace source is null or holds a tab or a newline: {value!r}")
    return "\t".join([action, split, *map(str, row)])
