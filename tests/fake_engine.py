"""A test double of an engine process (spec/engine-protocol.md) that misbehaves on purpose.

It answers every case with the oracle's output, except by the end of the case id:
``/hang`` never answers, ``/crash`` exits with code 3 after a line on stderr,
``/garbage`` writes a line that is not JSON, ``/wrong-table`` answers with a table
the area does not have, ``/provenance`` says its provenance before its answer,
``/bad-provenance`` writes a provenance line with a list in it; after its last
answer it says one more provenance line. ``--crash-always``
exits at once, before reading anything.
``--files CASES ANSWERS`` reads the cases from a file (JSON Lines or Arrow IPC)
and writes the answers to a file instead of the standard streams.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from typing import IO, Any

from harness.engine import run_canonical
from harness.reference_engine import ReferenceEngine
from harness.vectors import _arrow_item, _Where, tables_json, trace_from_json


def answer(case: dict[str, Any]) -> dict[str, Any]:
    trace = trace_from_json(
        case["area"],
        {k: case[k] for k in ("config", "batches", "restart_after")},
        case["id"],
        _Where("input"),
    )
    result = run_canonical(ReferenceEngine(), [trace])[0]
    if isinstance(result, Exception):
        return {"id": case["id"], "error": {"type": type(result).__name__, "message": str(result)}}
    return {"id": case["id"], "tables": tables_json(case["area"], result)}


def arrow_cases(path: str) -> Iterator[dict[str, Any]]:
    import pyarrow.ipc as ipc

    for rec in ipc.open_file(path).read_all().to_pylist():
        batches = [[_arrow_item(i) for i in b] for b in rec["batches"]]
        config = json.loads(rec["config"])
        yield {"id": rec["id"], "area": rec["area"], "config": config, "batches": batches,
               "restart_after": rec["restart_after"]}  # fmt: skip


def serve(cases: Iterator[dict[str, Any]], out: IO[str]) -> None:
    for case in cases:
        ending = case["id"].rsplit("/", 1)[-1]
        if ending == "hang":
            time.sleep(600)
        elif ending == "crash":
            print("fake engine: out of memory (on purpose)", file=sys.stderr, flush=True)
            out.flush()
            sys.exit(3)
        elif ending == "garbage":
            print("this is not JSON", file=out, flush=True)
        elif ending == "provenance":
            print(json.dumps({"provenance": {"fake": "1.0", "bundle": 7}}), file=out, flush=True)
            print(json.dumps(answer(case)), file=out, flush=True)
        elif ending == "bad-provenance":
            print(json.dumps({"provenance": {"fake": ["1", "0"]}}), file=out, flush=True)
        elif ending == "wrong-table":
            print(json.dumps({"id": case["id"], "tables": {"no_such_table": []}}), file=out, flush=True)
        else:
            print(json.dumps(answer(case)), file=out, flush=True)


def main() -> None:
    if "--crash-always" in sys.argv:
        print("fake engine: cannot start", file=sys.stderr)
        sys.exit(4)
    if "--files" in sys.argv:
        cases_path, answers_path = sys.argv[sys.argv.index("--files") + 1 :][:2]
        if cases_path.endswith(".arrow"):
            cases = arrow_cases(cases_path)
        else:
            cases = (json.loads(line) for line in open(cases_path, encoding="utf-8"))
        with open(answers_path, "w", encoding="utf-8") as out:
            serve(cases, out)
        return
    serve((json.loads(line) for line in sys.stdin), sys.stdout)
    print(json.dumps({"provenance": {"last": "after every answer"}}), flush=True)


if __name__ == "__main__":
    main()
