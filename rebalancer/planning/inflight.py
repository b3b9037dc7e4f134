"""What the planner's own recent evictions changed on a node that its usage reading does not show yet (pure).

A node's usage reading (the node's own series: cAdvisor's root cgroup, node_exporter) is a quantile over a
window of samples, each a rate over ``prometheus.rateWindow`` (:class:`~rebalancer.planning.reading_model.Reading`),
so it shows a change of the node's load only gradually, and fully only after a lag: load that left stays in a
high quantile until nearly the whole window is after the eviction, load that arrived shows within a few samples.
The model says, for each moment, which share of a change the reading shows (:meth:`Reading.shown`); the planner
uses the measured usage less the share of what left that the reading still holds, plus the share of what
landed that it does not hold yet. So each moved amount is counted once, as the node's real load holds it.

What left a node is the evicted pods' usage (an evicted pod whose replacement was seen back on its node left
nothing), from the eviction on. What landed on a node is the usage of each replacement seen bound to it (and
still there), from the moment it started: the node's reading includes a running container whatever the
container's own series says (a pod younger than ``rateWindow`` plus a step has no usage of its own yet), so
only the share the model says is not in the reading yet is added. A replacement bound but not started yet
(Pending) is in no reading: all of it is added. The replacement's creation is taken as its start (a container
that started later than that is added a little less than it should be for that while).

What left is counted once: when the node's reading has already fallen since the relief by more than the model
says (a load that fell besides), that fall is taken as part of what left. Memory (the working set) is the
same quantile of a gauge (no rate window), corrected the same way by each evicted pod's working set at
eviction (:attr:`EvictedPod.memory`; reliefs recorded before it was kept correct CPU only). The pod count
needs no correction: it is counted from the API server's pods, as they are now. A node's CPU summed from its
pods' own usage (``queries.nodeCpu: null``) needs none either: an evicted pod is no longer in the sum, and a
replacement too young to have a reading leaves the sum unknown. Unknown stays unknown: a node whose reading is
unknown stays unknown, and a node an evicted pod of unknown memory left or landed on has its memory unknown
until the reading shows the move; corrections never make a number.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rebalancer.domain.quantity import bytes_text, cores_text
from rebalancer.planning.reading_model import Lag, Reading, reading_lag

if TYPE_CHECKING:
    from rebalancer.domain.efficiency_records import EvictedPod, Relief

__all__ = ["Lag", "Reading", "reading_lag"]  # the reading model, re-exported


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
    landed_m: int  # usage of the replacements seen on the node
    baseline_m: int | None  # the node's measured usage at its first relief in reach (None: not recorded)
    relieved_at: float | None  # the latest relief of the node (None: it only received replacements)
    last_at: float  # the latest relief that moved load off or onto it
    until: float  # from then on the reading shows all of it
    left_held_m: int = 0  # of left_m, what the reading still holds (by the reading model)
    landed_unread_m: int = 0  # of landed_m, what the reading does not hold yet (by the reading model)
    expected_fall_m: int = 0  # how much the moves are expected to have lowered the reading since baseline_m


@dataclass(frozen=True, slots=True)
class Moves:
    """What earlier reliefs still in a reading's reach moved off and onto one node, in one resource (for
    memory, in bytes); ``left`` or ``landed`` None: a moved pod's amount is unknown (``unknown`` says which).
    ``left_held``: of ``left``, what the reading still holds; ``landed_unread``: of ``landed``, what it does
    not hold yet (both by the reading model; None with the amount they are a share of)."""

    node: str
    left: int | None
    landed: int | None
    baseline: int | None  # the node's measured amount at its first relief in reach (None: not recorded)
    relieved_at: float | None
    last_at: float
    until: float
    unknown: str | None = None
    left_held: int | None = 0
    landed_unread: int | None = 0
    expected_fall: int = 0  # how much the moves are expected to have lowered the reading since ``baseline``


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


def in_flight(
    reliefs: Iterable[Relief], now: float, reading: Reading, started: Mapping[str, float | None]
) -> dict[str, Flight]:
    """Per node, what the reliefs made before ``now`` moved off and onto it and how much of it the CPU
    ``reading`` does not show yet. ``started``: each replacement ("namespace/name") found on the node it was
    seen landing on, with the time it started (None: bound, not started); a replacement not there adds nothing."""
    found = _moves(reliefs, now, reading, lambda p: p.usage_m, started, _cpu_baseline)
    return {
        node: Flight(
            node,
            m.left or 0,
            m.landed or 0,
            m.baseline,
            m.relieved_at,
            m.last_at,
            m.until,
            m.left_held or 0,
            m.landed_unread or 0,
            m.expected_fall,
        )
        for node, m in found.items()
    }


def memory_in_flight(
    reliefs: Iterable[Relief], now: float, reading: Reading, started: Mapping[str, float | None]
) -> dict[str, Moves]:
    """:func:`in_flight` for the memory working set (``reading``: the gauge's). A pod recorded without its
    memory moves none; one recorded as unknown makes the amount unknown."""
    return _moves(reliefs, now, reading, _memory, started, _memory_baseline)


def _moves(
    reliefs: Iterable[Relief],
    now: float,
    reading: Reading,
    amount: Callable[[EvictedPod], int | None],
    started: Mapping[str, float | None],
    baseline_of: Callable[[Relief], int | None],
) -> dict[str, Moves]:
    """Per node, the ``amount`` (None: unknown) of the evicted pods the reliefs in reach moved off and onto
    it, and the share of it the ``reading`` does not show yet; ``baseline_of``: a relief's reading."""
    left: dict[str, _Sum] = {}
    landed: dict[str, _Sum] = {}
    unknown: dict[str, str] = {}
    baseline: dict[str, tuple[float, int | None]] = {}  # the node's reading at its first relief in reach, and when
    relieved: dict[str, float] = {}
    last: dict[str, float] = {}
    until: dict[str, float] = {}
    changes: list[tuple[str, float, int | None, bool]] = []  # (node, when, amount, rise) of every started move
    for relief in sorted(reliefs, key=lambda r: r.at):
        node = relief.node
        if relief.at > now:
            continue
        gone = [amount(pod) for pod in relief.evicted if pod.landed != node]  # back on its node: nothing left
        changes += [(node, relief.at, value, False) for value in gone]
        done = reading.caught_up(relief.at, rise=False)
        if now < done:
            held = 1.0 - reading.shown(relief.at, now, rise=False)
            baseline.setdefault(node, (relief.at, baseline_of(relief)))
            relieved[node] = last[node] = relief.at
            until[node] = max(until.get(node, 0.0), done)
            total = left.setdefault(node, _Sum())
            for pod in relief.evicted:
                if pod.landed != node:
                    total.add(amount(pod), held, pod, node, unknown)
        reach = max(done, reading.caught_up(relief.at, rise=True))
        for pod in relief.evicted:
            if pod.landed is None or pod.landed == node or pod.replacement is None or pod.replacement not in started:
                continue  # not seen, back on its node (nothing moved), or no longer on the node it landed on
            start = started[pod.replacement]
            if start is None:  # bound, not started: in no reading yet (counted while the relief is in reach)
                unread, done = 1.0, reach
            else:
                start = max(start, relief.at)
                changes.append((pod.landed, start, amount(pod), True))
                unread, done = 1.0 - reading.shown(start, now, rise=True), reading.caught_up(start, rise=True)
            if now >= done:
                continue
            landed.setdefault(pod.landed, _Sum()).add(amount(pod), unread, pod, pod.landed, unknown)
            last[pod.landed] = max(last.get(pod.landed, relief.at), relief.at)
            until[pod.landed] = max(until.get(pod.landed, 0.0), done)
    out = {}
    for node, at in sorted(last.items()):
        gone_sum, came = left.get(node, _Sum()), landed.get(node, _Sum())
        if gone_sum.amount == 0 and came.amount == 0:
            continue
        since, measured = baseline.get(node, (now, None))
        out[node] = Moves(
            node,
            gone_sum.amount,
            came.amount,
            measured,
            relieved.get(node),
            at,
            until[node],
            unknown.get(node),
            gone_sum.share,
            came.share,
            _expected_fall(reading, [c for c in changes if c[0] == node], since, now),
        )
    return out


def _expected_fall(
    reading: Reading, changes: list[tuple[str, float, int | None, bool]], since: float, now: float
) -> int:
    """How much the node's reading is expected to have fallen from ``since`` to ``now`` by the moves off and
    onto it (a rise counting negative): what of the fall since the baseline the moves explain."""
    fall = 0.0
    for _, at, value, rise in changes:
        if value is not None and reading.caught_up(at, rise=rise) > since:
            shown = reading.shown(at, now, rise=rise) - reading.shown(at, since, rise=rise)
            fall += -value * shown if rise else value * shown
    return round(fall)


class _Sum:
    """Amounts moved, and the part of each not shown by the reading (None: some amount is unknown)."""

    __slots__ = ("amount", "share")

    def __init__(self) -> None:
        self.amount: int | None = 0
        self.share: int | None = 0

    def add(self, amount: int | None, part: float, pod: EvictedPod, node: str, unknown: dict[str, str]) -> None:
        if amount is None:
            unknown.setdefault(node, f"{pod.namespace}/{pod.name}")
            self.amount = self.share = None
        elif self.amount is not None and self.share is not None:
            self.amount += amount
            self.share += round(amount * part)


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
    return _corrected(measured, flight.left_held_m, flight.landed_unread_m, flight.baseline_m, flight.expected_fall_m)


def corrected_memory(measured: int | None, moves: Moves) -> int | None:
    """The working set the planner uses for a node that read ``measured`` (None: unknown, as the reading or a
    moved pod's memory is)."""
    if moves.left is None or moves.left_held is None or moves.landed_unread is None:
        return None
    return _corrected(measured, moves.left_held, moves.landed_unread, moves.baseline, moves.expected_fall)


def _corrected(measured: int | None, held: int, unread: int, baseline: int | None, expected: int) -> int | None:
    """``measured`` less what left and the reading still holds (``held``), plus what landed and it does not
    hold yet (``unread``). What left is taken out once: when the reading has fallen since the first relief
    (``baseline``) by more than the moves explain (``expected``), the rest of the fall is taken as part of what
    left (a statistic that shows a fall sooner than the model says)."""
    if measured is None:
        return None
    unexplained = 0 if baseline is None else max(0, baseline - measured - expected)
    return max(0, measured - max(0, held - unexplained) + unread)


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
            unread = flight.landed_unread_m / 1000
            parts.append(f"{flight.landed_m / 1000:.1f} cores landed ({unread:.1f} not in the reading yet)")
        sections.append(f"{', '.join(parts)}; {_reads(measured_m, corrected_m, allocatable_m, cores_text)}")
    if memory is not None:
        moves = memory.moves
        relieved = (
            "" if flight is not None or moves.relieved_at is None else f"relieved {_ago(now - moves.relieved_at)}: "
        )
        parts = [f"{bytes_text(moves.left)} moved"] if moves.relieved_at is not None and moves.left else []
        if moves.landed:
            yet = "" if moves.landed_unread is None else f" ({bytes_text(moves.landed_unread)} not in the reading yet)"
            parts.append(f"{bytes_text(moves.landed)} landed{yet}")
        if moves.unknown is not None:
            parts.append(f"the memory of moved pod {moves.unknown} is unknown")
        reads = _reads(memory.measured, memory.corrected, allocatable_memory, bytes_text)
        sections.append(f"{relieved}memory: {', '.join([*parts, reads])}")
    return f"{'; '.join(sections)} until the usage window has caught up"


def _reads(measured: int, corrected: int | None, allocatable: int, text: Callable[[float], str]) -> str:
    def said(amount: int) -> str:
        return f"{100 * amount / allocatable:.1f}%" if allocatable > 0 else text(amount)

    return f"reads {said(measured)}, expected {'unknown' if corrected is None else said(corrected)}"


def _ago(seconds: float) -> str:
    if seconds < 90:
        return f"{max(0, round(seconds))} s ago"
    return f"{round(seconds / 60)} min ago"
