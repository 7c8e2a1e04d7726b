"""The event streams of the accuracy reproduction: one base stream, seven delay variants.

The paper ("Keyed watermarks", FGCS 169, 2025) names its variants but its
out-of-order generator is not in the public repository (it links a shared
drive), so the delay model below is ours, written to follow the paper's words:

Base stream ("ordered")
    ``vehicles`` keys (``v0000``...). Each vehicle gets a weight drawn from a
    log-normal distribution (``WEIGHT_SIGMA``), so a few vehicles report far
    more often than most, as in real fleet data. ``events`` event times are
    drawn uniformly over a span of ``events / EVENTS_PER_SECOND`` seconds
    starting at ``T0`` (a multiple of the window size), sorted, and each is
    given a vehicle with probability proportional to its weight: every vehicle
    is a Poisson process of its own rate. In the ordered variant events arrive
    in event-time order.

Delays
    A delayed event arrives ``delay`` ms after its place in event-time order:
    arrival order is the stable sort by ``event_time + delay`` (undelayed
    events have delay 0). Delays are integers drawn uniformly from
    ``DELAY_MIN_MS..DELAY_MAX_MS`` (2 s .. 20 s: from twice the 1 s
    out-of-orderness bound to two window lengths).

    - "p% of all data delayed": each event independently with probability p,
      each with its own delay.
    - "q% of median-proximate keys delayed": vehicles are ranked by their
      number of events; the round(q * vehicles) vehicles whose rank is nearest
      the median rank (a central block of ranks) are delayed. A delayed
      vehicle lags as a whole: ONE delay, drawn per vehicle, shifts all its
      events, so its own events stay in order (a vehicle whose uplink lags).
    - "q% of random keys delayed": the same, with vehicles chosen uniformly.

Micro-batches
    The arrival order is cut into ``batches`` equal micro-batches; ``seq`` is
    the position inside the batch.

Everything is seeded: the base stream by ``seed``, the delays by ``seed`` and
the variant's index, so every variant delays the same base events.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

T0 = 1_700_000_000_000  # a multiple of the 10 s window
EVENTS_PER_SECOND = 300  # of event time, over all vehicles
WEIGHT_SIGMA = 1.0
DELAY_MIN_MS = 2_000
DELAY_MAX_MS = 20_000
WINDOW_MS = 10_000
BOUND_MS = 1_000


@dataclass(frozen=True)
class Variant:
    name: str
    scope: str  # "none" | "events" | "median_keys" | "random_keys"
    share: float


VARIANTS = (
    Variant("ordered", "none", 0.0),
    Variant("5% of data delayed", "events", 0.05),
    Variant("50% of data delayed", "events", 0.50),
    Variant("20% of median keys delayed", "median_keys", 0.20),
    Variant("50% of median keys delayed", "median_keys", 0.50),
    Variant("20% of random keys delayed", "random_keys", 0.20),
    Variant("50% of random keys delayed", "random_keys", 0.50),
)


@dataclass
class Stream:
    """One variant's events in arrival order (numpy columns of equal length)."""

    variant: Variant
    batch: np.ndarray  # int64
    seq: np.ndarray  # int64
    vehicle: np.ndarray  # int64 vehicle index
    event_time: np.ndarray  # int64 ms
    delayed_vehicles: int
    delayed_events: int

    def __len__(self) -> int:
        return len(self.event_time)

    def vehicle_names(self) -> np.ndarray:
        return vehicle_names(self.vehicle)


def vehicle_names(vehicle: np.ndarray) -> np.ndarray:
    return np.char.add("v", np.char.zfill(vehicle.astype(str), 4)).astype(object)


def base_stream(events: int, vehicles: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(event_time, vehicle) sorted by event time: the ordered stream."""
    rng = np.random.default_rng(seed)
    weights = rng.lognormal(0.0, WEIGHT_SIGMA, vehicles)
    span_ms = max(1, events * 1000 // EVENTS_PER_SECOND)
    event_time = np.sort(T0 + rng.integers(0, span_ms, events, dtype=np.int64))
    vehicle = rng.choice(vehicles, size=events, p=weights / weights.sum()).astype(np.int64)
    return event_time, vehicle


def median_proximate(counts: np.ndarray, how_many: int) -> np.ndarray:
    """The ``how_many`` vehicles whose rank by event count is nearest the median rank."""
    order = np.argsort(counts, kind="stable")
    middle = (len(counts) - 1) / 2
    nearest = np.argsort(np.abs(np.arange(len(counts)) - middle), kind="stable")[:how_many]
    return order[np.sort(nearest)]


def make_stream(variant: Variant, events: int, vehicles: int, batches: int, seed: int) -> Stream:
    event_time, vehicle = base_stream(events, vehicles, seed)
    rng = np.random.default_rng([seed, VARIANTS.index(variant)])
    delay = np.zeros(events, np.int64)
    chosen = np.empty(0, np.int64)
    if variant.scope == "events":
        hit = rng.random(events) < variant.share
        delay[hit] = rng.integers(DELAY_MIN_MS, DELAY_MAX_MS + 1, int(hit.sum()))
    elif variant.scope in ("median_keys", "random_keys"):
        how_many = round(variant.share * vehicles)
        if variant.scope == "median_keys":
            chosen = median_proximate(np.bincount(vehicle, minlength=vehicles), how_many)
        else:
            chosen = rng.choice(vehicles, size=how_many, replace=False)
        lag = np.zeros(vehicles, np.int64)
        lag[chosen] = rng.integers(DELAY_MIN_MS, DELAY_MAX_MS + 1, len(chosen))
        delay = lag[vehicle]
    arrival = np.argsort(event_time + delay, kind="stable")
    position = np.arange(events, dtype=np.int64)
    batch = position * batches // max(events, 1)
    first = np.searchsorted(batch, np.arange(batches))
    return Stream(
        variant=variant,
        batch=batch,
        seq=position - first[batch],
        vehicle=vehicle[arrival],
        event_time=event_time[arrival],
        delayed_vehicles=len(chosen),
        delayed_events=int(np.count_nonzero(delay)),
    )


def describe() -> dict[str, Any]:
    """The model's constants, for the results file."""
    return {
        "t0": T0,
        "events_per_second": EVENTS_PER_SECOND,
        "weight_sigma": WEIGHT_SIGMA,
        "delay_ms": [DELAY_MIN_MS, DELAY_MAX_MS],
        "window_ms": WINDOW_MS,
        "bound_ms": BOUND_MS,
    }
