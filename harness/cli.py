"""``eventtime-conformance``: test vectors, engines and reports from the command line.

    eventtime-conformance areas                          # the spec areas, their clauses and tables
    eventtime-conformance clauses late_data              # the clauses of an area
    eventtime-conformance export                         # rewrite the committed set under vectors/
    eventtime-conformance export --check                 # exit 1 when vectors/ is stale
    eventtime-conformance export big.arrow --areas late_data --generated 1000 --seed 7 --no-features
    eventtime-conformance run vectors --engine reference
    eventtime-conformance run vectors --command "node examples/late_data_engine.js" --areas late_data
    eventtime-conformance run big.arrow --command "my-engine {cases} {answers}" --case-format arrow
    eventtime-conformance check vectors --outputs outputs.jsonl
    eventtime-conformance report vectors --outputs outputs.jsonl -o report.md
    eventtime-conformance expectations reports/conformance.json --engine mypkg.adapter:MyEngine
    eventtime-conformance selftest                       # can each expectation file still convict?

A run ends with one line, ``N passed, N failed, N deviations, N unexpected
passes, N skipped``, each case counted once (a deviation: a difference the
engine's expectation file excuses; skipped: a case the engine declines), and
its exit status follows from that line alone.

Exit codes: 0 nothing failed and nothing passed unexpectedly; 1 a case
failed (a wrong answer, a timeout, a crash, malformed output, no answer), a
case passed that an expectation entry says fails, an entry's witness is
missing, or ``export --check`` found the committed set stale; 2 bad input
(usage, an unreadable vector or outputs file); 3 the engine could not be
loaded or its command not started.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shlex
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from harness.clauses import load_clauses
from harness.outputs import TABLES

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_ENGINE = 0, 1, 2, 3
PROG = "eventtime-conformance"
DEFAULT_VECTORS = "vectors"


class UsageError(Exception):
    pass


def _out(text: str = "") -> None:
    print(text, flush=True)


def _err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# ---- areas and clauses --------------------------------------------------------------------


def _clauses_by_area(project: Path) -> dict[str, list[Any]]:
    """Clauses of spec/<area>.md per area (TR-* under "traces"); empty without a spec folder."""
    out: dict[str, list[Any]] = {}
    for clause in load_clauses(project / "spec"):
        out.setdefault(clause.file.removesuffix(".md"), []).append(clause)
    return out


def cmd_areas(args: argparse.Namespace) -> int:
    clauses = _clauses_by_area(Path(args.project))
    if args.json:
        listing = {
            area: {
                "tables": {table: list(columns) for table, columns in TABLES[area].items()},
                "clauses": [c.id for c in clauses.get(area, [])],
            }
            for area in TABLES
        }
        _out(json.dumps(listing, indent=2))
        return EXIT_OK
    for area in TABLES:
        ids = [c.id for c in clauses.get(area, [])]
        span = f"{ids[0]} .. {ids[-1]} ({len(ids)} clauses)" if ids else "(no spec/ folder here)"
        _out(f"{area}: {span}")
        for table, columns in TABLES[area].items():
            _out(f"    {table}: {', '.join(columns)}")
    return EXIT_OK


def cmd_clauses(args: argparse.Namespace) -> int:
    by_area = _clauses_by_area(Path(args.project))
    if not by_area:
        raise UsageError(f"no clause headings under {Path(args.project) / 'spec'}; run from a checkout")
    unknown = [a for a in args.areas if a not in by_area]
    if unknown:
        raise UsageError(f"unknown areas {unknown}; known: {sorted(by_area)}")
    for area in args.areas or list(by_area):
        for c in by_area[area]:
            _out(f"{c.id}\t{c.title}\t(spec/{c.file})")
    return EXIT_OK


# ---- export ------------------------------------------------------------------------------------


def cmd_export(args: argparse.Namespace) -> int:
    from harness.vector_export import (
        COMMITTED_GENERATED,
        COMMITTED_SEED,
        committed_files,
        feature_vectors,
        generated_vectors,
    )
    from harness.vectors import ARROW_SUFFIXES, JSONL_SUFFIX, read_vectors, vector_json, write_vectors

    project = Path(args.project)
    areas = _areas(args.areas)
    out = Path(args.out) if args.out else project / DEFAULT_VECTORS
    committed = (
        not args.areas and args.features and args.generated is None and args.seed is None and out.suffix == ""
    )
    files: dict[str, tuple[list[Any], dict[str, Any]]]
    if committed:
        files = committed_files(project)
    else:
        count = COMMITTED_GENERATED if args.generated is None else args.generated
        seed = COMMITTED_SEED if args.seed is None else args.seed
        cases = (feature_vectors(project, areas) if args.features else []) + generated_vectors(
            areas, count, seed
        )
        header = {"origin": f"{PROG} export", "seed": seed, "traces": count}
        if out.suffix in (JSONL_SUFFIX, *ARROW_SUFFIXES):
            files = {"": (cases, header)}
        else:
            suffix = ".arrow" if args.format == "arrow" else JSONL_SUFFIX
            files = {f"{area}{suffix}": ([c for c in cases if c.area == area], header) for area in areas}
            files = {k: v for k, v in files.items() if v[0]}
    targets = {(out / name if name else out): content for name, content in files.items()}
    if args.check:
        return _check_export(out, targets, read_vectors, vector_json)
    for path, (cases, header) in targets.items():
        write_vectors(path, cases, **header)
    if committed:
        for stale in sorted(
            set((out / "features").glob("*.jsonl")) | set((out / "generated").glob("*.jsonl"))
        ):
            if stale not in targets:
                stale.unlink()
    total = sum(len(c) for c, _ in targets.values())
    _out(f"wrote {total} cases to {len(targets)} file{'s' if len(targets) != 1 else ''} under {out}")
    return EXIT_OK


def _check_export(
    out: Path,
    targets: dict[Path, tuple[list[Any], dict[str, Any]]],
    read: Callable[..., Any],
    as_json: Callable[..., Any],
) -> int:
    """Compares what an export would write with the files on disk, case by case."""
    problems = []
    for path, (cases, _) in targets.items():
        if not path.is_file():
            problems.append(f"{path}: missing ({len(cases)} cases would be written)")
            continue
        on_disk = {v.id: as_json(v) for v in read([path]).vectors}
        fresh = {v.id: as_json(v) for v in cases}
        for case_id in fresh.keys() - on_disk.keys():
            problems.append(f"{path}: case {case_id} is new")
        for case_id in on_disk.keys() - fresh.keys():
            problems.append(f"{path}: case {case_id} is gone")
        for case_id in fresh.keys() & on_disk.keys():
            if fresh[case_id] != on_disk[case_id]:
                what = [k for k in fresh[case_id] if fresh[case_id].get(k) != on_disk[case_id].get(k)]
                problems.append(f"{path}: case {case_id} differs in {', '.join(what)}")
    if problems:
        _out(f"{out} is stale ({len(problems)} differences); `{PROG} export` rewrites it:")
        for p in sorted(problems):
            _out(f"  {p}")
        return EXIT_FAILED
    _out(f"{out} is up to date ({sum(len(c) for c, _ in targets.values())} cases)")
    return EXIT_OK


def _areas(given: Sequence[str] | None) -> list[str]:
    unknown = [a for a in given or () if a not in TABLES]
    if unknown:
        raise UsageError(f"unknown areas {unknown}; known: {list(TABLES)}")
    return list(given) if given else list(TABLES)


# ---- run, check, report -----------------------------------------------------------------------


def _load(args: argparse.Namespace) -> Any:
    """The selected cases: --areas and --case (shell patterns over ids) narrow the files' cases."""
    from harness.vectors import VectorSet, read_vectors

    found = read_vectors(args.vectors)
    areas = set(_areas(args.areas))
    chosen = [
        v
        for v in found.vectors
        if v.area in areas and (not args.case or any(fnmatch.fnmatchcase(v.id, p) for p in args.case))
    ]
    if not chosen:
        raise UsageError(f"no case of {args.vectors} matches --areas/--case")
    return VectorSet(chosen, {v.id: found.sources[v.id] for v in chosen})


def _progress_bar(total: int, args: argparse.Namespace, what: str) -> Any:
    from tqdm import tqdm

    # disable=None: a bar on a terminal only, so CI logs stay clean
    return tqdm(
        total=total, desc=what, unit="case", file=sys.stderr, disable=True if args.no_progress else None
    )


def cmd_run(args: argparse.Namespace) -> int:
    from harness.engine import engine_provenance, load_engine
    from harness.engine_runner import CommandEngine, EngineStartError, run_in_process
    from harness.vectors import write_outputs

    if bool(args.engine) == bool(args.command):
        raise UsageError("give exactly one of --engine NAME (in process) or --command 'CMD' (a process)")
    selected = _load(args)
    started = time.monotonic()
    if args.command:
        engine_name = args.command
        command = CommandEngine(args.command, timeout=args.timeout, case_format=args.case_format)
        with _progress_bar(len(selected.vectors), args, "cases") as bar:
            try:
                results = command.run(selected.vectors, progress=bar.update)
            except EngineStartError as e:
                _err(f"{PROG}: {e}")
                return EXIT_ENGINE
        note = f"{command.starts} engine process{'es' if command.starts != 1 else ''}"
        args.provenance = command.provenance
    else:
        engine_name = args.engine
        try:
            engine = load_engine(args.engine)
        except Exception as e:  # noqa: BLE001 - any import or construction error of a third-party engine
            _err(f"{PROG}: engine {args.engine!r} could not be loaded: {type(e).__name__}: {e}")
            return EXIT_ENGINE
        args.name = args.name or engine.name
        with _progress_bar(len(selected.vectors), args, "cases") as bar:
            results = run_in_process(engine, selected.vectors, args.batch_size, progress=bar.update)
        note = "in process"
        args.provenance = engine_provenance(engine)
    _out(f"ran {len(selected.vectors)} cases on {engine_name} ({note}) in {time.monotonic() - started:.1f} s")
    if args.output:
        write_outputs(Path(args.output), selected.vectors, results, engine_name, args.provenance,
                      args.invocation, args.date)  # fmt: skip
        _out(f"answers written to {args.output}")
    return _finish(selected.vectors, results, engine_name, args)


def cmd_check(args: argparse.Namespace) -> int:
    selected = _load(args)
    header, results = _read_answers(args, selected)
    _from_header(args, header)
    return _finish(selected.vectors, results, str(header.get("engine", args.outputs)), args)


def _read_answers(args: argparse.Namespace, selected: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The answers file's header and its answers to the selected cases: a line may answer a case
    of the files that --areas or --case left out (a whole run's answers, one case checked)."""
    from harness.vectors import read_outputs, read_vectors

    header, results = read_outputs(Path(args.outputs), read_vectors(args.vectors))
    chosen = {v.id for v in selected.vectors}
    return header, {case: r for case, r in results.items() if case in chosen}


def _from_header(args: argparse.Namespace, header: dict[str, Any]) -> None:
    """The run's provenance, command and date as the outputs file's header keeps them."""
    from harness.engine import provenance_dict

    args.provenance = provenance_dict(header.get("provenance"))
    args.invocation = str(header.get("command") or "")
    args.date = str(header.get("date") or "")


REPORT_FORMATS = {".md": "markdown", ".html": "html", ".xml": "junit_xml", ".json": "json"}


def cmd_report(args: argparse.Namespace) -> int:
    selected = _load(args)
    header, results = _read_answers(args, selected)
    _from_header(args, header)
    engine = str(header.get("engine", args.outputs))
    summary, outcomes = _checked(selected.vectors, results, engine, args)
    if args.output in (None, "-"):
        sys.stdout.write(_render(summary, ".md"))
    else:
        _write_report(summary, Path(args.output))
    from harness.vector_check import run_counts

    tally = run_counts(outcomes, [e for b in summary["expectations"] for e in b["entries"]])
    return EXIT_OK if tally.ok else EXIT_FAILED


def _render(summary: dict[str, Any], suffix: str) -> str:
    from harness import reports

    if suffix not in REPORT_FORMATS:
        raise UsageError(f"a report ends in one of {', '.join(REPORT_FORMATS)}, not {suffix!r}")
    if suffix == ".json":
        return json.dumps(summary, indent=2, default=str) + "\n"
    text: str = getattr(reports, REPORT_FORMATS[suffix])(summary)
    return text


def _write_report(summary: dict[str, Any], path: Path) -> None:
    text = _render(summary, path.suffix)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    _out(f"report written to {path}")


def _checked(
    vectors: Sequence[Any], results: dict[str, Any], engine: str, args: argparse.Namespace
) -> tuple[dict[str, Any], list[Any]]:
    """The cases checked through the engine's expectation file, and the run's summary."""
    from harness.expectations import ExpectationFileError, expectations_from, load_expectations
    from harness.reports import summary_from_cases
    from harness.vector_check import apply_expectations, check_all, entry_statuses, fixed_witnesses

    name = getattr(args, "name", None) or engine
    try:
        if args.expectations:
            path = Path(args.expectations)
            if not path.is_file():
                raise UsageError(f"no expectation file {path}")
            exp = expectations_from(path, name)
        else:
            exp = load_expectations(Path(args.project) / "expectations", engine, name)
    except ExpectationFileError as e:
        raise UsageError(str(e)) from None
    outcomes = apply_expectations(check_all(vectors, results, exp), exp)
    areas = {v.area for v in vectors}
    whole = None if getattr(args, "case", None) else areas  # every case of these areas ran
    entries = entry_statuses(outcomes, exp, whole)
    block = {"engine": engine, "file": str(exp.path or ""), "entries": entries, "problems": exp.problems}
    outcomes = fixed_witnesses(outcomes, entries)
    clauses = [c for c in load_clauses(Path(args.project) / "spec") if c.file.removesuffix(".md") in areas]
    summary = summary_from_cases(
        outcomes, engine, args.vectors, clauses,
        expectations=[block] if exp.path else [], judged_by=exp, name=name,
        provenance=getattr(args, "provenance", None), command=getattr(args, "invocation", None),
        date=getattr(args, "date", None),
    )  # fmt: skip
    return summary, outcomes


def _finish(vectors: Sequence[Any], results: dict[str, Any], engine: str, args: argparse.Namespace) -> int:
    from harness.vector_check import failure_text, run_counts, skip_reasons

    summary, outcomes = _checked(vectors, results, engine, args)
    failed = [o for o in outcomes if o.status in ("fail", "unexpected-pass")]
    for o in failed[: args.max_failures]:
        _out("")
        _out(failure_text(o))
    if len(failed) > args.max_failures:
        _out(
            f"\n... and {len(failed) - args.max_failures} more failing cases (--max-failures, or the report)"
        )
    for block in summary["expectations"]:
        for entry in block["entries"]:
            if entry["status"] != "applied":
                witness = f" (witness {entry['witness']})" if entry.get("witness") else ""
                _out(f"{block['file']}: {entry['key']}: {entry['status']}{witness}")
        for problem in block["problems"]:
            _out(problem if problem.startswith(block["file"]) else f"{block['file']}: {problem}")
    for report in args.report or []:
        _write_report(summary, Path(report))
    reasons = skip_reasons(outcomes)
    if reasons:
        _out("")
        _out("skipped, by reason:")
        for reason, n in reasons[:SKIP_REASONS_SHOWN]:
            _out(f"  {n:4d}  {reason}")
        if len(reasons) > SKIP_REASONS_SHOWN:
            _out(f"  ... {len(reasons) - SKIP_REASONS_SHOWN} more reasons in the report")
    _out("")
    _out(_shares_line(summary, engine))
    tally = run_counts(outcomes, [e for b in summary["expectations"] for e in b["entries"]])
    _out(f"{engine}: {tally.line()}")
    return EXIT_OK if tally.ok else EXIT_FAILED


#: skip reasons listed on the console; the report lists every case's
SKIP_REASONS_SHOWN = 8


def _shares_line(summary: dict[str, Any], engine: str) -> str:
    """How many clauses of the run the engine let the cases observe, and how they ended."""
    from harness.reports import CLAUSE_STATUS_ORDER

    counts = Counter(r["status"] for r in summary["rows"] if r["engine"] == engine)
    parts = [f"{counts[s]} {s}" for s in CLAUSE_STATUS_ORDER if counts[s]]
    return f"clauses: {', '.join(parts) or 'none'}"


# ---- expectation files --------------------------------------------------------------------------


def cmd_expectations(args: argparse.Namespace) -> int:
    """Writes or updates an engine's expectation file from a run's summary JSON."""
    from harness.expectations import (
        ExpectationFileError,
        Expectations,
        expectations_from,
        file_name,
        render,
        update_from_summary,
    )

    try:
        summary = json.loads(Path(args.summary).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot read the run's summary {args.summary}: {e}") from None
    engines: dict[str, str] = {
        str(e.get("id")): str(e.get("name", e.get("id"))) for e in summary.get("engines", [])
    }
    engine_id = args.engine or next((e for e in engines if e != "reference"), "")
    if engine_id not in engines:
        raise UsageError(f"{args.summary} has no engine {engine_id!r}; it has {sorted(engines)}")
    name = str(args.name or engines[engine_id] or engine_id)
    path = Path(args.directory) / file_name(name)
    try:
        current = expectations_from(path, name) if path.is_file() else Expectations(name)
    except ExpectationFileError as e:
        raise UsageError(str(e)) from None
    update = update_from_summary(current.deviations, summary, engine_id)
    _out(f"{path}: {len(update.deviations)} entries")
    for key in update.added:
        _out(f"  added {key} (a placeholder reason: say why)")
    for what in update.removed:
        _out(f"  removed {what}: the run reported it as an unexpected pass or its witness missing")
    if not (update.added or update.removed) and path.is_file():
        _out("  nothing to change")
        return EXIT_OK
    if args.dry_run:
        sys.stdout.write(render(name, update.deviations, current.shows, current.declines))
        return EXIT_OK
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        render(name, update.deviations, current.shows, current.declines),
        encoding="utf-8",
    )
    return EXIT_OK


def cmd_selftest(args: argparse.Namespace) -> int:
    """The judge tests itself on each expectation file (harness/selftest.py)."""
    from harness.expectations import ExpectationFileError, expectations_from
    from harness.selftest import selftest
    from harness.vectors import read_vectors

    files = [Path(f) for f in args.files] or sorted((Path(args.project) / "expectations").glob("*.toml"))
    if not files:
        raise UsageError("no expectation file given, and none in expectations/")
    areas = set(_areas(args.areas))
    vectors = [v for v in read_vectors(args.vectors).vectors if v.area in areas]
    unsound = 0
    for path in files:
        try:
            exp = expectations_from(path, path.stem)
        except (OSError, ExpectationFileError) as e:
            raise UsageError(str(e)) from None
        result = selftest(exp, vectors)
        for line in result.lines():
            _out(line)
        unsound += not result.sound
    _out(f"selftest: {len(files) - unsound} passed, {unsound} failed")
    return EXIT_FAILED if unsound else EXIT_OK


#: the pipeline command's micro-batch on Spark: each costs its stages' fixed seconds however small
SPARK_BATCH_SECONDS = 5


def cmd_pipeline(args: argparse.Namespace) -> int:
    from harness.pipeline_run import SampleShape, run

    folder = Path(args.out) if args.out else Path(args.project) / "reports" / "pipeline" / f"seed-{args.seed}"
    batch_seconds = args.batch_seconds or (SPARK_BATCH_SECONDS if args.engine == "spark" else 1)
    shape = SampleShape(args.seconds, args.producers, args.seed, batch_seconds)
    try:
        lines, agrees = run(shape, folder, not args.no_progress, args.engine)
    except ValueError as error:  # a sample too small to run (harness.pipeline_run.sample_trace)
        raise UsageError(str(error)) from None
    for line in lines:
        _out(line)
    return EXIT_OK if agrees else EXIT_FAILED


# ---- the parser -------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Portable test vectors of the event-time conformance suite: export them, run an "
        "engine over them, check its answers (spec/vectors.md, spec/engine-protocol.md).",
        epilog="exit codes: 0 all cases passed, 1 a case failed or the committed set is stale, "
        "2 bad input, 3 the engine could not be started",
    )
    parser.add_argument(
        "--project", default=".", help="the checkout (spec/, features/); default: ."
    )
    sub = parser.add_subparsers(dest="command_name", required=True, metavar="COMMAND")

    p = sub.add_parser("areas", help="list the spec areas, their clause ranges and output tables")
    p.add_argument("--json", action="store_true", help="as JSON: tables with columns, clause ids")
    p.set_defaults(func=cmd_areas)

    p = sub.add_parser("clauses", help="list the clauses (id, title, spec file) of some or all areas")
    p.add_argument("areas", nargs="*", help="areas (default: all, and spec/traces.md)")
    p.set_defaults(func=cmd_clauses)

    p = sub.add_parser("export", help="export vectors from the scenarios and generated traces")
    p.add_argument("out", nargs="?", help=f"a folder (one file per area) or a .jsonl/.arrow file; default: "
                   f"{DEFAULT_VECTORS}/, the committed set")  # fmt: skip
    p.add_argument("--areas", nargs="+", metavar="AREA", help="only these areas")
    p.add_argument("--no-features", dest="features", action="store_false", help="no scenario cases")
    p.add_argument("--generated", type=int, metavar="N", help="generated traces per area (default 6)")
    p.add_argument("--seed", type=int, help="seed of the generated traces (default 0)")
    p.add_argument("--format", choices=("jsonl", "arrow"), default="jsonl", help="file format in a folder")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if the files differ")
    p.set_defaults(func=cmd_export)

    def selection(p: argparse.ArgumentParser) -> None:
        p.add_argument("vectors", nargs="*", default=[DEFAULT_VECTORS], help="vector files or folders")
        p.add_argument("--areas", nargs="+", metavar="AREA", help="only the cases of these areas")
        p.add_argument(
            "--case", action="append", metavar="PATTERN", help="only case ids matching (repeatable)"
        )
        p.add_argument("--max-failures", type=int, default=20, help="failing cases printed (default 20)")
        expectation_options(p)
        p.add_argument(
            "--report",
            action="append",
            metavar="FILE",
            help="also write a report there, by its suffix: .md, .html, .xml (JUnit) or .json (repeatable)",
        )

    def expectation_options(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--expectations",
            metavar="FILE",
            help="the engine's known deviations (default: expectations/<name>.toml in the project, if any)",
        )
        p.add_argument(
            "--name", help="the engine's name for its expectation file (default: its name, or the command)"
        )

    p = sub.add_parser("run", help="run an engine over vectors and check its answers")
    selection(p)
    p.add_argument("--engine", help="in process: reference, spark or package.module:attribute")
    p.add_argument(
        "--command",
        help="an engine process, e.g. 'node examples/late_data_engine.js' (cases on stdin, answers on "
        "stdout), or 'my-engine --in {cases} --out {answers}' (files)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="seconds a command may go without answering (a {cases} command: for its whole run)",
    )
    p.add_argument(
        "--case-format",
        choices=("jsonl", "arrow"),
        default="jsonl",
        help="the file a command naming {cases} reads (it writes its answers to {answers})",
    )
    p.add_argument("--batch-size", type=int, default=200, help="cases per engine.run call in process")
    p.add_argument("--output", metavar="FILE", help="write the answers there (the outputs file of `check`)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("check", help="check an outputs file against the vectors' expected outputs")
    selection(p)
    p.add_argument("--outputs", required=True, metavar="FILE", help="the engine's answers (JSON Lines)")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser(
        "report", help="write the report of an outputs file: Markdown, HTML, JUnit XML or JSON"
    )
    p.add_argument("vectors", nargs="*", default=[DEFAULT_VECTORS], help="vector files or folders")
    p.add_argument("--outputs", required=True, metavar="FILE", help="the engine's answers (JSON Lines)")
    p.add_argument("--areas", nargs="+", metavar="AREA", help="only the cases of these areas")
    p.add_argument("--case", action="append", metavar="PATTERN", help="only case ids matching (repeatable)")
    expectation_options(p)
    p.add_argument(
        "-o", "--output", metavar="FILE",
        help="where, by its suffix: .md, .html, .xml (JUnit) or .json (default: Markdown on standard output)",
    )  # fmt: skip
    p.set_defaults(func=cmd_report)

    p = sub.add_parser(
        "expectations",
        help="write or update an engine's expectations/<name>.toml from a run's summary JSON",
        description="Adds place entries (clause, table, columns, witness), with a placeholder reason, "
        "covering every place the run's failures differ in; removes the entries the run reported as "
        "unexpected passes or with a missing witness; keeps the rest and the file's [shows].",
    )
    p.add_argument(
        "summary",
        nargs="?",
        default="reports/conformance.json",
        help="the run's summary (default: %(default)s)",
    )
    p.add_argument(
        "--engine", help="the engine's id in the summary (default: the one engine besides reference)"
    )
    p.add_argument("--name", help="the file's engine name (default: the engine's name in the summary)")
    p.add_argument("--directory", default="expectations", help="where the files are (default: %(default)s)")
    p.add_argument("--dry-run", action="store_true", help="print the file instead of writing it")
    p.set_defaults(func=cmd_expectations)

    p = sub.add_parser(
        "pipeline",
        help="run the oxirs pipeline (spec/pipeline.md) over a sample generated from a seed, with a summary",
        description="Generates a sample (a few minutes of orders, payments, clicks and a sensor burst from "
        "a few hundred producers, with disorder, re-deliveries and a restart), runs the pipeline on the "
        "oracle or on Spark with a progress bar, writes every table as CSV and prints what happened; on "
        "Spark it also runs the oracle on the same sample and exits 1 when a table differs.",
    )
    p.add_argument("--engine", choices=("reference", "spark"), default="reference",
                   help="where the pipeline runs (default: %(default)s, no Java needed)")  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="the sample's seed (default: %(default)s)")
    p.add_argument("--seconds", type=int, default=120, help="seconds of events (default: %(default)s)")
    p.add_argument("--producers", type=int, default=300, help="producers (default: %(default)s)")
    p.add_argument("--batch-seconds", type=int, metavar="N",
                   help=f"seconds of arrivals per micro-batch (default: 1 on the oracle, "
                   f"{SPARK_BATCH_SECONDS} on Spark, where each micro-batch costs seconds)")  # fmt: skip
    p.add_argument("--out", metavar="FOLDER", help="the tables' folder (reports/pipeline/seed-<seed>)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_pipeline)

    p = sub.add_parser(
        "selftest",
        help="check that expectation files can still convict: a mute oracle passes, one that loses "
        "results fails, planted bugs fail",
    )
    p.add_argument("files", nargs="*", help="expectation files (default: every expectations/*.toml)")
    p.add_argument("--vectors", nargs="+", default=[DEFAULT_VECTORS], help="vector files or folders")
    p.add_argument("--areas", nargs="+", metavar="AREA", help="only the cases of these areas")
    p.set_defaults(func=cmd_selftest)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from harness.vector_export import ExportError
    from harness.vectors import VectorFormatError

    parser = build_parser()
    args = parser.parse_args(argv)
    args.invocation = shlex.join([PROG, *(sys.argv[1:] if argv is None else argv)])
    args.date = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    try:
        return int(args.func(args))
    except (UsageError, VectorFormatError, ExportError) as e:
        _err(f"{PROG}: {e}")
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        _err(f"{PROG}: interrupted")
        return 130
    except BrokenPipeError:  # a reader such as `head` stopped early: nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
