"""docs/accuracy.md and docs/accuracy.png from the results of run.py."""

from __future__ import annotations

import statistics
from typing import Any

# The paper's accuracy for the two variants it quotes (1 - the loss it reports).
PAPER_GLOBAL = {"50% of median keys delayed": 0.67, "50% of random keys delayed": 0.63}


def _row(results: dict[str, Any], variant: str, kind: str, key: str = "rows") -> dict[str, Any]:
    return next(r for r in results[key] if r["variant"] == variant and r["kind"] == kind)


def _state(r: dict[str, Any]) -> str:
    text = f"keys {r['state_keys']:,}, open windows {r['state_open_windows']:,}"
    if r.get("spark_state_bytes") is not None:
        text += f"; Spark value {r['spark_state_bytes']:,} B"
    return text


def table(results: dict[str, Any]) -> str:
    lines = [
        "| variant | watermark | accuracy | dropped events | windows fired | state at the end | "
        "Flink's window rule |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results["rows"]:
        lines.append(
            f"| {r['variant']} | {r['kind']} | **{r['accuracy']:.2%}** | {r['dropped']:,} | "
            f"{r['windows_fired']:,} | {_state(r)} | {r['window_rule_accuracy']:.2%} |"
        )
    return "\n".join(lines)


def scale_table(results: dict[str, Any]) -> str:
    lines = [
        "| variant | global accuracy | keyed accuracy | oracle events/s (global, keyed) |",
        "|---|---|---|---|",
    ]
    names = dict.fromkeys(r["variant"] for r in results["scale_rows"])
    for name in names:
        g, k = _row(results, name, "global", "scale_rows"), _row(results, name, "keyed", "scale_rows")
        lines.append(
            f"| {name} | {g['accuracy']:.2%} | {k['accuracy']:.2%} | "
            f"{g['oracle_events_per_s']:,} / {k['oracle_events_per_s']:,} |"
        )
    return "\n".join(lines)


def markdown(results: dict[str, Any]) -> str:
    s = results["settings"]
    m = results["machine"]
    acc = {(r["variant"], r["kind"]): r["accuracy"] for r in results["rows"]}
    rule = {(r["variant"], r["kind"]): r["window_rule_accuracy"] for r in results["rows"]}
    spark_s = statistics.median(r.get("spark_seconds", float("nan")) for r in results["rows"])
    oracle_rate = statistics.median(r["oracle_events_per_s"] for r in results["rows"])
    spark_note = (
        f"Spark (`spark_impl.keyed_watermarks`, {s['batches']} micro-batches) ran every variant and kind "
        "on the same events and reported exactly the oracle's late events, fired windows and tracked "
        "keys; the runner fails on any difference. Spark took "
        f"{spark_s:.0f} s per run (median, start-up and parquet sink included); the oracle ran "
        f"{oracle_rate:,.0f} events/s (median)."
        if s["spark"]
        else "Spark was not run (`--no-spark`)."
    )
    scale = (
        f"\n## The oracle at {s['scale_events']:,} events\n\nThe same variants, ten times larger "
        f"(oracle only; Spark's limit here is 1M events per variant; events/s includes the "
        f"per-key window operators of the oracle):\n\n{scale_table(results)}\n"
        if results["scale_rows"]
        else ""
    )
    share = {r["variant"]: r["delayed_events"] / r["events"] for r in results["rows"]}
    keyed_min = min(v for (_, kind), v in acc.items() if kind == "keyed" and v == v)
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
  Spark, whose tracked keys are checked), and the bytes of Spark's state value.
- "Flink's window rule": the same streams judged by Flink's window operator's
  rule (an element is dropped only when its window has already fired), computed
  with numpy in `bench/accuracy/window_rule.py`, not by our operators.

## Results

{table(results)}

![accuracy per variant](accuracy.png)
{scale}
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
    import numpy as np

    names = list(dict.fromkeys(r["variant"] for r in results["rows"]))
    glob = [100 * _row(results, n, "global")["accuracy"] for n in names]
    keyed = [100 * _row(results, n, "keyed")["accuracy"] for n in names]
    rule = [100 * _row(results, n, "global")["window_rule_accuracy"] for n in names]
    x = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(10, 4.8))
    ax.bar(x - 0.2, glob, 0.4, label="global watermark (F065 operator, one key)", color="#c44e52")
    ax.bar(x + 0.2, keyed, 0.4, label="keyed watermarks (F065 operator, key = vehicle)", color="#4c72b0")
    ax.scatter(x - 0.2, rule, marker="_", s=300, color="black", label="global, Flink's window rule (numpy)")
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
    for i, (g, k) in enumerate(zip(glob, keyed, strict=True)):
        ax.text(i - 0.2, g + 1, f"{g:.1f}", ha="center", fontsize=7)
        ax.text(i + 0.2, k + 1, f"{k:.1f}", ha="center", fontsize=7)
    ax.axhline(99, color="gray", linestyle=":", linewidth=1)
    ax.set_xticks(x, [n.replace(" delayed", "\ndelayed") for n in names], fontsize=8)
    ax.set_ylabel("accuracy (% of events counted in fired windows)")
    ax.set_ylim(0, 110)
    s = results["settings"]
    ax.set_title(f"{s['events']:,} events, {s['vehicles']:,} vehicles, 10 s windows, 1 s bound", fontsize=10)
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
