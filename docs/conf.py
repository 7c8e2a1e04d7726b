"""Sphinx configuration of the documentation site: ``tox -e docs`` builds it into build/docs."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))  # the step-reference generator
sys.path.insert(0, str(HERE.parent))  # harness, reference and features, for the generator

project = "Event-time conformance suite"
author = "the eventtime-conformance authors"
copyright = "the eventtime-conformance authors, Apache-2.0"

extensions = ["myst_parser", "step_reference"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "guides/_generated", "**/.pytest_cache"]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3  # links such as page.md#a-heading resolve
# The spec files are included as written: their clause headings follow a title directly.
suppress_warnings = ["myst.header"]

html_theme = "furo"
html_title = "Event-time conformance suite"
html_static_path: list[str] = []
pygments_style = "friendly"
