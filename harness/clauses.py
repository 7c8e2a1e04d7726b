"""Clause ids of the specification (``spec/*.md``).

A clause is a heading of level 2 to 4 whose text starts with its id, for
example ``### F065-R7 All keys idle`` or ``### TR-4 The processing clock``.
The conformance summary lists every clause found here, so a clause without a
scenario or a property shows up as untested.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# An id is an area prefix, a dash, an optional letter run and a number:
# F065-R7, F017E-R3, TR-4, VF-R12.
CLAUSE_ID = r"[A-Z][A-Za-z0-9]*-[A-Z]*\d+"
CLAUSE_ID_RE = re.compile(rf"^{CLAUSE_ID}$")
HEADING_RE = re.compile(rf"^#{{2,4}}\s+({CLAUSE_ID})\b[ \t]*(.*)$", re.MULTILINE)


@dataclass(frozen=True)
class Clause:
    id: str
    title: str
    file: str  # spec file name, "" for a clause only seen in test tags
    text: str = ""  # the clause's Markdown body, up to the next heading


def is_clause_id(text: str) -> bool:
    return bool(CLAUSE_ID_RE.match(text))


def clause_sort_key(clause_id: str) -> tuple[str, str, int]:
    """F065-R2 before F065-R10: area, letter run, number."""
    m = re.match(r"^(.*)-([A-Z]*)(\d+)$", clause_id)
    if not m:
        return (clause_id, "", 0)
    return (m.group(1), m.group(2), int(m.group(3)))


ANY_HEADING_RE = re.compile(r"^#{1,6}\s", re.MULTILINE)


def parse_clauses(text: str, file: str = "") -> list[Clause]:
    out = []
    for m in HEADING_RE.finditer(text):
        following = ANY_HEADING_RE.search(text, m.end())
        body = text[m.end() : following.start() if following else len(text)].strip()
        out.append(Clause(m.group(1), m.group(2).strip(), file, body))
    return out


def load_clauses(spec_dir: str | Path) -> list[Clause]:
    """Every clause heading of ``spec_dir/*.md`` in file order; [] if the folder is missing."""
    spec_dir = Path(spec_dir)
    if not spec_dir.is_dir():
        return []
    out: list[Clause] = []
    seen: set[str] = set()
    for path in sorted(spec_dir.glob("*.md")):
        for clause in parse_clauses(path.read_text(encoding="utf-8"), path.name):
            if clause.id not in seen:
                seen.add(clause.id)
                out.append(clause)
    return out
