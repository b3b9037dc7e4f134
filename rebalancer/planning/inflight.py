"""What the planner's own recent evictions changed on a node that its usage reading does not show yet (pure).

A node's CPU usage is a quantile over a window (``prometheus.window``) of samples ``prometheus.step`` apart,
each a rate over ``prometheus.rateWindow``, so a reading shows a change of the node's load only after a lag
(:func:`reading_lag`): load that left stays in a high quantile until nearly the whole window is after the
eviction, load that arrived shows in it within a few samples. Until then the planner uses the measured
usage less what left the node and plus what is known to have landed on it but is not in the reading yet.
Memory (the working set) is the same quantile over the same samples of a gauge: its lag is
:func:`reading_lag` without a rate window, and it is corrected the same way by each evicted pod's working
set at eviction (:attr:`EvictedPod.memory`; reliefs recorded before it was kept correct CPU only). The pod
count needs no correction: it is counted from the API server's pods, as they are now.

An evicted pod whose replacement was seen back on its node left nothing. What left is counted once: when
the node's reading has already fallen since the relief (a statistic that follows a drop sooner than a high
quantile does), that fall is taken as part of what left. Unknown stays unknown: a node whose reading is
unknown stays unknown, and a node an evicted pod of unknown memory left or landed on has its memory
unknown until the reading shows the move; corrections never make a number.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rebalancer.domain.model import PodKey
from rebalancer.domain.quantity import bytes_text, cores_text

if TYPE_CHECKING:
    from rebalancer.domain.efficiency_records import EvictedPod, Relief


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

    A sample holds what was before a change until ``rate_window`` after it (0 for a gauge, as memory). The quantile reads the samples of
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
class Moves:
    """What earlier reliefs still in a reading's reach moved off and onto one node, in one resource (for
    memory, in bytes); ``left`` or ``landed`` None: a moved pod's amount is unknown (``unknown`` says which)."""

    node: str
    left: int | None
    landed: int | None
    baseline: int | None  # the node's measured amount at its first relief in reach (None: not recorded)
    relieved_at: float | None
    last_at: float
    until: float
    unknown: str | None = None


@dataclass(frozen=True, slots=True)
class MemoryCorrection:
    """A node's memory working set as the planner uses it (None: unknown), and the reading it corrects."""

    measured: int
    corrected: int | None
    moves: Moves


@dataclass(frozen=True, slots=True)
class Correction:
    """A node's usage as the planner uses it, and the reading it corrects (CPU, and memory when read)."""

    node: str
    measured_m: int
    corrected_m: int
    flight: Flight | None  # None: the CPU reading needs no correction (only memory moved in its reach)
    note: str  # why, for the plan ("relieved 3 min ago: 4.1 cores moved, expected 52%")
    memory: MemoryCorrection | None = None  # None: the node's memory is not corrected


def in_flight(reliefs: Iterable[Relief], now: float, lag: Lag, pod_usage: Mapping[PodKey, int]) -> dict[str, Flight]:
    """Per node, what the reliefs made before ``now`` moved off and onto it and the reading does not show yet
    (``lag``). ``pod_usage``: the pods' current readings (a replacement's own reading shows how much of it
    the node's reading holds)."""
    found = _moves(reliefs, now, lag, lambda p: p.usage_m, lambda p: _reading(p.replacement, pod_usage), _cpu_baseline)
    return {
        node: Flight(node, m.left or 0, m.landed or 0, m.baseline, m.relieved_at, m.last_at, m.until)
        for node, m in found.items()
    }


def memory_in_flight(
    reliefs: Iterable[Relief], now: float, lag: Lag, pod_memory: Mapping[PodKey, int]
) -> dict[str, Moves]:
    """:func:`in_flight` for the memory working set (``lag``: the gauge's, ``pod_memory``: the pods' current
    readings). A pod recorded without its memory moves none; one recorded as unknown makes the amount unknown."""
    return _moves(reliefs, now, lag, _memory, lambda p: _reading(p.replacement, pod_memory), _memory_baseline)


def _moves(
    reliefs: Iterable[Relief],
    now: float,
    lag: Lag,
    amount: Callable[[EvictedPod], int | None],
    shown: Callable[[EvictedPod], int],
    baseline_of: Callable[[Relief], int | None],
) -> dict[str, Moves]:
    """Per node, the ``amount`` (None: unknown) of the evicted pods the reliefs in reach moved off and onto it
    (less what a replacement's own reading, ``shown``, already holds); ``baseline_of``: a relief's reading."""
    left: dict[str, int | None] = {}
    landed: dict[str, int | None] = {}
    unknown: dict[str, str] = {}
    baseline: dict[str, int | None] = {}
    relieved: dict[str, float] = {}
    last: dict[str, float] = {}
    until: dict[str, float] = {}
    for relief in sorted(reliefs, key=lambda r: r.at):
        age, node = now - relief.at, relief.node
        if 0 <= age < lag.gone:
            baseline.setdefault(node, baseline_of(relief))
            relieved[node] = last[node] = relief.at
            until[node] = max(until.get(node, 0.0), relief.at + lag.gone)
            left.setdefault(node, 0)
            for pod in relief.evicted:
                if pod.landed != node:  # a replacement seen back on the node: the reading keeps it, nothing left
                    left[node] = _added(left[node], amount(pod), pod, node, unknown)
        if 0 <= age < lag.landed:
            for pod in relief.evicted:
                if pod.landed is None or pod.landed == node:
                    continue
                value = amount(pod)
                arrived = None if value is None else max(0, value - shown(pod))
                landed[pod.landed] = _added(landed.get(pod.landed, 0), arrived, pod, pod.landed, unknown)
                last[pod.landed] = max(last.get(pod.landed, relief.at), relief.at)
                until[pod.landed] = max(until.get(pod.landed, 0.0), relief.at + lag.landed)
    return {
        node: Moves(
            node,
            left.get(node, 0),
            landed.get(node, 0),
            baseline.get(node),
            relieved.get(node),
            at,
            until[node],
            unknown.get(node),
        )
        for node, at in sorted(last.items())
        if left.get(node, 0) != 0 or landed.get(node, 0) != 0
    }


def _added(total: int | None, amount: int | None, pod: EvictedPod, node: str, unknown: dict[str, str]) -> int | None:
    if amount is None:
        unknown.setdefault(node, f"{pod.namespace}/{pod.name}")
    return None if total is None or amount is None else total + amount


def _cpu_baseline(relief: Relief) -> int | None:
    return relief.measured_m


def _memory_baseline(relief: Relief) -> int | None:
    return relief.measured_memory


def _memory(pod: EvictedPod) -> int | None:
    if pod.memory is None:
        return 0  # not recorded: a relief of before memory was kept corrects CPU only
    return None if pod.memory < 0 else pod.memory


def corrected(measured: int | None, flight: Flight) -> int | None:
    """The usage the planner uses for a node that read ``measured`` (None: unknown, and so it stays)."""
    return _corrected(measured, flight.left_m, flight.landed_m, flight.baseline_m)


def corrected_memory(measured: int | None, moves: Moves) -> int | None:
    """The working set the planner uses for a node that read ``measured`` (None: unknown, as the reading or a
    moved pod's memory is)."""
    if moves.left is None or moves.landed is None:
        return None
    return _corrected(measured, moves.left, moves.landed, moves.baseline)


def _corrected(measured: int | None, left: int, landed: int, baseline: int | None) -> int | None:
    if measured is None:
        return None
    already_fallen = 0 if baseline is None else max(0, baseline - measured)
    still_in_reading = max(0, left - already_fallen)
    return max(0, measured - still_in_reading + landed)


def describe(
    flight: Flight | None,
    measured_m: int,
    corrected_m: int,
    allocatable_m: int,
    now: float,
    memory: MemoryCorrection | None = None,
    allocatable_memory: int = 0,
) -> str:
    """One line for the plan: what moved, how long ago, what the node is expected at (CPU, then memory)."""
    sections = []
    if flight is not None:
        parts = []
        if flight.relieved_at is not None:
            parts.append(f"relieved {_ago(now - flight.relieved_at)}: {flight.left_m / 1000:.1f} cores moved")
        if flight.landed_m:
            parts.append(f"{flight.landed_m / 1000:.1f} cores landed")
        sections.append(f"{', '.join(parts)}; {_reads(measured_m, corrected_m, allocatable_m, cores_text)}")
    if memory is not None:
        moves = memory.moves
        relieved = (
            "" if flight is not None or moves.relieved_at is None else f"relieved {_ago(now - moves.relieved_at)}: "
        )
        parts = [f"{bytes_text(moves.left)} moved"] if moves.relieved_at is not None and moves.left else []
        if moves.landed:
            parts.append(f"{bytes_text(moves.landed)} landed")
        if moves.unknown is not None:
            parts.append(f"the memory of moved pod {moves.unknown} is unknown")
        reads = _reads(memory.measured, memory.corrected, allocatable_memory, bytes_text)
        sections.append(f"{relieved}memory: {', '.join([*parts, reads])}")
    return f"{'; '.join(sections)} until the usage window has caught up"


def _reads(measured: int, corrected: int | None, allocatable: int, text: Callable[[float], str]) -> str:
    def said(amount: int) -> str:
        return f"{100 * amount / allocatable:.1f}%" if allocatable > 0 else text(amount)

    return f"reads {said(measured)}, expected {'unknown' if corrected is None else said(corrected)}"


def _reading(replacement: str | None, pod_usage: Mapping[PodKey, int]) -> int:
    if replacement is None or "/" not in replacement:
        return 0
    namespace, name = replacement.split("/", 1)
    return pod_usage.get((namespace, name), 0)


def _ago(seconds: float) -> str:
    if seconds < 90:
        return f"{max(0, round(seconds))} s ago"
    return f"{round(seconds / 60)} min ago"
