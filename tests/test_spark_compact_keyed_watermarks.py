"""The compact keyed tracker (F065-R26..R37) on Spark (spark_impl/keyed_watermarks/).

The differential suite (properties/test_keyed_watermarks.py) compares every generated trace with
the oracle at the harness's own bucket count; these tests check what it cannot:

- the shard computed in the JVM before the shuffle is the digest's (R27), for any key text;
- the answer does not depend on how Spark spreads the shards over buckets (R37): the same traces
  through 1 and 5 buckets (one multiplexed harness run each) give the oracle's tables (the
  differential adds the harness's 3);
- a restart between batches gives the uninterrupted output (R37, R24);
- the state stays bounded however many keys arrive (R36), in the state store itself;
- bad settings are refused when the operator is applied, saying what is wrong (R26).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from harness.outputs import Output
from harness.traces import I64_MAX, InvalidConfig, Item, Trace
from reference.keyed_watermarks import KeyedWatermarkStream, config_from_trace, key_digest_words, run_trace

BUCKET_COUNTS = (1, 5)  # every shard in one group; shards spread over more groups than shards
RESTART_BUCKETS = 5
RESTART_AFTER = 1
BATCHES = 3
# Keys beyond ASCII, an empty key and a key with a NUL byte: the digest reads the key's UTF-8 bytes.
ODD_KEYS = ("é", "日本", "🙂x", "", "a\x00b", "Ωmega")


def compact_trace(seed: int) -> Trace:
    """A compact stream small enough to demote, promote, collide and age: 1 to 6 exact keys over
    1 to 4 shards, sketches 3 to 10 cells wide and 1 to 3 deep, up to 11 keys, three batches of
    out-of-order events with clock, idle and remove_key items and malformed items."""
    rng = random.Random(seed)
    exact = rng.randint(1, 6)
    config: dict[str, Any] = {
        "bounded_delay": rng.choice([0, 1000, 3000]),
        "exact_key_count": exact,
        "shards": rng.randint(1, min(4, exact)),
        "sketch_error_rate": rng.choice([0.99, 0.9, 0.5, 0.3]),
        "sketch_depth": rng.randint(1, 3),
    }
    if rng.random() < 0.7:
        config["idle_timeout"] = rng.choice([0, 2000, 5000])
    keys = [f"k{i}" for i in range(rng.randint(2, 8))] + list(rng.sample(ODD_KEYS, 3))
    batches: list[tuple[Item, ...]] = []
    clock = top = 0
    for _ in range(BATCHES):
        batch: list[Item] = []
        for _ in range(rng.randint(10, 50)):
            r = rng.random()
            if r < 0.75:
                top += rng.choice([0, 500, 1000])
                lag = rng.choice([0, 0, 1000, 4000, 9000])
                batch.append(Item("event", key=rng.choice(keys), event_time=max(0, top - lag)))
            elif r < 0.85:
                clock += rng.choice([0, 1000, 3000])
                batch.append(Item("clock", time=clock))
            elif r < 0.9:
                batch.append(Item("idle", key=rng.choice(keys)))
            elif r < 0.95:
                batch.append(Item("remove_key", key=rng.choice(keys)))
            else:
                batch.append(rng.choice([Item("event", key=None, event_time=5), Item("clock", time=None)]))
        batches.append(tuple(batch))
    return Trace("keyed_watermarks", config, tuple(batches), name=f"compact-{seed}")


def traces() -> list[Trace]:
    """Generated compact streams, one with its settings' defaults but for exact_key_count, and an
    ordinary stream in the same query (its estimated_keys stays null, R35). Few streams with many
    items: a query's cost grows with its groups (streams x buckets), hardly with their rows. The
    seeds give 1 to 4 shards, depths 1 to 3, widths 3 to 10, and reach every case checked below."""
    generated = [compact_trace(seed) for seed in range(3, 8)]
    defaults = Trace(
        "keyed_watermarks",
        {"exact_key_count": 3},
        (
            (Item("event", key="a", event_time=9000), Item("event", key="b", event_time=1000)),
            (Item("event", key="c", event_time=2000), Item("event", key="a", event_time=1000)),
            (),  # an empty batch still reports progress
        ),
    )
    ordinary = Trace("keyed_watermarks", {"bounded_delay": 1000}, defaults.batches)
    return [*generated, defaults, ordinary]


def what_the_traces_reach(trace_list: list[Trace]) -> set[str]:
    """The compact behaviours the traces exercise, read from the oracle: the comparisons below
    mean something only if these happen."""
    reached: set[str] = set()
    for trace in trace_list:
        if "exact_key_count" not in trace.config:
            continue
        out = run_trace(trace)
        stream = KeyedWatermarkStream(trace.config)
        seen: set[str] = set()
        for b, batch in enumerate(trace.batches):
            stream.run_batch(b, batch)
        for _, _, key, _, key_watermark, _ in sorted(out["events"]):
            if key not in seen and key_watermark is not None:
                reached.add("new key judged by another key's cells")  # R29, R30
            seen.add(key)
        if any(state == "sketched" for *_, state in out["keys"]):
            reached.add("demotion")  # R30, R35
        if any(state == "removed" for *_, state in out["keys"]):
            reached.add("removal")
        if any(state == "idle" for *_, state in out["keys"]):
            reached.add("idle key")
        if out["errors"]:
            reached.add("error row")
        shards = stream.tracker.shards
        if sum(1 for s in shards if s.events) >= 3:
            reached.add("three shards or more with events")
        if any(s.events >= s.config.aging_period for s in shards):
            reached.add("aging")  # R28
    return reached


def engine_outputs(trace_list: list[Trace], buckets: int) -> list[Output]:
    """The harness engine's run (one query for every trace, restarts as the traces ask) with
    ``buckets`` wide-stage groups."""
    from spark_impl import keyed_watermarks
    from spark_impl.engine import SparkEngine

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(keyed_watermarks, "ENGINE_BUCKETS", buckets)
        results = SparkEngine().run(trace_list)
    for r in results:
        assert not isinstance(r, Exception), r
    return results  # type: ignore[return-value]


def canonical(output: Output) -> dict[str, list[tuple[Any, ...]]]:
    return {table: sorted(rows, key=repr) for table, rows in output.items()}


@pytest.fixture(scope="module")
def answers() -> dict[int, list[Output]]:
    """One harness run per bucket count; the run with RESTART_BUCKETS stops after batch
    RESTART_AFTER and restarts from its checkpoint (each query start costs seconds)."""
    return {
        buckets: engine_outputs(
            [replace(t, restart_after=frozenset({RESTART_AFTER})) for t in traces()]
            if buckets == RESTART_BUCKETS else traces(),
            buckets,
        )
        for buckets in BUCKET_COUNTS
    }  # fmt: skip


@pytest.mark.clauses("F065-R27")
def test_spark_jvm_shard_is_the_digest_shard() -> None:
    """The shard the projection computes with sha2 and decimal arithmetic is w0 mod shards of the
    reference digest, for keys beyond ASCII, keys whose w0 needs all 64 bits, and shard counts
    up to the i64 maximum."""
    from pyspark.sql import functions as F

    from spark_impl.keyed_watermarks import compact_shard
    from spark_impl.session import get_spark

    rng = random.Random(7)
    alphabet = "abcxyz019-_ éßΩжは日本🙂\t"
    keys = sorted({*ODD_KEYS, *("".join(rng.choices(alphabet, k=rng.randint(1, 40))) for _ in range(400))})
    words = {k: key_digest_words(k)[0] for k in keys}
    assert sum(w >= 1 << 63 for w in words.values()) > 100  # the unsigned upper half is exercised
    counts = (1, 2, 3, 4, 7, 1_000_003, (1 << 62) + 1, I64_MAX)
    df = get_spark().createDataFrame([(k,) for k in keys], "key string")
    got = df.select(
        "key", *(compact_shard(F.col("key"), F.lit(n)).alias(f"s{i}") for i, n in enumerate(counts))
    )
    for row in got.collect():
        expected = [words[row["key"]] % n for n in counts]
        assert [row[f"s{i}"] for i in range(len(counts))] == expected, row["key"]


@pytest.mark.clauses(
    "F065-R26", "F065-R27", "F065-R28", "F065-R29", "F065-R30", "F065-R31", "F065-R34", "F065-R35", "F065-R37"
)
def test_spark_compact_answer_does_not_depend_on_buckets(answers: dict[int, list[Output]]) -> None:
    """Every table of every trace equals the oracle's with 1 and 5 buckets (every shard in one
    group; shards spread, groups left empty)."""
    trace_list = traces()
    assert what_the_traces_reach(trace_list) == {
        "new key judged by another key's cells",
        "demotion",
        "removal",
        "idle key",
        "error row",
        "three shards or more with events",
        "aging",
    }
    for trace, *outputs in zip(trace_list, *(answers[b] for b in BUCKET_COUNTS), strict=True):
        expected = canonical(run_trace(trace))
        for buckets, answer in zip(BUCKET_COUNTS, outputs, strict=True):
            assert canonical(answer) == expected, (trace.name, trace.config, f"{buckets} buckets")
    ordinary = answers[1][-1]["progress"]
    assert ordinary and all(row[-1] is None for row in ordinary)  # F065-R35: null without the compact tracker


@pytest.mark.clauses("F065-R24", "F065-R37")
def test_spark_compact_restart_between_batches_gives_the_uninterrupted_output(
    answers: dict[int, list[Output]],
) -> None:
    """The run stopped after batch RESTART_AFTER and restarted from its checkpoint reports what
    the oracle's uninterrupted run reports: exact keys, both sketches, registers and counts
    cross the restart."""
    assert any(len(t.batches) > RESTART_AFTER + 1 for t in traces())  # batches follow the restart
    for trace, again in zip(traces(), answers[RESTART_BUCKETS], strict=True):
        assert canonical(again) == canonical(run_trace(trace)), (trace.name, trace.config)


def _events_file(path: Path, batches: int, keys_per_batch: int) -> str:
    """Two streams with the same events: each of ``batches`` batches brings ``keys_per_batch``
    keys never seen before, all of one length, so a bounded state has the same size in every
    batch."""
    import pyarrow as pa

    from spark_impl.trace_source import write_trace_file

    cols: dict[str, list[Any]] = {"batch": [], "seq": [], "stream": [], "key": [], "ts": []}
    for b in range(batches):
        for i in range(keys_per_batch):
            for stream in ("compact", "exact"):
                cols["batch"].append(b)
                cols["seq"].append(len(cols["seq"]))
                cols["stream"].append(stream)
                cols["key"].append(f"key-{b:03d}-{i:05d}")
                cols["ts"].append(1000 * (b * keys_per_batch + i))
    write_trace_file(str(path), pa.table(cols))
    return str(path)


def _state_bytes(checkpoint: str, batch_id: int) -> dict[str, int]:
    """Bytes of the wide stage's state values per stream after micro-batch ``batch_id``, read
    back with the state store reader: every binary field of every state variable."""
    from pyspark.sql import functions as F

    from spark_impl.session import get_spark

    spark = get_spark()
    binary = {
        "bucket": ["value.blocks"],
        "blocks": [
            f"user_map_value.{c}"
            for c in (
                "key_lengths",
                "key_bytes",
                "numbers",
                "idle",
                "window_key_lengths",
                "window_key_bytes",
                "window_numbers",
            )
        ],
        "shard_keys": [f"user_map_value.{c}" for c in ("key_lengths", "key_bytes", "numbers", "idle")],
        "shard_sketches": [f"user_map_value.{c}" for c in ("frequency", "high", "empty", "registers")],
    }
    totals: dict[str, int] = {}
    for var, cols in binary.items():
        size = sum((F.coalesce(F.length(F.col(c)), F.lit(0)) for c in cols), F.lit(0))
        rows = None
        for operator in (0, 1):  # the two stateful stages; only the wide one has these variables
            try:  # collected inside: under Spark Connect a wrong variable fails only when run
                rows = (
                    spark.read.format("statestore")
                    .option("operatorId", operator)
                    .option("stateVarName", var)
                    .option("batchId", batch_id)
                    .load(checkpoint)
                    .groupBy("key.kw_sid")
                    .agg(F.sum(size).alias("b"))
                    .collect()
                )
                break
            except Exception:  # noqa: BLE001 - the other stage does not define the variable
                continue
        assert rows is not None, f"no stage holds {var}"
        for row in rows:
            totals[row["kw_sid"]] = totals.get(row["kw_sid"], 0) + int(row["b"])
    return totals


@pytest.mark.clauses("F065-R26", "F065-R34", "F065-R35", "F065-R36", "F065-R37")
def test_spark_compact_state_stays_bounded(tmp_path: Path) -> None:
    """The operator's own defaults select the compact tracker (exact_key_count=8 over 2 shards,
    sketches 6 x 2); a second stream in the same query keeps every key (stream_configs). After
    1 and after 2 batches of 300 new keys each, the compact stream's state bytes are equal and
    within R36's formula, while the ordinary stream's grow with the keys; estimated_keys follows
    the distinct keys within 3 standard errors. A restart with another shard count is refused."""
    from pyspark.errors import StreamingQueryException

    from spark_impl.keyed_watermarks import keyed_watermarks
    from spark_impl.session import get_spark
    from spark_impl.trace_source import SOURCE_NAME

    spark = get_spark()
    batches, per_batch = 2, 300
    path = _events_file(tmp_path / "events.parquet", batches + 1, per_batch)  # the last: the refused restart
    checkpoint, sink = str(tmp_path / "checkpoint"), str(tmp_path / "out")

    def start(end_batch: int, shards: int) -> Any:
        source = (
            spark.readStream.format(SOURCE_NAME).option("path", path).option("end_batch", end_batch).load()
        )
        kw = keyed_watermarks(
            source,
            key_col="key",
            event_time_col="ts",
            stream_id_col="stream",
            seq_col="seq",
            batch_col="batch",
            bounded_delay_ms=1000,
            exact_key_count=8,
            shards=shards,
            sketch_error_rate=0.5,
            sketch_depth=2,
            buckets=3,
            stream_configs={"exact": {"bounded_delay": 1000}},
            processing_time_col="current_timestamp",
        )
        query = (
            kw.output.writeStream.format("parquet")
            .option("path", sink)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        return query

    assert start(batches - 1, 2).exception() is None
    first, last = _state_bytes(checkpoint, 0), _state_bytes(checkpoint, batches - 1)
    assert first["compact"] == last["compact"], (first, last)
    key_bytes = len("key-000-00000")
    # R36 per shard: 4 exact entries (length, text, three integers, idle flag), two sketches of
    # 2 x 6 cells, the empty-cell mask, 4096 registers; the bucket's summary: 8 integers per shard.
    bound = 2 * (4 * (4 + key_bytes + 3 * 8 + 1) + 2 * 2 * 6 * 8 + 2 * 6 + 4096) + 2 * 8 * 8
    assert last["compact"] <= bound, (last["compact"], bound)
    assert last["exact"] > 1.8 * first["exact"]  # the ordinary stream keeps every key
    progress = {
        (r["stream_id"], r["batch"]): r
        for r in spark.read.parquet(sink).filter("output = 'progress'").collect()
    }
    for b in range(batches):
        estimate, distinct = progress[("compact", b)]["estimated_keys"], per_batch * (b + 1)
        assert abs(estimate - distinct) <= 3 * 1.04 / 64 * distinct, (b, estimate)  # F065-R34
        assert progress[("compact", b)]["total_keys"] == 8  # F065-R31: the exact keys only
        assert progress[("exact", b)]["estimated_keys"] is None  # F065-R35
    with pytest.raises(
        StreamingQueryException, match=r"holds \(shards, .*\) = \(2, 4, 2, 6\).*give \(4, 2, 2, 6\)"
    ):
        raise_failure(start(batches, 4))


def raise_failure(query: Any) -> None:
    error = query.exception()
    if error is not None:
        raise error


def _tiny_frame() -> Any:
    from spark_impl.session import get_spark

    return get_spark().createDataFrame([("a", 1)], "key string, ts long")


REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"exact_key_count": 0}, "exact_key_count must be an integer >= 1, got 0"),
    (
        {"exact_key_count": 4, "max_keys": 2},
        r"picks its exact keys by its own rule and keeps no windows; drop \['max_keys'\]",
    ),
    ({"exact_key_count": 4, "window_size_ms": 1000}, r"drop \['window_size'\]"),
    ({"exact_key_count": 4, "eviction_policy": "RejectNew"}, r"drop \['eviction_policy'\]"),
    ({"exact_key_count": 2, "shards": 3}, r"shards \(3\) must be at most exact_key_count \(2\)"),
    ({"exact_key_count": 2, "sketch_depth": 7}, "sketch_depth must be at most 6, got 7"),
    ({"exact_key_count": 2, "sketch_depth": 0}, "sketch_depth must be an integer >= 1, got 0"),
    (
        {"exact_key_count": 2, "sketch_error_rate": 1},
        "sketch_error_rate must be a number from 0.00001 to below 1",
    ),
    (
        {"exact_key_count": 2, "sketch_error_rate": 0},
        "sketch_error_rate must be a number from 0.00001 to below 1",
    ),
    ({"exact_key_count": 2, "sketch_error_rate": 1e-6}, "sketch_error_rate must be a number from 0.00001"),
    ({"exact_key_count": 2, "sketch_error_rate": True}, "sketch_error_rate must be a number"),
    ({"sketch_depth": 3}, r"\['sketch_depth'\] need exact_key_count \(the compact tracker, F065-R26\)"),
    ({"shards": 2, "sketch_error_rate": 0.1}, r"\['shards', 'sketch_error_rate'\] need exact_key_count"),
    (
        {"stream_id_col": "key", "stream_configs": {"t": {"exact_key_count": 3, "shards": 4}}},
        r"stream 't': shards \(4\) must be at most exact_key_count \(3\)",
    ),
    (
        {"stream_id_col": "key", "stream_configs": {"t": {"shards": 2}}},
        r"stream 't': \['shards'\] need exact_key_count",
    ),
]


@pytest.mark.clauses("F065-R20", "F065-R26")
@pytest.mark.parametrize(("settings", "message"), REFUSED, ids=[m[:40] for _, m in REFUSED])
def test_spark_compact_bad_settings_are_refused_with_the_reason(
    settings: dict[str, Any], message: str
) -> None:
    from spark_impl.keyed_watermarks import keyed_watermarks

    with pytest.raises(InvalidConfig, match=message):
        keyed_watermarks(_tiny_frame(), key_col="key", event_time_col="ts", **settings)


def trace_settings() -> Iterator[dict[str, Any]]:
    """Trace-style settings around the compact tracker's limits, valid and not."""
    yield from (
        {"exact_key_count": 1},
        {"exact_key_count": 1, "shards": 1},
        {"exact_key_count": 3, "shards": 3},
        {"exact_key_count": 3, "shards": 4},
        {"exact_key_count": 2, "sketch_depth": 6},
        {"exact_key_count": 2, "sketch_depth": 7},
        {"exact_key_count": 2, "sketch_error_rate": 0.00001},
        {"exact_key_count": 2, "sketch_error_rate": 0.99999},
        {"exact_key_count": 2, "sketch_error_rate": "0.1"},
        {"exact_key_count": 2, "max_keys": None, "window_size": None},
        {"exact_key_count": 2, "max_keys": 1},
        {"exact_key_count": 2, "bounded_delay": -1},
        {"exact_key_count": 2, "idle_timeout": 0},
        {"exact_key_count": I64_MAX, "shards": I64_MAX},
        {"exact_key_count": 2.0},
        {"exact_key_count": 2, "eviction_policy": "RejectNew"},
        {"exact_key_count": 2, "eviction_policy": "LeastRecentlyActive"},
        {"exact_key_count": 2, "window_size": 5},
        {"shards": 1},
        {"exact_key_count": None},
        {"exact_key_count": 2, "typo": 1},
    )


@pytest.mark.clauses("F065-R20", "F065-R26")
def test_spark_compact_settings_are_accepted_and_refused_as_the_oracle_does() -> None:
    """The harness engine checks a trace's settings before a query starts (TR-6): the same
    settings pass or fail as in the oracle."""
    from spark_impl.keyed_watermarks import validate_config

    for settings in trace_settings():
        try:
            config_from_trace(dict(settings))
            oracle_refuses = False
        except InvalidConfig:
            oracle_refuses = True
        try:
            validate_config(settings)
            spark_refuses = False
        except InvalidConfig:
            spark_refuses = True
        assert spark_refuses == oracle_refuses, settings
