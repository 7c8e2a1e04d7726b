"""Check the HTML conformance report (harness/reports.py) in a real browser: headless Chromium.

    python scripts/check_report_html.py reports/conformance.html [--screenshot report.png]

Chromium loads the page and dumps the DOM it built; the checks run on that DOM:
the page parsed into a document with the matrix table, every matrix row has a
clause link and status cells, every ``href="#x"`` has an element ``id="x"``, ids
are unique, and the page loads nothing from elsewhere. ``--screenshot`` also
writes a picture at 1280 pixels wide. Exits 0 when every check passes, 1 when
one fails, 2 when Chromium is missing or cannot run. Not part of the test run
(it needs the ``chromium`` binary: ``apt-get install chromium``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run")
TIMEOUT = 120  # seconds for one Chromium run


class _Dom(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: list[str] = []
        self.hrefs: list[str] = []
        self.external: list[str] = []
        self.tags: set[str] = set()
        self.matrix_tables = 0
        self.clause_rows = 0
        self.clause_links: list[str] = []
        self.cell_links: list[str] = []
        self.clause_sections: set[str] = set()
        self._in_row = False
        self._in_cell = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        classes = a.get("class", "").split()
        self.tags.add(tag)
        if "id" in a:
            self.ids.append(a["id"])
        href = a.get("href", "")
        if tag == "a" and href.startswith("#"):
            self.hrefs.append(href[1:])
            if "cid" in classes:
                self.clause_links.append(href[1:])
            elif self._in_cell:
                self.cell_links.append(href[1:])
                self._in_cell = False
        for key in ("src", "href"):
            value = a.get(key, "")
            if tag in ("link", "script", "img", "iframe") and value:
                self.external.append(f"<{tag} {key}={value!r}>")
        if tag == "table" and a.get("id") == "matrix-table":
            self.matrix_tables += 1
        if tag == "tr" and "clause-row" in classes:
            self.clause_rows += 1
        if tag == "td" and "data-clause" in a:
            self._in_cell = True
        if tag == "section" and "clause" in classes and "id" in a:
            self.clause_sections.add(a["id"])


def find_chromium() -> str | None:
    given = os.environ.get("CHROMIUM")
    if given:
        return shutil.which(given) or (given if Path(given).is_file() else None)
    return next((p for p in map(shutil.which, BROWSERS) if p), None)


def run_chromium(browser: str, *args: str) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="report-check-") as profile:
        return subprocess.run(
            [browser, *FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )


def check_dom(dom_text: str) -> list[str]:
    """What is wrong with the page Chromium built; [] when nothing is."""
    dom = _Dom()
    dom.feed(dom_text)
    dom.close()
    problems = []
    if "body" not in dom.tags:
        problems.append("the DOM has no <body>: the page did not load")
    if dom.matrix_tables != 1:
        problems.append(f"expected one matrix table (id=matrix-table), found {dom.matrix_tables}")
    if dom.clause_rows == 0:
        problems.append("the matrix has no clause rows")
    if len(dom.clause_links) != dom.clause_rows:
        problems.append(f"{dom.clause_rows} matrix rows but {len(dom.clause_links)} clause links")
    ids = set(dom.ids)
    dupes = sorted({i for i in dom.ids if dom.ids.count(i) > 1}) if len(ids) != len(dom.ids) else []
    if dupes:
        problems.append(f"{len(dupes)} ids used twice, e.g. {dupes[:5]}")
    missing_clauses = sorted(set(dom.clause_links) - dom.clause_sections)
    if missing_clauses:
        problems.append(
            f"{len(missing_clauses)} clause links without a clause section, e.g. {missing_clauses[:5]}"
        )
    missing = sorted(set(dom.hrefs) - ids)
    if missing:
        problems.append(f"{len(missing)} links to anchors that do not exist, e.g. {missing[:5]}")
    if not dom.cell_links:
        problems.append("the matrix has no status cells linking to their tests")
    if dom.external:
        problems.append(f"the page loads resources: {dom.external[:5]}")
    if not problems:
        print(
            f"ok: matrix with {dom.clause_rows} clauses and {len(dom.cell_links)} cells, "
            f"{len(dom.hrefs)} links, all resolve"
        )
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", type=Path, help="the HTML report")
    parser.add_argument("--screenshot", type=Path, metavar="PNG", help="also write a screenshot there")
    parser.add_argument("--height", type=int, default=2000, help="window height of the screenshot (px)")
    args = parser.parse_args(argv)

    if not args.path.is_file():
        print(f"error: {args.path} is not a file", file=sys.stderr)
        return 2
    browser = find_chromium()
    if browser is None:
        print(
            "error: no Chromium found (tried $CHROMIUM and " + ", ".join(BROWSERS) + "); "
            "install it, e.g. apt-get install chromium",
            file=sys.stderr,
        )
        return 2
    url = args.path.resolve().as_uri()
    try:
        done = run_chromium(browser, "--dump-dom", url)
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"error: {browser} did not run: {e}", file=sys.stderr)
        return 2
    if done.returncode != 0 or not done.stdout.strip():
        print(
            f"error: {browser} --dump-dom exited {done.returncode}:\n{done.stderr[-2000:]}", file=sys.stderr
        )
        return 2
    problems = check_dom(done.stdout)

    if args.screenshot:
        shot = args.screenshot.resolve()
        shot.parent.mkdir(parents=True, exist_ok=True)
        shot.unlink(missing_ok=True)
        try:
            done = run_chromium(browser, f"--screenshot={shot}", f"--window-size=1280,{args.height}", url)
        except (OSError, subprocess.TimeoutExpired) as e:
            print(f"error: {browser} did not run: {e}", file=sys.stderr)
            return 2
        if not shot.is_file() or shot.stat().st_size == 0:
            problems.append(f"no screenshot written (exit {done.returncode}): {done.stderr[-1000:]}")
        else:
            print(f"screenshot: {shot}")

    for p in problems:
        print(f"FAIL: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
