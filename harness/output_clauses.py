"""Which clauses each output table and column shows (spec/traces.md TR-8), and so which
clauses a difference between two answers is evidence against.

Every area declares, beside the table layouts of ``harness/outputs.py``:

* ``refusal``: the clauses that decide which configurations are refused (TR-6);
  one answer refusing a trace and the other not, or refusing with another error
  type, is attributed to these;
* per table, ``key``: the columns that name a row, so the rows of two answers
  are paired by them; ``rows``: the clauses that decide which rows exist (a row
  that only one answer has is attributed to these); ``columns``: for every other
  column, the clauses that decide its value (a paired row whose value differs
  there is attributed to these).

``differences`` applies the declarations to two answers: one ``Difference`` per place (a
table's column, or which rows it has) where they differ, with the clauses that decide it,
seen through the tables and columns an engine shows. The conformance summary charges a
failing test to these clauses only (those of them the test names), not to every clause of
its area, and an expectation file's place entries excuse a difference only in the places they
name (harness/expectations.py).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from harness.outputs import TABLES, Output, Row


@dataclass(frozen=True)
class TableClauses:
    key: tuple[str, ...]
    rows: tuple[str, ...]
    columns: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class AreaClauses:
    refusal: tuple[str, ...]
    tables: Mapping[str, TableClauses]


# the aggregates column holding a double's text (OXE-R18), by position: its name may change
EOA_NUMBER = TABLES["exactly_once_aggregation"]["aggregates"][3]

# ---- the declarations, one area each ---------------------------------------------------------

SHOWN: dict[str, AreaClauses] = {
    "keyed_watermarks": AreaClauses(
        refusal=("F065-R20", "F065-R26"),
        tables={
            "events": TableClauses(
                key=("batch", "seq"),
                rows=("F065-R22", "F065-R23", "F065-R39"),  # one row per well-formed event
                columns={
                    "key": ("F065-R22",),
                    "event_time": ("F065-R22",),
                    # the key's own state just before the event: none when untracked, reset by
                    # eviction (which key: R13/R14) or removal, none for a rejected event
                    "key_watermark": (
                        "F065-R1", "F065-R2", "F065-R3", "F065-R4", "F065-R12", "F065-R13", "F065-R14",
                        "F065-R15", "F065-R17", "F065-R29", "F065-R30", "F065-R31",
                    ),
                    "verdict": ("F065-R3", "F065-R4", "F065-R15", "F065-R30"),
                },
            ),
            "progress": TableClauses(
                key=("batch",),
                rows=("F065-R22", "F065-R39"),
                columns={
                    "global_watermark": ("F065-R5", "F065-R6", "F065-R7"),
                    # R25: idle keys stay tracked; R15: a rejected key is not added
                    "total_keys": (
                        "F065-R1", "F065-R12", "F065-R15", "F065-R17", "F065-R19", "F065-R25", "F065-R30",
                        "F065-R31",
                    ),
                    "active_keys": ("F065-R9", "F065-R10", "F065-R11", "F065-R19"),
                    "idle_keys": ("F065-R9", "F065-R10", "F065-R11", "F065-R19"),
                    "evicted_keys": ("F065-R12", "F065-R15", "F065-R19", "F065-R30"),
                    "global_advances": ("F065-R8", "F065-R16", "F065-R19"),
                    "key_advances": ("F065-R2", "F065-R15", "F065-R19", "F065-R30"),
                    "estimated_keys": ("F065-R34", "F065-R35"),
                },
            ),
            "keys": TableClauses(
                key=("batch", "key"),
                # a row per key whose watermark or state changed: every clause that changes either
                rows=(
                    "F065-R1", "F065-R2", "F065-R9", "F065-R10", "F065-R11", "F065-R12", "F065-R13",
                    "F065-R14", "F065-R17", "F065-R22",
                    "F065-R39",
                ),
                columns={
                    "watermark": ("F065-R2", "F065-R4", "F065-R12", "F065-R17"),  # null once removed
                    "state": (
                        "F065-R9", "F065-R10", "F065-R11", "F065-R12", "F065-R13", "F065-R14", "F065-R17",
                        "F065-R25", "F065-R30", "F065-R35",
                    ),
                },
            ),
            "windows": TableClauses(
                key=("batch", "key", "window_start"),
                rows=("F065-R21", "F065-R39"),
                columns={"window_end": ("F065-R21",), "count": ("F065-R21",), "sum": ("F065-R21",)},
            ),
            "errors": TableClauses(
                key=("batch", "seq"), rows=("F065-R23", "F065-R39"), columns={"reason": ("F065-R23",)}
            ),
        },
    ),
    "partitioned_watermarks": AreaClauses(
        refusal=("F064-R5", "F064-R24"),  # R5: a negative max_lateness; R24: the settings
        tables={
            "progress": TableClauses(
                key=("batch",),
                rows=("F064-R21", "F064-R25"),
                columns={
                    # R20: one evaluation per step, so a step's intermediate candidates never count
                    "combined_watermark": ("F064-R6", "F064-R7", "F064-R8", "F064-R13", "F064-R20"),
                    "total_partitions": ("F064-R2", "F064-R12", "F064-R13", "F064-R16"),
                    "active_partitions": (
                        "F064-R3", "F064-R4", "F064-R9", "F064-R10", "F064-R11", "F064-R16",
                    ),
                    "idle_partitions": (
                        "F064-R3", "F064-R4", "F064-R9", "F064-R10", "F064-R11", "F064-R16",
                    ),
                    "watermark_advances": ("F064-R7", "F064-R16", "F064-R20"),
                    "rebalances": ("F064-R2", "F064-R12", "F064-R13", "F064-R16"),
                },
            ),
            "partitions": TableClauses(
                key=("batch", "source", "partition"),
                # a row per partition whose watermark, state or core changed (added/removed ones do)
                rows=(
                    "F064-R2", "F064-R3", "F064-R4", "F064-R5", "F064-R9", "F064-R10", "F064-R11", "F064-R12",
                    "F064-R13", "F064-R17", "F064-R21",
                    "F064-R25",
                ),
                columns={
                    "watermark": ("F064-R3", "F064-R4", "F064-R5"),
                    "state": ("F064-R2", "F064-R3", "F064-R4", "F064-R9", "F064-R10", "F064-R11", "F064-R13"),
                    "core": ("F064-R17",),
                },
            ),
            "sources": TableClauses(
                key=("batch", "source"),
                # a row per source whose watermark or active count changed
                rows=(
                    "F064-R3", "F064-R4", "F064-R6", "F064-R8", "F064-R9", "F064-R10", "F064-R11", "F064-R14",
                    "F064-R15", "F064-R21",
                    "F064-R25",
                ),
                columns={
                    "watermark": ("F064-R6", "F064-R8", "F064-R14"),
                    "active_partitions": (
                        "F064-R3", "F064-R4", "F064-R9", "F064-R10", "F064-R11", "F064-R15",
                    ),
                },
            ),
            # R22's reasons name the refusals of R1, R2, R4, R12, R17; R13: no error for an untracked removal
            "errors": TableClauses(
                key=("batch", "seq"),
                rows=(
                    "F064-R1", "F064-R2", "F064-R4", "F064-R12", "F064-R13", "F064-R17", "F064-R22",
                    "F064-R25",
                ),
                columns={
                    "reason": (
                        "F064-R1", "F064-R2", "F064-R4", "F064-R12", "F064-R13", "F064-R17", "F064-R22",
                    ),
                },
            ),
        },
    ),
    "session_windows": AreaClauses(
        refusal=("F017E-R18",),
        tables={
            "sessions": TableClauses(
                # an open session is named by key and start (R13); a wrong start is a missing row
                key=("batch", "key", "session_start"),
                # R1: sessions of two keys never meet
                rows=("F017E-R1", "F017E-R2", "F017E-R3", "F017E-R7", "F017E-R13", "F017E-R14", "F017E-R24"),
                columns={
                    "session_end": ("F017E-R2", "F017E-R3"),
                    "count": ("F017E-R1", "F017E-R3", "F017E-R4"),
                    "sum": ("F017E-R1", "F017E-R3", "F017E-R4"),
                    "reason": ("F017E-R8",),
                },
            ),
            "late": TableClauses(
                key=("batch", "seq"),
                rows=("F017E-R10", "F017E-R24"),
                columns={
                    "key": ("F017E-R19",),
                    "event_time": ("F017E-R19",),
                    "watermark": ("F017E-R5", "F017E-R6"),  # just after the event reached the generator
                    "verdict": ("F017E-R11",),
                },
            ),
            "timers": TableClauses(
                key=("batch", "key", "session_start"),
                rows=("F017E-R2", "F017E-R3", "F017E-R7", "F017E-R12", "F017E-R24"),  # one per open session
                columns={"trigger_time": ("F017E-R2", "F017E-R12")},
            ),
            "progress": TableClauses(
                key=("batch",),
                rows=("F017E-R19", "F017E-R24"),
                columns={
                    "watermark": ("F017E-R5",),
                    "open_sessions": ("F017E-R3", "F017E-R7", "F017E-R9"),
                    "sessions_closed_by_timer": ("F017E-R8", "F017E-R9"),
                    "sessions_closed_by_watermark": ("F017E-R8", "F017E-R9"),
                    "late_events": ("F017E-R9", "F017E-R10"),
                },
            ),
            "errors": TableClauses(
                key=("batch", "seq"), rows=("F017E-R20", "F017E-R24"), columns={"reason": ("F017E-R20",)}
            ),
        },
    ),
    "watermark_propagation": AreaClauses(
        refusal=("OXW-R4", "OXW-R9", "OXW-R10", "OXW-R20"),
        tables={
            "generated": TableClauses(
                key=("batch", "seq", "key"),
                rows=("OXW-R1", "OXW-R2", "OXW-R21"),
                columns={"watermark": ("OXW-R2", "OXW-R3")},
            ),
            "watermarks": TableClauses(
                key=("batch", "seq", "key"),
                # a row per changed output: accepted source updates (R12), re-emissions (R13, R14)
                rows=("OXW-R12", "OXW-R13", "OXW-R14", "OXW-R15", "OXW-R18", "OXW-R21"),
                columns={"watermark": ("OXW-R12", "OXW-R13", "OXW-R15")},
            ),
            "violations": TableClauses(
                key=("batch", "seq", "key"),
                rows=("OXW-R12", "OXW-R21"),
                columns={"watermark": ("OXW-R12",), "reason": ("OXW-R12",)},
            ),
            "progress": TableClauses(
                key=("batch",),
                rows=("OXW-R18", "OXW-R21"),
                columns={
                    "aligned_watermark": ("OXW-R5", "OXW-R6", "OXW-R7", "OXW-R8"),
                    "global_watermark": ("OXW-R6", "OXW-R7", "OXW-R16"),  # R16 applies R6, R7 to sinks
                    "violation_count": ("OXW-R12", "OXW-R18"),
                },
            ),
            # R11: not_a_source and unknown nodes; R17: the checks and their order
            "errors": TableClauses(
                key=("batch", "seq"),
                rows=("OXW-R11", "OXW-R17", "OXW-R21"),
                columns={"reason": ("OXW-R11", "OXW-R17")},
            ),
        },
    ),
    "late_data": AreaClauses(
        refusal=("OXL-R15",),
        tables={
            "events": TableClauses(
                key=("batch", "seq"),
                rows=("OXL-R9", "OXL-R16", "OXL-R19"),  # one row per well-formed event
                columns={
                    "source": ("OXL-R2",),
                    "event_time": ("OXL-R9",),
                    "watermark": ("OXL-R1", "OXL-R2", "OXL-R3"),
                    "verdict": ("OXL-R4", "OXL-R6", "OXL-R7", "OXL-R8", "OXL-R10", "OXL-R11"),
                    "lateness": ("OXL-R4", "OXL-R5"),
                    "assigned_time": ("OXL-R7", "OXL-R9"),
                    "channel": ("OXL-R8", "OXL-R9"),
                },
            ),
            "side_outputs": TableClauses(
                key=("batch", "seq"),  # the routed event, not its computed position
                rows=("OXL-R8", "OXL-R14", "OXL-R19"),
                columns={
                    "channel": ("OXL-R8",),
                    "position": ("OXL-R13", "OXL-R14"),
                    "source": ("OXL-R14",),
                    "event_time": ("OXL-R14",),
                },
            ),
            "windows": TableClauses(
                # a window closes at most once (R12), so source and start name it; the closing
                # batch and seq are values a wrong closing rule changes
                key=("source", "window_start"),
                rows=("OXL-R10", "OXL-R12", "OXL-R19"),  # R10: whether it ever closes
                columns={
                    "batch": ("OXL-R10", "OXL-R12"),
                    "seq": ("OXL-R10", "OXL-R12"),
                    "window_end": ("OXL-R12",),
                    "watermark": ("OXL-R3", "OXL-R12"),
                    "count": ("OXL-R12",),
                },
            ),
            "progress": TableClauses(
                key=("batch",),
                rows=("OXL-R17", "OXL-R19"),
                columns={
                    "on_time": ("OXL-R4", "OXL-R17"),
                    "allowed_late": ("OXL-R10", "OXL-R11", "OXL-R17"),
                    "reassigned": ("OXL-R7", "OXL-R17"),
                    "dropped": ("OXL-R6", "OXL-R7", "OXL-R17"),
                    "side_output": ("OXL-R8", "OXL-R17"),
                    "open_windows": ("OXL-R12", "OXL-R17"),
                },
            ),
            # R16: the reasons and their order; R3: watermark_regressed
            "errors": TableClauses(
                key=("batch", "seq"),
                rows=("OXL-R3", "OXL-R16", "OXL-R19"),
                columns={"reason": ("OXL-R3", "OXL-R16")},
            ),
        },
    ),
    "eventtime_buffer": AreaClauses(
        refusal=("VELO-R1", "VELO-R2", "VELO-R3", "VELO-R4", "VELO-R7"),
        tables={
            "emitted": TableClauses(
                # an output item is named by its batch, kind and input item (a watermark by its value):
                # a tuple released in the wrong batch or not at all is a missing row
                key=("batch", "kind", "arrival_batch", "arrival_seq", "watermark"),
                # R20: clock items emit nothing in event-time mode; R21: the flush at the end
                rows=(
                    "VELO-R9", "VELO-R12", "VELO-R14", "VELO-R16", "VELO-R17", "VELO-R20", "VELO-R21",
                    "VELO-R25",
                ),
                columns={
                    "key": ("VELO-R15", "VELO-R17"),
                    "event_time": ("VELO-R5", "VELO-R9", "VELO-R10", "VELO-R11", "VELO-R15", "VELO-R17"),
                    "value": ("VELO-R15", "VELO-R17"),
                    "reason": ("VELO-R5", "VELO-R11", "VELO-R12"),
                },
            ),
            "late": TableClauses(
                key=("batch", "seq"),
                rows=("VELO-R13", "VELO-R14", "VELO-R19", "VELO-R25"),  # R19: the exact drop bound
                columns={
                    "key": ("VELO-R14",),
                    "event_time": ("VELO-R5", "VELO-R10", "VELO-R11"),
                    "watermark": ("VELO-R14", "VELO-R16"),  # as it stood when the collection arrived
                },
            ),
            "progress": TableClauses(
                key=("batch",),
                rows=("VELO-R23", "VELO-R25"),
                columns={
                    "watermark": ("VELO-R9", "VELO-R13", "VELO-R16"),
                    "max_timestamp_seen": ("VELO-R12", "VELO-R13", "VELO-R14", "VELO-R22"),
                    "buffer_size": ("VELO-R14", "VELO-R17", "VELO-R21", "VELO-R22"),
                    "late_dropped_count": ("VELO-R14", "VELO-R22"),
                    "watermark_emitted_count": ("VELO-R9", "VELO-R16", "VELO-R22"),
                },
            ),
            # R12 and the tuple reasons of R5, R11; R23: malformed items
            "errors": TableClauses(
                key=("batch", "seq"),
                rows=("VELO-R5", "VELO-R11", "VELO-R12", "VELO-R23", "VELO-R25"),
                columns={"reason": ("VELO-R5", "VELO-R11", "VELO-R12", "VELO-R23")},
            ),
        },
    ),
    "sla_admission": AreaClauses(
        refusal=("OXS-R1", "OXS-R2", "OXS-R3", "OXS-R14"),
        tables={
            "decisions": TableClauses(
                key=("batch", "seq"),
                rows=("OXS-R15", "OXS-R17"),  # one row per well-formed event
                columns={
                    "stream": ("OXS-R15",),
                    "event_time": ("OXS-R15",),
                    "now": ("OXS-R16",),
                    # which check fails first, and what the policy makes of the shedder's answer
                    "decision": (
                        "OXS-R5", "OXS-R6", "OXS-R7", "OXS-R8", "OXS-R9", "OXS-R10", "OXS-R11", "OXS-R12",
                        "OXS-R13",
                    ),
                    "reason": ("OXS-R5", "OXS-R6", "OXS-R7", "OXS-R8", "OXS-R9"),
                    "tokens_left": ("OXS-R1", "OXS-R3", "OXS-R4", "OXS-R8", "OXS-R13"),
                    "lag": ("OXS-R6", "OXS-R9"),
                },
            ),
            "streams": TableClauses(
                key=("batch", "stream"),
                rows=("OXS-R17",),
                columns={
                    "admitted": ("OXS-R5", "OXS-R9"),
                    "rejected_lag": ("OXS-R6", "OXS-R9"),
                    "rejected_jitter": ("OXS-R7", "OXS-R9"),
                    "rejected_rate": ("OXS-R8", "OXS-R9"),
                    "shed": ("OXS-R11", "OXS-R12", "OXS-R13"),
                    "throttled": ("OXS-R11", "OXS-R12", "OXS-R13"),
                    "tokens": ("OXS-R3", "OXS-R4", "OXS-R8"),
                },
            ),
            "progress": TableClauses(
                key=("batch",),
                rows=("OXS-R17",),
                columns={
                    "admitted": ("OXS-R5", "OXS-R17"),
                    "rejected": ("OXS-R5", "OXS-R9", "OXS-R17"),
                    "shed": ("OXS-R13", "OXS-R17"),
                    "throttled": ("OXS-R13", "OXS-R17"),
                    "load_score": ("OXS-R10", "OXS-R17"),
                },
            ),
            "errors": TableClauses(key=("batch", "seq"), rows=("OXS-R15",), columns={"reason": ("OXS-R15",)}),
        },
    ),
    "exactly_once_aggregation": AreaClauses(
        refusal=("OXE-R15",),
        tables={
            "messages": TableClauses(
                key=("batch", "seq"),
                rows=("OXE-R16", "OXE-R18"),  # one row per well-formed message
                columns={
                    "producer": ("OXE-R1", "OXE-R18"),
                    "partition": ("OXE-R1", "OXE-R18"),
                    "sequence": ("OXE-R1", "OXE-R18"),
                    "key": ("OXE-R1", "OXE-R18"),
                    # the window, the memory it keeps and what crosses a restart
                    "verdict": ("OXE-R1", "OXE-R2", "OXE-R3", "OXE-R13", "OXE-R19"),
                },
            ),
            "aggregates": TableClauses(
                key=("batch", "key"),
                rows=("OXE-R3", "OXE-R5", "OXE-R18"),  # a key's row in each batch that folded for it
                columns={
                    "kind": ("OXE-R4", "OXE-R18"),
                    EOA_NUMBER: (
                        "OXE-R1", "OXE-R3", "OXE-R5", "OXE-R7", "OXE-R8", "OXE-R9", "OXE-R16", "OXE-R17",
                        "OXE-R19",
                    ),
                    "count": ("OXE-R3", "OXE-R5", "OXE-R6", "OXE-R19"),
                },
            ),
            "progress": TableClauses(
                key=("batch",),
                rows=("OXE-R18",),
                columns={
                    "folded": ("OXE-R3", "OXE-R18", "OXE-R19"),
                    "duplicates": ("OXE-R3", "OXE-R18", "OXE-R19"),
                    "outside_window": ("OXE-R2", "OXE-R3", "OXE-R18", "OXE-R19"),
                    "keys": ("OXE-R5", "OXE-R18", "OXE-R19"),
                },
            ),
            "errors": TableClauses(key=("batch", "seq"), rows=("OXE-R16",), columns={"reason": ("OXE-R16",)}),
        },
    ),
    "window_joins": AreaClauses(
        refusal=("OXJ-R18",),
        tables={
            "pairs": TableClauses(
                # a (left, right) pair is emitted at most once (R3), so its two events name it; the
                # emitting item is a value a wrong emission rule changes
                key=("left_batch", "left_seq", "right_batch", "right_seq"),
                # which pairs exist: each join's rule, its lateness and purge, and what crosses a restart
                rows=(
                    "OXJ-R3", "OXJ-R4", "OXJ-R5", "OXJ-R7", "OXJ-R8", "OXJ-R9", "OXJ-R10", "OXJ-R11",
                    "OXJ-R12", "OXJ-R13", "OXJ-R14", "OXJ-R15", "OXJ-R21", "OXJ-R23",
                ),
                columns={
                    "batch": ("OXJ-R3", "OXJ-R6", "OXJ-R11", "OXJ-R15"),
                    "seq": ("OXJ-R3", "OXJ-R6", "OXJ-R11", "OXJ-R15"),
                    "key": ("OXJ-R3", "OXJ-R20"),
                    "left_time": ("OXJ-R3", "OXJ-R20"),
                    "left_value": ("OXJ-R3", "OXJ-R20"),
                    "right_time": ("OXJ-R3", "OXJ-R20"),
                    "right_value": ("OXJ-R3", "OXJ-R20"),
                },
            ),
            "late": TableClauses(
                key=("batch", "seq"),
                rows=("OXJ-R4", "OXJ-R7", "OXJ-R8", "OXJ-R11", "OXJ-R14", "OXJ-R23"),  # one per late event
                columns={
                    "side": ("OXJ-R1", "OXJ-R20"),
                    "key": ("OXJ-R1", "OXJ-R20"),
                    "event_time": ("OXJ-R1", "OXJ-R20"),
                    "watermark": ("OXJ-R2", "OXJ-R21"),  # current at the event's arrival
                },
            ),
            "progress": TableClauses(
                key=("batch",),
                rows=("OXJ-R17", "OXJ-R23"),
                columns={
                    "watermark": ("OXJ-R2", "OXJ-R21"),
                    "left_events": ("OXJ-R7", "OXJ-R11", "OXJ-R14", "OXJ-R17", "OXJ-R21"),
                    "right_events": ("OXJ-R7", "OXJ-R11", "OXJ-R14", "OXJ-R17", "OXJ-R21"),
                    "pairs_emitted": (
                        "OXJ-R3", "OXJ-R5", "OXJ-R9", "OXJ-R10", "OXJ-R11", "OXJ-R12", "OXJ-R13", "OXJ-R15",
                        "OXJ-R17", "OXJ-R21",
                    ),
                    "late_events_dropped": ("OXJ-R7", "OXJ-R11", "OXJ-R14", "OXJ-R17", "OXJ-R21"),
                    # held panes (tumbling), left panes (sliding), sessions awaiting partners (session)
                    "open_windows": ("OXJ-R4", "OXJ-R11", "OXJ-R12", "OXJ-R16", "OXJ-R17", "OXJ-R21"),
                },
            ),
            # R19: the reasons and their order; R2: watermark_regressed
            "errors": TableClauses(
                key=("batch", "seq"),
                rows=("OXJ-R2", "OXJ-R19", "OXJ-R23"),
                columns={"reason": ("OXJ-R2", "OXJ-R19")},
            ),
        },
    ),
    "pipeline": AreaClauses(
        refusal=("OXP-R13",),
        tables={
            "ingress": TableClauses(
                key=("batch", "seq"),
                rows=("OXP-R5", "OXP-R10", "OXP-R14"),  # one row per well-formed event
                columns={
                    "stream": ("OXP-R10",),
                    "key": ("OXP-R10",),
                    "event_time": ("OXP-R10",),
                    "decision": ("OXP-R5", "OXP-R6", "OXP-R11"),  # admission, its state across restarts
                    "reason": ("OXP-R5", "OXP-R6", "OXP-R11"),
                    "verdict": ("OXP-R5", "OXP-R7", "OXP-R8"),
                    "watermark": ("OXP-R6", "OXP-R7", "OXP-R8", "OXP-R11"),  # the stream's, before the event
                    "assigned_time": ("OXP-R7",),
                },
            ),
            "watermarks": TableClauses(
                key=("batch", "seq", "node"),
                rows=("OXP-R2", "OXP-R6", "OXP-R8", "OXP-R11", "OXP-R12"),  # which nodes change, when
                columns={"watermark": ("OXP-R2", "OXP-R8", "OXP-R11")},
            ),
            "pairs": TableClauses(
                key=("join", "left_batch", "left_seq", "right_batch", "right_seq"),
                # which events reach each join, on which side, and when its watermark moves
                rows=("OXP-R3", "OXP-R5", "OXP-R6", "OXP-R7", "OXP-R8", "OXP-R9", "OXP-R11", "OXP-R12"),
                columns={
                    "batch": ("OXP-R6",),
                    "seq": ("OXP-R6",),
                    "key": ("OXP-R3", "OXP-R10"),
                    "left_time": ("OXP-R5", "OXP-R10"),  # a reassigned event's assigned time
                    "left_value": ("OXP-R3", "OXP-R10"),
                    "right_time": ("OXP-R5", "OXP-R10"),
                    "right_value": ("OXP-R3", "OXP-R10"),
                },
            ),
            "join_late": TableClauses(
                key=("batch", "seq", "join"),
                rows=("OXP-R7",),  # only at the session join's boundary
                columns={
                    "side": ("OXP-R3",),
                    "key": ("OXP-R7",),
                    "event_time": ("OXP-R7",),
                    "watermark": ("OXP-R7",),
                },
            ),
            "messages": TableClauses(
                key=("batch", "seq"),
                rows=("OXP-R5", "OXP-R7", "OXP-R9"),  # the admitted events that stay in the main stream
                columns={
                    "producer": ("OXP-R9",),
                    "partition": ("OXP-R9",),
                    "sequence": ("OXP-R9",),
                    "key": ("OXP-R9",),
                    "verdict": ("OXP-R9", "OXP-R11"),  # re-delivery, across restarts too
                },
            ),
            "aggregates": TableClauses(
                key=("batch", "key"),
                rows=("OXP-R9", "OXP-R10", "OXP-R12"),
                columns={
                    "kind": ("OXP-R13",),
                    EOA_NUMBER: ("OXP-R9", "OXP-R11"),
                    "count": ("OXP-R9", "OXP-R11"),
                },
            ),
            "progress": TableClauses(
                key=("batch",),
                rows=("OXP-R10", "OXP-R12"),
                columns={
                    "admitted": ("OXP-R5", "OXP-R10", "OXP-R11"),
                    "rejected": ("OXP-R5", "OXP-R10", "OXP-R11"),
                    "shed": ("OXP-R5", "OXP-R10", "OXP-R11"),
                    "throttled": ("OXP-R5", "OXP-R10", "OXP-R11"),
                    "dropped_late": ("OXP-R7", "OXP-R10", "OXP-R11"),
                    "side_output": ("OXP-R7", "OXP-R10", "OXP-R11"),
                    "reassigned": ("OXP-R7", "OXP-R10", "OXP-R11"),
                    "pairs": ("OXP-R3", "OXP-R6", "OXP-R10", "OXP-R11"),
                    "folded": ("OXP-R9", "OXP-R10", "OXP-R11"),
                    "duplicates": ("OXP-R9", "OXP-R10", "OXP-R11"),
                    "outside_window": ("OXP-R9", "OXP-R10", "OXP-R11"),
                    "watermark": ("OXP-R2", "OXP-R8", "OXP-R10"),
                },
            ),
            "errors": TableClauses(
                key=("batch", "seq"),
                rows=("OXP-R8", "OXP-R14"),
                columns={"reason": ("OXP-R8", "OXP-R14")},
            ),
        },
    ),
}  # fmt: skip


# ---- attribution ----------------------------------------------------------------------------

#: the place of a difference in which rows a table has (a row only one answer has), beside its columns
ROWS = "rows"
#: an expectation entry's one-way excuses of ROWS: rows only the engine has, as long as it has every
#: row the spec expects; rows only the spec has, as long as every row of the engine's is expected
EXTRA_ROWS, MISSING_ROWS = "extra_rows", "missing_rows"
ONE_WAY_ROWS = (EXTRA_ROWS, MISSING_ROWS)
#: the table of a difference in whether the configuration is refused (TR-6)
REFUSAL = "refusal"


@dataclass(frozen=True)
class Difference:
    """One place where two answers of a trace differ, and the clauses that decide that place.

    ``table`` is an output table or ``REFUSAL``; ``place`` is a column of the table, ``ROWS``
    (which rows exist) or, for a refusal, ``ROWS`` too."""

    table: str
    place: str
    clauses: frozenset[str]


def place_clauses(area: str, table: str, place: str) -> frozenset[str]:
    """The clauses that decide one place: a key column and ``ROWS`` by the table's ``rows``."""
    decl = SHOWN[area]
    if table == REFUSAL:
        return frozenset(decl.refusal)
    t = decl.tables[table]
    return frozenset(t.rows if place in (ROWS, *ONE_WAY_ROWS) or place in t.key else t.columns[place])


@cache
def clause_areas() -> dict[str, str]:
    """Every clause some place of an area decides, with that area."""
    out = {}
    for area, decl in SHOWN.items():
        for c in decl.refusal:
            out[c] = area
        for t in decl.tables.values():
            for c in (*t.rows, *(c for cs in t.columns.values() for c in cs)):
                out[c] = area
    return out


def _by_key(columns: Sequence[str], key: Sequence[str], rows: Sequence[Row]) -> dict[Row, list[Row]]:
    idx = [columns.index(k) for k in key]
    out: dict[Row, list[Row]] = defaultdict(list)
    for r in rows:
        out[tuple(r[i] for i in idx)].append(r)
    return out


def project_rows(area: str, table: str, columns: Sequence[str], rows: Sequence[Row]) -> list[Row]:
    """The rows of one table cut to ``columns`` (in the table's order), sorted as a multiset."""
    every = TABLES[area][table]
    idx = [every.index(c) for c in every if c in columns]
    return sorted((tuple(r[i] for i in idx) for r in rows), key=_order)


def table_places(
    area: str,
    table: str,
    expected: Sequence[Row],
    actual: Sequence[Row],
    columns: Sequence[str] | None = None,
    *,
    rows_excused: bool = False,
    rows_one_way: str | None = None,
) -> list[Difference]:
    """Where two answers of one table differ, seen through ``columns`` only (all by default): rows
    are paired by the key columns among them; a key with more or fewer rows on one side is a
    ``ROWS`` difference, a paired row's differing value one of its column. With
    ``rows_excused`` the rows of such a key are not compared at all (no pairing is right). With
    ``rows_one_way`` (``EXTRA_ROWS`` or ``MISSING_ROWS``) nothing differs when the one answer's rows
    are a part of the other's (as multisets) in that direction, and everything that differs is
    reported otherwise."""
    shown = tuple(c for c in TABLES[area][table] if columns is None or c in columns)
    e_all = project_rows(area, table, shown, expected)
    a_all = project_rows(area, table, shown, actual)
    if e_all == a_all:
        return []
    if rows_one_way is not None:
        inner, outer = (e_all, a_all) if rows_one_way == EXTRA_ROWS else (a_all, e_all)
        if Counter(inner) <= Counter(outer):
            return []
    decl = SHOWN[area].tables[table]
    key = [k for k in decl.key if k in shown]
    e_rows, a_rows = _by_key(shown, key, e_all), _by_key(shown, key, a_all)
    places: set[str] = set()
    for k in e_rows.keys() | a_rows.keys():
        es, as_ = e_rows.get(k, []), a_rows.get(k, [])
        if len(es) != len(as_):
            places.add(ROWS)
            if rows_excused:
                continue
        if es == as_:
            continue
        for e, a in zip(es, as_, strict=False):
            places.update(shown[i] for i, (x, y) in enumerate(zip(e, a, strict=True)) if x != y)
    # a differing key column cannot happen in pairs of one key: only the other columns remain
    return [Difference(table, p, place_clauses(area, table, p)) for p in sorted(places)]


def table_clauses(area: str, table: str, expected: list[Row], actual: list[Row]) -> set[str]:
    """The clauses one table's difference is attributed to (empty when the rows are equal)."""
    return set().union(*(d.clauses for d in table_places(area, table, expected, actual)))


def _order(row: Row) -> tuple[Any, ...]:
    return tuple((v is not None, v) for v in row)


def refusal_differences(area: str) -> list[Difference] | None:
    """One answer refused the trace and the other did not, or with another error type."""
    return [Difference(REFUSAL, ROWS, frozenset(SHOWN[area].refusal))] if area in SHOWN else None


def differences(
    area: str,
    expected: Output | Exception,
    actual: Output | Exception,
    shown: Mapping[str, Sequence[str]] | None = None,
) -> list[Difference] | None:
    """Every place where two answers of one trace differ (a table's rows or column, or a refusal
    on one side), with the clauses deciding it: [] when they agree; None when it cannot be placed
    (an answer is a crash, not a refusal). ``shown``: the tables and columns to compare (an
    engine's declaration, harness/expectations.py); every one by default."""
    from harness.traces import InvalidConfig

    if area not in SHOWN:
        return None
    e_err, a_err = isinstance(expected, Exception), isinstance(actual, Exception)
    if e_err or a_err:
        if (e_err and not isinstance(expected, InvalidConfig)) or (
            a_err and not isinstance(actual, InvalidConfig)
        ):
            return None
        if e_err and a_err and type(expected).__name__ == type(actual).__name__:
            return []
        return refusal_differences(area)
    assert not isinstance(expected, Exception) and not isinstance(actual, Exception)
    out = []
    for table in TABLES[area]:
        if shown is not None and table not in shown:
            continue
        columns = None if shown is None else shown[table]
        out += table_places(area, table, expected.get(table, []), actual.get(table, []), columns)
    return out


def clauses_of(found: Sequence[Difference] | None) -> set[str]:
    """Every clause some of the differences is attributed to."""
    return set().union(*(d.clauses for d in found)) if found else set()


def differing_clauses(area: str, expected: Output | Exception, actual: Output | Exception) -> set[str] | None:
    """Every clause the differences of two answers are attributed to (``differences``, joined)."""
    found = differences(area, expected, actual)
    return None if found is None else clauses_of(found)
