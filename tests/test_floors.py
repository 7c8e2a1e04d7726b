"""The floors of docs/architecture.md, checked from the imports: which package may import which,
no engine named outside the harness's registry, and no module in an import circle.

The rule is the table in docs/architecture.md ("The floors"), read from the page, so the page
and the check cannot drift apart. The import graph is grimp's: every ``import`` statement of the
packages, also those inside functions. Each check is also run on a graph or a source with a
planted violation, which it must report.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import grimp
import pytest

pytestmark = pytest.mark.oracle_alone  # no Spark: it may run beside the Spark pre-run

ROOT = Path(__file__).resolve().parent.parent
ARCHITECTURE = ROOT / "docs" / "architecture.md"
#: what the harness must never import (issue of the floors: the ground floor names no engine)
ENGINES_AND_TESTS = (
    "spark_impl", "spark_native", "flink_engine", "beam_engine", "bytewax_engine", "properties",
)  # fmt: skip
#: the harness modules that may name an engine module as a string: the registry and the oracle
REGISTRY_MODULES = ("harness/engine.py", "harness/reference_engine.py")
IMPORT_FUNCTIONS = frozenset({"import_module", "__import__", "find_spec", "spec_from_file_location"})


def floors() -> dict[str, frozenset[str]]:
    """package -> the packages it may import, from the table of docs/architecture.md."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text.split("## The floors", 1)[1].split("\n## ", 1)[0]
    table: dict[str, frozenset[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and re.fullmatch(r"`\w+`", cells[0]):
            table[cells[0].strip("`")] = frozenset(re.findall(r"`(\w+)`", cells[2]))
    return table


def import_graph() -> grimp.ImportGraph:
    # the test folder rides along so that an import of it from a product package is seen
    return grimp.build_graph(*floors(), "properties", cache_dir=None)


def floor_violations(graph: grimp.ImportGraph, table: Mapping[str, frozenset[str]]) -> list[str]:
    """Each import from one package into another that its row does not allow."""
    found = []
    for importer in sorted(m for m in graph.modules if m.split(".")[0] in table):
        top = importer.split(".")[0]
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            target = imported.split(".")[0]
            if target != top and target not in table[top]:
                found.append(f"{importer} imports {imported}: {top} may import {sorted(table[top])}")
    return found


def import_circles(graph: grimp.ImportGraph, packages: Iterable[str]) -> list[list[str]]:
    """The import circles among the modules of ``packages``: strongly connected components of
    more than one module (Tarjan's algorithm), or a module importing itself."""
    modules = sorted(m for m in graph.modules if m.split(".")[0] in set(packages))
    edges = {
        m: sorted(i for i in graph.find_modules_directly_imported_by(m) if i in modules) for m in modules
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in edges[module]:
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1 or module in edges[module]:
                circles.append(sorted(component))

    for module in modules:
        if module not in index:
            visit(module)
    return circles


def engines_named(source: str, forbidden: Iterable[str] = ENGINES_AND_TESTS) -> list[str]:
    """Module names of ``forbidden`` packages given to an import function (``importlib``'s and
    the like) as a string or the start of an f-string: an import grimp cannot see."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and node.args):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name not in IMPORT_FUNCTIONS:
            continue
        first = node.args[0]
        if isinstance(first, ast.JoinedStr) and first.values and isinstance(first.values[0], ast.Constant):
            first = first.values[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            if first.value.split(".")[0] in set(forbidden):
                found.append(f"line {node.lineno}: {name}({first.value!r}...)")
    return found


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return import_graph()


def test_the_table_keeps_the_harness_off_every_engine() -> None:
    table = floors()
    assert {"harness", "reference", "strategies", "spark_impl", "spark_native", "flink_engine"} <= set(table)
    assert not table["harness"] & set(ENGINES_AND_TESTS)
    assert all(allowed <= set(table) for allowed in table.values()), table


def test_every_import_between_packages_is_one_the_floors_allow(graph: grimp.ImportGraph) -> None:
    assert floor_violations(graph, floors()) == []


def test_no_module_of_the_packages_sits_in_an_import_circle(graph: grimp.ImportGraph) -> None:
    assert import_circles(graph, floors()) == []


def test_the_harness_names_engines_only_in_its_registry() -> None:
    found = {}
    for path in sorted((ROOT / "harness").glob("*.py")):
        if path.relative_to(ROOT).as_posix() not in REGISTRY_MODULES:
            found[path.name] = engines_named(path.read_text(encoding="utf-8"))
    assert {name: names for name, names in found.items() if names} == {}


# ---- planted violations: each check must report them ------------------------------------------


def test_a_harness_module_importing_spark_is_reported() -> None:
    graph = import_graph()
    graph.add_import(importer="harness.steps", imported="spark_impl.session")
    graph.add_import(importer="harness.reports", imported="properties.conftest")
    found = floor_violations(graph, floors())
    assert [f.split(":")[0] for f in found] == [
        "harness.reports imports properties.conftest",
        "harness.steps imports spark_impl.session",
    ]


def test_an_import_circle_is_reported_with_every_module_on_it() -> None:
    graph = import_graph()
    # the circle the layout registry had: the inspection imported every operator
    graph.add_import(importer="spark_impl.checkpoints", imported="spark_impl.keyed_watermarks")
    (circle,) = import_circles(graph, floors())
    # keyed_watermarks reaches checkpoints directly and through the modules it shares with others
    assert {"spark_impl.checkpoints", "spark_impl.keyed_watermarks", "spark_impl.scaleout"} <= set(circle)
    assert all(m.startswith("spark_impl.") for m in circle), circle
    graph.add_import(importer="harness.traces", imported="harness.reports")
    circles = import_circles(graph, floors())
    assert len(circles) == 2 and all(len(c) >= 2 for c in circles), circles


def test_an_engine_loaded_by_name_outside_the_registry_is_reported() -> None:
    source = (
        "import importlib\n"
        "def load(area):\n"
        "    importlib.import_module('spark_impl.engine')\n"
        "    importlib.import_module(f'properties.{area}_strategies')\n"
        "    importlib.import_module(f'reference.{area}')\n"
        "    __import__('flink_engine')\n"
    )
    assert engines_named(source) == [
        "line 3: import_module('spark_impl.engine'...)",
        "line 4: import_module('properties.'...)",
        "line 6: __import__('flink_engine'...)",
    ]
