"""spark_impl.worker_bytecode: a zip of sources gets a pyc beside each module, and Python then
runs that pyc, with the same results, from the same zip."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from spark_impl.worker_bytecode import add_bytecode, has_bytecode

pytestmark = pytest.mark.oracle_alone  # no engine: it may run beside the pre-run

SOURCES = {
    "pkg/__init__.py": "from pkg.answer import answer\n",
    "pkg/answer.py": "def answer():\n    return sum(range(10)), __file__\n",
    "pkg/py2_example.py": "print 'a Python 2 file'\n",
    "pkg/data.txt": "not code\n",
}


def _zip(path: Path, extra: dict[str, bytes] | None = None) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, text in SOURCES.items():
            z.writestr(name, text)
        for name, data in (extra or {}).items():
            z.writestr(name, data)
    return path


def _import_answer(zip_path: Path) -> tuple[int, str]:
    """pkg.answer() run by a fresh interpreter with the zip first on its path, as Spark's
    Python processes run pyspark."""
    env = dict(os.environ, PYTHONPATH=str(zip_path), PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run(
        [sys.executable, "-c", "import pkg; total, where = pkg.answer(); print(total); print(where)"],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    total, where = done.stdout.split()
    return int(total), where


def test_each_source_gets_a_pyc_that_python_runs_instead_of_compiling(tmp_path: Path) -> None:
    path = _zip(tmp_path / "code.zip")
    assert not has_bytecode(path)
    total, where = _import_answer(path)
    assert (total, Path(where).name) == (45, "answer.py")

    assert add_bytecode(path) == 2  # the Python 2 file keeps its source alone
    assert has_bytecode(path)
    with zipfile.ZipFile(path) as z:
        assert {n: z.read(n).decode() for n in SOURCES} == SOURCES  # every entry as it was
        assert sorted(n for n in z.namelist() if n.endswith(".pyc")) == ["pkg/__init__.pyc", "pkg/answer.pyc"]
    total, where = _import_answer(path)
    assert (total, Path(where).name) == (45, "answer.pyc")


def test_pycs_of_another_python_are_replaced_and_ignored_until_then(tmp_path: Path) -> None:
    foreign = b"\x00\x00\r\n" + bytes(12) + b"not marshalled code"
    path = _zip(tmp_path / "code.zip", {"pkg/__init__.pyc": foreign, "pkg/answer.pyc": foreign})
    assert importlib.util.MAGIC_NUMBER != foreign[:4]
    assert not has_bytecode(path)
    total, where = _import_answer(path)  # zipimport falls back to the source
    assert (total, Path(where).name) == (45, "answer.py")

    assert add_bytecode(path) == 2
    assert has_bytecode(path)
    with zipfile.ZipFile(path) as z:
        assert z.read("pkg/answer.pyc")[:4] == importlib.util.MAGIC_NUMBER
        assert z.namelist().count("pkg/answer.pyc") == 1
    assert _import_answer(path) == (45, str(path / "pkg" / "answer.pyc"))
