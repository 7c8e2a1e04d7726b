"""Sphinx extension: the Gherkin step reference, generated from ``harness.steps.LIBRARY``.

On ``builder-inited`` it registers every step (the shared ones of ``harness/steps.py`` and the
area steps of ``features/test_<area>.py``), then writes Markdown pages that Sphinx reads like
any other source:

* ``reference/steps.md``: every step pattern, its type, the module that owns it, the areas
  whose feature files use it, and its docstring;
* ``guides/_generated/steps_<area>.md``: the same entries for one area (the steps its feature
  file uses plus the steps its test module defines), included by that area's guide.

Both are committed, so they read on any code host without building the site, and nothing
in them is maintained by hand: ``python docs/_ext/step_reference.py`` rewrites them, every
build does too, and ``tests/test_docs.py`` fails when the committed ones are stale.

The feature modules call ``pytest_bdd.scenarios`` at import, which needs a
running pytest; the import below replaces it by a no-op for the time of the import only, so
the modules register their steps exactly as under pytest and nothing else changes.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

AREAS = (
    "keyed_watermarks",
    "partitioned_watermarks",
    "session_windows",
    "eventtime_buffer",
    "watermark_propagation",
    "late_data",
    "sla_admission",
    "exactly_once_aggregation",
    "window_joins",
    "pipeline",
)
AREA_TITLES = {
    "keyed_watermarks": "Keyed watermarks",
    "partitioned_watermarks": "Per-partition watermarks",
    "session_windows": "Session windows",
    "eventtime_buffer": "Event-time reorder buffer",
    "watermark_propagation": "Watermark propagation",
    "late_data": "Late data",
    "sla_admission": "SLA admission",
    "exactly_once_aggregation": "Exactly-once aggregation",
    "window_joins": "Window joins",
    "pipeline": "The oxirs pipeline",
}
SHARED = "harness.steps"
MAX_CHOICES = 4  # more choices than this read better as <name>, listed under the entry
KEYWORDS = {"Given": "given", "When": "when", "Then": "then"}


@contextlib.contextmanager
def _scenarios_disabled() -> Iterator[None]:
    import pytest_bdd

    original = pytest_bdd.scenarios
    pytest_bdd.scenarios = lambda *args, **kwargs: None  # type: ignore[assignment]
    try:
        yield
    finally:
        pytest_bdd.scenarios = original  # type: ignore[assignment]


def load_library(root: Path) -> Any:
    """``harness.steps.LIBRARY`` with every area module's steps registered."""
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    from harness.steps import LIBRARY

    loaded = {Path(m.__file__).resolve() for m in list(sys.modules.values()) if getattr(m, "__file__", None)}
    with _scenarios_disabled():
        for area in AREAS:
            # Under pytest the module is already imported as ``test_<area>``: importing it again
            # under its package name would register every one of its steps a second time.
            if (root / "features" / f"test_{area}.py").resolve() not in loaded:
                importlib.import_module(f"features.test_{area}")
    return LIBRARY


# ---- reading the feature files: which steps each area uses -------------------------------------


def feature_steps(path: Path) -> list[tuple[str, str]]:
    """(type, text) of every step line of a feature file; And/But take the type before them.
    Scenario Outline placeholders are filled with a value of their Examples column."""
    lines = path.read_text(encoding="utf-8").splitlines()
    examples: dict[str, str] = {}
    for i, line in enumerate(lines):
        if line.strip().startswith("Examples"):
            rows: list[list[str]] = []
            for nxt in lines[i + 1 :]:
                if not nxt.strip().startswith("|"):
                    if rows:
                        break
                    continue
                rows.append([c.strip() for c in nxt.strip().strip("|").split("|")])
            if len(rows) >= 2:
                for name, value in zip(rows[0], rows[1], strict=False):
                    examples.setdefault(name, value)
    out: list[tuple[str, str]] = []
    last = "given"
    in_docstring = False
    for line in lines:
        s = line.strip()
        if s.startswith('"""') or s.startswith("```"):
            in_docstring = not in_docstring
            continue
        if in_docstring:
            continue
        word, _, rest = s.partition(" ")
        if word in KEYWORDS:
            last = KEYWORDS[word]
        elif word not in ("And", "But", "*"):
            continue
        text = re.sub(r"<([^<>]+)>", lambda m: examples.get(m.group(1), m.group(0)), rest.strip())
        out.append((last, text))
    return out


def usage(library: Any, root: Path) -> dict[int, set[str]]:
    """Step definition index -> the areas whose feature file uses it."""
    used: dict[int, set[str]] = {}
    for area in AREAS:
        for type_, text in feature_steps(root / "features" / f"{area}.feature"):
            for i, d in enumerate(library.defs):
                if d.type == type_ and d.regex.fullmatch(text):
                    used.setdefault(i, set()).add(area)
    return used


# ---- rendering ---------------------------------------------------------------------------------


def readable(regex: re.Pattern[str]) -> str:
    """A step pattern as a reader writes it: named groups as ``<name>`` (or their few literal
    choices as ``{a|b}``), optional parts in ``[...]``."""
    from re import _parser as sre  # type: ignore[attr-defined]

    names = {v: k for k, v in regex.groupindex.items()}

    def literal(items: Any) -> str | None:
        chars = []
        for op, av in items:
            if op is not sre.LITERAL:
                return None
            chars.append(chr(av))
        return "".join(chars)

    def render(items: Any) -> str:
        out = []
        for op, av in items:
            if op is sre.LITERAL:
                out.append(chr(av))
            elif op is sre.SUBPATTERN:
                gid, sub = av[0], av[-1]
                if gid in names:
                    out.append(_named(names[gid], sub, literal, render, sre))
                else:
                    out.append(render(sub))
            elif op is sre.BRANCH:
                alts = [render(a) for a in av[1]]
                out.append("{" + "|".join(alts) + "}")
            elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
                lo, hi, sub = av
                if (lo, hi) == (0, 1):
                    inner = render(sub)
                    out.append(f"[{inner.strip()}]" if not inner.startswith(" ") else f" [{inner.strip()}]")
                elif all(o is sre.IN for o, _ in sub):
                    out.append(" " if _is_space(sub, sre) else "…")
                else:
                    out.append(render(sub))
            elif op in (sre.ASSERT, sre.ASSERT_NOT, sre.AT):
                continue
            elif op is sre.IN:
                out.append("…")
            elif op is sre.ANY:
                out.append("…")
            else:
                out.append("…")
        return "".join(out)

    text = render(sre.parse(regex.pattern))
    return re.sub(r"\s+", " ", text).strip()


def _named(name: str, sub: Any, literal: Any, render: Any, sre: Any) -> str:
    """A named group: its text when it is fixed (`` in the same batch``), its choices when they
    read as words (``{the last batch|batch <n>}``), else ``<name>``."""
    text = literal(sub)
    if text is not None:
        return text
    items = list(sub)
    if len(items) == 1 and items[0][0] is sre.BRANCH:
        alts = [render(a) for a in items[0][1][1]]
        if len(alts) <= MAX_CHOICES and all(re.search(r"[A-Za-z]{2}", a) for a in alts):
            return "{" + "|".join(alts) + "}"
    return f"<{name}>"


def _is_space(sub: Any, sre: Any) -> bool:
    return any(op is sre.IN and any(x == (sre.CATEGORY, sre.CATEGORY_SPACE) for x in av) for op, av in sub)


def many_choices(regex: re.Pattern[str]) -> dict[str, list[str]]:
    """Named groups with more than MAX_CHOICES literal choices (the area nouns): name -> choices."""
    from re import _parser as sre  # type: ignore[attr-defined]

    out: dict[str, list[str]] = {}

    def walk(items: Any) -> None:
        for op, av in items:
            if op is sre.SUBPATTERN:
                gid, sub = av[0], av[-1]
                name = next((k for k, v in regex.groupindex.items() if v == gid), None)
                inner = list(sub)
                if name and len(inner) == 1 and inner[0][0] is sre.BRANCH:
                    alts = ["".join(chr(c) for o, c in a if o is sre.LITERAL) for a in inner[0][1][1]]
                    if len(alts) > MAX_CHOICES:
                        out[name] = alts
                walk(sub)
            elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
                walk(av[2])
            elif op is sre.BRANCH:
                for a in av[1]:
                    walk(a)

    walk(sre.parse(regex.pattern))
    return out


def docstring(func: Any) -> str:
    return inspect.cleandoc(func.__doc__) if func.__doc__ else ""


def owner_of(d: Any) -> str:
    """The module that owns a step, by its package name: pytest imports an area's module as
    ``test_<area>`` (``features/`` is no package), the generator as ``features.test_<area>``."""
    return f"features.{d.owner}" if d.owner.startswith("test_") else d.owner


def _where(owner: str) -> str:
    return "harness/steps.py" if owner == SHARED else owner.replace(".", "/") + ".py"


def _inline(text: str) -> str:
    """Text as one line of Markdown: double backticks (reST style) become single ones."""
    return " ".join(text.replace("``", "`").split())


def entry(d: Any, areas: set[str], heading: str) -> list[str]:
    owner = "shared" if owner_of(d) == SHARED else owner_of(d).removeprefix("features.test_")
    used = ", ".join(sorted(areas)) if areas else "no feature file yet"
    lines = [
        f"{heading} {d.type.capitalize()} `{readable(d.regex)}`",
        "",
        f"- type: **{d.type.capitalize()}**; owner: {owner} (`{_where(owner_of(d))}`, `{d.func.__name__}`)",
        f"- used by the feature files of: {used}",
    ]
    if "settings" in d.regex.groupindex:
        from harness.steps import SETTING_PHRASES

        phrases = ", ".join(f"`{readable(r)}`" for r, _ in SETTING_PHRASES)
        lines.append(f"- `<settings>`: phrases joined by `,` or `and`, each one of: {phrases}")
    for name, alts in many_choices(d.regex).items():
        lines.append(f"- `<{name}>` is one of: " + ", ".join(f"`{a}`" for a in sorted(alts)))
    lines += [
        "",
        "```text",
        d.pattern,
        "```",
        "",
    ]
    doc = docstring(d.func)
    lines += [_inline(doc) if doc else "_No docstring: the pattern above is the whole description._", ""]
    return lines


def _group(defs: list[tuple[int, Any]]) -> dict[str, list[tuple[int, Any]]]:
    groups: dict[str, list[tuple[int, Any]]] = {"given": [], "when": [], "then": []}
    for i, d in defs:
        groups[d.type].append((i, d))
    return groups


def full_page(library: Any, used: dict[int, set[str]]) -> str:
    out = [
        "# Step reference",
        "",
        "```{note}",
        "Generated from `harness.steps.LIBRARY` by `docs/_ext/step_reference.py` on every build: "
        "edit the docstrings in `harness/steps.py` or `features/test_<area>.py`, never this page.",
        "```",
        "",
        "Each entry gives the step as you write it (`<name>` is a value you fill in, `{a|b}` a "
        "choice, `[...]` optional), then the regular expression it is matched against (the whole "
        "step text must match), the module that defines it and the feature files that use it. "
        "Numbers are milliseconds; `I64_MAX`, `I64_MIN + 5` and `10_000` are accepted; `-` or "
        "`none` in an expected table is null. How a scenario's steps turn into batches is in the "
        "tutorial, [Write a scenario](../tutorial/scenario.md).",
        "",
    ]
    owners = [SHARED] + [f"features.test_{a}" for a in AREAS]
    for owner in owners:
        mine = [(i, d) for i, d in enumerate(library.defs) if owner_of(d) == owner]
        if not mine:
            continue
        if owner == SHARED:
            out += ["## Shared steps (`harness/steps.py`)", ""]
        else:
            area = owner.removeprefix("features.test_")
            out += [f"## {AREA_TITLES[area]} (`features/test_{area}.py`)", ""]
        for type_, defs in _group(mine).items():
            if not defs:
                continue
            out += [f"### {type_.capitalize()}", ""]
            for i, d in defs:
                out += entry(d, used.get(i, set()), "####")
    return "\n".join(out).rstrip() + "\n"


def area_fragment(library: Any, used: dict[int, set[str]], area: str) -> str:
    """The steps of one area: its own and the shared ones its feature file uses."""
    owner = f"features.test_{area}"
    mine = [(i, d) for i, d in enumerate(library.defs) if owner_of(d) == owner or area in used.get(i, set())]
    out = [
        "<!-- generated by docs/_ext/step_reference.py: do not edit -->",
        "",
        f"The steps `features/{area}.feature` uses and the steps `features/test_{area}.py` defines, "
        "generated from the step library at build time; the full list, with the regular "
        "expressions, is the [step reference](../../reference/steps.md). `<name>` is a value, "
        "`{a|b}` a choice, `[...]` optional.",
        "",
    ]
    for type_, defs in _group(mine).items():
        if not defs:
            continue
        out += [f"**{type_.capitalize()}**", ""]
        for _i, d in defs:
            doc = docstring(d.func)
            first = _inline(doc.split("\n\n")[0]) if doc else ""
            where = "shared" if owner_of(d) == SHARED else f"`test_{area}.py`"
            line = f"- `{readable(d.regex)}` ({where})"
            out.append(line + (f": {first}" if first else ""))
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")  # unchanged pages keep their time: no rebuild


def pages(root: Path) -> dict[Path, str]:
    """The generated pages of the project at ``root``: path (under docs/) -> text."""
    library = load_library(root)
    used = usage(library, root)
    docs = root / "docs"
    made = {docs / "reference" / "steps.md": full_page(library, used)}
    for area in AREAS:
        made[docs / "guides" / "_generated" / f"steps_{area}.md"] = area_fragment(library, used, area)
    return made


def generate(app: Any) -> None:
    for path, text in pages(Path(app.srcdir).parent).items():
        _write(path, text)


def setup(app: Any) -> dict[str, Any]:
    app.connect("builder-inited", generate)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    for written, text in pages(Path(__file__).resolve().parents[2]).items():
        _write(written, text)
        print(written)
