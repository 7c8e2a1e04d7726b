"""Per-engine known deviations: ``expectations/<engine>.toml`` (spec/traces.md TR-11).

The file is a list of ``[[deviation]]`` tables::

    [[deviation]]
    clause = "F065-R21"            # or: scenario = "A slow key's windows ..."
    reason = "windows fire one batch late"
    link = "https://github.com/org/repo/issues/12"

``scenario`` matches a Gherkin scenario name exactly, or the name of a
property test function. ``clause`` matches every scenario tagged with that
clause and every property test marked ``@pytest.mark.clauses(...)`` with it.
The suites apply each entry as a strict expected failure: a test it matches
that passes is reported as a failure, so a fixed deviation cannot linger.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path


class ExpectationFileError(ValueError):
    pass


@dataclass(frozen=True)
class Deviation:
    reason: str
    link: str = ""
    clause: str | None = None
    scenario: str | None = None

    def describe(self) -> str:
        what = f"clause {self.clause}" if self.clause else f"scenario {self.scenario!r}"
        link = f" ({self.link})" if self.link else ""
        return f"known deviation, {what}: {self.reason}{link}"

    def matches(self, scenario_name: str | None, clauses: set[str]) -> bool:
        if self.clause is not None:
            return self.clause in clauses
        return scenario_name is not None and scenario_name == self.scenario


def file_name(engine_id: str) -> str:
    """``reference`` -> ``reference.toml``; ``pkg.mod:Engine`` -> ``pkg.mod_Engine.toml``."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", engine_id) + ".toml"


def load_deviations(directory: str | Path, engine_id: str) -> list[Deviation]:
    path = Path(directory) / file_name(engine_id)
    if not path.is_file():
        return []
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ExpectationFileError(f"{path}: {e}") from None
    unknown = set(data) - {"deviation"}
    if unknown:
        raise ExpectationFileError(f"{path}: unknown top-level keys {sorted(unknown)}; use [[deviation]]")
    out = []
    for i, entry in enumerate(data.get("deviation", [])):
        where = f"{path} entry {i + 1}"
        extra = set(entry) - {"clause", "scenario", "reason", "link"}
        if extra:
            raise ExpectationFileError(f"{where}: unknown fields {sorted(extra)}")
        if ("clause" in entry) == ("scenario" in entry):
            raise ExpectationFileError(f"{where}: give exactly one of 'clause' or 'scenario'")
        if not str(entry.get("reason", "")).strip():
            raise ExpectationFileError(f"{where}: 'reason' is required")
        out.append(
            Deviation(
                reason=str(entry["reason"]),
                link=str(entry.get("link", "")),
                clause=entry.get("clause"),
                scenario=entry.get("scenario"),
            )
        )
    return out
