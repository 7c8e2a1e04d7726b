"""The aggregates folded in arrival order: running sums of integers, doubles in a total order for min
and max, and a key's folds of one batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from spark_impl.exactly_once_aggregation.amounts import canonical_nan

# ---- the aggregates (OXE-R5 to R9) -------------------------------------------------------------

LONG_FOLD_RUN = 32  # a key with more elements than this is added by np.add.accumulate on its own


def running_sums(starts: np.ndarray, lengths: np.ndarray, values: np.ndarray) -> np.ndarray:
    """OXE-R7: per group (contiguous, ``starts``/``lengths``), the running IEEE sum of its
    values added one at a time from the first: ``((a1 + a2) + a3) + ...``. Short groups advance
    together one rank per step; a long one goes through ``np.add.accumulate``, which adds left
    to right (a plain ``sum`` may add pairwise)."""
    out = values.copy()
    n = len(values)
    if not n:
        return out
    long_groups = lengths > LONG_FOLD_RUN
    for g in np.flatnonzero(long_groups).tolist():
        s, e = int(starts[g]), int(starts[g] + lengths[g])
        with np.errstate(invalid="ignore", over="ignore"):
            out[s:e] = np.add.accumulate(values[s:e])
    short = ~np.repeat(long_groups, lengths)
    rank = np.arange(n) - np.repeat(starts, lengths)
    at = np.flatnonzero(short & (rank > 0))
    if len(at):
        by_rank = at[np.argsort(rank[at], kind="stable")]
        bounds = np.searchsorted(rank[by_rank], np.arange(1, int(rank[at].max()) + 2))
        with np.errstate(invalid="ignore", over="ignore"):
            for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
                idx = by_rank[lo:hi]
                out[idx] = out[idx - 1] + values[idx]
    return canonical_nan(out)


_LOW63 = np.int64(0x7FFFFFFFFFFFFFFF)


def total_order(values: np.ndarray) -> np.ndarray:
    """The doubles (no NaN) as int64 in IEEE 754's total order: -0.0 below +0.0; an involution."""
    bits = np.ascontiguousarray(values, np.float64).view(np.int64)
    return np.where(bits < 0, bits ^ _LOW63, bits)


def from_total_order(keys: np.ndarray) -> np.ndarray:
    return np.where(keys < 0, keys ^ _LOW63, keys).view(np.float64)


@dataclass
class Folds:
    """One call's fold rows of one stream, and the stored entries of their keys, as arrays."""

    keys: np.ndarray  # object: the distinct keys, in order of first fold
    code: np.ndarray  # per fold: index into keys
    batch: np.ndarray
    amount: np.ndarray
    stored: np.ndarray  # per key: has an entry
    stored_value: np.ndarray
    stored_count: np.ndarray


def fold_values(folds: Folds, aggregate: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """OXE-R5 to R8 over one call: per key and batch with a fold, at the end of that batch, its
    (batch, value, count, key index), ordered by key then batch; the elements folded are each
    key's stored entry (if any) then its folds in arrival order. A key's last row is its entry."""
    m = len(folds.keys)
    stored_keys = np.flatnonzero(folds.stored)
    code = np.concatenate([stored_keys, folds.code])
    is_stored = np.concatenate([np.ones(len(stored_keys), bool), np.zeros(len(folds.code), bool)])
    batch = np.concatenate([np.full(len(stored_keys), -1, np.int64), folds.batch])
    amount = np.concatenate([folds.stored_value[stored_keys], folds.amount])
    weight = np.concatenate([folds.stored_count[stored_keys], np.ones(len(folds.code), np.int64)])
    order = np.argsort(code, kind="stable")  # stored first, then folds in arrival order, per key
    code, is_stored, batch = code[order], is_stored[order], batch[order]
    amount, weight = amount[order], weight[order]
    n = len(code)
    lengths = np.bincount(code, minlength=m)
    starts = np.zeros(m, np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    count = pd.Series(weight).groupby(code).cumsum().to_numpy(np.int64)
    if aggregate in ("sum", "mean"):
        value = running_sums(starts, lengths, amount)
    elif aggregate in ("min", "max"):
        nan = pd.Series(np.isnan(amount)).groupby(code).cummax().to_numpy(bool)
        image = pd.Series(total_order(np.where(np.isnan(amount), 0.0, amount))).groupby(code)
        ranked = (image.cummin() if aggregate == "min" else image.cummax()).to_numpy(np.int64)
        # a NaN element's 0.0 stand-in never shows: the flag makes the value NaN from there on
        value = np.where(nan, np.float64("nan"), from_total_order(ranked))
    else:
        value = np.zeros(n, np.float64)
    last = np.ones(n, bool)  # the last element of each (key, batch) run
    last[:-1] = (code[1:] != code[:-1]) | (batch[1:] != batch[:-1])
    rows = np.flatnonzero(last & ~is_stored)
    return batch[rows], value[rows], count[rows], code[rows]
