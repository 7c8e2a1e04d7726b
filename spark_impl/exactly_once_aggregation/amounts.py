"""A message's amount parsed from its text, vectorised over a batch, with the canonical text of a
double and of NaN (OXE-R16, R17).
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import pandas as pd

# ---- the text cells (OXE-R16, R17) -------------------------------------------------------------

AMOUNT_OK, AMOUNT_MISSING, AMOUNT_INVALID = 0, 1, 2


_JSON_NUMBER = re.compile(r"[ \t\n\r]*-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?[ \t\n\r]*")


_NAMED = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _parse_one(text: str) -> tuple[float, int]:
    """A JSON text that is not a plain number: null, one of the three named values, or invalid."""
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return 0.0, AMOUNT_INVALID
    if value is None:
        return 0.0, AMOUNT_MISSING
    if isinstance(value, str):
        return (_NAMED[value], AMOUNT_OK) if value in _NAMED else (0.0, AMOUNT_INVALID)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:
            return 0.0, AMOUNT_INVALID
        return (number, AMOUNT_OK) if np.isfinite(number) else (0.0, AMOUNT_INVALID)
    return 0.0, AMOUNT_INVALID


def parse_amounts(texts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """OXE-R16: the amounts' JSON texts (None: a null cell) -> (doubles, status per text:
    AMOUNT_OK, AMOUNT_MISSING for null, AMOUNT_INVALID). A plain JSON number is read by
    ``float``, which rounds its exact decimal value to the nearest double; one that rounds
    beyond the largest finite double is invalid. NaN comes out canonical (OXE-R9)."""
    n = len(texts)
    values = np.zeros(n, np.float64)
    status = np.full(n, AMOUNT_MISSING, np.int8)
    present = np.flatnonzero(pd.notna(pd.Series(texts, dtype=object)).to_numpy(bool))
    if not len(present):
        return values, status
    given = pd.Series(texts[present], dtype=object)
    plain = given.str.fullmatch(_JSON_NUMBER).fillna(False).to_numpy(bool)
    if plain.any():
        numbers = np.array([float(t) for t in given[plain].tolist()], np.float64)
        finite = np.isfinite(numbers)
        at = present[plain]
        values[at] = np.where(finite, numbers, 0.0)
        status[at] = np.where(finite, AMOUNT_OK, AMOUNT_INVALID)
    for i, text in zip(present[~plain].tolist(), given[~plain].tolist(), strict=True):
        if isinstance(text, str):
            values[i], status[i] = _parse_one(text)
        else:
            status[i] = AMOUNT_INVALID
    return values, status


def double_text(value: float) -> str:
    """OXE-R17: ``NaN``, ``Infinity``, ``-Infinity``, otherwise Python's ``repr``."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    return repr(float(value))


def canonical_nan(values: np.ndarray) -> np.ndarray:
    """OXE-R9: every NaN as the quiet NaN 0x7FF8000000000000 (x86 makes 0xFFF8... from inf - inf)."""
    return np.where(np.isnan(values), np.float64("nan"), values)
