"""Checks of README.md and the documentation site (in every test run, and by ``tox -e docs``).

* The site builds with Sphinx, warnings as errors (the step reference is generated from the
  step library on the way).

* Every Python snippet of README.md that needs no Spark runs as written (each in a fresh
  namespace, from the project folder). Snippets that start Spark (they import ``pyspark`` or
  ``spark_impl``) are left to the Spark snippet test.
* Every relative link of README.md and of docs/**/*.md names a file that exists.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
SPARK = re.compile(r"\b(pyspark|spark_impl|SparkSession)\b")
FENCE = re.compile(r"^(```|~~~)[^\n]*\n.*?^\1[ \t]*$", re.S | re.M)
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"(`+)[^`]*?\1")


def python_snippets(text: str) -> list[str]:
    return [m.group(1) for m in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M)]


def spark_free_snippets() -> list[str]:
    return [s for s in python_snippets(README.read_text(encoding="utf-8")) if not SPARK.search(s)]


def test_the_documentation_site_builds_without_a_warning(tmp_path: Path) -> None:
    from sphinx.cmd.build import build_main

    code = build_main(["-W", "--keep-going", "-q", "-b", "html", str(ROOT / "docs"), str(tmp_path / "html")])
    assert code == 0, "sphinx-build -W failed: run `tox -e docs` for the warnings"
    assert (tmp_path / "html" / "reference" / "steps.html").is_file()


def test_the_readme_has_a_spark_free_snippet() -> None:
    assert spark_free_snippets(), "README.md has no Python snippet that runs without Spark"


@pytest.mark.parametrize("snippet", spark_free_snippets(), ids=lambda s: s.strip().splitlines()[0][:40])
def test_readme_snippet_runs(snippet: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.syspath_prepend(str(ROOT))
    exec(compile(snippet, "README.md snippet", "exec"), {"__name__": "__readme__"})


def markdown_files() -> list[Path]:
    docs = sorted(p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts)
    return [README, *docs]


def relative_links(text: str) -> list[str]:
    """Link targets outside code blocks and code spans, without URLs, mail and in-page anchors."""
    text = INLINE_CODE.sub("", FENCE.sub("", text))
    out = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
            continue
        out.append(target.split("#", 1)[0])
    return out


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    broken = [t for t in relative_links(path.read_text(encoding="utf-8")) if not (path.parent / t).exists()]
    assert not broken, f"{path.relative_to(ROOT)}: links to missing files: {broken}"


def test_the_link_finder_sees_links() -> None:
    sample = "a [page](docs/x.md#part) and ![img](a.png) and [web](https://e.org) `[no](code.md)`"
    assert relative_links(sample) == ["docs/x.md", "a.png"]


#: what the oracle-only run imports beyond the package's own dependencies: the test runner, its
#: plugins, and Sphinx for the test above that builds the site
RUN_NEEDS = ("pytest", "pytest-bdd", "hypothesis", "sphinx", "myst-parser", "furo")


def test_the_quick_start_installs_what_the_oracle_run_imports() -> None:
    """The README's quick start and docs/tutorial/running.md install the extras that hold every
    distribution of RUN_NEEDS (pyproject.toml), so ``pytest --engine reference`` right after it
    collects and passes every test, the site build included."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    holders = {
        need: {name for name, deps in extras.items() if any(re.match(rf"{need}\b", d) for d in deps)}
        for need in RUN_NEEDS
    }
    for page in (README, ROOT / "docs" / "tutorial" / "running.md"):
        install = re.search(r"pip install -e '\.\[([a-z,]+)\]'", page.read_text(encoding="utf-8"))
        assert install, f"{page.name}: no `pip install -e '.[...]'` line"
        chosen = set(install.group(1).split(","))
        missing = sorted(need for need, names in holders.items() if not names & chosen)
        assert not missing, f"{page.name} installs {sorted(chosen)}, which leaves out {missing}"


def test_the_committed_step_reference_is_the_one_the_step_library_makes() -> None:
    """docs/reference/steps.md and guides/_generated/steps_<area>.md are generated from the step
    library and committed, so they read without building the site: they must not be stale."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "step_reference", ROOT / "docs" / "_ext" / "step_reference.py"
    )
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    stale = [
        str(path.relative_to(ROOT))
        for path, text in generator.pages(ROOT).items()
        if not path.is_file() or path.read_text(encoding="utf-8") != text
    ]
    assert not stale, f"stale: {stale}; run `python docs/_ext/step_reference.py` and commit them"
