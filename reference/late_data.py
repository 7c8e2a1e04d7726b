"""Late data (oxirs): the oracle of spec/late_data.md.

Deliberately simple: dictionaries, lists and one loop over the items of a
batch. Every rule names its clause id. Times are integer milliseconds;
"no watermark" is None.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.traces import I64_MAX, I64_MIN, InvalidConfig, Item, Trace, saturating_add
from reference.traces import Row, TraceClock, play

# ---- policies and the handler (OXL-R4..R9) ------------------------------------------


class LateDataPolicy:
    """What happens to a late event: ``LateDataPolicy.Drop()``, ``.Reassign(ms)``, ``.SideOutput(ch)``."""

    @dataclass(frozen=True)
    class Drop:
        pass

    @dataclass(frozen=True)
    class Reassign:
        max_lateness_ms: int

        def __post_init__(self) -> None:
            _require_int("max_lateness", self.max_lateness_ms, minimum=0)

    @dataclass(frozen=True)
    class SideOutput:
        channel: str

        def __post_init__(self) -> None:
            if not isinstance(self.channel, str) or not self.channel:
                raise InvalidConfig(f"channel must be a non-empty string, got {self.channel!r}")


Policy = LateDataPolicy.Drop | LateDataPolicy.Reassign | LateDataPolicy.SideOutput


@dataclass(frozen=True)
class LateDecision:
    """The handler's answer for one event (OXL-R9)."""

    verdict: str  # on_time | reassigned | dropped | side_output
    lateness: int | None = None
    assigned_time: int | None = None
    channel: str | None = None


def _require_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= I64_MAX:
        raise InvalidConfig(f"{name} must be an integer from {minimum} to {I64_MAX}, got {value!r}")
    return value


def is_late(event_time: int, watermark: int | None) -> bool:
    return watermark is not None and event_time < watermark  # OXL-R4: strict, no watermark is never late


def lateness(event_time: int, watermark: int) -> int:
    return min(I64_MAX, watermark - event_time)  # OXL-R5: reported saturated at the upper bound


class LateDataHandler:
    """Applies one policy to events judged against a given watermark (OXL-R1)."""

    def __init__(self, policy: Policy | None = None) -> None:
        self.policy: Policy = policy if policy is not None else LateDataPolicy.Drop()

    def handle(self, event_time: int, watermark: int | None) -> LateDecision:
        if watermark is None or not is_late(event_time, watermark):
            return LateDecision("on_time", assigned_time=event_time)  # OXL-R4, R9
        return self.handle_late(event_time, watermark)

    def handle_late(self, event_time: int, watermark: int) -> LateDecision:
        """The policy's decision for an event already known to be late (OXL-R11 decides before it)."""
        late_by = lateness(event_time, watermark)
        policy = self.policy
        if isinstance(policy, LateDataPolicy.Reassign):
            if watermark - event_time <= policy.max_lateness_ms:  # OXL-R7: exact difference, <= budget
                return LateDecision("reassigned", late_by, assigned_time=watermark)
            return LateDecision("dropped", late_by)  # OXL-R7: over budget
        if isinstance(policy, LateDataPolicy.SideOutput):
            return LateDecision("side_output", late_by, channel=policy.channel)  # OXL-R8
        return LateDecision("dropped", late_by)  # OXL-R6


# ---- allowed lateness (OXL-R10..R12) --------------------------------------------------


class AllowedLatenessTracker:
    """Registered windows and whether each is still open at an event-time ``now`` (OXL-R10)."""

    def __init__(self, allowed_lateness_ms: int = 0) -> None:
        self.allowed_lateness_ms = _require_int("allowed_lateness", allowed_lateness_ms, minimum=0)
        self.windows: dict[Any, int | None] = {}  # window id -> window end (None: never closes)

    def closes_at(self, window_end: int) -> int:
        return saturating_add(window_end, self.allowed_lateness_ms)  # OXL-R10: saturating sum

    def is_open(self, window_end: int | None, now: int | None) -> bool:
        """``window_end`` None: the window holding I64_MAX, which no watermark closes (OXL-R12)."""
        if now is None or window_end is None:
            return True
        return now < self.closes_at(window_end)  # OXL-R10: closed once now >= end + lateness

    def register(self, window: Any, window_end: int | None) -> None:
        self.windows.setdefault(window, window_end)

    def close_expired(self, now: int | None) -> list[Any]:
        """Forgets and returns the registered windows closed at ``now``, by end (OXL-R10)."""
        closed = sorted(
            (w for w, end in self.windows.items() if not self.is_open(end, now)),
            key=lambda w: self.windows[w] or 0,  # a closed window has an end: None never closes
        )
        for w in closed:
            del self.windows[w]
        return closed


def window_of(event_time: int, size: int) -> tuple[int, int]:
    """OXL-R12: [start, end) of the tumbling window holding the time, clamped to the range."""
    floor = event_time - event_time % size
    return max(I64_MIN, floor), min(I64_MAX, floor + size)


def closing_end(start: int, end: int, size: int) -> int | None:
    """The end the tracker closes a window at: None for the window holding I64_MAX (OXL-R12)."""
    return None if start + size > I64_MAX else end


# ---- side outputs (OXL-R13) -------------------------------------------------------------


class SideOutputRouter:
    """One queue per channel; drain returns a channel's events in routing order (OXL-R13)."""

    def __init__(self) -> None:
        self.queues: dict[str, list[Any]] = {}

    def route(self, channel: str, event: Any) -> None:
        self.queues.setdefault(channel, []).append(event)

    def drain(self, channel: str) -> list[Any]:
        drained = self.queues.get(channel, [])
        self.queues[channel] = []  # OXL-R13: only this channel is emptied
        return drained

    def pending(self, channel: str) -> int:
        return len(self.queues.get(channel, []))

    def channels(self) -> list[str]:
        return list(self.queues)  # OXL-R13: order of first use


# ---- the stream (OXL-R14..R18) ---------------------------------------------------------

CONFIG_KEYS = {"policy", "max_lateness", "channel", "window_size", "allowed_lateness"}
POLICIES = ("Drop", "Reassign", "SideOutput")
ACCEPTED_KINDS = ("event", "watermark", "clock")  # OXL-R16
VERDICTS = ("on_time", "allowed_late", "reassigned", "dropped", "side_output")


@dataclass(frozen=True)
class LateDataConfig:
    policy: Policy
    window_size: int | None
    allowed_lateness: int


def config_from_trace(config: dict[str, Any]) -> LateDataConfig:
    """OXL-R15: the trace's settings, refused with InvalidConfig before any item."""
    unknown = set(config) - CONFIG_KEYS
    if unknown:
        raise InvalidConfig(f"unknown late_data settings {sorted(unknown)}")
    name = config.get("policy", "Drop")
    if name not in POLICIES:
        raise InvalidConfig(f"policy must be one of {list(POLICIES)}, got {name!r}")
    for setting, owner in (("max_lateness", "Reassign"), ("channel", "SideOutput")):
        if name == owner and setting not in config:
            raise InvalidConfig(f"policy {owner} needs the setting {setting}")
        if name != owner and setting in config:
            raise InvalidConfig(f"{setting} applies to policy {owner} only, not {name}")
    policy: Policy
    if name == "Reassign":
        policy = LateDataPolicy.Reassign(config["max_lateness"])
    elif name == "SideOutput":
        policy = LateDataPolicy.SideOutput(config["channel"])
    else:
        policy = LateDataPolicy.Drop()
    size = config.get("window_size")
    if size is not None:
        _require_int("window_size", size, minimum=1)
    elif "allowed_lateness" in config:
        raise InvalidConfig("allowed_lateness needs window_size")
    allowed = _require_int("allowed_lateness", config.get("allowed_lateness", 0), minimum=0)
    return LateDataConfig(policy, size, allowed)


class LateDataStream:
    """Plays a late_data trace batch by batch and collects its output tables; what another cut of
    the same items into batches may change: OXL-R19."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config_from_trace(config)
        self.handler = LateDataHandler(self.config.policy)
        self.tracker = AllowedLatenessTracker(self.config.allowed_lateness)
        self.router = SideOutputRouter()
        self.clock = TraceClock()
        self.watermarks: dict[int | None, int] = {}  # OXL-R2, R3: per source, None is the unnamed one
        self.window_counts: dict[tuple[int | None, int], int] = {}  # OXL-R12: (source, start) -> count
        self.counts = dict.fromkeys(VERDICTS, 0)
        self.positions: dict[str, int] = {}  # OXL-R14: next position per channel
        self.out: dict[str, list[Row]] = {
            t: [] for t in ("events", "side_outputs", "windows", "progress", "errors")
        }

    def run_batch(self, b: int, batch: Sequence[Item]) -> None:
        for seq, item in enumerate(batch):
            error = self._item_error(item)
            if error is not None:
                self.out["errors"].append((b, seq, error))  # OXL-R16: changes nothing
            elif item.kind == "clock":
                assert item.time is not None
                self.clock.now = item.time  # OXL-R10: the processing clock closes nothing
            elif item.kind == "watermark":
                self._watermark(b, seq, item)
            else:
                self._event(b, seq, item)
        self._drain(b)
        n_open = len(self.tracker.windows)
        self.out["progress"].append((b, *(self.counts[v] for v in VERDICTS), n_open))  # OXL-R17

    def _item_error(self, item: Item) -> str | None:
        """OXL-R16: the reasons, in this order."""
        if item.kind == "duplicate_seq":
            return "duplicate_seq"  # TR-15
        if item.kind not in ACCEPTED_KINDS:
            return "unsupported_item"
        if item.kind == "event":
            return "missing_event_time" if item.event_time is None else None
        if item.time is None:
            return "missing_time"
        if item.kind == "clock":
            return "clock_went_backwards" if item.time < self.clock.now else None  # TR-4
        current = self.watermarks.get(item.source)
        return "watermark_regressed" if current is not None and item.time < current else None  # OXL-R3

    def _watermark(self, b: int, seq: int, item: Item) -> None:
        assert item.time is not None
        self.watermarks[item.source] = item.time  # OXL-R3: never below the current one here
        closing = [w for w in self.tracker.windows if w[0] == item.source]  # OXL-R12: own source only
        expired = [w for w in closing if not self.tracker.is_open(self.tracker.windows[w], item.time)]
        for source, start, end in sorted(expired, key=lambda w: w[1]):
            del self.tracker.windows[(source, start, end)]
            count = self.window_counts.pop((source, start))
            self.out["windows"].append((b, seq, source, start, end, item.time, count))

    def _event(self, b: int, seq: int, item: Item) -> None:
        t = item.event_time
        assert t is not None
        wm = self.watermarks.get(item.source)  # OXL-R2: its own source's watermark only
        decision = self.handler.handle(t, wm)
        if decision.verdict != "on_time" and self.config.window_size is not None:
            assert wm is not None
            start, end = window_of(t, self.config.window_size)
            closes = closing_end(start, end, self.config.window_size)
            if self.tracker.is_open(closes, wm):  # OXL-R11: an open window keeps it before the policy
                decision = LateDecision("allowed_late", decision.lateness, assigned_time=t)
        self.counts[decision.verdict] += 1
        self.out["events"].append(
            (b, seq, item.source, t, wm, decision.verdict, decision.lateness, decision.assigned_time,
             decision.channel)
        )  # fmt: skip
        if decision.verdict == "side_output":
            assert decision.channel is not None
            self.router.route(decision.channel, (b, seq, item.source, t))  # OXL-R8
        if decision.assigned_time is not None and self.config.window_size is not None:
            start, end = window_of(decision.assigned_time, self.config.window_size)  # OXL-R12
            self.tracker.register((item.source, start, end), closing_end(start, end, self.config.window_size))
            key = (item.source, start)
            self.window_counts[key] = self.window_counts.get(key, 0) + 1

    def _drain(self, b: int) -> None:
        for channel in self.router.channels():
            for _, seq, source, t in self.router.drain(channel):  # OXL-R14: drained every batch
                position = self.positions.get(channel, 0)
                self.positions[channel] = position + 1
                self.out["side_outputs"].append((b, channel, position, seq, source, t))

    def checkpoint(self) -> dict[str, Any]:
        """OXL-R18: everything that crosses a restart (the router is empty here)."""
        return copy.deepcopy(
            {
                "clock": self.clock.now,
                "watermarks": self.watermarks,
                "windows": self.tracker.windows,
                "window_counts": self.window_counts,
                "counts": self.counts,
                "positions": self.positions,
            }
        )

    def restore(self, snapshot: dict[str, Any]) -> None:
        snapshot = copy.deepcopy(snapshot)
        self.clock = TraceClock(snapshot["clock"])
        self.watermarks = snapshot["watermarks"]
        self.tracker.windows = snapshot["windows"]
        self.window_counts = snapshot["window_counts"]
        self.counts = snapshot["counts"]
        self.positions = snapshot["positions"]


def run_trace(trace: Trace) -> dict[str, list[Row]]:
    """Plays a late_data trace and returns its observable output tables."""
    return play(trace, LateDataStream)


__all__ = [
    "AllowedLatenessTracker",
    "LateDataConfig",
    "LateDataHandler",
    "LateDataPolicy",
    "LateDataStream",
    "LateDecision",
    "SideOutputRouter",
    "is_late",
    "lateness",
    "run_trace",
    "window_of",
    "closing_end",
]
