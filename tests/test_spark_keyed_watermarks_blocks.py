"""The blocks of a bucket (``spark_impl.scaleout.block_of``): linear hashing, as keyed watermarks
and session windows place their keys (docs/architecture.md, "Buckets and blocks").

A bucket of ``2**level + split`` blocks places a key by the low ``level`` bits of its hash, or
``level + 1`` bits for the blocks below ``split``, which have split already. What the layout
needs from that, checked on any hashes and any layout:

- every key lands in a block the bucket has;
- splitting the next block (``split + 1``, or ``level + 1`` when ``split`` wraps) moves only
  that block's keys, each to itself or to its new sibling ``split + 2**level``: a key of any
  other block stays where the state holds it, so no key is looked up where it never was.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from spark_impl.scaleout import block_of

I64 = st.integers(-(2**63), 2**63 - 1)


@st.composite
def layouts(draw: st.DrawFn) -> tuple[int, int]:
    level = draw(st.integers(0, 12))
    return level, draw(st.integers(0, 2**level - 1))


@given(st.lists(I64, min_size=1, max_size=64), layouts())
def test_spark_every_key_lands_in_a_block_the_bucket_has(hashes: list[int], layout: tuple[int, int]) -> None:
    level, split = layout
    blocks = block_of(np.array(hashes, np.int64), level, split)
    assert ((blocks >= 0) & (blocks < 2**level + split)).all(), (level, split, blocks)


@given(st.lists(I64, min_size=1, max_size=64), layouts())
def test_spark_a_split_moves_only_the_split_blocks_keys_to_its_sibling(
    hashes: list[int], layout: tuple[int, int]
) -> None:
    level, split = layout
    keys = np.array(hashes, np.int64)
    before = block_of(keys, level, split)
    after = block_of(keys, level + 1, 0) if split + 1 == 2**level else block_of(keys, level, split + 1)
    moved = before != after
    assert (before[moved] == split).all(), (level, split, before, after)
    assert (after[moved] == split + 2**level).all(), (level, split, before, after)
    assert np.isin(after[before == split], [split, split + 2**level]).all()
