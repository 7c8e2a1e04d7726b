"""Regenerates docs/conformance/: every vector on each engine, then one matrix of them all.

    python scripts/engine_reports.py                         # all six engines (tox -e engine-reports)
    python scripts/engine_reports.py --engines spark-native  # run one again, merge with the others' last runs

Each engine runs through the command-line tool over vectors/ with its expectation file
(expectations/<name>.toml): reference, spark and spark-native in process; flink, beam and bytewax
out of process, each in its own environment (`tox -e flink`, `tox -e beam`, `tox -e bytewax`,
started with the checkout's bootstrap tox; each writes its run's summary itself). Each run's
summary JSON and its answers (gzipped JSON Lines, with the engine's versions and settings in their
header) stay in reports/engines/. The merge writes docs/conformance/matrix.html and
docs/conformance/summary.md (which opens with the share of the vectors each engine could express: a
case an engine declines is not a pass), each engine with what it ran with, copies every engine's
answers to docs/conformance/answers/, and writes docs/conformance/examples.md: every deviation entry
with its smallest case and both answers. An engine with no run in reports/engines/ (a new machine,
or a run of other engines only) is merged from its committed answers, judged again with today's
vectors and expectation file (at every merge, until the engine runs here). The command fails when a
run has a failure that no expectation entry explains, after writing what it has.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "reports" / "engines"
OUT = ROOT / "docs" / "conformance"
ENGINES = ("reference", "spark", "spark-native", "flink", "beam", "bytewax")
IN_PROCESS = ("reference", "spark", "spark-native")
#: the others each run in a tox environment of the same name: their pins clash with PySpark's


def tox_command() -> str:
    """The tox that starts a command engine's environment: the checkout's bootstrap one, else tox on
    PATH."""
    bootstrap = ROOT / ".bootstrap-venv" / "bin" / "tox"
    found = str(bootstrap) if bootstrap.is_file() else shutil.which("tox")
    if found is None:
        raise SystemExit("engine-reports: no tox to start the engines' environments (README: Two commands)")
    return found


def answers_file(name: str) -> Path:
    """Where an engine's raw answers to every case are kept (an outputs file, gzipped)."""
    return RUNS / f"{name}-answers.jsonl.gz"


def judged_marker(name: str) -> Path:
    """Beside a summary that ``judge_committed`` made rather than a run: such a summary is made
    again at every merge, so that it is judged by the vectors and expectation files of the day."""
    return RUNS / f"{name}.judged-again"


def run_engine(name: str) -> int:
    """One engine over every vector; its summary JSON lands in reports/engines/<name>.json and its
    answers in ``answers_file(name)``."""
    RUNS.mkdir(parents=True, exist_ok=True)
    judged_marker(name).unlink(missing_ok=True)  # from now on its summary is a run's
    answers = ["--output", str(answers_file(name).relative_to(ROOT))]
    if name in IN_PROCESS:
        argv = [sys.executable, "-m", "harness.cli", "run", "vectors", "--engine", name, "--no-progress",
                "--report", str((RUNS / f"{name}.json").relative_to(ROOT)), *answers]  # fmt: skip
    else:  # its own environment: PyFlink, Beam and Bytewax cannot share this one
        argv = [tox_command(), "-e", name, "--", *answers]
    print(f"engine-reports: {' '.join(argv)}", flush=True)
    return subprocess.run(argv, cwd=ROOT, check=False).returncode


def named(summary: dict[str, Any], name: str) -> dict[str, Any]:
    """The run's summary with its engine called ``name`` (a command engine's summary names it by
    its command line)."""
    old = {e["id"] for e in summary.get("engines", [])}
    out = dict(summary)
    out["engines"] = [{**e, "id": name} for e in summary.get("engines", [])]
    for key in ("rows", "tests", "expectations"):
        out[key] = [{**r, "engine": name} if r.get("engine") in old else r for r in summary.get(key, [])]
    return out


#: lines of a case's detail the committed reports keep (its tables are one --case run away)
DETAIL_LINES = 12


def trimmed(test: dict[str, Any]) -> dict[str, Any]:
    """A case with its detail cut to the first lines, and none for a pass: the committed pages stay
    small."""
    if test.get("outcome") == "passed":
        return {**test, "detail": ""}
    lines = str(test.get("detail", "")).splitlines()
    keep = lines[:DETAIL_LINES] + (
        [f"... ({len(lines) - DETAIL_LINES} more lines)"] if len(lines) > DETAIL_LINES else []
    )
    return {**test, "detail": "\n".join(keep)}


def merged(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """One summary with every engine's rows, tests and expectations (same format, TR-11)."""
    out = dict(summaries[0])
    for key in ("engines", "rows", "tests", "expectations", "clause_tag_problems"):
        out[key] = [item for s in summaries for item in s.get(key, [])]
    # the cells keep their counts; the listings keep the cases worth reading: not the passes
    out["sources"] = sorted({src for s in summaries for src in s.get("sources", [])})
    return out


#: the outcomes of a case the engine itself did not answer: a decline, a refusal its adapter decides
DECLINED, ADAPTER = "declined", "adapter"
#: clause statuses that come from the engine's own answers
OBSERVED = ("FAIL", "unexpected-pass", "deviation", "ok")


def share_table(summary: dict[str, Any]) -> list[str]:
    """Per engine: how many cases it answered itself and what came of them, and how many clauses
    its answers let the cases observe."""
    from harness.expectations import FAILING_ENTRY

    lines = [
        "## What each engine could express",
        "",
        "A case an engine declines (it has no operator for it, or its expectation file shows none of",
        "the area's result tables; the reasons are in the table of declines) is neither a pass nor a",
        "failure, and neither is a configuration its adapter refuses with this project's own check",
        "(`adapter`). A deviation is a failure an entry of its expectation file excuses, in the",
        "tables and columns the entry names. A clause is observed when some case could have failed",
        "it through what the engine shows; `masked` ones only in places that differ where another",
        "clause's entry excuses them; `not observable` ones are decided only by tables or columns it",
        "does not show.",
        "",
        "| engine | cases | declined | adapter | answered | share | passed | deviation | failed "
        "| unexpected pass | clauses observed | masked | not observable |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for engine in summary["engines"]:
        outcomes = Counter(t["outcome"] for t in summary["tests"] if t["engine"] == engine["id"])
        total = sum(outcomes.values())
        answered = total - outcomes[DECLINED] - outcomes[ADAPTER]
        share = f"{100 * answered / total:.0f}%" if total else "-"
        statuses = Counter(r["status"] for r in summary["rows"] if r["engine"] == engine["id"])
        clauses = sum(statuses.values())
        observed = sum(statuses[s] for s in OBSERVED)
        clause_share = f"{observed} of {clauses} ({100 * observed / clauses:.0f}%)" if clauses else "-"
        unexpected = outcomes["unexpected-pass"] + sum(
            1 for b in summary.get("expectations", []) if b.get("engine") == engine["id"]
            for e in b.get("entries", []) if e.get("status") in FAILING_ENTRY
        )  # fmt: skip
        lines.append(
            f"| {engine['id']} | {total} | {outcomes[DECLINED]} | {outcomes[ADAPTER]} | {answered} | "
            f"{share} | {outcomes['passed']} | {outcomes['deviation']} | {outcomes['failed']} | "
            f"{unexpected} | {clause_share} | {statuses['masked']} | {statuses['not observable']} |"
        )
    return [*lines, ""]


def vector_sizes(vectors: Any) -> dict[str, int]:
    """Each vector's number of trace items, by case id: the smallest shows a rule best."""
    return {v.id: sum(len(b) for b in v.trace.batches) for v in vectors.vectors}


def deviation_table(summary: dict[str, Any], sizes: dict[str, int]) -> list[str]:
    """Per engine and expectation entry: how many cases it explains and the smallest of them."""
    lines = [
        "## Deviations, each with the vector that shows it",
        "",
        "The engine's expectation entries (expectations/<engine>.toml), each with the place it excuses",
        "(clause at table.columns), the cases it excuses and its witness: a case that shows exactly",
        "that difference, checked on every run (`eventtime-conformance run vectors --case <id> ...`",
        "runs it alone).",
        "",
        "| engine | entry | status | cases | witness (items) | reason |",
        "|---|---|---|---|---|---|",
    ]
    for block in summary.get("expectations", []):
        engine = block.get("engine", "")
        deviating = [t for t in summary["tests"] if t["engine"] == engine and t["outcome"] == "deviation"]
        for entry in block.get("entries", []):
            key = str(entry.get("key") or entry.get("clause") or entry.get("scenario", ""))
            if entry.get("scenario"):
                cases = [t["name"] for t in deviating if t["name"] == entry["scenario"]]
            else:
                cases = [t["name"] for t in deviating if key in t.get("excused_by", [])]
            witness = entry.get("witness") or entry.get("scenario")
            shown = f"`{witness}` ({sizes.get(witness, '?')})" if witness else "-"
            reason = str(entry.get("reason", "")).replace("|", "\\|")
            status = entry.get("status", "")
            lines.append(f"| {engine} | {key} | {status} | {len(cases)} | {shown} | {reason} |")
    return [*lines, ""]


#: rows of each answer shown on the examples page; a smallest case rarely has more
EXAMPLE_ROWS = 12


def entry_examples(
    summary: dict[str, Any], sizes: dict[str, int]
) -> list[tuple[str, dict[str, Any], str, bool]]:
    """Per engine and place entry: (engine, entry, case, alone): the smallest case the entry excuses,
    preferring one no other entry excuses too (alone: its difference lies in the entry's place only)."""
    chosen = []
    for block in summary.get("expectations", []):
        engine = block.get("engine", "")
        deviating = [t for t in summary["tests"] if t["engine"] == engine and t["outcome"] == "deviation"]
        for entry in block.get("entries", []):
            if entry.get("scenario"):
                continue
            key = str(entry.get("key"))
            cases = [t for t in deviating if key in t.get("excused_by", [])]
            if not cases:
                continue
            alone = [t for t in cases if t.get("excused_by") == [key]]
            best = min(alone or cases, key=lambda t: (sizes.get(t["name"], 10**9), t["name"]))
            chosen.append((engine, entry, best["name"], bool(alone)))
    return chosen


def _rows_table(columns: tuple[str, ...], rows: list[Any]) -> list[str]:
    shown = sorted(rows, key=repr)[:EXAMPLE_ROWS]
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    out += ["| " + " | ".join("-" if v is None else str(v) for v in row) + " |" for row in shown]
    if not rows:
        out.append("| " + " | ".join("" for _ in columns) + " |")
    if len(rows) > len(shown):
        out.append(f"\n({len(rows) - len(shown)} more rows in the answers file)")
    return out


def examples_page(summary: dict[str, Any], vectors: Any, sizes: dict[str, int]) -> str:
    """docs/conformance/examples.md: every deviation entry with its smallest case and both answers
    of the entry's table, the oracle's and the engine's, read from the committed files."""
    from harness.outputs import TABLES
    from harness.vectors import read_outputs

    by_id = {v.id: v for v in vectors.vectors}
    answers: dict[str, dict[str, Any]] = {}
    lines = [
        "# Each deviation, shown",
        "",
        "Generated by `scripts/engine_reports.py` from the committed vectors and each engine's committed",
        "answers (`answers/`). For every entry of an engine's expectation file: the smallest case it",
        "excuses, preferring one whose difference lies in that entry's place alone (no other entry",
        "excuses anything in it), the case's items, and the entry's table as the spec's oracle and the",
        "engine answered it. Rows are sorted; a table is cut after",
        f"{EXAMPLE_ROWS} rows. Run it alone: `eventtime-conformance run vectors --case ID ...`.",
        "",
    ]
    chosen = entry_examples(summary, sizes)
    for engine in dict.fromkeys(engine for engine, *_ in chosen):
        path = OUT / "answers" / f"{engine}.jsonl.gz"
        header, answers[engine] = read_outputs(path, vectors) if path.is_file() else ({}, {})
        ran_with = {
            **header.get("provenance", {}),
            "command": header.get("command"),
            "date": header.get("date"),
        }
        lines += [f"{engine} ran with: " + "; ".join(f"{k} {v}" for k, v in ran_with.items() if v) + ".", ""]
    for engine, entry, case, alone in chosen:
        vector = by_id[case]
        table = str(entry["table"])
        columns = TABLES[vector.area][table]
        result = answers[engine].get(case)
        mine = result.output.get(table, []) if result is not None and result.output is not None else []
        expected = vector.expected.get(table, []) if isinstance(vector.expected, dict) else []
        note = "" if alone else " (other entries excuse differences of this case too)"
        lines += [
            f"## {engine}: {entry['key']}",
            "",
            str(entry.get("reason", "")),
            "",
            f"`{case}` ({sizes.get(case, '?')} item{'' if sizes.get(case) == 1 else 's'}){note}:",
            "",
            "```json",
            *[json.dumps([i.to_json() for i in batch]) for batch in vector.trace.batches],
            "```",
            "",
            f"`{table}`, the spec (the oracle):",
            "",
            *_rows_table(columns, list(expected)),
            "",
            f"`{table}`, {engine}:",
            "",
            *_rows_table(columns, list(mine)),
            "",
        ]
    return "\n".join(lines)


def declined_table(summary: dict[str, Any]) -> list[str]:
    """Per engine, each reason it declined cases with, how many and one of them."""
    lines = [
        "## What each engine declined, and why",
        "",
        "| engine | reason | cases | for example |",
        "|---|---|---|---|",
    ]
    for engine in summary["engines"]:
        by_reason: dict[str, list[str]] = {}
        for t in summary["tests"]:
            if t["engine"] == engine["id"] and t["outcome"] == DECLINED:
                first = str(t.get("detail", "")).splitlines()[0] if t.get("detail") else ""
                reason = first.removeprefix("unsupported by the engine: ").removeprefix("declined: ")
                reason = reason.replace("|", "\\|")
                by_reason.setdefault(reason, []).append(t["name"])
        for reason, cases in sorted(by_reason.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            lines.append(f"| {engine['id']} | {reason} | {len(cases)} | `{min(cases)}` |")
    return [*lines, ""]


def judge_committed(name: str) -> bool:
    """Makes ``name``'s run in RUNS from its committed answers (docs/conformance/answers/), judged
    again by ``check``; False when there are none. The answers keep their own provenance."""
    committed = OUT / "answers" / f"{name}.jsonl.gz"
    if not committed.is_file():
        return False
    RUNS.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(committed, answers_file(name))
    # as run_engine does: from the project folder, so the report names paths as a run's does
    argv = [sys.executable, "-m", "harness.cli", "check", "vectors", "--outputs", str(answers_file(name)),
            "--name", name, "--report", str(RUNS / f"{name}.json")]  # fmt: skip
    subprocess.run(argv, cwd=ROOT, check=False, stdout=subprocess.DEVNULL)
    judged_marker(name).touch()
    print(f"engine-reports: no run of {name} in {RUNS}: its committed answers judged again", flush=True)
    return True


def write_docs(summary: dict[str, Any]) -> None:
    from harness.reports import html, markdown
    from harness.vectors import read_vectors

    vectors = read_vectors([ROOT / "vectors"])  # the committed vectors, read once for both pages
    sizes = vector_sizes(vectors)

    OUT.mkdir(parents=True, exist_ok=True)
    # the cells keep their counts (the rows); the listings keep the cases worth reading: what
    # failed or deviates (a decline's reason is one line per area, in the engine's section)
    listed = [trimmed(t) for t in summary["tests"] if t.get("outcome") not in ("passed", DECLINED)]
    pages = {**summary, "tests": listed}
    (OUT / "matrix.html").write_text(html(pages), encoding="utf-8")
    text = markdown(pages)
    head, _, rest = text.partition("\n## ")
    tables = "\n".join([*share_table(summary), *deviation_table(summary, sizes), *declined_table(summary)])
    (OUT / "summary.md").write_text(f"{head}\n{tables}\n## {rest}", encoding="utf-8")
    # every engine's raw answers beside the pages: a reader checks a cell without running anything
    (OUT / "answers").mkdir(exist_ok=True)
    for engine in summary["engines"]:
        source = answers_file(engine["id"])
        if source.is_file():
            shutil.copyfile(source, OUT / "answers" / f"{engine['id']}.jsonl.gz")
    (OUT / "examples.md").write_text(examples_page(summary, vectors, sizes), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES), help="engines to run")
    parser.add_argument("--merge-only", action="store_true", help="merge the last runs without running")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    codes = {} if args.merge_only else {name: run_engine(name) for name in args.engines}
    summaries = []
    for name in ENGINES:
        path = RUNS / f"{name}.json"
        # a run's summary is kept; one judged from committed answers is judged again
        if (path.is_file() and not judged_marker(name).is_file()) or judge_committed(name):
            summaries.append(named(json.loads(path.read_text(encoding="utf-8")), name))
        else:
            print(f"engine-reports: no run of {name} in {path}: left out of the matrix", file=sys.stderr)
    if not summaries:
        return 2
    write_docs(merged(summaries))
    print(f"engine-reports: wrote {OUT / 'matrix.html'} and {OUT / 'summary.md'}")
    failed = [name for name, code in codes.items() if code != 0]
    if failed:
        print(f"engine-reports: runs with unexplained failures: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
