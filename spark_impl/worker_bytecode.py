"""Bytecode for the Python code that Spark's own Python processes import.

The pip package of PySpark ships its Python code twice: as the installed
``pyspark`` package, and as ``pyspark/python/lib/pyspark.zip`` (with py4j's
zip beside it). Every Python process Spark starts puts those zips first on its
path: the daemon that forks the workers, the driver-side runner of each
``transformWithState`` stage, the runner of a Python streaming source and the
data-source planners, several per query start. A zip holds sources only and
Python cannot cache bytecode inside one, so each of those processes compiles
the pyspark modules it imports again, about 0.5 s of CPU per process here.

``add_bytecode`` rewrites each zip with a ``.pyc`` beside every ``.py``: an
unchecked hash-based pyc (PEP 552) compiled from exactly the source beside it,
which Python's zipimport loads instead of compiling. The code that runs is the
same; an interpreter of another Python version finds a magic number it does
not know and compiles the source as before. The tox environments run
``python -m spark_impl.worker_bytecode`` before the suites; a user may run it
once after installing or upgrading pyspark, while no Spark runs from that
installation (a running process has read the old zip's directory).
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import sys
import tempfile
import warnings
import zipfile
from pathlib import Path

#: PEP 552 flags: hash-based, source not checked (the pyc sits beside its only source)
UNCHECKED_HASH = (1).to_bytes(4, "little")


def worker_zips() -> list[Path]:
    """The zips of Python code in the installed pyspark's ``python/lib``."""
    import pyspark

    return sorted((Path(pyspark.__file__).parent / "python" / "lib").glob("*.zip"))


def _pyc(zip_path: Path, name: str, source: bytes) -> bytes | None:
    try:
        with warnings.catch_warnings():  # pyspark's own tests hold a few SyntaxWarnings
            warnings.simplefilter("ignore")
            # the file name zipimport gives the code when it compiles the source itself
            code = compile(source, f"{zip_path}{os.sep}{name}", "exec", dont_inherit=True)
    except SyntaxError:  # e.g. a Python 2 example: zipimport reports it when it is imported
        return None
    return (
        importlib.util.MAGIC_NUMBER
        + UNCHECKED_HASH
        + importlib.util.source_hash(source)
        + marshal.dumps(code)
    )


def has_bytecode(zip_path: Path) -> bool:
    """Whether the zip holds pycs, all of this interpreter's (``add_bytecode`` wrote it)."""
    with zipfile.ZipFile(zip_path) as z:
        pycs = [n for n in z.namelist() if n.endswith(".pyc")]
        return bool(pycs) and all(z.read(n)[:4] == importlib.util.MAGIC_NUMBER for n in pycs)


def add_bytecode(zip_path: Path) -> int:
    """Rewrites ``zip_path`` with this interpreter's pyc beside each source (older pycs
    replaced) and returns how many it holds; the new zip replaces the old one in one rename."""
    written = 0
    fd, tmp = tempfile.mkstemp(prefix=zip_path.name + ".", suffix=".tmp", dir=zip_path.parent)
    os.close(fd)
    try:
        with zipfile.ZipFile(zip_path) as old, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as new:
            for info in old.infolist():
                if info.filename.endswith(".pyc"):
                    continue
                source = old.read(info)
                new.writestr(info, source)
                if info.filename.endswith(".py"):
                    pyc = _pyc(zip_path, info.filename, source)
                    if pyc is not None:
                        pyc_info = zipfile.ZipInfo(info.filename + "c", info.date_time)
                        pyc_info.compress_type = zipfile.ZIP_DEFLATED
                        new.writestr(pyc_info, pyc)
                        written += 1
        os.chmod(tmp, os.stat(zip_path).st_mode & 0o777)
        os.replace(tmp, zip_path)
    except BaseException:
        os.unlink(tmp)
        raise
    return written


def main() -> int:
    """Adds bytecode to every worker zip that lacks it; one line per zip. A zip it cannot
    rewrite (a read-only installation) is reported and left as it is: only speed is lost."""
    for path in worker_zips():
        if has_bytecode(path):
            print(f"{path}: has bytecode for this Python already")
            continue
        try:
            count = add_bytecode(path)
        except OSError as error:
            print(f"{path}: left as it is ({error}); Spark's Python processes compile it at each start")
            continue
        print(f"{path}: {count} modules compiled in")
    return 0


if __name__ == "__main__":
    sys.exit(main())
