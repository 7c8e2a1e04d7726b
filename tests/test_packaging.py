"""What ``pip install .`` puts in the wheel: every package of the installed folders.

A checkout imports every folder it has, and so does the suites' editable install; a user's
``pip install .`` (README, "Validate your engine") gets only what the wheel holds. A listed set of
packages once left out ``spark_impl.keyed_watermarks`` when that module became a package, so
the installed keyed operator did not import; pyproject.toml now finds them by pattern.
"""

from __future__ import annotations

import tomllib
from fnmatch import fnmatchcase
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.oracle_alone


def installed(config: dict, package: str) -> bool:
    """Whether setuptools' configuration in ``config`` (``[tool.setuptools]``) installs ``package``."""
    packages = config["packages"]
    if isinstance(packages, list):
        return package in packages
    found = packages["find"]
    return any(fnmatchcase(package, p) for p in found.get("include", ["*"])) and not any(
        fnmatchcase(package, p) for p in found.get("exclude", [])
    )


def test_every_package_under_an_installed_folder_is_installed() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    tops = [p.parent.name for p in ROOT.glob("*/__init__.py") if installed(config, p.parent.name)]
    assert {"harness", "reference", "spark_impl", "spark_native", "strategies"} <= set(tops), tops
    inside = sorted(
        ".".join(p.parent.relative_to(ROOT).parts) for top in tops for p in (ROOT / top).rglob("__init__.py")
    )
    assert [p for p in inside if not installed(config, p)] == [], "packages the wheel would leave out"
    # the listed set this replaced, which left the keyed operator's package out
    old = {
        "packages": ["harness", "reference", "spark_impl", "spark_impl.testing", "spark_native", "strategies"]
    }
    assert not installed(old, "spark_impl.keyed_watermarks")
