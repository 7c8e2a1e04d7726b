"""The malformed items of a trace, for adapters of engines that take any element.

An engine such as Flink's DataStream or Beam's ``TestStream`` has no notion of a malformed trace
item: it takes whatever it is given. Its adapter checks the items by the spec's rules and feeds
the engine only the well-formed ones. What these checks find is the adapter's, never the
engine's answer: an expectation file leaves the errors table out of what the engine shows.
"""

from __future__ import annotations

from typing import Any

Batches = list[list[dict[str, Any]]]


def late_data_errors(batches: Batches) -> dict[tuple[int, int], str]:
    """(batch, seq) -> reason of every malformed late-data item (OXL-R16; TR-4 for the clock)."""
    errors = {}
    clock, watermarks = 0, dict[Any, int]()  # each source's watermark (OXL-R3)
    for b, batch in enumerate(batches):
        for seq, item in enumerate(batch):
            kind = item.get("kind")
            if kind == "duplicate_seq":
                errors[(b, seq)] = "duplicate_seq"
            elif kind not in ("event", "watermark", "clock"):
                errors[(b, seq)] = "unsupported_item"
            elif kind == "event":
                if item.get("event_time") is None:
                    errors[(b, seq)] = "missing_event_time"
            elif item.get("time") is None:
                errors[(b, seq)] = "missing_time"
            elif kind == "clock":
                if item["time"] < clock:
                    errors[(b, seq)] = "clock_went_backwards"
                else:
                    clock = item["time"]
            elif item["time"] < watermarks.get(item.get("source"), item["time"]):
                errors[(b, seq)] = "watermark_regressed"
            else:
                watermarks[item.get("source")] = item["time"]
    return errors


def _join_event_error(item: dict[str, Any]) -> str | None:
    side = item.get("side")
    if side is None:
        return "missing_side"
    if side not in ("left", "right"):
        return "unknown_side"
    if item.get("key") is None:
        return "missing_key"
    if item.get("event_time") is None:
        return "missing_event_time"
    return None


def window_join_errors(batches: Batches) -> dict[tuple[int, int], str]:
    """(batch, seq) -> reason of every malformed window-join item (OXJ-R19)."""
    errors = {}
    watermark = None
    for b, batch in enumerate(batches):
        for seq, item in enumerate(batch):
            kind = item.get("kind")
            if kind == "duplicate_seq":
                errors[(b, seq)] = "duplicate_seq"
            elif kind not in ("event", "watermark"):
                errors[(b, seq)] = "unsupported_item"
            elif kind == "event":
                reason = _join_event_error(item)
                if reason:
                    errors[(b, seq)] = reason
            elif item.get("time") is None:
                errors[(b, seq)] = "missing_time"
            elif watermark is not None and item["time"] < watermark:
                errors[(b, seq)] = "watermark_regressed"
            else:
                watermark = item["time"]
    return errors
