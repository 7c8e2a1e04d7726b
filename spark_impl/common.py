"""Helpers shared by the Spark operators (keyed and partitioned watermarks).

Pure numpy/pandas: everything here also runs inside Spark's Python workers.

- ``require_int``: a setting that must be an integer in ``minimum..i64 max``.
- ``sat_sub``: saturating i64 subtraction, vectorised (numpy wraps silently).
- ``OutputRows``: the rows of one call of a stateful processor, collected as
  column pieces per output table and assembled into one pandas frame with
  exact nullable longs (never floats).
- ``opt``: a nullable scalar as the ``(values, null mask)`` pair OutputRows takes.
- ``with_defaults``: adds the normalised input columns a stream did not carry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from harness.traces import I64_MAX, I64_MIN, InvalidConfig


def require_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise InvalidConfig(f"{name} must be an integer >= {minimum}, got {value!r}")
    if value > I64_MAX:
        raise InvalidConfig(f"{name} must fit in a signed 64-bit integer, got {value!r}")
    return int(value)


def sat_sub(a: np.ndarray, d: int) -> np.ndarray:
    """max(i64 min, a - d) for d >= 0, without wrapping."""
    with np.errstate(over="ignore"):
        return np.where(a < I64_MIN + d, np.int64(I64_MIN), a - np.int64(d))


class OutputRows:
    """Pieces of the combined output, assembled column-wise without floats."""

    def __init__(self, stream_id: str, columns: Sequence[str], string_cols: Sequence[str]) -> None:
        self.stream_id = stream_id
        self.columns = tuple(columns)
        self.string_cols = frozenset(string_cols)
        self.pieces: list[tuple[int, dict[str, Any]]] = []

    def add(self, output: str, n: int, **cols: Any) -> None:
        """cols: numpy arrays / scalars; a long column may be (values, null_mask)."""
        if n:
            cols["output"] = output
            self.pieces.append((n, cols))

    def frame(self) -> pd.DataFrame:
        total = sum(n for n, _ in self.pieces)
        data: dict[str, Any] = {}
        for c in self.columns:
            if c == "stream_id":
                data[c] = np.full(total, self.stream_id, dtype=object)
                continue
            if c in self.string_cols:
                parts = []
                for n, cols in self.pieces:
                    v = cols.get(c)
                    parts.append(
                        np.full(n, v, dtype=object) if v is None or isinstance(v, str)
                        else np.asarray(v, dtype=object)
                    )
                data[c] = np.concatenate(parts) if parts else np.empty(0, object)
                continue
            vals, masks = [], []
            for n, cols in self.pieces:
                v = cols.get(c)
                if v is None:
                    vals.append(np.zeros(n, np.int64))
                    masks.append(np.ones(n, bool))
                elif isinstance(v, tuple):
                    vals.append(np.asarray(v[0], np.int64))
                    masks.append(np.asarray(v[1], bool))
                elif np.ndim(v) == 0:
                    vals.append(np.full(n, v, np.int64))
                    masks.append(np.zeros(n, bool))
                else:
                    vals.append(np.asarray(v, np.int64))
                    masks.append(np.zeros(n, bool))
            if vals:
                data[c] = pd.arrays.IntegerArray(np.concatenate(vals), np.concatenate(masks))
            else:
                data[c] = pd.array([], dtype="Int64")
        return pd.DataFrame(data, columns=list(self.columns))


def opt(value: int | None) -> tuple[np.ndarray, np.ndarray]:
    return (np.array([0 if value is None else value], np.int64), np.array([value is None]))


def with_defaults(pdf: pd.DataFrame, defaults: Mapping[str, Any]) -> pd.DataFrame:
    """Adds the normalised columns the input did not carry."""
    missing = {c: v for c, v in defaults.items() if c not in pdf.columns}
    if missing:
        pdf = pdf.assign(**{c: np.full(len(pdf), v, dtype=object if isinstance(v, str) else None)
                            for c, v in missing.items()})  # fmt: skip
    return pdf


__all__ = ["OutputRows", "opt", "require_int", "sat_sub", "with_defaults"]
