"""Checkpoints an operator cannot continue from: another state layout, or values that do not decode.

Every operator on the scale-out pattern (``spark_impl/scaleout.py``) starts each of
its ValueStates with the layout version its release writes and the bucket count
(``docs/architecture.md``, "State layouts"). A checkpoint written by another
release, or with another bucket count, cannot be read; one whose values were
damaged cannot either. This module says so in words a user can act on, at two
moments:

- before a query starts: ``check_checkpoint(spark, checkpoint_location)``
  inspects the checkpoint with Spark's own readers of a checkpoint's state (the
  ``state-metadata`` and ``statestore`` batch data sources, which read
  ``transformWithStateInPandas`` state variables in Spark 4.3), finds which
  operator wrote each stateful stage, learns its layout version and bucket count
  from every value that carries them, decodes those values (and with ``deep=True``
  every other value too) with the operator's own unpacking code, and raises
  ``IncompatibleCheckpoint`` or ``CorruptCheckpoint`` naming the operator, the
  state variable, a stream, the versions and what to do. An absent or empty
  checkpoint passes;
- inside a running query (a query started without the inspection): the
  operators' unpacking code raises the same two errors, and the first stage's
  and second stage's processors add the stream, so the Python error Spark
  reports in ``query.exception()`` is that message, raised from one frame.

``IncompatibleCheckpoint`` and ``CorruptCheckpoint`` are ``RuntimeError`` s:
nothing the caller can fix by retrying, and what an operator raised before for a
checkpoint of another layout.

How an operator is recognised in a checkpoint: its first stage is grouped by
``<p>_sid`` and ``<p>_bucket``, ``p`` the initials of the area's name
(``kw_sid`` for keyed_watermarks); its second stage is grouped by ``stream_id``
and ``kw_route`` like every other operator's, so it is recognised by the fields
of its state value; a stage between the two (exactly-once aggregation's key stage,
``Operator.middle``) by its own grouping key. Stateful operators of anything else in the same query are
left alone. ``operators()`` lists, per area, the state variables of each stage
and the function that decodes each. Each operator module registers its own
(``LAYOUT = register(Operator(...))`` beside its state classes), so this module
imports no operator; an operator the Spark engine runs that did not register
would be left alone, so tests/test_spark_checkpoints.py fails until it does.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

NEW_LOCATION = "start the query from a new checkpoint location"
RESTORE = "restore the checkpoint folder from a copy, or " + NEW_LOCATION
SECOND_STAGE_KEY = ("stream_id", "kw_route")
# Spark's condition for a checkpoint whose query has not committed a micro-batch yet.
NOTHING_COMMITTED = "STDS_COMMITTED_BATCH_UNAVAILABLE"
PROBLEMS_SHOWN = 8  # a refusal lists at most this many problems; the count says how many more


class CheckpointError(RuntimeError):
    """A checkpoint an operator cannot continue from: ``finding`` (what is wrong), then where
    (``variable``: the state value, ``stream``: whose; None when not known), then ``advice``
    (what to do). ``operator`` names the operator; ``problems``, from the inspection, holds one
    line per problem found (the message shows the first ``PROBLEMS_SHOWN``)."""

    def __init__(
        self,
        finding: str,
        advice: str = "",
        operator: str | None = None,
        variable: str | None = None,
        stream: str | None = None,
        problems: Sequence[str] = (),
    ) -> None:
        self.finding, self.advice, self.problems = finding, advice, tuple(problems)
        self.operator, self.variable, self.stream = operator, variable, stream
        parts = (
            f"state {variable!r}" if variable else "",
            f"stream {stream!r}" if stream is not None else "",
        )
        where = ", ".join(part for part in parts if part)
        self.message = finding + (f" ({where})" if where else "") + (f". {advice}" if advice else "") + "."
        super().__init__(self.message)

    def in_stream(self, stream: Any) -> CheckpointError:
        """The same error naming the stream whose state it is (the processor knows it, the
        unpacking code does not)."""
        if self.stream is not None:
            return self
        return type(self)(self.finding, self.advice, self.operator, self.variable, str(stream), self.problems)


class IncompatibleCheckpoint(CheckpointError):
    """The checkpoint was written by another release of the operator (another state layout), or
    with settings it is bound to (the bucket count, a compact stream's shape, a graph's sources)."""


class CorruptCheckpoint(CheckpointError):
    """A state value of the checkpoint does not decode, or one the operator's summary lists is
    missing: the checkpoint was damaged."""


def layout_refusal(
    operator: str, what: str, found: Any, expected: Any, variable: str | None = None
) -> IncompatibleCheckpoint:
    """The error for a value whose layout field ``what`` (the layout version, the bucket count)
    differs from what this release reads, with what the user can do about it."""
    finding = f"{operator}: the checkpoint holds {what} {found}; this release reads {what} {expected} only"
    if what == "buckets":
        advice = f"A checkpoint is bound to the bucket count it was written with: pass buckets={found} "
        advice += f"to {operator}, or {NEW_LOCATION}"
    else:
        side = "a newer" if _as_int(found) > _as_int(expected) else "an older"
        advice = f"It was written by {side} release of the operators: run that release to finish with it"
        advice += f", or {NEW_LOCATION}"
    return IncompatibleCheckpoint(finding, advice, operator, variable)


def _as_int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1


def undecodable(operator: str, variable: str, error: BaseException) -> CorruptCheckpoint:
    """The error for a state value the operator's own code could not decode."""
    detail = f"{type(error).__name__}: {error}".strip().rstrip(":")
    return CorruptCheckpoint(
        f"{operator}: a state value of the checkpoint does not decode: {detail}",
        f"The checkpoint was damaged: {RESTORE}",
        operator,
        variable,
    )


def missing_value(operator: str, variable: str, what: str) -> CorruptCheckpoint:
    """The error for a value the operator's own summary lists but the checkpoint lacks."""
    return CorruptCheckpoint(
        f"{operator}: the checkpoint lacks {what}, which its summary lists",
        f"The checkpoint was damaged: {RESTORE}",
        operator,
        variable,
    )


class decoding:  # noqa: N801 - used as a statement: ``with decoding(operator, variable):``
    """Around the unpacking of one state value: any error but a CheckpointError becomes
    ``CorruptCheckpoint`` naming the operator and the variable. Costs one object per value read."""

    __slots__ = ("operator", "variable")

    def __init__(self, operator: str, variable: str) -> None:
        self.operator, self.variable = operator, variable

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, error: BaseException | None, traceback: Any) -> None:
        if error is None or isinstance(error, CheckpointError) or not isinstance(error, Exception):
            return  # never swallows: the error, if any, goes on
        raise undecodable(self.operator, self.variable, error) from error


# ---- what each operator's checkpoint holds --------------------------------------------------


Decoder = Callable[[tuple[Any, ...], tuple[Any, ...]], Any]  # (value, map key or ()) -> anything


@dataclass(frozen=True)
class Stage:
    """One stateful stage of an operator: its state variables and how each value decodes. The
    decoders of a layout value (``layout`` names them) get the value with its own bucket count."""

    variables: Mapping[str, Decoder]
    layout: tuple[str, ...]


@dataclass(frozen=True)
class Operator:
    """An area's operator as its checkpoint holds it. An operator with a stateful stage between
    the first and the second (exactly-once aggregation's key stage) names it ``middle``, with
    the grouping key it is recognised by."""

    area: str
    version: int
    first: Stage
    second: Stage
    second_fields: tuple[str, ...]  # the fields of the second stage's layout value
    middle: Stage | None = None
    middle_key: tuple[str, ...] = ()

    def stage(self, name: str) -> Stage:
        """The stage called ``name`` in an inspection report: first, middle or second."""
        if name == "middle" and self.middle is not None:
            return self.middle
        return self.first if name == "first" else self.second

    def decoders(self) -> dict[str, Decoder]:
        """Every state variable of every stage with its decoder (names are unique per operator)."""
        middle = self.middle.variables if self.middle is not None else {}
        return {**self.first.variables, **middle, **self.second.variables}


def schema_fields(schema: str) -> tuple[str, ...]:
    """The field names of a DDL schema string, in order."""
    return tuple(part.strip().split()[0].strip("`") for part in schema.split(","))


_OPERATORS: dict[str, Operator] = {}


def operators() -> dict[str, Operator]:
    """The operators registered so far, by area, with their state variables and decoders. An
    operator module registers its layout when imported (``register``), so a query's operators
    are known by the time it starts; ``spark_impl.engine`` imports all of them."""
    return dict(_OPERATORS)


def register(operator: Operator) -> Operator:
    """Adds an area's operator to ``operators()``; each operator module registers its own layout
    when it is imported, so this module imports none of them."""
    _OPERATORS[operator.area] = operator
    return operator


def value_buckets(value: tuple[Any, ...]) -> int:
    """The bucket count of a layout value (its second field, after the layout version)."""
    return int(value[1])


def stage_prefix(area: str) -> str:
    """The prefix of an area's first-stage grouping columns: the initials of its name."""
    return "".join(word[0] for word in area.split("_"))


# ---- the inspection ---------------------------------------------------------------------------


@dataclass
class StageReport:
    """What the inspection found in one stateful stage of the checkpoint."""

    operator_id: int
    area: str | None  # None: not a stage of an operator of this release (left alone)
    stage: str  # "first", "middle", "second" or "other"
    variables: tuple[str, ...]
    layouts: dict[tuple[int, int], int] = field(default_factory=dict)  # (version, buckets) -> values
    values: int = 0  # the layout values read


@dataclass(frozen=True)
class _Plan:
    """How one state variable of one recognised stage is judged (also shipped to the workers)."""

    operator_id: int
    area: str
    variable: str
    expected_version: int
    has_layout: bool  # the value starts with the layout version and the bucket count
    fields: tuple[str, ...] = ()  # the value's fields, in order
    binary: frozenset[str] = frozenset()  # those of them that are binary
    # the operator's own decoder, shipped with the plan: a worker need not import the operator
    decoder: Decoder | None = field(default=None, compare=False)


# A judged value: (kind, version, buckets, detail); kind _LAYOUT for a sound value.
Judged = tuple[str, "int | None", "int | None", str]
_LAYOUT, _INCOMPATIBLE, _CORRUPT, _JSON = "layout", "incompatible", "corrupt", "json"
PROBLEM_SCHEMA = "operator_id long, variable string, kind string, stream string, detail string"


def _no_local_state(spark: Any, checkpoint_location: str) -> bool:
    """True when classic Spark's checkpoint is a local folder with no ``state`` folder in it (a
    Connect server may see another file system than this client)."""
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        return False
    parsed = urllib.parse.urlparse(checkpoint_location)
    if parsed.scheme not in ("", "file"):
        return False
    return not os.path.isdir(os.path.join(parsed.path if parsed.scheme else checkpoint_location, "state"))


def check_checkpoint(spark: Any, checkpoint_location: str, *, deep: bool = False) -> list[StageReport]:
    """Inspects ``checkpoint_location`` before a query starts on it: every stateful stage an
    operator of this release wrote must hold this release's layout version and one bucket
    count, and its values must decode. Returns what it found, one report per stateful stage
    (none for an absent or empty checkpoint, or one whose query committed no micro-batch);
    raises ``IncompatibleCheckpoint`` (another layout, a state variable this release does not
    know) or ``CorruptCheckpoint`` (a value that does not decode, bucket counts that disagree, a
    state Spark cannot read), listing the problems.

    Read: every value that carries the layout (one per stream and bucket of a first stage, one
    per stream of a second), in one job, decoded in the driver with the operator's own code.
    ``deep=True`` also decodes every value of the stages' MapStates (the blocks of keys, sessions
    or partitions: the bulk of the state), in a second job whose Python workers decode them and
    send back only the problems."""
    if _no_local_state(spark, checkpoint_location):
        return []  # a new checkpoint: Spark's reader would only warn that it holds no metadata
    try:
        stages = spark.read.format("state-metadata").load(checkpoint_location).collect()
    except Exception as error:  # noqa: BLE001 - Spark says why in many exception types
        raise _unreadable(checkpoint_location, "its state metadata", error) from error
    known = operators()
    reports: dict[int, StageReport] = {}
    plans: dict[tuple[int, str], _Plan] = {}
    layout_reads: list[Any] = []
    map_reads: list[Any] = []
    problems: list[tuple[str, str]] = []  # (kind, line)
    for row in stages:
        properties = json.loads(row.operatorProperties or "{}")
        variables = [v["stateName"] for v in properties.get("stateVariables", [])]
        report = reports.setdefault(int(row.operatorId), StageReport(int(row.operatorId), None, "other", ()))
        report.variables = tuple(variables)
        if not variables:
            continue
        frames = _StageFrames(spark, checkpoint_location, report.operator_id)
        try:
            report.area, report.stage = _recognise(frames, variables, known)
            if report.area is None:
                continue
            operator = known[report.area]
            stage = operator.stage(report.stage)
            for name in variables:
                if name not in stage.variables:
                    unknown = "a state variable this release's operator does not have"
                    problems.append((_INCOMPATIBLE, _problem_line(report, name, None, unknown)))
                    continue
                column = "value" if name in stage.layout else "user_map_value"
                schema = frames[name].schema[column].dataType
                plan = _Plan(
                    report.operator_id,
                    report.area,
                    name,
                    operator.version,
                    name in stage.layout,
                    tuple(schema.fieldNames()),
                    frozenset(f.name for f in schema.fields if f.dataType.typeName() == "binary"),
                    stage.variables[name],
                )
                plans[(plan.operator_id, name)] = plan
                if plan.has_layout:
                    layout_reads.append(_as_json(frames[name], plan))
                elif deep:
                    map_reads.append(_decoded_in_workers(frames[name], plan))
        except Exception as error:  # noqa: BLE001 - a state schema Spark cannot read
            if _condition(error) == NOTHING_COMMITTED:
                return []  # a query that died before its first commit: it starts again from nothing
            what = f"the state of stateful operator {row.operatorId}"
            raise _unreadable(checkpoint_location, what, error) from error
    for found in _collect(layout_reads, checkpoint_location) + _collect(map_reads, checkpoint_location):
        report, plan = reports[int(found.operator_id)], plans[(int(found.operator_id), found.variable)]
        if found.kind == _JSON:
            kind, version, buckets, detail = judge(plan, _from_json(plan, found.detail), ())
        else:
            kind, version, buckets, detail = found.kind, None, None, found.detail
        if kind == _LAYOUT:
            assert version is not None and buckets is not None
            report.layouts[(version, buckets)] = report.layouts.get((version, buckets), 0) + 1
            report.values += 1
        else:
            problems.append((kind, _problem_line(report, found.variable, found.stream, detail)))
    for report in reports.values():
        counts = sorted({b for _, b in report.layouts})
        if len(counts) > 1:
            mixed = f"its values hold different bucket counts {counts}, where one query writes one"
            problems.append((_CORRUPT, _problem_line(report, None, None, mixed)))
    _refuse(checkpoint_location, problems)
    return list(reports.values())


class _StageFrames:
    """The ``statestore`` DataFrames of one stage's state variables, each loaded when first used
    (a load reads the variable's schema from the checkpoint)."""

    def __init__(self, spark: Any, location: str, operator_id: int) -> None:
        self.spark, self.location, self.operator_id = spark, location, operator_id
        self.frames: dict[str, Any] = {}

    def __getitem__(self, variable: str) -> Any:
        if variable not in self.frames:
            self.frames[variable] = (
                self.spark.read.format("statestore")
                .option("operatorId", self.operator_id)
                .option("stateVarName", variable)
                .load(self.location)
            )
        return self.frames[variable]


def _recognise(
    frames: _StageFrames, variables: Sequence[str], known: Mapping[str, Operator]
) -> tuple[str | None, str]:
    """(area, stage) of a stateful stage: a first or middle stage by its grouping key, a second
    stage (whose key every operator shares) by the fields of its layout value."""
    key = tuple(frames[variables[0]].schema["key"].dataType.fieldNames())
    for area, operator in known.items():
        prefix = stage_prefix(area)
        if key == (f"{prefix}_sid", f"{prefix}_bucket"):
            return area, "first"
        if operator.middle is not None and key == operator.middle_key:
            return area, "middle"
    if key != SECOND_STAGE_KEY:
        return None, "other"
    for area, operator in known.items():
        for name in operator.second.layout:
            if (
                name in variables
                and tuple(frames[name].schema["value"].dataType.fieldNames()) == operator.second_fields
            ):
                return area, "second"
    return None, "second"


def _stream_of(frame: Any) -> Any:
    from pyspark.sql import functions as F

    first_key = frame.schema["key"].dataType.fieldNames()[0]
    return F.col("key").getField(first_key).cast("string").alias("stream")


def _as_json(frame: Any, plan: _Plan) -> Any:
    """One row per layout value, the value as JSON text (binary fields in base64), so the values
    of every stage and variable travel in one union to the driver."""
    from pyspark.sql import functions as F

    return frame.select(
        F.lit(plan.operator_id).cast("long").alias("operator_id"),
        F.lit(plan.variable).alias("variable"),
        F.lit(_JSON).alias("kind"),
        _stream_of(frame),
        F.to_json(F.col("value"), {"ignoreNullFields": "false"}).alias("detail"),
    )


def _from_json(plan: _Plan, text: str | None) -> tuple[Any, ...] | None:
    import base64

    if text is None:
        return None
    fields = json.loads(text)
    return tuple(
        base64.b64decode(fields[f]) if f in plan.binary and fields[f] is not None else fields[f]
        for f in plan.fields
    )


def _decoded_in_workers(frame: Any, plan: _Plan) -> Any:
    """The problems of one MapState's values, decoded in the workers."""
    from pyspark.sql import functions as F

    columns = [
        _stream_of(frame),
        F.col("user_map_key").alias("map_key"),
        F.col("user_map_value").alias("value"),
    ]
    return frame.select(*columns).mapInArrow(_Decode(plan), PROBLEM_SCHEMA)


def _collect(reads: Sequence[Any], location: str) -> list[Any]:
    if not reads:
        return []
    union = reads[0]
    for more in reads[1:]:
        union = union.unionByName(more)
    try:
        return list(union.collect())
    except Exception as error:  # noqa: BLE001 - a state store Spark cannot open
        raise _unreadable(location, "its state", error) from error


def judge(plan: _Plan, value: tuple[Any, ...] | None, map_key: tuple[Any, ...]) -> Judged:
    """One value through the operator's own code: its layout fields, then its decoding."""
    if value is None:
        return (_CORRUPT, None, None, "a null value")
    version = buckets = None
    if plan.has_layout:
        version, buckets = _as_int(value[0]), _as_int(value[1])
        if version != plan.expected_version:
            refusal = layout_refusal(plan.area, "state layout version", version, plan.expected_version)
            return (_INCOMPATIBLE, version, buckets, refusal.finding)
    assert plan.decoder is not None, plan
    try:
        plan.decoder(value, map_key)
    except CheckpointError as error:
        return (
            _INCOMPATIBLE if isinstance(error, IncompatibleCheckpoint) else _CORRUPT,
            version,
            buckets,
            error.finding,
        )
    except Exception as error:  # noqa: BLE001 - whatever the decoding raised: the value is damaged
        return (_CORRUPT, version, buckets, undecodable(plan.area, plan.variable, error).finding)
    return (_LAYOUT, version, buckets, "")


@dataclass(frozen=True)
class _Decode:
    """The ``mapInArrow`` body of a deep inspection: each MapState value through the operator's
    own decoder; only problems go back, at most ``shown`` per partition."""

    plan: _Plan
    shown: int = PROBLEMS_SHOWN

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        found: list[dict[str, Any]] = []
        for batch in batches:
            for row in batch.to_pylist():
                value = None if row["value"] is None else tuple(row["value"].values())
                key = () if row["map_key"] is None else tuple(row["map_key"].values())
                kind, _, _, detail = judge(self.plan, value, key)
                if kind != _LAYOUT and len(found) < self.shown:
                    found.append(
                        {
                            "operator_id": self.plan.operator_id,
                            "variable": self.plan.variable,
                            "kind": kind,
                            "stream": row["stream"],
                            "detail": detail,
                        }
                    )
        if found:
            types = {"long": pa.int64(), "string": pa.string()}
            schema = pa.schema([(n, types[t]) for n, t in (f.split() for f in PROBLEM_SCHEMA.split(", "))])
            yield pa.RecordBatch.from_pylist(found, schema=schema)


def _problem_line(report: StageReport, variable: str | None, stream: str | None, detail: str) -> str:
    where = f"{report.area}, {report.stage} stage (stateful operator {report.operator_id})"
    where += "" if variable is None else f", state {variable!r}"
    where += "" if stream is None else f", stream {stream!r}"
    return f"{where}: {str(detail).removeprefix(f'{report.area}: ')}"


def _refuse(location: str, problems: Sequence[tuple[str, str]]) -> None:
    """One error listing every problem: IncompatibleCheckpoint if any is one, else CorruptCheckpoint."""
    if not problems:
        return
    lines = sorted({line for _, line in problems})
    shown = "\n".join(f"- {line}" for line in lines[:PROBLEMS_SHOWN])
    more = f"\n- and {len(lines) - PROBLEMS_SHOWN} more" if len(lines) > PROBLEMS_SHOWN else ""
    if any(kind == _INCOMPATIBLE for kind, _ in problems):
        finding = f"The checkpoint at {location} was written by another release of the operators or settings"
        advice = f"Run the release that wrote it to finish with it, or {NEW_LOCATION}"
        raise IncompatibleCheckpoint(
            f"{finding}; this release cannot continue from it", f"{advice}:\n{shown}{more}", problems=lines
        )
    finding = f"The checkpoint at {location} holds state this release cannot decode"
    raise CorruptCheckpoint(finding, f"It was damaged: {RESTORE}:\n{shown}{more}", problems=lines)


def _condition(error: BaseException) -> str | None:
    """Spark's error condition of an error from a Spark call, classic or Connect."""
    getter = getattr(error, "getCondition", None) or getattr(error, "getErrorClass", None)
    try:
        return getter() if getter is not None else None
    except Exception:  # noqa: BLE001 - an error without a condition
        return None


def _unreadable(location: str, what: str, error: BaseException) -> CorruptCheckpoint:
    return CorruptCheckpoint(
        f"Spark cannot read {what} in the checkpoint at {location}: {_first_line(error)}",
        f"{RESTORE[0].upper()}{RESTORE[1:]}",
    )


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


__all__ = [
    "CheckpointError",
    "CorruptCheckpoint",
    "IncompatibleCheckpoint",
    "StageReport",
    "check_checkpoint",
    "decoding",
    "layout_refusal",
    "missing_value",
    "operators",
    "stage_prefix",
    "undecodable",
]
