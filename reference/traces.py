"""The oracle's side of spec/traces.md: the processing clock and playing a trace with restarts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from harness.traces import Trace

Row = tuple[Any, ...]


class TraceClock:
    """TR-4: the processing clock of a trace, moved only by clock items."""

    def __init__(self, now: int = 0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


class Stream(Protocol):
    out: dict[str, list[Row]]

    def run_batch(self, b: int, batch: Any) -> None: ...
    def checkpoint(self) -> dict[str, Any]: ...
    def restore(self, snapshot: dict[str, Any]) -> None: ...


def play(trace: Trace, new_stream: Callable[[dict[str, Any]], Stream]) -> dict[str, list[Row]]:
    """Runs every batch; at a restart point only the checkpoint crosses into a new stream (TR-5)."""
    stream = new_stream(dict(trace.config))
    for b, batch in enumerate(trace.batches):
        stream.run_batch(b, batch)
        if b in trace.restart_after:
            snapshot, output = stream.checkpoint(), stream.out
            stream = new_stream(dict(trace.config))
            stream.restore(snapshot)
            stream.out = output
    return stream.out
