"""How many real bugs do the Spark suites catch? Plants each mutant of the catalogue in a copy of
the tree and runs its area's Spark suites on it, stopping at the first failure.

    python scripts/mutants.py                      # every mutant (tox -e mutants)
    python scripts/mutants.py late_data shared     # the mutants of these areas only
    python scripts/mutants.py --list               # the catalogue, nothing run
    python scripts/mutants.py --baseline sla_admission   # the suites on the unmutated copy: they must pass

The catalogue, ``mutants/catalogue.toml``, holds realistic bugs of ``spark_impl/``: each an exact
snippet of one file and its replacement, the area whose suites should catch it (``shared`` ones
name the areas whose operators use the code). A mutant is killed when its suites fail:
``features/test_<area>.py``, ``properties/test_<area>.py``, ``tests/test_spark_<area>*.py``,
the sink step's tests, which every operator's ``write_tables`` runs (``SINK_STEP_TESTS``), and
the layout test, which runs the area's scenarios again under another layout (``LAYOUT_TESTS``), on
``--engine spark`` with the test job's Hypothesis profile (so without the tests marked
``conformance_job``, as in the test job). The script prints, per mutant, the
test that killed it and the time it took, then the kill rate per area and its own run time, and
writes them to ``reports/mutants.json``. It exits 0 whatever survives: it measures, it does not
judge (a survivor gets a test or a stated reason it is equivalent).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CATALOGUE = ROOT / "mutants" / "catalogue.toml"
REPORT = ROOT / "reports" / "mutants.json"
#: a mutant whose suites run longer than this is stopped and counted as surviving
TIMEOUT_S = 1800


@dataclass(frozen=True)
class Mutant:
    id: str
    area: str
    file: str
    description: str
    original: str
    mutated: str
    areas: tuple[str, ...]  # whose suites run: the area's own, or for shared code every user's


def load(path: Path = CATALOGUE) -> list[Mutant]:
    """The catalogue, each mutant checked to apply to exactly one place of the tree as it is."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    out = []
    for m in data["mutant"]:
        areas = tuple(m.get("areas_using") or [m["area"]])
        mutant = Mutant(m["id"], m["area"], m["file"], m["description"], m["original"], m["mutated"], areas)
        found = (ROOT / mutant.file).read_text(encoding="utf-8").count(mutant.original)
        if found != 1:
            raise SystemExit(f"mutants: {mutant.id}: its original text occurs {found} times in {mutant.file}")
        out.append(mutant)
    ids = [m.id for m in out]
    if len(set(ids)) != len(ids):
        raise SystemExit("mutants: two mutants share an id")
    return out


def suites(areas: tuple[str, ...]) -> list[str]:
    """The test job's Spark suites of these areas, as paths relative to the tree."""
    found: list[str] = []
    for area in areas:
        for pattern in (
            f"features/test_{area}.py",
            f"properties/test_{area}.py",
            f"tests/test_spark_{area}*.py",
        ):
            found += sorted(str(p.relative_to(ROOT)) for p in ROOT.glob(pattern))
    return list(dict.fromkeys([*found, SINK_STEP_TESTS, LAYOUT_TESTS]))


#: spark_impl.scaleout.SinkStep's own tests (on keyed watermarks): the code every area's
#: write_tables and the engine run
SINK_STEP_TESTS = "tests/test_spark_sink_step.py"
#: the areas' scenarios again under another physical layout (TR-18), on the selected areas' traces
LAYOUT_TESTS = "properties/test_layouts.py"


def copy_tree(into: Path) -> None:
    """The files git knows, as they are in the working tree (nothing built, no .tox)."""
    listed = (
        subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True)
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            target = into / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


@dataclass
class Outcome:
    mutant: Mutant
    killed: bool
    by: str  # the first failing test, or why it counts as surviving
    seconds: float


FAILED_RE = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.MULTILINE)


def run(mutant: Mutant, python: str) -> Outcome:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"mutant-{mutant.id}-") as tmp:
        tree = Path(tmp)
        copy_tree(tree)
        target = tree / mutant.file
        target.write_text(
            target.read_text(encoding="utf-8").replace(mutant.original, mutant.mutated), encoding="utf-8"
        )
        # the copy first on every path, so the driver and Spark's Python workers import the mutant
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [tmp, os.environ.get("PYTHONPATH")]))}
        argv = [python, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-rfE", "--engine", "spark",
                *suites(mutant.areas)]  # fmt: skip
        try:
            done = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return Outcome(mutant, False, f"timed out after {TIMEOUT_S} s", time.monotonic() - started)
        seconds = time.monotonic() - started
        if done.returncode == 0:
            return Outcome(mutant, False, "survived: every test passed", seconds)
        failed = FAILED_RE.findall(done.stdout)
        if done.returncode not in (1, 2) or not failed:
            tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
            return Outcome(
                mutant, True, f"the run stopped (exit {done.returncode}): {' | '.join(tail)}", seconds
            )
        return Outcome(mutant, True, failed[0], seconds)


def report(outcomes: list[Outcome], seconds: float) -> dict:
    by_area: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        by_area[o.mutant.area].append(o)
    areas = {
        area: {"mutants": len(os_), "killed": sum(o.killed for o in os_)}
        for area, os_ in sorted(by_area.items())
    }
    return {
        "seconds": round(seconds, 1),
        "killed": sum(o.killed for o in outcomes),
        "mutants": len(outcomes),
        "areas": areas,
        "outcomes": [
            {
                "id": o.mutant.id,
                "area": o.mutant.area,
                "killed": o.killed,
                "by": o.by,
                "seconds": round(o.seconds, 1),
            }
            for o in outcomes
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("areas", nargs="*", help="only the mutants of these areas (an area, or shared)")
    parser.add_argument("--list", action="store_true", help="print the catalogue and run nothing")
    parser.add_argument(
        "--baseline",
        action="store_true",
        help="run the chosen mutants' suites once on an unmutated copy instead: a kill means something "
        "only where they pass",
    )
    args = parser.parse_args(argv)
    catalogue = load()
    chosen = [m for m in catalogue if not args.areas or m.area in args.areas]
    if not chosen:
        raise SystemExit(f"mutants: no mutant of {args.areas}; areas: {sorted({m.area for m in catalogue})}")
    if args.baseline:
        areas = tuple(dict.fromkeys(a for m in chosen for a in m.areas))
        o = run(Mutant("baseline", "-", chosen[0].file, "no mutant", "", "", areas), sys.executable)
        verdict = f"FAILS: {o.by}" if o.killed else "passes"
        print(f"mutants: baseline of {', '.join(areas)}: {verdict} ({o.seconds:.0f} s)")
        return 1 if o.killed else 0
    if args.list:
        for m in chosen:
            print(f"{m.id:32} {m.area:26} {m.file}: {m.description}")
        return 0
    started = time.monotonic()
    outcomes = []
    for n, m in enumerate(chosen, 1):
        print(f"mutants: {n}/{len(chosen)} {m.id} ({m.area}: {', '.join(suites(m.areas))})", flush=True)
        o = run(m, sys.executable)
        outcomes.append(o)
        print(f"  {'killed' if o.killed else 'SURVIVED'} in {o.seconds:.0f} s: {o.by}", flush=True)
    summary = report(outcomes, time.monotonic() - started)
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print("\n| area | mutants | killed | kill rate |\n|---|---|---|---|")
    for area, n in summary["areas"].items():
        print(f"| {area} | {n['mutants']} | {n['killed']} | {100 * n['killed'] / n['mutants']:.0f}% |")
    total = summary["mutants"]
    print(f"| all | {total} | {summary['killed']} | {100 * summary['killed'] / total:.0f}% |")
    print(f"\nmutants: {summary['killed']} of {total} killed in {summary['seconds'] / 60:.1f} min; {REPORT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
