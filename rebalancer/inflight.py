"""What the planner's own recent evictions changed on a node that its usage reading does not show yet (pure).

A node's usage is a statistic over a window (``prometheus.window``) of a rate over ``prometheus.rateWindow``,
so a reading still covers that long before it: a node relieved a few minutes ago still reads as hot, and
a node its replacements landed on may read cooler than it is. Until the reading no longer covers the time
of the eviction, the planner uses the measured usage less what left the node and plus what is known to
have landed on it but is not in the replacement's own reading yet.

What left is counted once: when the node's reading has already fallen since the relief (a statistic that
follows a drop sooner than a high quantile does), that fall is taken as part of what left. Unknown stays
unknown: a node whose reading is unknown stays unknown, corrections never make a number.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rebalancer.model import PodKey

if TYPE_CHECKING:
    from rebalancer.efficiency.records import Relief


@dataclass(frozen=True, slots=True)
class EarlierReliefs:
    """The reliefs of earlier cycles as the efficiency records hold them. ``missing``: why they are not
    known this cycle (no correction is made, and the plan says so)."""

    known: tuple[Relief, ...] = ()
    missing: str | None = None


@dataclass(frozen=True, slots=True)
class Flight:
    """What earlier reliefs still in the reading's reach moved off and onto one node (millicores)."""

    node: str
    left_m: int  # usage of the pods evicted from the node (not counting those whose replacement came back)
    landed_m: int  # usage of replacements seen landing on the node, not yet in their own reading
    baseline_m: int | None  # the node's measured usage at its first relief in reach (None: not recorded)
    relieved_at: float | None  # the latest relief of the node (None: it only received replacements)
    last_at: float  # the latest relief that moved load off or onto it
    until: float  # from then on the reading covers only time after ``last_at``


@dataclass(frozen=True, slots=True)
class Correction:
    """A node's usage as the planner uses it, and the reading it corrects."""

    node: str
    measured_m: int
    corrected_m: int
    flight: Flight
    note: str  # why, for the plan ("relieved 3 min ago: 4.1 cores moved, expected 52%")


def in_flight(
    reliefs: Iterable[Relief], now: float, reach: float, pod_usage: Mapping[PodKey, int]
) -> dict[str, Flight]:
    """Per node, what the reliefs made in ``(now - reach, now]`` moved off and onto it. ``pod_usage``: the
    pods' current readings (a replacement's own reading shows how much of it the node's reading holds)."""
    left: dict[str, int] = {}
    landed: dict[str, int] = {}
    baseline: dict[str, tuple[float, int | None]] = {}
    relieved: dict[str, float] = {}
    last: dict[str, float] = {}
    for relief in sorted(reliefs, key=lambda r: r.at):
        if not now - reach < relief.at <= now:
            continue
        node = relief.node
        baseline.setdefault(node, (relief.at, relief.measured_m))
        relieved[node] = last[node] = relief.at
        for pod in relief.evicted:
            if pod.landed == node:  # came back: the reading keeps it, nothing left
                continue
            left[node] = left.get(node, 0) + pod.usage_m
            if pod.landed is not None:
                shown = _reading(pod.replacement, pod_usage)
                landed[pod.landed] = landed.get(pod.landed, 0) + max(0, pod.usage_m - shown)
                last[pod.landed] = max(last.get(pod.landed, relief.at), relief.at)
    return {
        node: Flight(
            node,
            left.get(node, 0),
            landed.get(node, 0),
            baseline[node][1] if node in baseline else None,
            relieved.get(node),
            at,
            at + reach,
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
    reads = f"reads {100 * measured_m / allocatable_m:.1f}%" if allocatable_m > 0 else f"reads {measured_m}m"
    expected = f"expected {100 * corrected_m / allocatable_m:.1f}%" if allocatable_m > 0 else f"expected {corrected_m}m"
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
