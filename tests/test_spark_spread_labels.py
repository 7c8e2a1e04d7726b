"""Bucket labels (``spark_impl.scaleout.spread_labels``): every shuffle partition gets its share.

An operator groups its wide stage by (stream, bucket). Spark places a group on the shuffle
partition ``pmod(murmur3(stream, label), partitions)``; with the bucket numbers themselves as
labels, 32 buckets on 8 partitions put 7 or 8 buckets on the busiest partition where 4 is the
fair share (docs/spread.md measured 1.77x). Each bucket is grouped under a label of its own
instead, chosen so the hash sends it to partition ``bucket mod partitions``. Checked here with
Spark's own hash partitioning (``repartition`` by the grouping columns builds the same
``HashPartitioning`` a stateful stage's shuffle does):

- with the default bucket count every partition gets exactly its share of each stream's
  buckets, for a null stream and a non-ASCII one too, and for int and long bucket columns;
- the labels give the buckets back (``bucket_of``) and never collide;
- negative routes (the summary route) keep their number.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from spark_impl.scaleout import BUCKETS_PER_PARTITION, SUMMARY_ROUTE, bucket_of, spread_labels

PARTITIONS = 8
BUCKETS = PARTITIONS * BUCKETS_PER_PARTITION
STREAMS = ["trace-1", "orders", "Zürich ✓", None]


def _placed(spark: Any, kind: str) -> list[tuple[Any, int, int, int]]:
    """(stream, bucket, label, shuffle partition) of every bucket of every stream."""
    from pyspark.sql import functions as F

    rows = [(s, b) for s in STREAMS for b in range(BUCKETS)] + [(s, SUMMARY_ROUTE) for s in STREAMS]
    df = spark.createDataFrame(rows, f"stream string, bucket {kind}").withColumn("original", F.col("bucket"))
    labelled = spread_labels(df, "bucket", BUCKETS, "stream")
    placed = labelled.repartition(PARTITIONS, "stream", "bucket").select(
        "stream", "original", "bucket", F.spark_partition_id().alias("partition")
    )
    return [(r.stream, r.original, r.bucket, r.partition) for r in placed.collect()]


@pytest.mark.parametrize("kind", ["int", "bigint"])
def test_spark_every_partition_gets_its_share_of_each_streams_buckets(kind: str) -> None:
    """Each bucket on partition ``bucket mod partitions``: exactly ``BUCKETS_PER_PARTITION`` a
    partition. (A bucket keeps its number when none of its ``LABEL_TRIES`` candidates hits, about
    one bucket in 25 million at 8 partitions: none of these streams has one.)"""
    from spark_impl.session import get_spark

    placed = [p for p in _placed(get_spark(), kind) if p[1] != SUMMARY_ROUTE]
    assert [(s, b) for s, b, _, part in placed if part != b % PARTITIONS] == []
    for stream in STREAMS:
        per_partition = Counter(part for s, _, _, part in placed if s == stream)
        assert sorted(per_partition.values()) == [BUCKETS_PER_PARTITION] * PARTITIONS, (stream, per_partition)


@pytest.mark.parametrize("kind", ["int", "bigint"])
def test_spark_labels_give_their_buckets_back_and_never_collide(kind: str) -> None:
    from spark_impl.session import get_spark

    placed = _placed(get_spark(), kind)
    for stream in STREAMS:
        mine = [(b, label) for s, b, label, _ in placed if s == stream]
        assert [bucket_of(label, BUCKETS) for _, label in mine] == [b for b, _ in mine]
        assert len({label for _, label in mine}) == len(mine)
    assert {label for _, b, label, _ in placed if b == SUMMARY_ROUTE} == {SUMMARY_ROUTE}


def test_spark_the_numbers_themselves_would_crowd_a_partition() -> None:
    """Why the labels exist: the same buckets grouped under their own numbers."""
    from pyspark.sql import functions as F

    from spark_impl.session import get_spark

    rows = [(s, b) for s in STREAMS for b in range(BUCKETS)]
    df = get_spark().createDataFrame(rows, "stream string, bucket int")
    parts = df.repartition(PARTITIONS, "stream", "bucket").select("stream", F.spark_partition_id().alias("p"))
    busiest = max(Counter((r.stream, r.p) for r in parts.collect()).values())
    assert busiest > BUCKETS_PER_PARTITION


def test_spark_one_partitions_worth_of_buckets_keeps_the_numbers() -> None:
    """Fewer than ``2 x BUCKETS_PER_PARTITION`` buckets: spread over one partition, nothing to
    choose; the query is left as it was."""
    frame = object()
    assert spread_labels(frame, "bucket", 2 * BUCKETS_PER_PARTITION - 1, "stream") is frame
