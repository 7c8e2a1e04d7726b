"""How long the default run's Spark work takes under different engine and session settings.

A measurement, not a test: it prints figures and asserts nothing. Each workload is one
``SparkEngine.run`` call, as the suites make it:

- ``scenarios``: the traces of every Spark scenario of ``features/``, which the pytest plugin's
  pre-run sends in one call;
- an area name (``late_data``, ...): that area's differential traces under the ``ci`` profile
  (200 traces), which ``properties/test_<area>.py`` sends in one call;
- several of those joined by ``+`` (``scenarios+late_data+sla_admission``): all their traces in
  one call.

A variant is a name and settings: ``SparkEngine`` arguments (``concurrent_queries``,
``split_queries``) and runtime session settings (names starting with ``spark.``, set for the
variant's runs and restored after). Every round runs every workload under every variant, the
variants' order rotated by one each round, so a slow spell of a shared machine hits them all;
the end prints each variant's median wall time, its ratio to the first variant's, and the CPU
time of this process tree (the JVM and Python workers included). A variant whose outputs differ
from the first variant's is reported as such.

    python bench/run_speed.py --workload scenarios --workload late_data --rounds 3 \\
        --variant before split_queries=false,concurrent_queries=1 --variant after concurrent_queries=3

Run it with the test environment's variables (``HYPOTHESIS_PROFILE=ci``, ``PYTHONHASHSEED=0``),
as tox runs the suites.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _flag(text: str) -> bool:
    return text.lower() in ("1", "true", "yes")


ENGINE_SETTINGS = {"concurrent_queries": int, "split_queries": _flag, "split_restarts": _flag}


def scenario_traces() -> list[Any]:
    """The traces of the features' pre-run on the Spark engine (harness.pytest_plugin.EngineRuns.prerun)."""
    import pytest

    from harness.pytest_plugin import scenario_traces as traces_of_selected_scenarios

    class Collect:
        items: list[Any] = []

        def pytest_collection_finish(self, session: Any) -> None:
            Collect.items = list(session.items)

    args = ["--collect-only", "-q", "-p", "no:cacheprovider", "--engine", "spark", str(ROOT / "features")]
    with contextlib.redirect_stdout(io.StringIO()):  # the collection's listing is not a figure
        pytest.main(args, plugins=[Collect()])
    traces, _ = traces_of_selected_scenarios(Collect.items, "spark")
    from spark_impl.engine import SparkEngine

    return [t for t in traces.values() if t.area in SparkEngine.areas]  # as the pre-run leaves them


def differential_traces(area: str) -> list[Any]:
    from harness.hypothesis_profiles import load_profile
    from strategies.common import differential_traces as drawn

    load_profile()
    return drawn(importlib.import_module(f"strategies.{area}").DIFFERENTIAL)


def workload_traces(workload: str) -> list[Any]:
    traces: list[Any] = []
    for part in workload.split("+"):
        traces += scenario_traces() if part == "scenarios" else differential_traces(part)
    return traces


def parse_variant(name: str, text: str) -> tuple[str, dict[str, Any], dict[str, str]]:
    engine: dict[str, Any] = {}
    conf: dict[str, str] = {}
    for part in filter(None, text.split(",")):
        key, _, value = part.partition("=")
        if key.startswith("spark."):
            conf[key] = value
        elif key in ENGINE_SETTINGS:
            engine[key] = ENGINE_SETTINGS[key](value)
        else:
            raise SystemExit(f"variant {name}: {key!r} is no SparkEngine setting and no spark.* setting")
    return name, engine, conf


def tree_cpu_seconds() -> dict[str, float]:
    """CPU seconds of this process tree by part: ``driver`` (this Python process), ``jvm`` (Spark's
    JVM, its own threads), ``driver_python`` (Python processes the JVM starts one by one: the
    stateful operators' planning runners, the source's runners; a reaped one counts in the JVM's
    children) and ``workers`` (the daemon and the Python workers it forks)."""
    import psutil

    parts = {"driver": 0.0, "jvm": 0.0, "driver_python": 0.0, "workers": 0.0}
    me = psutil.Process()
    for process in [me, *me.children(recursive=True)]:
        try:
            t = process.cpu_times()
            line = " ".join(process.cmdline())
        except psutil.Error:
            continue
        own, reaped = t.user + t.system, t.children_user + t.children_system
        if process.pid == me.pid:
            parts["driver"] += own
        elif "java" in process.name():
            parts["jvm"] += own
            parts["driver_python"] += reaped
        elif "pyspark.daemon" in line or "pyspark.worker" in line:
            parts["workers"] += own + reaped
        else:
            parts["driver_python"] += own + reaped
    return parts


def run_once(spark: Any, engine_settings: dict[str, Any], conf: dict[str, str], traces: list[Any]) -> tuple:
    from harness.engine import run_canonical
    from spark_impl.engine import SparkEngine
    from spark_impl.session import settings_applied

    with settings_applied(spark, conf):
        engine = SparkEngine(spark, **engine_settings)
        cpu_before = tree_cpu_seconds()
        started = time.perf_counter()
        outputs = run_canonical(engine, traces)
        wall = time.perf_counter() - started
        cpu = {part: seconds - cpu_before.get(part, 0.0) for part, seconds in tree_cpu_seconds().items()}
    return wall, cpu, [repr(o) if isinstance(o, Exception) else o for o in outputs]


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workload", action="append", required=True, help="scenarios or an area name")
    parser.add_argument("--variant", nargs=2, action="append", metavar=("NAME", "SETTINGS"), required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--exclude-area", action="append", default=[], help="leave this area's scenarios out")
    parser.add_argument("--warm-up", action="store_true", help="one untimed run of a small workload first")
    args = parser.parse_args(argv)

    from spark_impl.session import get_spark

    variants = [parse_variant(name, text) for name, text in args.variant]
    workloads = {w: workload_traces(w) for w in args.workload}
    workloads = {w: [t for t in traces if t.area not in args.exclude_area] for w, traces in workloads.items()}
    for name, traces in workloads.items():
        stops = sorted({b for t in traces for b in t.restart_after})
        print(f"workload {name}: {len(traces)} traces, restart points {stops}, "
              f"{sum(1 for t in traces if t.restart_after)} traces with some", flush=True)  # fmt: skip
    spark = get_spark()
    if args.warm_up:
        first = next(iter(workloads.values()))
        run_once(spark, {}, {}, first[:4])
    walls: dict[tuple[str, str], list[float]] = {}
    cpus: dict[tuple[str, str], list[dict[str, float]]] = {}
    loads: dict[tuple[str, str], list[float]] = {}  # 1-minute load average after each run
    differs: set[tuple[str, str]] = set()
    reference: dict[str, list[Any]] = {}
    for round_no in range(args.rounds):
        shift = round_no % len(variants)
        for name, traces in workloads.items():
            for vname, engine_settings, conf in variants[shift:] + variants[:shift]:
                wall, cpu, outputs = run_once(spark, engine_settings, conf, traces)
                if name not in reference:
                    reference[name] = outputs
                elif outputs != reference[name]:
                    differs.add((name, vname))
                walls.setdefault((name, vname), []).append(wall)
                cpus.setdefault((name, vname), []).append(cpu)
                parts = ", ".join(f"{part} {seconds:.1f}" for part, seconds in cpu.items())
                load = os.getloadavg()[0]
                loads.setdefault((name, vname), []).append(load)
                print(
                    f"round {round_no + 1} {name} {vname}: wall {wall:.1f} s, cpu {sum(cpu.values()):.1f} s "
                    f"({parts}), load {load:.1f}",
                    flush=True,
                )
    print("\nmedians (wall s [all runs], cpu s, wall ratio to the first variant):")
    base = variants[0][0]
    for name in workloads:
        base_wall = statistics.median(walls[(name, base)])
        for vname, _, _ in variants:
            w = walls[(name, vname)]
            mark = "  OUTPUTS DIFFER" if (name, vname) in differs else ""
            print(
                f"  {name:24} {vname:16} {statistics.median(w):7.1f} [{', '.join(f'{x:.1f}' for x in w)}]"
                f"  cpu {statistics.median(sum(c.values()) for c in cpus[(name, vname)]):7.1f}"
                f"  ratio {statistics.median(w) / base_wall:.2f}"
                f"  load {statistics.median(loads[(name, vname)]):.1f}{mark}"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
