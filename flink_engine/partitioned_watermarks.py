"""F064 on Flink: per-split watermarks of a FLIP-27 source, combined by Flink's source operator.

A Flink source reader that reads several splits (a Kafka topic's partitions) emits each record through
its split's output (``ReaderOutput.createOutputForSplit``); Flink runs one watermark generator per split
and combines them as the minimum over the splits that are not idle (its WatermarkOutputMultiplexer).
That is F064's tracker, so the adapter gives each trace partition a split of one Java source
(java/eventtime/flink/TraceSource.java, replaying the trace in arrival order) and a generator written
as Flink documents custom ones: an event goes to Flink's own bounded-out-of-orderness generator
(``max - max_lateness - 1``, which is the spec's ``max - max_lateness``: common.to_flink), a watermark
item is emitted as the split's watermark (less one), and ``idle`` and ``active`` items call the split
output's ``markIdle`` and ``markActive``. Flink emits after each record (no periodic emission).

Translated by the adapter, nothing computed: ``register_source`` opens the outputs of partitions
``0..count-1`` not yet open and releases those at or above ``count``; ``add_partition`` opens one,
``remove_partition`` releases one (Flink's split lifecycle); every case's outputs are released at its
end so that they hold no later case. Observed from Flink: the watermark after each batch (a record of
the reader's main output, which no generator sees, read by a process function): ``progress.
combined_watermark``. Not observable in Flink, so not shown: each split's watermark and idleness
(``partitions``), per-source watermarks (``sources``: Flink combines every split of the source
operator), the counters, and the error rows (the adapter's input checks).

Declined: ``clock`` items (Flink's idle timeout, ``withIdleness``, counts wall-clock time, not the
trace's clock), ``assign_core`` (Flink has no cores to assign a split to: a split's reader is the
enumerator's choice), an item naming a partition the trace has not opened (a reader emits only for its
own splits, so such an item has nothing in Flink to go to), a source of more than MAX_SPLITS partitions,
and times beyond a case's stretch of Flink event time. Restart points are not replayed: the job runs
each case once, uninterrupted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from flink_engine import common, trace_source
from harness.traces import InvalidConfig
from reference.partitioned_watermarks import config_from_trace

AREA = "partitioned_watermarks"
SPLIT_KINDS = ("event", "watermark", "idle", "active")  # records sent through their partition's split
MAX_SPLITS = 10_000  # a registration opens one split output per partition, each a line of the script
NO_CLOCK = (
    "Flink's only idle timeout (WatermarkStrategy.withIdleness) counts wall-clock time on the task: the "
    "trace's clock items have nothing in Flink to go to (F064-R11)"
)
NO_CORES = (
    "Flink has no cores to assign a partition to: the enumerator decides which reader reads a split, and "
    "each reader combines only its own splits (F064-R17)"
)


@dataclass
class Prepared:
    case_id: str
    index: int
    base: int
    batches: int
    script: list[str] = field(default_factory=list)


def split_id(index: int, source: int, partition: int) -> str:
    return f"{index}/{source}/{partition}"


def _decline(case_id: str, reason: str) -> dict[str, Any]:
    return {"id": case_id, "unsupported": reason}


def _well_formed(item: dict[str, Any], *names: str) -> bool:
    return all(isinstance(item.get(n), int) and not isinstance(item.get(n), bool) for n in names)


def prepare(case: dict[str, Any], index: int) -> Prepared | dict[str, Any]:
    try:
        _, max_lateness = config_from_trace(case.get("config", {}))
    except InvalidConfig as error:
        return {"id": case["id"], "error": {"type": "InvalidConfig", "message": str(error)}}
    base = common.case_base(index)
    prepared = Prepared(case["id"], index, base, len(case["batches"]))
    opened: dict[int, set[int]] = {}  # per source, the partitions whose split output is open
    times: list[int] = [max_lateness]
    for b, batch in enumerate(case["batches"]):
        for seq, item in enumerate(batch):
            kind = item.get("kind")
            if kind == "clock":
                return _decline(case["id"], NO_CLOCK)
            if kind == "assign_core":
                return _decline(case["id"], NO_CORES)
            if kind == "register_source" and _well_formed(item, "source", "count"):
                if item["count"] > MAX_SPLITS:
                    return _decline(case["id"], f"a source of more than {MAX_SPLITS} partitions (splits)")
                if item["count"] < 0:
                    continue  # no split count to translate: the spec refuses it (invalid_partition)
                mine = opened.setdefault(item["source"], set())
                for p in sorted(mine - set(range(item["count"]))):
                    prepared.script.append(trace_source.line("release", split_id(index, item["source"], p)))
                    mine.discard(p)
                for p in range(item["count"]):
                    if p not in mine:
                        mine.add(p)
                        prepared.script.append(trace_source.line("open", split_id(index, item["source"], p)))
            elif kind in ("add_partition", "remove_partition") and _well_formed(item, "source", "partition"):
                registered = opened.get(item["source"])
                if registered is None:
                    continue  # a source never registered: nothing in Flink to add a split to
                split = split_id(index, item["source"], item["partition"])
                if kind == "add_partition" and item["partition"] not in registered:
                    registered.add(item["partition"])
                    prepared.script.append(trace_source.line("open", split))
                elif kind == "remove_partition" and item["partition"] in registered:
                    registered.discard(item["partition"])
                    prepared.script.append(trace_source.line("release", split))
            elif kind in SPLIT_KINDS and _well_formed(item, "source", "partition"):
                timed = "event_time" if kind == "event" else "time" if kind == "watermark" else None
                if timed is not None and not _well_formed(item, timed):
                    continue  # malformed: the spec refuses it, Flink has no such record
                if item["partition"] not in opened.get(item["source"], set()):
                    return _decline(
                        case["id"],
                        "an item names a partition the trace has not opened: a Flink reader emits only "
                        "through the outputs of its own splits (F064-R4)",
                    )
                ts = wm = 0  # the record's fields are never null (PyFlink's tuple coder refuses one)
                if kind == "event":
                    times.append(item["event_time"])
                    ts = base + item["event_time"]
                elif kind == "watermark":
                    times.append(item["time"])
                    wm = common.to_flink(base + item["time"])
                split = split_id(index, item["source"], item["partition"])
                row = (kind, index, b, seq, split, ts, wm, max_lateness, "")
                prepared.script.append(trace_source.line("record", split, row))
        mark = ("mark", index, b, -1, "", 0, 0, 0, "")
        prepared.script.append(trace_source.line("record", "", mark))  # reads the watermark after batch b
    if not common.fits(*times):
        return _decline(
            case["id"],
            f"times or durations of {common.TIME_LIMIT} ms or more: this adapter gives each case its own "
            "stretch of Flink event time, so the i64 ends of TR-2 are out of reach",
        )
    still_open = [split_id(index, s, p) for s, parts in sorted(opened.items()) for p in sorted(parts)]
    prepared.script += [trace_source.line("release", split) for split in still_open]
    return prepared


def build(env: Any, t_env: Any, cases: list[Prepared]) -> list[Any]:
    """One Java source for every case, in case order; a process function reads its watermark."""
    from pyflink.common import Types

    script = [line for case in cases for line in case.script]
    rows = trace_source.stream(env, script, Types.ROW_NAMED(common.FIELD_NAMES, common.field_types()))
    observed = rows.process(common.observe_watermark(), output_type=common.observed_type())
    return [common.marks(observed)]


def assemble(case: Prepared, records: list[dict[str, Any]]) -> dict[str, Any]:
    after_batch = {r["batch"]: r["wm"] for r in records if r["t"] == "mark"}
    progress = [
        [b, common.case_watermark(after_batch[b], case.base), None, None, None, None, None]
        for b in range(case.batches)
    ]
    return {
        "id": case.case_id,
        "tables": {"progress": progress, "partitions": [], "sources": [], "errors": []},
    }
