"""What the planner's own recent evictions changed on a node that its usage reading does not show yet (pure).

A node's usage is a quantile over a window (``prometheus.window``) of samples ``prometheus.step`` apart, each
a rate over ``prometheus.rateWindow``, so a reading shows a change of the node's load only after a lag
(:func:`reading_lag`): load that left stays in a high quantile until nearly the whole window is after the
eviction, load that arrived shows in it within a few samples. Until then the planner uses the measured
usage less what left the node and plus what is known to have landed on it but is not in the reading yet.

An evicted pod whose replacement was seen back on its node left nothing. What left is counted once: when
the node's reading has already fallen since the relief (a statistic that follows a drop sooner than a high
quantile does), that fall is taken as part of what left. Unknown stays unknown: a node whose reading is
unknown stays unknown, corrections never make a number.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rebalancer.domain.model import PodKey
from rebalancer.domain.quantity import cores_text

if TYPE_CHECKING:
    from rebalancer.domain.efficiency_records import Relief


@dataclass(frozen=True, slots=True)
class EarlierReliefs:
    """The reliefs of earlier cycles as the efficiency records hold them. ``missing``: why they are not
    known this cycle (no correction is made, and the plan says so)."""

    known: tuple[Relief, ...] = ()
    missing: str | None = None


@dataclass(frozen=True, slots=True)
class Lag:
    """How long after a change of a node's load its usage reading still does not show it (seconds)."""

    gone: float  # load that left: while a sample the quantile reads still holds it
    landed: float  # load that arrived: until every sample the quantile reads holds it


def reading_lag(window: float, quantile: float, rate_window: float, step: float) -> Lag:
    """The lag of the ``quantile`` of the ``window / step`` samples of a rate over ``rate_window`` (seconds).

    A sample holds what was before a change until ``rate_window`` after it. The quantile reads the samples of
    rank ``quantile * (n - 1)`` (linear interpolation, as Prometheus): a fall shows once every sample from
    that rank up is later, a rise once every sample from that rank up holds it (the higher ranks being the
    later samples after a fall, the ones holding the new load after a rise)."""
    if window <= 0 or step <= 0 or rate_window < 0 or not 0 < quantile <= 1:
        raise ValueError(f"reading_lag: window {window}, step {step}, rate window {rate_window}, quantile {quantile}")
    samples = max(1, int(window // step))
    rank = round(quantile * (samples - 1), 9)
    return Lag(rate_window + math.ceil(rank) * step, rate_window + (samples - 1 - math.floor(rank)) * step)


@dataclass(frozen=True, slots=True)
class Flight:
    """What earlier reliefs still in the reading's reach moved off and onto one node (millicores)."""

    node: str
    left_m: int  # usage of the pods evicted from the node (not counting those whose replacement came back)
    landed_m: int  # usage of replacements seen landing on the node, not yet in their own reading
    baseline_m: int | None  # the node's measured usage at its first relief in reach (None: not recorded)
    relieved_at: float | None  # the latest relief of the node (None: it only received replacements)
    last_at: float  # the latest relief that moved load off or onto it
    until: float  # from then on the reading shows all of it


@dataclass(frozen=True, slots=True)
class Correction:
    """A node's usage as the planner uses it, and the reading it corrects."""

    node: str
    measured_m: int
    corrected_m: int
    flight: Flight
    note: str  # why, for the plan ("relieved 3 min ago: 4.1 cores moved, expected 52%")


def in_flight(reliefs: Iterable[Relief], now: float, lag: Lag, pod_usage: Mapping[PodKey, int]) -> dict[str, Flight]:
    """Per node, what the reliefs made before ``now`` moved off and onto it and the reading does not show yet
    (``lag``). ``pod_usage``: the pods' current readings (a replacement's own reading shows how much of it
    the node's reading holds)."""
    left: dict[str, int] = {}
    landed: dict[str, int] = {}
    baseline: dict[str, tuple[float, int | None]] = {}
    relieved: dict[str, float] = {}
    last: dict[str, float] = {}
    until: dict[str, float] = {}
    for relief in sorted(reliefs, key=lambda r: r.at):
        age, node = now - relief.at, relief.node
        if 0 <= age < lag.gone:
            baseline.setdefault(node, (relief.at, relief.measured_m))
            relieved[node] = last[node] = relief.at
            until[node] = max(until.get(node, 0.0), relief.at + lag.gone)
            # a replacement seen back on the node: the reading keeps it, nothing left
            left[node] = left.get(node, 0) + sum(p.usage_m for p in relief.evicted if p.landed != node)
        if 0 <= age < lag.landed:
            for pod in relief.evicted:
                if pod.landed is None or pod.landed == node:
                    continue
                shown = _reading(pod.replacement, pod_usage)
                landed[pod.landed] = landed.get(pod.landed, 0) + max(0, pod.usage_m - shown)
                last[pod.landed] = max(last.get(pod.landed, relief.at), relief.at)
                until[pod.landed] = max(until.get(pod.landed, 0.0), relief.at + lag.landed)
    return {
        node: Flight(
            node,
            left.get(node, 0),
            landed.get(node, 0),
            baseline[node][1] if node in baseline else None,
            relieved.get(node),
            at,
            until[node],
        )
        for node, at in sorted(last.items())
        if left.get(node, 0) or landed.get(node, 0)
    }


def corrected(measured: int | None, flight: Flight) -> int | None:
    """The usage the planner uses for a node that read ``measured`` (None: unknown, and so it stays)."""
    if measured is None:
        return None
    already_fallen = 0 if flight.baseline_m is None else max(0, flight.baseline_m - measured)
    still_in_reading = max(0, flight.left_m - already_fallen)
    return max(0, measured - still_in_reading + flight.landed_m)


def describe(flight: Flight, measured_m: int, corrected_m: int, allocatable_m: int, now: float) -> str:
    """One line for the plan: what moved, how long ago, what the node is expected at."""
    parts = []
    if flight.relieved_at is not None:
        parts.append(f"relieved {_ago(now - flight.relieved_at)}: {flight.left_m / 1000:.1f} cores moved")
    if flight.landed_m:
        parts.append(f"{flight.landed_m / 1000:.1f} cores landed")
    reads = f"reads {100 * measured_m / allocatable_m:.1f}%" if allocatable_m > 0 else f"reads {cores_text(measured_m)}"
    expected = (
        f"expected {100 * corrected_m / allocatable_m:.1f}%"
        if allocatable_m > 0
        else f"expected {cores_text(corrected_m)}"
    )
    return f"{', '.join(parts)}; {reads}, {expected} until the usage window has caught up"


def _reading(replacement: str | None, pod_usage: Mapping[PodKey, int]) -> int:
    if replacement is None or "/" not in replacement:
        return 0
    namespace, name = replacement.split("/", 1)
    return pod_usage.get((namespace, name), 0)


def _ago(seconds: float) -> str:
    if seconds < 90:
        return f"{max(0, round(seconds))} s ago"
    return f"{round(seconds / 60)} min ago"
