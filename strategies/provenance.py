"""What a committed draw or count of the strategies was made under: the Hypothesis and Python
versions, and the hash of every project source the process that made it had loaded. A run reads
the committed file only while all of it is unchanged (strategies/coverage_counts.json,
strategies/differential_draws.json.gz)."""

from __future__ import annotations

import hashlib
import os
import sys
from typing import Any

PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def draw_conditions() -> dict[str, Any]:
    """What a committed draw depends on besides its key (parts, traces, seed, restart positions)
    and the sources: the Hypothesis and Python versions."""
    import hypothesis

    return {"hypothesis": hypothesis.__version__, "python": f"{sys.version_info[0]}.{sys.version_info[1]}"}


def file_hash(relative: str) -> str:
    try:
        with open(os.path.join(PROJECT, relative), "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return "missing"


def stale_sources(data: dict[str, Any]) -> list[str]:
    """The source files of a committed file that changed since it was made (or are gone)."""
    return sorted(path for path, digest in data.get("sources", {}).items() if file_hash(path) != digest)


def loaded_sources() -> dict[str, str]:
    """The hash of every project module this process has loaded, by its path in the project."""
    sources = {}
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if file and os.path.abspath(file).startswith(PROJECT + os.sep) and file.endswith(".py"):
            relative = os.path.relpath(os.path.abspath(file), PROJECT)
            if not relative.startswith((".", "build")):
                sources[relative] = file_hash(relative)
    return dict(sorted(sources.items()))
