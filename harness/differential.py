"""Differential checking of an engine against the oracle, with a shrinker.

``check_against_reference(engine, traces)`` runs all ``traces`` through the
engine in ONE ``run`` call and through the reference, and compares canonical
outputs (``harness.outputs.diff``). When some traces differ, only the smallest
failing one is shrunk: greedy passes that drop batches, drop items, merge
batches, drop restart points and settings, and simplify numbers and keys.
Each round's candidates go to the engine together (one ``run`` call per
``candidates_per_run`` candidates), so an expensive engine pays per round,
not per candidate. The shrinker stops at a fixed point or at its time cap;
the AssertionError then shows

* the shrunk trace as Gherkin steps that paste into a feature file (the
  expected tables, from the oracle, as ``Then`` steps),
* ``Trace.describe()`` and the trace as JSON,
* the side-by-side diff of oracle and engine.

``to_gherkin`` and ``trace_from_gherkin`` are inverse on keyed-watermarks
traces, so a printed scenario can be replayed without pytest-bdd.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from harness import expectations
from harness.engine import Engine, run_canonical
from harness.outputs import TABLES, Output, diff, format_table
from harness.reference_engine import ReferenceEngine
from harness.traces import ITEM_FIELD_TYPES, Item, Trace

Result = Output | Exception

# ---- comparing ----------------------------------------------------------------


def compare(area: str, expected: Result, actual: Result) -> str:
    """Empty when the engine's answer equals the oracle's; else a readable difference."""
    if isinstance(expected, Exception) or isinstance(actual, Exception):
        if isinstance(expected, Exception) and isinstance(actual, Exception):
            if type(expected).__name__ == type(actual).__name__:
                return ""  # TR-6: both refused the configuration
        return f"expected: {_result_text(expected)}\nactual:   {_result_text(actual)}"
    return diff(area, expected, actual)


def _result_text(r: Result) -> str:
    if isinstance(r, Exception):
        return f"{type(r).__name__}: {r}"
    return "an output (" + ", ".join(f"{k}: {len(v)} rows" for k, v in r.items()) + ")"


def run_safely(engine: Engine, traces: Sequence[Trace]) -> list[Result]:
    """``run_canonical``, but a run that raises is split until the raising trace is found.

    A trace whose run raises gets the exception as its result, so a crash is
    a difference like any other.
    """
    if not traces:
        return []
    try:
        return run_canonical(engine, traces)
    except Exception as error:  # noqa: BLE001 - a crash is a finding, not a harness error
        if len(traces) == 1:
            return [RuntimeError(f"engine {engine.name} raised {type(error).__name__}: {error}")]
        mid = len(traces) // 2
        return run_safely(engine, traces[:mid]) + run_safely(engine, traces[mid:])


# ---- the size of a trace (what the shrinker minimises) ------------------------------


def _digits(n: int) -> int:
    """Significant digits: 10000 is simpler than 9999."""
    s = str(abs(n)).rstrip("0")
    return len(s) if s else 0


def _numbers(trace: Trace) -> list[int]:
    nums = [v for v in trace.config.values() if isinstance(v, int) and not isinstance(v, bool)]
    for b in trace.batches:
        for i in b:
            fields = (i.event_time, i.time, i.value, i.partition, i.source, i.count, i.core)
            nums += [v for v in (*fields, i.producer, i.sequence) if v is not None]
    return nums


def size(trace: Trace) -> tuple[Any, ...]:
    items = sum(len(b) for b in trace.batches)
    keys = {i.key for b in trace.batches for i in b if i.key is not None}
    # F064: the partitions an item names count like keys (F065 traces name none)
    parts = {(i.source, i.partition) for b in trace.batches for i in b if i.source is not None}
    nums = _numbers(trace)
    return (
        items,
        len(trace.batches),
        len(trace.restart_after),
        len(keys) + len(parts),
        len(trace.config),
        sum(_digits(n) for n in nums),
        sum(min(abs(n), 2**64) for n in nums),
        sum(len(k) for k in keys),
        sum(1 for b in trace.batches for i in b if i.kind != "event"),
        tuple(sorted(keys)),  # last: "a" before "c"
    )


# ---- candidate reductions ---------------------------------------------------------


def _with(trace: Trace, batches: Sequence[Sequence[Item]], restart: Iterable[int] | None = None) -> Trace:
    restart_after = trace.restart_after if restart is None else restart
    n = len(batches)
    return Trace(
        trace.area,
        trace.config,
        tuple(tuple(b) for b in batches),
        frozenset(r for r in restart_after if 0 <= r < n - 1),
        trace.name,
    )


def _chunks(n: int) -> Iterable[tuple[int, int]]:
    """(start, stop) chunks of sizes n/2, n/4, ..., 1 (delta debugging)."""
    size_ = n
    seen = set()
    while size_ >= 1:
        size_ = max(1, size_ // 2) if size_ > 1 else 1
        for s in range(0, n, size_):
            c = (s, min(n, s + size_))
            if c not in seen:
                seen.add(c)
                yield c
        if size_ == 1:
            break


def drop_batches(trace: Trace) -> Iterable[Trace]:
    n = len(trace.batches)
    if n <= 1:
        return
    for s, e in _chunks(n):
        if e - s >= n:
            continue
        kept = [b for i, b in enumerate(trace.batches) if not s <= i < e]
        # a restart after a dropped batch goes; later ones move down
        restart = [r if r < s else r - (e - s) for r in trace.restart_after if not s <= r < e]
        yield _with(trace, kept, restart)


def drop_items(trace: Trace) -> Iterable[Trace]:
    flat = [(bi, ii) for bi, b in enumerate(trace.batches) for ii in range(len(b))]
    for s, e in _chunks(len(flat)):
        gone = set(flat[s:e])
        yield _with(
            trace,
            [[it for ii, it in enumerate(b) if (bi, ii) not in gone] for bi, b in enumerate(trace.batches)],
        )


def merge_batches(trace: Trace) -> Iterable[Trace]:
    n = len(trace.batches)
    if n <= 1:
        return
    if n > 2:
        yield _with(trace, [[it for b in trace.batches for it in b]], ())
    for i in range(n - 1):
        merged = (
            list(trace.batches[:i]) + [trace.batches[i] + trace.batches[i + 1]] + list(trace.batches[i + 2 :])
        )
        restart = [r if r < i else r - 1 for r in trace.restart_after if r != i]
        yield _with(trace, merged, restart)


def drop_restarts(trace: Trace) -> Iterable[Trace]:
    if len(trace.restart_after) > 1:
        yield _with(trace, trace.batches, ())
    for r in sorted(trace.restart_after):
        yield _with(trace, trace.batches, trace.restart_after - {r})


def drop_settings(trace: Trace) -> Iterable[Trace]:
    """Back to the defaults, one setting at a time (max_keys takes its policy with it)."""
    for k in list(trace.config):
        if k == "bounded_delay":
            continue  # printed by the Given step anyway
        cfg = dict(trace.config)
        del cfg[k]
        if k == "max_keys":
            cfg.pop("eviction_policy", None)
        yield replace(trace, config=cfg)


def _simpler_ints(v: int) -> list[int]:
    out = [0, 1] if v > 1 else ([0] if v == 1 else [])
    if v < 0:
        out = [0, -v]
    a = abs(v)
    for p in (10**k for k in range(1, 19)):
        if a > p:
            r = (a // p) * p
            out.append(r if v > 0 else -r)
    out += [v // 2, v - 1] if v > 0 else []
    seen, res = set(), []
    for c in out:
        if c != v and c not in seen and _digits(c) <= _digits(v) and abs(c) <= abs(v):
            seen.add(c)
            res.append(c)
    return res


def _map_items(trace: Trace, f: Callable[[Item], Item]) -> Trace:
    return _with(trace, [[f(i) for i in b] for b in trace.batches])


def _replace_value(trace: Trace, name: str, old: Any, new: Any, kind: str | None = None) -> Trace:
    """Every item whose field ``name`` is ``old`` gets ``new``; with ``kind``, items of that kind only
    (``time`` defaults to clock items: F064 watermark times are simplified on their own)."""
    kind = kind or ("clock" if name == "time" else None)

    def f(i: Item) -> Item:
        if getattr(i, name) != old or (kind is not None and i.kind != kind):
            return i
        return replace(i, **{name: new})

    return _map_items(trace, f)


def _shift_event_times(trace: Trace, d: int) -> Trace:
    def f(i: Item) -> Item:
        return i if i.event_time is None else replace(i, event_time=i.event_time - d)

    return _map_items(trace, f)


def simplify_numbers(trace: Trace) -> Iterable[Trace]:
    # settings
    for k, v in trace.config.items():
        if isinstance(v, int) and not isinstance(v, bool):
            for c in _simpler_ints(v):
                if k in ("max_keys", "window_size") and c < 1:
                    continue
                yield replace(trace, config={**trace.config, k: c})
    # event times: shift the whole stream down, then each distinct value everywhere it occurs
    ets = sorted({i.event_time for b in trace.batches for i in b if i.event_time is not None})
    if ets and ets[0] > 0:
        for d in [ets[0]] + [c for c in _simpler_ints(ets[0]) if 0 < c < ets[0]]:
            yield _shift_event_times(trace, d)
    for v in ets:
        for c in _simpler_ints(v):
            yield _replace_value(trace, "event_time", v, c)
    # clock times
    cts = sorted({i.time for b in trace.batches for i in b if i.kind == "clock" and i.time is not None})
    for v in cts:
        for c in _simpler_ints(v):
            yield _replace_value(trace, "time", v, c)
    # F064 watermark items: shift them all down, then each distinct time
    wts = sorted({i.time for b in trace.batches for i in b if i.kind == "watermark" and i.time is not None})
    if wts and wts[0] > 0:
        for d in [wts[0]] + [c for c in _simpler_ints(wts[0]) if 0 < c < wts[0]]:

            def shift(i: Item, d: int = d) -> Item:
                return replace(i, time=i.time - d) if i.kind == "watermark" and i.time is not None else i

            yield _map_items(trace, shift)
    for v in wts:
        for c in _simpler_ints(v):
            yield _replace_value(trace, "time", v, c, kind="watermark")
    # F064 partition counts and cores
    for name in ("count", "core"):
        for v in sorted({getattr(i, name) for b in trace.batches for i in b if getattr(i, name) is not None}):
            for c in _simpler_ints(v):
                yield _replace_value(trace, name, v, c)
    # OXE: message sequences shifted down together (their distances decide the window), then
    # each distinct producer and sequence everywhere it occurs
    seqs = sorted({i.sequence for b in trace.batches for i in b if i.sequence is not None})
    if seqs and seqs[0] > 0:
        for d in [seqs[0]] + [c for c in _simpler_ints(seqs[0]) if 0 < c < seqs[0]]:

            def lower(i: Item, d: int = d) -> Item:
                return i if i.sequence is None else replace(i, sequence=i.sequence - d)

            yield _map_items(trace, lower)
    for name in ("producer", "sequence"):
        for v in sorted({getattr(i, name) for b in trace.batches for i in b if getattr(i, name) is not None}):
            for c in _simpler_ints(v):
                yield _replace_value(trace, name, v, c)
    # values
    vals = sorted({i.value for b in trace.batches for i in b if i.value})
    if vals:
        yield _map_items(trace, lambda i: replace(i, value=0))
        for v in vals:
            for c in _simpler_ints(v)[:3]:
                yield _replace_value(trace, "value", v, c)


def simplify_keys(trace: Trace) -> Iterable[Trace]:
    order = list(dict.fromkeys(i.key for b in trace.batches for i in b if i.key is not None))
    names = [chr(ord("a") + n) if n < 26 else f"k{n}" for n in range(len(order))]
    rename = dict(zip(order, names))
    if any(k != rename[k] for k in order):
        yield _map_items(trace, lambda i: replace(i, key=rename[i.key]) if i.key is not None else i)
    for j, y in enumerate(order):
        for x in order[j + 1 :]:
            yield _replace_value(trace, "key", x, y)


def simplify_partitions(trace: Trace) -> Iterable[Trace]:
    """F064: sources renumbered 0, 1, ... in order of appearance, then one source or one partition
    of a source renamed to a smaller number everywhere it occurs (items that name it)."""
    order = list(dict.fromkeys(i.source for b in trace.batches for i in b if i.source is not None))
    if not order:
        return
    rename = {x: n for n, x in enumerate(sorted(x for x in order if x >= 0))}
    if any(rename.get(x, x) != x for x in order):
        yield _map_items(
            trace, lambda i: replace(i, source=rename.get(i.source, i.source)) if i.source is not None else i
        )
    for x in order:
        for y in order:
            if 0 <= y < x:
                yield _replace_value(trace, "source", x, y)
    pairs = sorted(
        {(i.source, i.partition) for b in trace.batches for i in b if i.partition is not None}, key=str
    )
    for src, p in pairs:
        for c in _simpler_ints(p):

            def f(i: Item, src: Any = src, p: int = p, c: int = c) -> Item:
                return replace(i, partition=c) if (i.source, i.partition) == (src, p) else i

            yield _map_items(trace, f)


PASSES: tuple[Callable[[Trace], Iterable[Trace]], ...] = (
    drop_batches,
    drop_items,
    drop_restarts,
    merge_batches,
    drop_settings,
    simplify_keys,
    simplify_partitions,
    simplify_numbers,
)


def candidates(trace: Trace) -> list[Trace]:
    """Every one-step reduction of ``trace`` that is strictly smaller, biggest cuts first."""
    here = size(trace)
    seen = {trace.dumps()}
    out = []
    for p in PASSES:
        for c in p(trace):
            key = c.dumps()
            if key not in seen and size(c) < here:
                seen.add(key)
                out.append(c)
    return out


# ---- shrinking ------------------------------------------------------------------


@dataclass
class ShrinkResult:
    trace: Trace
    expected: Result
    actual: Result
    difference: str
    rounds: int = 0
    engine_runs: int = 0
    candidates_tried: int = 0
    seconds: float = 0.0
    timed_out: bool = False


def shrink(
    engine: Engine,
    trace: Trace,
    expected: Result,
    actual: Result,
    *,
    reference: Engine | None = None,
    seconds: float = 60.0,
    candidates_per_run: int | None = None,
) -> ShrinkResult:
    """Greedy shrinking of one failing trace under a time cap.

    Each round runs the candidates of the current trace through the engine,
    ``candidates_per_run`` at a time (None: all in one run), and moves to the
    smallest candidate of that run that still differs from the oracle.
    """
    reference = reference or ReferenceEngine()
    start = time.monotonic()
    best = ShrinkResult(trace, expected, actual, compare(trace.area, expected, actual))
    progress = True
    while progress:
        progress = False
        pool = candidates(best.trace)
        step = candidates_per_run or max(1, len(pool))
        for s in range(0, len(pool), step):
            if time.monotonic() - start > seconds:
                best.timed_out = True
                progress = False
                break
            chunk = pool[s : s + step]
            exp = run_safely(reference, chunk)
            act = run_safely(engine, chunk)
            best.engine_runs += 1
            best.candidates_tried += len(chunk)
            failing = [
                (size(c), n, c, e, a, d)
                for n, (c, e, a) in enumerate(zip(chunk, exp, act))
                if (d := compare(c.area, e, a))
            ]
            if failing:
                _, _, c, e, a, d = min(failing, key=lambda f: (f[0], f[1]))
                best = replace(best, trace=c, expected=e, actual=a, difference=d, rounds=best.rounds + 1)
                progress = True
                break
    best.seconds = time.monotonic() - start
    return best


# ---- the checker ------------------------------------------------------------------


@dataclass
class Report:
    engine: str
    traces: int
    failing: list[int] = field(default_factory=list)
    seconds: float = 0.0


def check_against_reference(
    engine: Engine,
    traces: Sequence[Trace],
    *,
    reference: Engine | None = None,
    shrink_seconds: float = 60.0,
    candidates_per_run: int | None = None,
    context: str = "",
) -> Report:
    """Run ``traces`` through ``engine`` (one call) and the oracle; raise when any differs.

    ``context`` (for example the Hypothesis profile and seed) is printed with a failure.
    """
    reference = reference or ReferenceEngine()
    t0 = time.monotonic()
    actual = run_safely(engine, traces)
    expected = run_safely(reference, traces)
    report = Report(engine.name, len(traces))
    for n, (t, e, a) in enumerate(zip(traces, expected, actual)):
        if compare(t.area, e, a):
            report.failing.append(n)
    report.seconds = time.monotonic() - t0
    if not report.failing:
        return report
    active = expectations.active()
    judged = {
        n: expectations.judge(
            traces[n].area, traces[n].config, expected[n], actual[n], active.expectations, active.test
        )
        for n in report.failing
    }
    # a difference only in tables or columns the engine's file says it does not show is none
    report.failing = [n for n in report.failing if judged[n] is None or judged[n].differences]  # type: ignore[union-attr]
    if not report.failing:
        return report
    placed: list[expectations.Judged] | None = (
        None if any(judged[n] is None for n in report.failing) else [judged[n] for n in report.failing]  # type: ignore[misc]
    )
    unexcused = [n for n in report.failing if judged[n] is None or judged[n].unexcused]  # type: ignore[union-attr]
    if not unexcused:
        first = min(report.failing, key=lambda n: size(traces[n]))
        used = list(dict.fromkeys(d for n in report.failing for d in judged[n].excused_by))  # type: ignore[union-attr]
        raise ExcusedDifference(
            f"engine {engine.name!r} differs from the oracle on {len(report.failing)} of {report.traces} "
            f"generated traces, every difference in a place an entry excuses "
            f"({'; '.join(d.key for d in used)}); the smallest, "
            f"#{first}:\n{compare(traces[first].area, expected[first], actual[first])}",
            judged=placed,
        )
    first = min(unexcused, key=lambda n: size(traces[n]))  # the smallest is the cheapest to shrink
    shrunk = shrink(
        engine,
        traces[first],
        expected[first],
        actual[first],
        reference=reference,
        seconds=shrink_seconds,
        candidates_per_run=candidates_per_run,
    )
    error = AssertionError(failure_message(engine, traces, report, first, shrunk, context))
    error.judged = placed  # type: ignore[attr-defined]  # read by the conformance summary
    raise error


class ExcusedDifference(AssertionError):
    """A differential run whose every difference the engine's expectation entries excuse."""

    def __init__(self, message: str, judged: list[expectations.Judged] | None) -> None:
        super().__init__(message)
        self.judged = judged


def failure_message(
    engine: Engine,
    traces: Sequence[Trace],
    report: Report,
    first: int,
    shrunk: ShrinkResult,
    context: str = "",
) -> str:
    original = traces[first]
    head = (
        f"engine {engine.name!r} differs from the oracle on {len(report.failing)} of {report.traces} "
        f"generated traces{' (' + context + ')' if context else ''}.\n"
        f"Shrunk trace #{first} from {_shape(original)} to {_shape(shrunk.trace)} in {shrunk.rounds} "
        f"rounds, {shrunk.engine_runs} engine runs, {shrunk.candidates_tried} candidates, "
        f"{shrunk.seconds:.1f} s{' (time cap reached)' if shrunk.timed_out else ''}."
    )
    others = ""
    if len(report.failing) > 1:
        rest = [n for n in report.failing if n != first]
        others = "\nOther failing traces: " + ", ".join(f"#{n}" for n in rest[:20])
        others += " ..." if len(rest) > 20 else ""
    scenario = to_gherkin(
        shrunk.trace,
        expected=shrunk.expected,
        actual=shrunk.actual,
        title=f"{engine.name} agrees with the oracle (generated trace #{first}, shrunk)",
    )
    return "\n\n".join(
        [
            head + others,
            _saved(shrunk.trace, original, scenario),
            "Paste into features/" + shrunk.trace.area + ".feature:\n\n" + scenario,
            "Trace.describe():\n" + shrunk.trace.describe(),
            "Trace JSON:\n" + shrunk.trace.dumps(),
            "Difference (expected = oracle, actual = " + engine.name + "):\n" + shrunk.difference,
        ]
    )


def _saved(shrunk: Trace, original: Trace, scenario: str) -> str:
    """TR-13: the shrunk and the generated trace go to a file; the line that replays them."""
    from harness import replay

    test_id = replay.current_test()
    try:
        from harness.hypothesis_profiles import profile_name, run_seed

        profile, seed = profile_name(), run_seed()
    except ImportError:  # the harness without its test extra
        profile, seed = "", -1
    traces = [shrunk] if shrunk == original else [shrunk, original]
    path = replay.write_failure(test_id or "", profile=profile, seed=seed, traces=traces, gherkin=scenario)
    if test_id is None:
        return f"Traces saved to {path} (shrunk first, then as generated)."
    return (
        f"Traces saved to {path} (shrunk first, then as generated), the scenario to "
        f"{path.with_suffix('.feature')}.\nReplay them: {replay.replay_command(test_id, path)}"
    )


def _shape(t: Trace) -> str:
    items = sum(len(b) for b in t.batches)
    return f"{len(t.batches)} batches / {items} items / {len(t.restart_after)} restarts"


# ---- Gherkin ------------------------------------------------------------------------
#
# The steps are those of the shared step library (harness/steps.py, README
# "step vocabulary"); ``trace_from_gherkin`` replays a scenario through that
# library, so what is printed here is what a feature file runs. Each When step
# is one batch; the restart step puts a restart point after the batch before it.
#
#   Given keyed watermarks with a bounded delay of <n> ms
#   And an idle timeout of <n> ms
#   And at most <n> keys evicting <Policy>
#   And tumbling windows of <n> ms
#   Given keyed watermarks configured with:           | setting | value |   (settings the phrases cannot say)
#   When these events arrive in one batch:            | key | event_time | [value |]
#   When these items arrive in one batch:             | kind | key | event_time | [value |] [time |]
#   When the processing clock advances to <n> ms      (goes back to <n> ms: an error row)
#   When key <k> is marked idle
#   When key <k> is removed
#   When an empty batch passes
#   When the engine restarts from its checkpoint
#   Then the verdicts are: / the progress is: / the key changes are: / the windows are: /
#        the errors are: / there are no errors / no windows fire / the configuration is rejected
#
# F064 (partitioned watermarks), S/P = source/partition:
#
#   Given partitioned watermarks with the default configuration
#   Given partitioned watermarks with an idle timeout of <n> ms and a max lateness of <n> ms
#   Given partitioned watermarks configured with:     | setting | value |
#   When source <S> is registered with <n> partitions
#   When these events arrive in one batch:            | source | partition | event_time |
#   When these watermarks arrive in one batch:        | source | partition | time |
#   When partition S/P reports watermark <n>
#   When partition S/P is marked idle / marked active / added / removed
#   When partition S/P is assigned to core <c>
#   When these items arrive in one batch:             | kind | source | partition | event_time |
#                                                     | time | count | core |  (the columns any item uses)
#   Then the progress is: / the partition changes are: / the source changes are: / the errors are:
#
# In input tables an empty cell is a missing field (an error row, TR-7); in
# expected tables "-" is null.

_PHRASED = {"bounded_delay", "idle_timeout", "max_keys", "eviction_policy", "window_size"}

THEN_STEPS = {
    "events": "the verdicts are:",
    "progress": "the progress is:",
    "keys": "the key changes are:",
    "windows": "the windows are:",
    "errors": "the errors are:",
}
THEN_EMPTY = {"windows": "no windows fire", "errors": "there are no errors"}


def _cell(v: Any) -> str:
    return "" if v is None else str(v)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], indent: str) -> list[str]:
    cells = [list(header)] + [[_cell(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return [indent + "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |" for r in cells]


def _key_word(key: str) -> str:
    return key if key and not any(c.isspace() or c == '"' for c in key) else f'"{key}"'


def _phrasable(cfg: dict[str, Any]) -> bool:
    def is_int(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    if set(cfg) - _PHRASED or ("eviction_policy" in cfg and "max_keys" not in cfg):
        return False
    if not all(
        is_int(cfg[k]) for k in ("bounded_delay", "idle_timeout", "max_keys", "window_size") if k in cfg
    ):
        return False
    return not ("eviction_policy" in cfg and not re.fullmatch(r"\w+", str(cfg["eviction_policy"])))


def _given_steps(cfg: dict[str, Any], indent: str) -> list[str]:
    if not _phrasable(cfg):
        rows = [[k, f'"{v}"' if isinstance(v, str) else ("none" if v is None else v)] for k, v in cfg.items()]
        return ["Given keyed watermarks configured with:"] + _table(["setting", "value"], rows, indent + "  ")
    lines = [f"Given keyed watermarks with a bounded delay of {cfg.get('bounded_delay', 5000)} ms"]
    if "idle_timeout" in cfg:
        lines.append(f"And an idle timeout of {cfg['idle_timeout']} ms")
    if cfg.get("max_keys") is not None:
        lines.append(
            f"And at most {cfg['max_keys']} keys evicting {cfg.get('eviction_policy', 'LeastRecentlyActive')}"
        )
    if cfg.get("window_size") is not None:
        lines.append(f"And tumbling windows of {cfg['window_size']} ms")
    return lines


def _batch_steps(batch: Sequence[Item], clock_now: int, indent: str) -> list[str]:
    if not batch:
        return ["an empty batch passes"]
    with_value = any(i.value for i in batch)
    if all(i.kind == "event" for i in batch):
        header = ["key", "event_time"] + (["value"] if with_value else [])
        rows = [[i.key, i.event_time] + ([i.value] if with_value else []) for i in batch]
        return ["these events arrive in one batch:"] + _table(header, rows, indent + "  ")
    if len(batch) == 1:
        i = batch[0]
        if i.kind == "clock" and i.time is not None:
            verb = "goes back" if i.time < clock_now else "advances"
            return [f"the processing clock {verb} to {i.time} ms"]
        if i.kind == "idle" and i.key:
            return [f"key {_key_word(i.key)} is marked idle"]
        if i.kind == "remove_key" and i.key:
            return [f"key {_key_word(i.key)} is removed"]
    with_time = any(i.kind == "clock" for i in batch)
    header = (
        ["kind", "key", "event_time"] + (["value"] if with_value else []) + (["time"] if with_time else [])
    )
    rows = [
        [i.kind, i.key, i.event_time]
        + ([i.value if i.kind == "event" else None] if with_value else [])
        + ([i.time] if with_time else [])
        for i in batch
    ]
    return ["these items arrive in one batch:"] + _table(header, rows, indent + "  ")


# -- F064

_F064_PHRASES = {"idle_timeout": "an idle timeout of {} ms", "max_lateness": "a max lateness of {} ms"}

F064_THEN_STEPS = {
    "progress": "the progress is:",
    "partitions": "the partition changes are:",
    "sources": "the source changes are:",
    "errors": "the errors are:",
}

_F064_ITEM_COLUMNS = ("source", "partition", "event_time", "time", "count", "core")

_F064_PARTITION_PHRASES = {
    "idle": "is marked idle",
    "active": "is marked active",
    "add_partition": "is added",
    "remove_partition": "is removed",
}


def _f064_given_steps(cfg: dict[str, Any], indent: str) -> list[str]:
    phrasable = set(cfg) <= set(_F064_PHRASES) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in cfg.values()
    )
    if not phrasable:
        rows = [[k, f'"{v}"' if isinstance(v, str) else ("none" if v is None else v)] for k, v in cfg.items()]
        return ["Given partitioned watermarks configured with:"] + _table(
            ["setting", "value"], rows, indent + "  "
        )
    if not cfg:
        return ["Given partitioned watermarks with the default configuration"]
    phrases = [_F064_PHRASES[k].format(cfg[k]) for k in ("idle_timeout", "max_lateness") if k in cfg]
    return ["Given partitioned watermarks with " + " and ".join(phrases)]


def _f064_batch_steps(batch: Sequence[Item], clock_now: int, indent: str) -> list[str]:
    if not batch:
        return ["an empty batch passes"]

    def has(i: Item, *names: str) -> bool:
        return all(getattr(i, n) is not None for n in names) and i.key is None

    if all(i.kind == "event" and has(i, "source", "partition", "event_time") for i in batch):
        rows = [[i.source, i.partition, i.event_time] for i in batch]
        return ["these events arrive in one batch:"] + _table(
            ["source", "partition", "event_time"], rows, indent + "  "
        )
    if len(batch) > 1 and all(i.kind == "watermark" and has(i, "source", "partition", "time") for i in batch):
        rows = [[i.source, i.partition, i.time] for i in batch]
        return ["these watermarks arrive in one batch:"] + _table(
            ["source", "partition", "time"], rows, indent + "  "
        )
    if len(batch) == 1:
        i = batch[0]
        if i.kind == "clock" and i.time is not None:
            verb = "goes back" if i.time < clock_now else "advances"
            return [f"the processing clock {verb} to {i.time} ms"]
        if i.kind == "register_source" and has(i, "source", "count"):
            return [f"source {i.source} is registered with {i.count} partition{'' if i.count == 1 else 's'}"]
        if has(i, "source", "partition"):
            where = f"partition {i.source}/{i.partition}"
            if i.kind == "watermark" and i.time is not None:
                return [f"{where} reports watermark {i.time}"]
            if i.kind in _F064_PARTITION_PHRASES:
                return [f"{where} {_F064_PARTITION_PHRASES[i.kind]}"]
            if i.kind == "assign_core" and i.core is not None:
                return [f"{where} is assigned to core {i.core}"]
    columns = [c for c in _F064_ITEM_COLUMNS if any(getattr(i, c) is not None for i in batch)]
    rows = [[i.kind] + [getattr(i, c) for c in columns] for i in batch]
    return ["these items arrive in one batch:"] + _table(["kind", *columns], rows, indent + "  ")


def _setting_cell(v: Any) -> Any:
    """A configuration value as the ``configured with:`` table reads it back (steps.parse_setting_value)."""
    if v is None:
        return "none"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, (list, tuple, dict)):
        return json.dumps(v)
    return v


def _item_cell(name: str, v: Any) -> Any:
    if v is None or (name == "value" and v == 0):
        return None
    if ITEM_FIELD_TYPES[name] == "json":
        return json.dumps(v)
    if name == "key":
        return _key_word(v)
    return v


def generic_gherkin(trace: Trace, then: list[tuple[str, list[Any]]], indent: str = "  ") -> list[str]:
    """Steps every area understands: a ``configured with:`` table, one ``these items arrive``
    table per batch, ``the <table> table is:`` for each expected table in ``then``."""
    s = indent * 2
    area = trace.area.replace("_", " ")
    rows = [[k, _setting_cell(v)] for k, v in trace.config.items()]
    lines = [f"{s}Given {area} configured with:"] + _table(["setting", "value"], rows, s + "  ")
    for b, batch in enumerate(trace.batches):
        if not batch:
            lines.append(f"{s}When an empty batch passes")
        else:
            columns = [
                c for c in ITEM_FIELD_TYPES if any(_item_cell(c, getattr(i, c)) is not None for i in batch)
            ]
            cells = [[i.kind] + [_item_cell(c, getattr(i, c)) for c in columns] for i in batch]
            lines.append(f"{s}When these items arrive in one batch:")
            lines += _table(["kind", *columns], cells, s + "  ")
        if b in trace.restart_after:
            lines.append(f"{s}When the engine restarts from its checkpoint")
    word = "Then"
    for name, table_rows in then:
        if not table_rows:
            lines.append(f"{s}{word} the {name} table is empty")
        else:
            lines.append(f"{s}{word} the {name} table is:")
            lines += [s + "  " + ln for ln in format_table(TABLES[trace.area][name], table_rows).splitlines()]
        word = "And"
    return lines


def to_gherkin(
    trace: Trace,
    expected: Result | None = None,
    actual: Result | None = None,
    title: str = "shrunk trace",
    indent: str = "  ",
) -> str:
    """A scenario for ``trace``.

    With ``expected`` (the oracle's result), Then steps state it: only the
    tables in which ``actual`` differs when that is given, else every table.
    """
    cfg = dict(trace.config)
    s = indent * 2
    if trace.area not in ("keyed_watermarks", "partitioned_watermarks"):
        header = [f"{indent}@{trace.area}", f"{indent}Scenario: {title}"]
        if isinstance(expected, Exception):
            rejected = f"{s}Then the configuration is rejected"
            return "\n".join([*header, *generic_gherkin(trace, [], indent), rejected])
        shown = expected if isinstance(expected, dict) else {}
        other = actual if isinstance(actual, dict) else None
        then = [
            (name, shown.get(name, []))
            for name in TABLES[trace.area]
            if expected is not None and not (other is not None and other.get(name) == shown.get(name))
        ]
        return "\n".join([*header, *generic_gherkin(trace, then, indent)])
    f064 = trace.area == "partitioned_watermarks"
    given_steps, batch_steps = (
        (_f064_given_steps, _f064_batch_steps) if f064 else (_given_steps, _batch_steps)
    )
    then_steps = F064_THEN_STEPS if f064 else THEN_STEPS
    lines = [f"{indent}{'@F064' if f064 else '@F065'}", f"{indent}Scenario: {title}"]
    lines += [s + ln if not ln.startswith(indent) else ln for ln in given_steps(cfg, s)]
    now = 0
    for b, batch in enumerate(trace.batches):
        steps = batch_steps(batch, now, s)
        lines.append(f"{s}When {steps[0]}")
        lines += steps[1:]
        for i in batch:
            if i.kind == "clock" and i.time is not None and i.time >= now:
                now = i.time
        if b in trace.restart_after:
            lines.append(f"{s}When the engine restarts from its checkpoint")
    if isinstance(expected, Exception):
        lines.append(f"{s}Then the configuration is rejected")
    elif expected is not None:
        word = "Then"
        for name, columns in TABLES[trace.area].items():
            rows = expected.get(name, [])
            if isinstance(actual, dict) and actual.get(name, []) == rows:
                continue
            if not isinstance(actual, dict) and not rows and name not in ("progress", *THEN_EMPTY):
                continue
            if not rows and name in THEN_EMPTY:
                lines.append(f"{s}{word} {THEN_EMPTY[name]}")
            else:
                lines.append(f"{s}{word} {then_steps[name]}")
                lines += [s + "  " + ln for ln in format_table(columns, rows).splitlines()]
            word = "And"
    return "\n".join(lines)


def trace_from_gherkin(text: str) -> Trace:
    """Replays the Given/When steps of a scenario through the shared step library."""
    from harness.steps import LIBRARY, ScenarioState, StepUsageError

    state = ScenarioState(name="from gherkin")
    lines = [ln.strip() for ln in text.splitlines()]
    kind = None
    n = 0
    while n < len(lines):
        m = re.match(r"^(Given|When|Then|And|But)\s+(.*)$", lines[n])
        n += 1
        if not m:
            continue
        word, step = m.groups()
        kind = word.lower() if word in ("Given", "When", "Then") else kind
        table = []
        while n < len(lines) and lines[n].startswith("|"):
            table.append([c.strip() for c in lines[n].strip().strip("|").split("|")])
            n += 1
        if kind == "then":
            continue
        d = LIBRARY.find(kind or "given", step)
        if d is None:
            raise StepUsageError(f"no step definition for {kind} {step!r}")
        d.call(state, step, table or None)
    return state.trace()


__all__ = [
    "Report",
    "ShrinkResult",
    "candidates",
    "check_against_reference",
    "compare",
    "run_safely",
    "shrink",
    "size",
    "to_gherkin",
    "trace_from_gherkin",
]
