"""Portable test vectors (spec/vectors.md): traces with the oracle's expected output, as files.

A vector file is JSON Lines (one header line, then one case per line) or an
Arrow IPC file (one record per case, the same fields). Reading one never runs
code: JSON is parsed with the standard parser (NaN and Infinity refused, no
duplicate keys) and every field is checked, so a malformed file stops with an
error that names the file and the line (or record) and what is wrong there.

The same module reads and writes the *outputs* file: one answer per case, as
an engine writes it on standard output (spec/engine-protocol.md) and as the
command-line tool stores it for ``check``.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from harness.outputs import TABLES, Output, canonical
from harness.traces import InvalidTrace, Item, Trace

VECTORS_FORMAT = "eventtime-conformance-vectors"
OUTPUTS_FORMAT = "eventtime-conformance-outputs"
CASES_FORMAT = "eventtime-conformance-cases"  # an engine's input file: vectors without expected outputs
VERSION = 1
JSONL_SUFFIX = ".jsonl"
ARROW_SUFFIXES = (".arrow", ".arrows", ".feather")
CASE_FIELDS = ("id", "area", "clauses", "origin", "note", "trace", "expected")
TRACE_FIELDS = ("config", "batches", "restart_after")
ITEM_FIELDS = tuple(f.name for f in fields(Item))
FAILURE_KINDS = ("timeout", "crash", "malformed", "missing", "engine_error")


class VectorFormatError(ValueError):
    """A vector or outputs file that breaks spec/vectors.md; the message names the place."""


@dataclass(frozen=True)
class ExpectedError:
    """The answer to a refused configuration (TR-6): the error type; the message is for people."""

    type: str
    message: str = ""


@dataclass(frozen=True)
class Vector:
    """One case: a trace, the clauses it shows, and the oracle's answer to it."""

    id: str
    trace: Trace
    expected: Output | ExpectedError
    clauses: tuple[str, ...] = ()
    origin: str = ""
    note: str = ""

    @property
    def area(self) -> str:
        return self.trace.area


@dataclass(frozen=True)
class CaseResult:
    """What an engine answered for one case, or why it answered nothing usable.

    Exactly one of ``output`` (the tables, canonical), ``error`` (a refused
    configuration), ``unsupported`` (the engine declines the case, with a
    reason) or ``failure`` (kind, detail: a timeout, a crash, malformed output,
    no answer) is set.
    """

    id: str
    output: Output | None = None
    error: ExpectedError | None = None
    unsupported: str | None = None
    failure: tuple[str, str] | None = None


@dataclass
class VectorSet:
    """The cases of one or more files, in file order, with where each came from."""

    vectors: list[Vector] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)  # case id -> "file:line"

    def add(self, vector: Vector, where: str) -> None:
        if vector.id in self.sources:
            raise VectorFormatError(
                f"{where}: case id {vector.id!r} already used at {self.sources[vector.id]}"
            )
        self.vectors.append(vector)
        self.sources[vector.id] = where


# ---- strict JSON ---------------------------------------------------------------------------


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


def loads_strict(text: str) -> Any:
    """``json.loads`` without NaN/Infinity and without duplicate keys (ValueError otherwise)."""
    return json.loads(text, parse_constant=_no_constants, object_pairs_hook=_no_duplicate_keys)


def dumps_line(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, allow_nan=False)


# ---- cases <-> JSON --------------------------------------------------------------------


def tables_json(area: str, output: Output) -> dict[str, Any]:
    """Every table of the area with its columns and canonical rows."""
    return {name: {"columns": list(cols), "rows": [list(r) for r in output.get(name, [])]}
            for name, cols in TABLES[area].items()}  # fmt: skip


def expected_json(area: str, expected: Output | ExpectedError) -> dict[str, Any]:
    if isinstance(expected, ExpectedError):
        out = {"error": expected.type}
        return {**out, "message": expected.message} if expected.message else out
    return {"tables": tables_json(area, expected)}


def vector_json(vector: Vector) -> dict[str, Any]:
    trace = vector.trace.to_json()
    out: dict[str, Any] = {
        "id": vector.id,
        "area": vector.area,
        "clauses": list(vector.clauses),
        "origin": vector.origin,
    }
    if vector.note:
        out["note"] = vector.note
    out["trace"] = {k: trace[k] for k in TRACE_FIELDS}
    out["expected"] = expected_json(vector.area, vector.expected)
    return out


def case_input_json(vector: Vector) -> dict[str, Any]:
    """What an engine is sent (spec/engine-protocol.md): the case without its expected output."""
    trace = vector.trace.to_json()
    return {"id": vector.id, "area": vector.area, **{k: trace[k] for k in TRACE_FIELDS}}


class _Where:
    """Builds error messages that name the place: ``file:line: case 'x': field: problem``."""

    def __init__(self, place: str) -> None:
        self.place = place

    def fail(self, message: str) -> VectorFormatError:
        return VectorFormatError(f"{self.place}: {message}")


def _require(obj: Mapping[str, Any], name: str, kind: type | tuple[type, ...], where: _Where) -> Any:
    if name not in obj:
        raise where.fail(f"missing field {name!r}")
    value = obj[name]
    if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
        expected = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise where.fail(f"field {name!r} must be {_json_kind(expected)}, got {dumps_line(value)[:80]}")
    return value


def _json_kind(python_name: str) -> str:
    return {"str": "a string", "list": "an array", "dict": "an object", "int": "an integer"}.get(
        python_name, python_name
    )


def _unknown(obj: Mapping[str, Any], allowed: Sequence[str], what: str, where: _Where) -> None:
    extra = sorted(set(obj) - set(allowed))
    if extra:
        raise where.fail(f"{what} has unknown fields {extra}; allowed: {list(allowed)}")


def trace_from_json(area: str, data: Any, name: str, where: _Where) -> Trace:
    if not isinstance(data, dict):
        raise where.fail("field 'trace' must be an object")
    _unknown(data, TRACE_FIELDS, "'trace'", where)
    config = _require(data, "config", dict, where)
    batches = _require(data, "batches", list, where)
    restart_after = data.get("restart_after", [])
    if not isinstance(restart_after, list) or any(
        isinstance(b, bool) or not isinstance(b, int) for b in restart_after
    ):
        raise where.fail("'restart_after' must be an array of batch numbers")
    built: list[tuple[Item, ...]] = []
    for b, batch in enumerate(batches):
        if not isinstance(batch, list):
            raise where.fail(f"batch {b} must be an array of items")
        items = []
        for s, raw in enumerate(batch):
            at = f"batch {b} item {s}"
            if not isinstance(raw, dict):
                raise where.fail(f"{at} must be an object")
            _unknown(raw, ITEM_FIELDS, at, where)
            if "kind" not in raw:
                raise where.fail(f"{at} has no 'kind'")
            try:
                items.append(Item(**raw))
            except InvalidTrace as e:
                raise where.fail(f"{at}: {e}") from None
        built.append(tuple(items))
    try:
        return Trace(area, config, tuple(built), frozenset(restart_after), name)
    except InvalidTrace as e:
        raise where.fail(str(e)) from None


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, (str, int, float))


def tables_from_json(area: str, data: Any, where: _Where, *, strict: bool) -> Output:
    """``{table: {"columns": [...], "rows": [[...]]}}``; engines may also give ``{table: [rows]}``
    with rows as arrays in column order or as objects by column name (``strict`` refuses those
    and missing tables: a vector file states every table)."""
    if not isinstance(data, dict):
        raise where.fail("'tables' must be an object of table name -> table")
    known = TABLES[area]
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise where.fail(f"area {area!r} has no tables {unknown}; its tables: {list(known)}")
    missing = [t for t in known if t not in data]
    if strict and missing:
        raise where.fail(f"tables {missing} are missing (a vector states every table, empty ones too)")
    raw: dict[str, list[Any]] = {}
    for name, table in data.items():
        columns = known[name]
        if isinstance(table, dict):
            _unknown(table, ("columns", "rows"), f"table {name!r}", where)
            if table.get("columns") != list(columns):
                raise where.fail(
                    f"table {name!r}: columns must be {list(columns)}, got {table.get('columns')}"
                )
            rows = table.get("rows")
        elif strict:
            raise where.fail(f"table {name!r} must be an object with 'columns' and 'rows'")
        else:
            rows = table
        if not isinstance(rows, list):
            raise where.fail(f"table {name!r}: rows must be an array")
        for i, row in enumerate(rows):
            if isinstance(row, dict) and not strict:
                _unknown(row, columns, f"table {name!r} row {i}", where)
                absent = [c for c in columns if c not in row]
                if absent:
                    raise where.fail(f"table {name!r} row {i} lacks columns {absent}")
                cells = list(row.values())
            elif isinstance(row, list):
                if len(row) != len(columns):
                    raise where.fail(
                        f"table {name!r} row {i} has {len(row)} cells, the columns are {list(columns)}"
                    )
                cells = row
            else:
                raise where.fail(f"table {name!r} row {i} must be an array of cells")
            if not all(_scalar(c) for c in cells):
                raise where.fail(f"table {name!r} row {i}: cells are strings, numbers or null")
        raw[name] = rows
    try:
        return canonical(area, raw)
    except (ValueError, TypeError) as e:
        raise where.fail(str(e)) from None


def expected_from_json(area: str, data: Any, where: _Where) -> Output | ExpectedError:
    if not isinstance(data, dict):
        raise where.fail("field 'expected' must be an object")
    if "error" in data:
        _unknown(data, ("error", "message"), "'expected'", where)
        if not isinstance(data["error"], str) or not data["error"]:
            raise where.fail("'expected.error' must name the error type, e.g. \"InvalidConfig\"")
        return ExpectedError(data["error"], str(data.get("message", "")))
    _unknown(data, ("tables",), "'expected'", where)
    if "tables" not in data:
        raise where.fail("'expected' needs 'tables' (an output) or 'error' (a refused configuration)")
    return tables_from_json(area, data["tables"], where, strict=True)


def vector_from_json(obj: Any, place: str) -> Vector:
    where = _Where(place)
    if not isinstance(obj, dict):
        raise where.fail("a case must be a JSON object")
    case_id = obj.get("id")
    if isinstance(case_id, str) and case_id:
        where = _Where(f"{place}: case {case_id!r}")
    _unknown(obj, CASE_FIELDS, "the case", where)
    case_id = _require(obj, "id", str, where)
    if not case_id:
        raise where.fail("'id' must not be empty")
    area = _require(obj, "area", str, where)
    if area not in TABLES:
        raise where.fail(f"unknown area {area!r}; areas: {sorted(TABLES)}")
    clauses = obj.get("clauses", [])
    if not isinstance(clauses, list) or not all(isinstance(c, str) for c in clauses):
        raise where.fail("'clauses' must be an array of clause ids")
    origin, note = obj.get("origin", ""), obj.get("note", "")
    if not isinstance(origin, str) or not isinstance(note, str):
        raise where.fail("'origin' and 'note' must be strings")
    trace = trace_from_json(area, obj.get("trace"), case_id, where)
    expected = expected_from_json(area, _require(obj, "expected", dict, where), where)
    return Vector(case_id, trace, expected, tuple(clauses), origin, note)


# ---- files -------------------------------------------------------------------------------


def header_json(kind: str = VECTORS_FORMAT, **extra: Any) -> dict[str, Any]:
    return {"format": kind, "version": VERSION, **extra}


def check_header(obj: Any, kind: str, where: _Where) -> dict[str, Any]:
    if not isinstance(obj, dict) or obj.get("format") != kind:
        raise where.fail(f'the first line must be the header {{"format": "{kind}", "version": {VERSION}}}')
    if obj.get("version") != VERSION:
        raise where.fail(f"format version {obj.get('version')!r} is not supported (this reader: {VERSION})")
    return obj


def write_jsonl(path: Path, vectors: Iterable[Vector], **header: Any) -> None:
    lines = [dumps_line(header_json(**header))] + [dumps_line(vector_json(v)) for v in vectors]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _read_bytes(path: Path) -> bytes:
    """A file's bytes, gunzipped when its name ends in ``.gz`` (committed answers are)."""
    if path.suffix != ".gz":
        return path.read_bytes()
    try:
        return gzip.decompress(path.read_bytes())
    except (OSError, EOFError) as e:
        raise VectorFormatError(f"{path}: not a gzip file ({e})") from None


def _write_text(path: Path, text: str) -> None:
    """Writes ``text``, gzipped when the name ends in ``.gz`` (no time stamp: the same answers give
    the same bytes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode("utf-8")
    path.write_bytes(gzip.compress(data, compresslevel=9, mtime=0) if path.suffix == ".gz" else data)


def _json_lines(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON) of every non-blank line; a bad line names itself."""
    try:
        text = _read_bytes(path).decode("utf-8")
    except UnicodeDecodeError as e:
        raise VectorFormatError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield number, loads_strict(line)
        except ValueError as e:
            raise VectorFormatError(f"{path}:{number}: not valid JSON: {e}") from None


def read_jsonl(path: Path, into: VectorSet) -> dict[str, Any]:
    header: dict[str, Any] | None = None
    for number, obj in _json_lines(path):
        place = f"{path}:{number}"
        if header is None:
            header = check_header(obj, VECTORS_FORMAT, _Where(place))
            continue
        into.add(vector_from_json(obj, place), place)
    if header is None:
        raise VectorFormatError(f"{path}: empty file; the first line must be the header")
    return header


def vector_files(paths: Sequence[str | Path]) -> list[Path]:
    """Files as given; a folder gives its vector files, recursively, in name order."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(f for f in p.rglob("*") if f.suffix in (JSONL_SUFFIX, *ARROW_SUFFIXES))
        elif p.is_file():
            out.append(p)
        else:
            raise VectorFormatError(f"{p}: no such file or folder")
    return out


def read_vectors(paths: Sequence[str | Path]) -> VectorSet:
    """Every case of the files (or folders) given; VectorFormatError names the first bad place."""
    found = VectorSet()
    for path in vector_files(paths):
        if path.suffix in ARROW_SUFFIXES:
            read_arrow(path, found)
        else:
            read_jsonl(path, found)
    return found


# ---- Arrow IPC (large generated traces) ------------------------------------------------------

_ITEM_INT_FIELDS = ("event_time", "value", "partition", "source", "time", "count", "core")


def _arrow_schema() -> Any:
    import pyarrow as pa

    item = pa.struct(
        [("kind", pa.string()), ("key", pa.string())]
        + [(name, pa.int64()) for name in _ITEM_INT_FIELDS]
        + [("raw", pa.string()), ("messages", pa.string())]  # JSON text: a cell is a string, number or null
    )
    return pa.schema(
        [
            ("id", pa.string()),
            ("area", pa.string()),
            ("clauses", pa.list_(pa.string())),
            ("origin", pa.string()),
            ("note", pa.string()),
            ("config", pa.string()),  # JSON text: settings differ per area
            ("batches", pa.list_(pa.list_(item))),
            ("restart_after", pa.list_(pa.int64())),
            ("expected", pa.string()),  # JSON text of the 'expected' object
        ]
    )


def write_arrow(path: Path, vectors: Iterable[Vector], with_expected: bool = True, **header: Any) -> None:
    import pyarrow as pa
    import pyarrow.ipc as ipc

    records = []
    for v in vectors:
        case = vector_json(v)
        records.append(
            {
                "id": v.id,
                "area": v.area,
                "clauses": list(v.clauses),
                "origin": v.origin,
                "note": v.note,
                "config": dumps_line(case["trace"]["config"]),
                "batches": [
                    [
                        {
                            **{n: i.get(n) for n in ("kind", "key", *_ITEM_INT_FIELDS)},
                            "value": i.get("value", 0),
                            "raw": dumps_line(i["raw"]) if "raw" in i else None,
                            "messages": dumps_line(i["messages"]) if "messages" in i else None,
                        }
                        for i in batch
                    ]
                    for batch in case["trace"]["batches"]
                ],
                "restart_after": case["trace"]["restart_after"],
                "expected": dumps_line(case["expected"]) if with_expected else None,
            }
        )
    meta = {k: dumps_line(v) for k, v in header_json(**header).items()}
    schema = _arrow_schema().with_metadata(meta)
    table = pa.Table.from_pylist(records, schema=schema)
    path.parent.mkdir(parents=True, exist_ok=True)
    with ipc.new_file(str(path), schema) as writer:
        writer.write_table(table)


def read_arrow(path: Path, into: VectorSet) -> dict[str, Any]:
    import pyarrow as pa
    import pyarrow.ipc as ipc

    try:
        with pa.memory_map(str(path)) as source:
            table = ipc.open_file(source).read_all()
    except (pa.ArrowInvalid, OSError) as e:
        raise VectorFormatError(f"{path}: not an Arrow IPC file: {e}") from None
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    try:
        header = check_header(
            {k: loads_strict(v) for k, v in meta.items()}, VECTORS_FORMAT, _Where(str(path))
        )
    except ValueError as e:
        raise VectorFormatError(f"{path}: schema metadata is not JSON: {e}") from None
    missing = [n for n in _arrow_schema().names if n not in table.column_names]
    if missing:
        raise VectorFormatError(f"{path}: columns {missing} are missing")
    for number, rec in enumerate(table.to_pylist()):
        place = f"{path}: record {number}"
        try:
            case = {
                "id": rec["id"],
                "area": rec["area"],
                "clauses": rec["clauses"] or [],
                "origin": rec["origin"] or "",
                "note": rec["note"] or "",
                "trace": {
                    "config": loads_strict(rec["config"]),
                    "batches": [[_arrow_item(i) for i in b or []] for b in rec["batches"] or []],
                    "restart_after": rec["restart_after"] or [],
                },
                "expected": loads_strict(rec["expected"]),
            }
        except (ValueError, TypeError) as e:
            raise VectorFormatError(f"{place}: a JSON text column is not valid JSON: {e}") from None
        into.add(vector_from_json(case, place), place)
    return header


def _arrow_item(rec: Mapping[str, Any]) -> dict[str, Any]:
    item = {k: v for k, v in rec.items() if v is not None and k not in ("raw", "messages")}
    for name in ("raw", "messages"):
        if rec.get(name) is not None:
            item[name] = loads_strict(rec[name])
    return item


def write_case_inputs(path: Path, vectors: Sequence[Vector]) -> None:
    """The cases an engine is sent, without their expected outputs (spec/engine-protocol.md):
    JSON Lines without a header, or the Arrow layout with a null ``expected`` column."""
    if path.suffix in ARROW_SUFFIXES:
        write_arrow(path, vectors, with_expected=False, kind=CASES_FORMAT)
    else:
        lines = [dumps_line(case_input_json(v)) for v in vectors]
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def write_vectors(path: Path, vectors: Sequence[Vector], **header: Any) -> None:
    """JSON Lines, or Arrow IPC for a path ending in .arrow."""
    if path.suffix in ARROW_SUFFIXES:
        write_arrow(path, vectors, **header)
    else:
        write_jsonl(path, vectors, **header)


# ---- the outputs file (answers per case) ---------------------------------------------------


def result_json(area: str, result: CaseResult) -> dict[str, Any]:
    out: dict[str, Any] = {"id": result.id}
    if result.output is not None:
        out["tables"] = tables_json(area, result.output)
    elif result.error is not None:
        out["error"] = {"type": result.error.type, "message": result.error.message}
    elif result.unsupported is not None:
        out["unsupported"] = result.unsupported
    elif result.failure is not None:
        out["failure"] = {"kind": result.failure[0], "detail": result.failure[1]}
    return out


def answer_from_json(obj: Any, areas: Mapping[str, str], place: str, *, allow_failure: bool) -> CaseResult:
    """One answer line: ``{"id", "tables"}``, ``{"id", "error": {"type", "message"}}`` or
    ``{"id", "unsupported": reason}`` (and, in a stored outputs file, ``{"id", "failure"}``).
    ``areas`` maps every known case id to its area."""
    where = _Where(place)
    if not isinstance(obj, dict):
        raise where.fail("an answer must be a JSON object with an 'id'")
    case_id = obj.get("id")
    if not isinstance(case_id, str):
        raise where.fail("an answer needs the string 'id' of its case")
    if case_id not in areas:
        raise where.fail(f"answers case {case_id!r}, which was not sent")
    where = _Where(f"{place}: case {case_id!r}")
    answers = ["tables", "error", "unsupported"] + (["failure"] if allow_failure else [])
    given = [k for k in answers if k in obj]
    _unknown(obj, ["id", *answers], "the answer", where)
    if len(given) != 1:
        raise where.fail(f"an answer has exactly one of {answers}, got {given or 'none'}")
    kind = given[0]
    if kind == "tables":
        return CaseResult(
            case_id, output=tables_from_json(areas[case_id], obj["tables"], where, strict=False)
        )
    if kind == "error":
        err = obj["error"]
        if isinstance(err, str):
            err = {"type": err}
        if not isinstance(err, dict) or not isinstance(err.get("type"), str):
            raise where.fail('\'error\' must be {"type": "InvalidConfig", "message": "..."}')
        return CaseResult(case_id, error=ExpectedError(err["type"], str(err.get("message", ""))))
    if kind == "unsupported":
        return CaseResult(case_id, unsupported=str(obj["unsupported"]) or "unsupported")
    failure = obj["failure"]
    if not isinstance(failure, dict) or failure.get("kind") not in FAILURE_KINDS:
        raise where.fail(f'\'failure\' must be {{"kind": one of {list(FAILURE_KINDS)}, "detail": ...}}')
    return CaseResult(case_id, failure=(failure["kind"], str(failure.get("detail", ""))))


def write_outputs(
    path: Path,
    vectors: Sequence[Vector],
    results: Mapping[str, CaseResult],
    engine: str,
    provenance: Mapping[str, str] | None = None,
    command: str | None = None,
    date: str | None = None,
) -> None:
    """The answers as an outputs file (gzipped when ``path`` ends in ``.gz``); the header names
    the engine and, when given, its provenance (what ran, with which settings), the command of
    the run and its date."""
    extra: dict[str, Any] = {"provenance": dict(provenance)} if provenance else {}
    extra.update({k: v for k, v in (("command", command), ("date", date)) if v})
    lines = [dumps_line(header_json(OUTPUTS_FORMAT, engine=engine, **extra))]
    lines += [dumps_line(result_json(v.area, results[v.id])) for v in vectors if v.id in results]
    _write_text(path, "\n".join(lines) + "\n")


def read_outputs(path: Path, vectors: VectorSet) -> tuple[dict[str, Any], dict[str, CaseResult]]:
    """The header and the answers of an outputs file; every line must answer a case of ``vectors``."""
    areas = {v.id: v.area for v in vectors.vectors}
    header: dict[str, Any] | None = None
    results: dict[str, CaseResult] = {}
    for number, obj in _json_lines(path):
        place = f"{path}:{number}"
        if header is None:
            header = check_header(obj, OUTPUTS_FORMAT, _Where(place))
            continue
        result = answer_from_json(obj, areas, place, allow_failure=True)
        if result.id in results:
            raise VectorFormatError(f"{place}: case {result.id!r} is answered twice")
        results[result.id] = result
    if header is None:
        raise VectorFormatError(f"{path}: empty file; the first line must be the header")
    return header, results
