"""docs/accuracy.md and docs/accuracy.png from the results of run.py."""

from __future__ import annotations

import statistics
from typing import Any

# The paper's accuracy for the two variants it quotes (1 - the loss it reports).
PAPER_GLOBAL = {"50% of median keys delayed": 0.67, "50% of random keys delayed": 0.63}
WINDOW_KINDS = ("global", "keyed")  # the kinds that run window operators (and Spark)


def _row(results: dict[str, Any], variant: str, kind: str, key: str = "rows") -> dict[str, Any]:
    return next(r for r in results[key] if r["variant"] == variant and r["kind"] == kind)


def _state(r: dict[str, Any]) -> str:
    text = f"keys {r['state_keys']:,}, open windows {r['state_open_windows']:,}"
    if r.get("spark_state_bytes") is not None:
        text += f"; Spark state {r['spark_state_bytes']:,} B"
    return text


def table(results: dict[str, Any]) -> str:
    lines = [
        "| variant | watermark | accuracy | dropped events | windows fired | state at the end | "
        "Flink's window rule |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results["rows"]:
        if r["kind"] not in WINDOW_KINDS:
            continue
        lines.append(
            f"| {r['variant']} | {r['kind']} | **{r['accuracy']:.2%}** | {r['dropped']:,} | "
            f"{r['windows_fired']:,} | {_state(r)} | {r['window_rule_accuracy']:.2%} |"
        )
    return "\n".join(lines)


def scale_table(results: dict[str, Any]) -> str:
    kinds = [k for k in WINDOW_KINDS if any(r["kind"] == k for r in results["scale_rows"])]
    lines = [
        "| variant | "
        + " | ".join(f"{k} accuracy" for k in kinds)
        + f" | oracle events/s ({', '.join(kinds)}) |",
        "|---|" + "---|" * len(kinds) + "---|",
    ]
    names = dict.fromkeys(r["variant"] for r in results["scale_rows"])
    for name in names:
        rows = [_row(results, name, k, "scale_rows") for k in kinds]
        lines.append(
            f"| {name} | "
            + " | ".join(f"{r['accuracy']:.2%}" for r in rows)
            + " | "
            + " / ".join(f"{r['oracle_events_per_s']:,}" for r in rows)
            + " |"
        )
    return "\n".join(lines)


def markdown(results: dict[str, Any]) -> str:
    s = results["settings"]
    m = results["machine"]
    window_rows = [r for r in results["rows"] if r["kind"] in WINDOW_KINDS]
    has_compact = any(r["kind"] == "compact" for r in results["rows"])
    spark_s = statistics.median(r.get("spark_seconds", float("nan")) for r in window_rows)
    oracle_rate = statistics.median(r["oracle_events_per_s"] for r in window_rows)
    kinds = ", ".join(dict.fromkeys(r["kind"] for r in window_rows))
    spark_note = (
        f"Spark (`spark_impl.keyed_watermarks`, {s['batches']} micro-batches) ran every variant and kind "
        f"({kinds}) on the same events and reported exactly the oracle's late events, fired windows and "
        "tracked keys; the runner fails on any difference. Spark took "
        f"{spark_s:.0f} s per run (median, start-up and parquet sink included); the oracle ran "
        f"{oracle_rate:,.0f} events/s (median)."
        if s["spark"]
        else "Spark was not run (`--no-spark`)."
    )
    if has_compact:
        spark_note += " The compact tracker ran on the oracle only ([below](#the-compact-tracker))."
    scale = (
        f"\n## The oracle at {s['scale_events']:,} events\n\nThe same variants, ten times larger "
        f"(oracle only; Spark's limit here is 1M events per variant; events/s includes the "
        f"per-key window operators of the oracle"
        + ("; the compact tracker is not run at this size" if has_compact else "")
        + f"):\n\n{scale_table(results)}\n"
        if results["scale_rows"]
        else ""
    )
    compact_setup = (
        "\n- **compact**: the memory-bounded tracker of F065-R26..R37 on the oracle, at the sizes and "
        "with the accuracy derivation given in [The compact tracker](#the-compact-tracker)."
        if has_compact
        else ""
    )
    compact = compact_section(results) if has_compact else ""
    paper = paper_section(results) if {"global", "keyed"} <= {r["kind"] for r in window_rows} else ""
    return f"""# Keyed vs global watermarks: accuracy

Reproduces the accuracy experiment of "Keyed watermarks" (Yasser et al., Future
Generation Computer Systems 169, 2025): events keyed by vehicle id, 10 s
tumbling windows, 1 s bounded out-of-orderness; accuracy = events counted in
fired windows / events in the input.

Command (wall time {results["wall_seconds"]} s on {m["before"]["cores"]} cores; load average before
{m["before"]["load_average"]}, after {m["after"]["load_average"]}: the machine was shared with other
helpers' Spark jobs):

    {results["command"]}

{s["events"]:,} events per variant from {s["vehicles"]:,} vehicles, seed {s["seed"]}. {spark_note}

## Setup

- **keyed**: the F065 operator (`spec/keyed_watermarks.md`) with key = vehicle id,
  bounded delay 1000 ms, keyed tumbling windows of 10000 ms (R21). An event is
  counted when its verdict is on time (R3: `t >= its vehicle's watermark`) and its
  window fired.
- **global**: the same operator with ONE constant key for every event, so the key's
  watermark is the stream's: max event time seen minus 1000 ms, a bounded
  out-of-orderness generator at one source. Windows fired per vehicle are derived:
  a vehicle's window fires exactly when the global window with the same start
  fires, so they are the distinct (vehicle, window start) pairs of the on-time
  events in fired global windows (`bench/accuracy/engines.py`, the same code for
  both engines).
- A window that has not fired when the stream ends is not fired (no final flush),
  for both kinds and both engines: the "ordered" rows show this end effect.
- **Delay model** (`bench/accuracy/variants.py`): vehicle weights are log-normal
  (sigma {s["weight_sigma"]}), {s["events_per_second"]} events per second of event time over all
  vehicles; a delayed event arrives `delay` ms after its place in event-time
  order, delays uniform in {s["delay_ms"][0]}..{s["delay_ms"][1]} ms. "p% of data": each event
  with probability p, its own delay. "q% of keys": one delay per chosen vehicle,
  applied to all its events (the vehicle lags as a whole); median-proximate = the
  vehicles whose rank by event count is nearest the median rank. The paper's own
  generator is not in its public repository, so this model is our reading of its
  description.
- State at the end: tracked keys and open windows of the oracle (the same on
  Spark, whose tracked keys are checked), and the live bytes of Spark's state
  (every state variable of both stages, read with Spark's state data source).
- "Flink's window rule": the same streams judged by Flink's window operator's
  rule (an element is dropped only when its window has already fired), computed
  with numpy in `bench/accuracy/window_rule.py`, not by our operators.{compact_setup}

## Results

{table(results)}

![accuracy per variant](accuracy.png)
{scale}{paper}{compact}"""


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _pct(share: float) -> str:
    """A share as a percentage; tiny non-zero shares keep a significant digit instead of reading 0.00%."""
    return f"{share:.2%}" if share == 0 or share >= 0.0001 else f"{100 * share:.1g}%"


def _spread(values: list[int]) -> str:
    low, high = min(values), max(values)
    return f"{low:,}" if low == high else f"{low:,}..{high:,}"


def compact_sizes_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| tracker | exact keys | width x depth, shards | state, R36 bound | keyed tracker on the same "
        "stream | the keyed tracker reaches the bound at | estimated keys (distinct vehicles) |",
        "|---|---|---|---|---|---|---|",
    ]
    for tracker in dict.fromkeys(r["tracker"] for r in rows):
        mine = [r for r in rows if r["tracker"] == tracker]
        r = mine[0]
        lines.append(
            f"| {tracker} | {r['exact_key_count']:,} | {r['sketch_width']:,} x {r['sketch_depth']}, "
            f"{r['shards']} | {r['compact_state_bytes']:,} B | "
            f"{_spread([x['exact_state_bytes'] for x in mine])} B | "
            f"{r['break_even_keys']:,} keys | {_spread([x['estimated_keys'] for x in mine])} "
            f"({_spread([x['true_keys'] for x in mine])}) |"
        )
    return "\n".join(lines)


def compact_table(results: dict[str, Any]) -> str:
    lines = [
        "| variant | tracker | accuracy | dropped events | dropped only by the compact tracker | "
        "R33 bound | events of keys through the sketch | demotions |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in dict.fromkeys(r["variant"] for r in results["rows"] if r["kind"] == "compact"):
        keyed = _row(results, name, "keyed")
        lines.append(f"| {name} | keyed | {keyed['accuracy']:.2%} | {keyed['dropped']:,} | | | | |")
        for r in results["rows"]:
            if r["kind"] != "compact" or r["variant"] != name:
                continue
            through = r["events_of_keys_through_sketch"] / r["events"]
            lines.append(
                f"| {name} | {r['tracker']} | **{r['accuracy']:.2%}** | {r['dropped']:,} | "
                f"{r['dropped_only_by_compact']:,} ({_pct(r['dropped_only_by_compact_share'])}) | "
                f"{_pct(r['r33_bound'])} | {through:.1%} | {r['demotions']:,} |"
            )
    return "\n".join(lines)


def compact_section(results: dict[str, Any]) -> str:
    """The compact tracker's runs: sizes, accuracy against the keyed tracker, R33's bound, R36's memory."""
    rows = [r for r in results["rows"] if r["kind"] == "compact"]
    s = results["settings"]
    shares = sorted({g["exact_share"] for g in s.get("compact_grid", [])}, reverse=True)
    widths = sorted({r["sketch_width"] for r in rows})
    depths = sorted({r["sketch_depth"] for r in rows})
    shards = sorted({r["shards"] for r in rows})
    rates = _and([str(x) for x in sorted({r["sketch_error_rate"] for r in rows}, reverse=True)])
    ordered = [r for r in rows if r["variant"] == "ordered"]
    ordered_note = ""
    if ordered and all(r["dropped_only_by_compact"] == 0 for r in ordered):
        ordered_note = (
            "- **In the ordered stream every size gives the keyed verdicts.** An estimate is the time of "
            "some earlier event, and in event-time order no earlier event is later than the one arriving, "
            "so no estimate can make an event late.\n"
        )
    per_width = []
    for width in widths:
        mine = [r for r in rows if r["sketch_width"] == width]
        worst = max(mine, key=lambda r: r["dropped_only_by_compact_share"])
        written = _spread([r["keys_written_to_sketch"] for r in mine])
        head = f"  - width {width:,}, {written} keys written to the max sketch: "
        if worst["dropped_only_by_compact"] == 0:
            per_width.append(head + "no event is dropped by the compact tracker alone in any variant.")
            continue
        keyed_accuracy = _row(results, worst["variant"], "keyed")["accuracy"]
        per_width.append(
            head + f"at worst {_pct(worst['dropped_only_by_compact_share'])} of the events are dropped by "
            f"the compact tracker alone ({worst['variant']}, {worst['exact_key_count']:,} exact keys: "
            f"accuracy {worst['accuracy']:.2%} against keyed {keyed_accuracy:.2%})."
        )
    above = [r for r in rows if r["accuracy"] > _row(results, r["variant"], "keyed")["accuracy"]]
    above_note = (
        f"- **A compact accuracy above the keyed one** ({len(above)} of {len(rows)} runs) is the end "
        "effect seen from the other side: a too-high estimate also fires a key's last window early, so "
        "windows still open under the keyed tracker when the stream ends are counted; their events are "
        "on time for both trackers.\n"
        if above
        else ""
    )
    within = sum(1 for r in rows if r["dropped_only_by_compact_share"] <= r["r33_bound"])
    bound_note = (
        "**R33's bound holds in every run, and is loose.** The share dropped only by the compact "
        "tracker is at or below R33's bound for that run everywhere."
        if within == len(rows)
        else f"**R33's bound is an expectation, not a cap.** In {within} of {len(rows)} runs the share "
        "dropped only by the compact tracker is at or below R33's bound for that run; the bound is "
        "over the hash, and one stream with one hash can exceed it."
    )
    smaller = sorted({r["tracker"] for r in rows if r["compact_state_bytes"] < r["exact_state_bytes"]})
    memory_note = (
        f"At {s['vehicles']:,} vehicles the keyed tracker is smaller than every size here"
        if not smaller
        else f"At {s['vehicles']:,} vehicles the compact state is below the keyed tracker's only for "
        + _and([f'"{t}"' for t in smaller])
    )
    through = _spread([r["keys_through_sketch"] for r in rows])
    rate = statistics.median(r["oracle_events_per_s"] for r in rows)
    sizes = _and([f"{share:.0%}" for share in shares])
    return f"""
## The compact tracker

The memory-bounded tracker of F065-R26..R37 (`CompactKeyedWatermarkTracker` of
`reference/keyed_watermarks.py`) on the same streams, on the oracle only (one
`apply_batch` per micro-batch, as the keyed kind): exact sets of {sizes} of the
vehicles, widths {_and([f"{w:,}" for w in widths])} (error rates {rates}), depth
{_and([str(d) for d in depths])}, shards {_and([str(n) for n in shards])}. The grid is chosen
against the tail: with this fleet {through} of the {s["vehicles"]:,} vehicles pass through the max
sketch at some point, so one width is narrower than that tail (most tail keys have all their
cells shared) and one is several times wider; two exact-set sizes show how much holding the
busiest keys exactly buys on top.

- **Accuracy** is derived as for the keyed kind, since the compact tracker keeps no
  windows (R26): an event is counted when it is on time and its window
  `[s, s + 10 s)` fires, and a key's window fires once the watermark the key is judged by
  reaches the window's end. That watermark never goes down without `remove_key` (none here),
  so the window fires by the end of the stream exactly when its end is at or below the key's
  final `watermark_for_key`. The runner applies the same derivation to the keyed tracker and
  asserts that it gives exactly the keyed kind's counted events and fired windows in every
  variant, which checks it.
- **Checked in every run**: R32 (no event the keyed tracker calls late is on time for the
  compact one) and R33's witness rule (every event whose verdict differs is of a vehicle that
  shares its cell in every row with another vehicle); the runner stops on a failure.
- **Dropped only by the compact tracker**: late for it, on time for the keyed tracker (R32
  says there is no other kind of difference). **R33 bound**: per shard, the share of events
  of keys that went through the sketch (written to it, or entered the exact set after its
  first write) times `(1 - (1 - 1/width)^n)^depth`, `n` being the keys written to the max
  sketch over the run.
- **State** is R36's bound: `shards x (floor(exact_key_count / shards) x (key bytes + 5 x 8)
  + 2 x depth x width x 8 + 4096 + 2 x 8)` bytes, with the longest vehicle name as the key;
  the keyed tracker by the same accounting is `tracked keys x (key bytes + 5 x 8)` (its
  keyed windows not counted).
- Spark does not run the compact kind in this benchmark: the suite's differential tests
  compare its Spark operator with the oracle. The oracle's compact tracker ran
  {rate:,.0f} events/s (median).

{compact_sizes_table(rows)}

{compact_table(results)}

{ordered_note}- **The width must be sized for the tail.** A lagging vehicle outside the exact set
  whose cells are all shared with vehicles that do not lag is judged by their later times, so
  its events are late: the global watermark's failure, one key at a time.
{chr(10).join(per_width)}
{above_note}- {bound_note} The bound counts every key whose cells are all shared; a shared cell changes
  a verdict only when the key sharing it is ahead by more than the delay plus the event's
  own disorder.
- **Memory.** The compact state does not grow with the key count (R36). {memory_note}; the
  column "the keyed tracker reaches the bound at" gives the key count above which the compact
  tracker is the smaller, and `estimated_keys` (R34) says how far a stream is from it.
"""


def paper_section(results: dict[str, Any]) -> str:
    """The comparison with the paper's figures (needs both the global and the keyed rows)."""
    rows = [r for r in results["rows"] if r["kind"] in WINDOW_KINDS]
    acc = {(r["variant"], r["kind"]): r["accuracy"] for r in rows}
    rule = {(r["variant"], r["kind"]): r["window_rule_accuracy"] for r in rows}
    share = {r["variant"]: r["delayed_events"] / r["events"] for r in rows}
    keyed_min = min(v for (_, kind), v in acc.items() if kind == "keyed" and v == v)
    return f"""
## Where we agree with the paper, and where not

- **Keyed keeps (almost) everything when keys lag as a whole.** With whole
  vehicles delayed, keyed accuracy stays at the ordered baseline
  ({acc[("ordered", "keyed")]:.2%}; what is missing are the windows still open when the
  stream ends), in line with the paper's ">= 99%".
- **Half of the median-proximate keys delayed: global {acc[("50% of median keys delayed", "global")]:.2%}**
  (the paper: about 67%, i.e. ~33% lost). The loss is the share of events of the
  delayed vehicles: under F065 an event is late as soon as it is 1 ms below
  the watermark, and a vehicle lagging 2..20 s is always more than the 1 s bound
  behind the stream, so under one global watermark every event of a delayed
  vehicle is lost. How close this lands to the paper depends on how much of the
  data those central vehicles hold: with our log-normal weights they hold
  {share["50% of median keys delayed"]:.1%} of the events, which is why the figure agrees; that
  agreement comes from our weight choice, not from a calibration against the
  paper's data set.
- **Half of random keys delayed: global {acc[("50% of random keys delayed", "global")]:.2%}**
  (the paper: over 37% lost). Random vehicles hold about half of the data
  ({share["50% of random keys delayed"]:.1%} here), and under F065's event-level rule every event of
  a delayed vehicle is late, so about half is lost. Flink, which the paper ran,
  drops an element only once its window has fired, so events early in a window
  survive a short lag: judged by that rule the same streams keep
  {rule[("50% of random keys delayed", "global")]:.2%} (random keys) and
  {rule[("50% of median keys delayed", "global")]:.2%} (median keys). Neither rule reproduces both
  of the paper's figures with our delay model, which had to be guessed; the
  direction is the same (one global watermark loses a large share, keyed
  watermarks almost nothing).
- **Delays of individual events are not what keyed watermarks fix.** With 5% / 50%
  of all events delayed, keyed accuracy is {acc[("5% of data delayed", "keyed")]:.2%} /
  {acc[("50% of data delayed", "keyed")]:.2%}: a delayed event is behind later events of its own
  vehicle too, so its own watermark has passed it unless the vehicle sent nothing
  else in the meantime. Keyed still beats global there (global
  {acc[("5% of data delayed", "global")]:.2%} / {acc[("50% of data delayed", "global")]:.2%}),
  since quiet vehicles keep their delayed events. The lowest keyed accuracy over all
  variants is {keyed_min:.2%}.
- The state column shows the price: keyed tracks one watermark per vehicle and
  keeps each vehicle's open windows, where the global watermark keeps one key and
  one open window.
"""


def plot(results: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["variant"] for r in results["rows"]))
    trackers = list(dict.fromkeys(r["tracker"] for r in results["rows"] if r["kind"] == "compact"))
    fig, axes = plt.subplots(2 if trackers else 1, 1, figsize=(10, 9.6 if trackers else 4.8), squeeze=False)
    _plot_window_kinds(axes[0][0], results, names)
    if trackers:
        _plot_compact(axes[1][0], results, names, trackers)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _variant_axis(ax: Any, names: list[str]) -> None:
    import numpy as np

    ax.axhline(99, color="gray", linestyle=":", linewidth=1)
    ax.set_xticks(np.arange(len(names)), [n.replace(" delayed", "\ndelayed") for n in names], fontsize=8)
    ax.set_ylabel("accuracy (% of events counted in fired windows)")
    ax.set_ylim(0, 110)


def _plot_window_kinds(ax: Any, results: dict[str, Any], names: list[str]) -> None:
    import numpy as np

    kinds = {r["kind"] for r in results["rows"]}
    x = np.arange(len(names))
    if "global" in kinds:
        glob = [100 * _row(results, n, "global")["accuracy"] for n in names]
        rule = [100 * _row(results, n, "global")["window_rule_accuracy"] for n in names]
        ax.bar(x - 0.2, glob, 0.4, label="global watermark (F065 operator, one key)", color="#c44e52")
        ax.scatter(
            x - 0.2, rule, marker="_", s=300, color="black", label="global, Flink's window rule (numpy)"
        )
        paper = [(i, 100 * PAPER_GLOBAL[n]) for i, n in enumerate(names) if n in PAPER_GLOBAL]
        if paper:
            ax.scatter(
                [i - 0.2 for i, _ in paper],
                [v for _, v in paper],
                marker="x",
                s=60,
                color="darkorange",
                zorder=3,
                label="global, the paper's figure",
            )
        for i, g in enumerate(glob):
            ax.text(i - 0.2, g + 1, f"{g:.1f}", ha="center", fontsize=7)
    if "keyed" in kinds:
        keyed = [100 * _row(results, n, "keyed")["accuracy"] for n in names]
        ax.bar(x + 0.2, keyed, 0.4, label="keyed watermarks (F065 operator, key = vehicle)", color="#4c72b0")
        for i, k in enumerate(keyed):
            ax.text(i + 0.2, k + 1, f"{k:.1f}", ha="center", fontsize=7)
    _variant_axis(ax, names)
    s = results["settings"]
    ax.set_title(f"{s['events']:,} events, {s['vehicles']:,} vehicles, 10 s windows, 1 s bound", fontsize=10)
    ax.legend(fontsize=7, loc="lower left")


def _plot_compact(ax: Any, results: dict[str, Any], names: list[str], trackers: list[str]) -> None:
    import numpy as np

    x = np.arange(len(names))
    step = 0.8 / (1 + len(trackers))
    keyed = [100 * _row(results, n, "keyed")["accuracy"] for n in names]
    ax.bar(x - 0.4 + step / 2, keyed, step, label="keyed tracker", color="#4c72b0")
    if any(r["kind"] == "global" for r in results["rows"]):
        glob = [100 * _row(results, n, "global")["accuracy"] for n in names]
        ax.scatter(x, glob, marker="_", s=900, color="#c44e52", zorder=3, label="global watermark")
    colours = ["#dd8452", "#55a868", "#8172b3", "#937860", "#da8bc3", "#8c8c8c"]
    for j, tracker in enumerate(trackers, start=1):
        values = [
            100
            * next(r for r in results["rows"] if r.get("tracker") == tracker and r["variant"] == n)[
                "accuracy"
            ]
            for n in names
        ]
        ax.bar(x - 0.4 + step * (j + 0.5), values, step, label=tracker, color=colours[(j - 1) % len(colours)])
    _variant_axis(ax, names)
    ax.set_title("the compact tracker (F065-R26..R37, oracle only) against the keyed tracker", fontsize=10)
    ax.legend(fontsize=7, loc="lower left")
