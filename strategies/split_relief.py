"""Hot nodes relieved in turn, the second half ahead on another CPU when nothing moves before it.

Relieving a hot node changes what the next one sees through a move (room taken on a destination, a
budget spent, the scheduler model's pods) and through one remembered thing, below; every other state
kept from node to node is a cache whose answers do not depend on what was asked before (the landing
predictor's and the scheduler model's: a cache that did would break this, and the hypothesis tests
comparing split plans with plans in turn would find it). So when the first half of the hot nodes moves
nothing, the second half, relieved from the plan's starting state, is exactly what relieving it in turn
would give. That is the most expensive plan, too: every candidate of every hot node is asked (on the
150,000-pod benchmark cluster placement prediction refuses all 22,483 of them). :func:`relieve_all`
starts the second half on an :class:`~strategies.base.Offload` and relieves the first half here; the
answer is taken when the first half moved nothing, else the offload is cancelled at the first move
and this process relieves the second half itself, as it does when no answer comes.

A fork is not free: until the child ends, every page this process writes is copied first, and after
it each first write still faults. So the first ``min_split // 4`` hot nodes are relieved in turn
before anything is started, and a plan that moves among them (the usual one: the hottest node is
relieved at once) never forks; on the benchmark cluster with the landing guard (2,238 moves) a child
cancelled at the first move cost the plan 0.05-0.18 s. The child's nodes cost more each (its own
copy-on-write faults, the answer pickled), so it takes 45% of them (:data:`HERE`).

One thing besides moves carries over from node to node: a room search that found nothing is
remembered (:class:`~strategies.placement.RoomTracker`), and a later pod needing no more is refused
with :data:`~strategies.placement.REMEMBERED` instead of a full search. The answer lists its
remembered searches; those the first half's searches already cover get that reason, as in turn.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import msgspec

from rebalancer.model import PodKey
from rebalancer.plan import NodeDecision, PlannedEviction, PodDecision, Unrelieved
from strategies.base import Offload
from strategies.placement import REMEMBERED, Miss, RoomTracker

HERE = 0.55  # the share of the nodes after the probe relieved here, the rest ahead (150,000 pods: this
# process's part 0.49 s, the child's 0.52-0.55 s with its fork, faults and answer)

Relieve = Callable[[NodeDecision], tuple[list[PlannedEviction], list[PodDecision], Unrelieved | None]]


@dataclass(slots=True)
class Relieved:
    """What relieving some hot nodes gave, in their order."""

    evictions: list[PlannedEviction]
    records: list[PodDecision]
    unrelieved: dict[str, Unrelieved]

    def extend(self, other: Relieved) -> None:
        self.evictions += other.evictions
        self.records += other.records
        self.unrelieved.update(other.unrelieved)


@dataclass(frozen=True, slots=True)
class _Answer:
    relieved: Relieved
    misses: dict[str, list[Miss]]  # per tracker: the searches it remembered


def relieve_all(
    hot: Sequence[NodeDecision],
    relieve: Relieve,
    trackers: Mapping[str, RoomTracker],
    offload: Offload | None,
) -> Relieved:
    """``relieve`` each of ``hot`` in turn (``trackers``: the room searches it uses), the second half
    on ``offload`` when there are at least its ``min_split`` nodes (see the module docstring). When the
    child's answer is taken, this process's working state (trackers, budgets, the scheduler model) does
    not hold the second half's moves: the plan's result is all that is used afterwards."""
    if offload is None or len(hot) < max(2, offload.min_split):
        return _in_turn(hot, relieve)
    probe = offload.min_split // 4
    relieved = _in_turn(hot[:probe], relieve)
    if relieved.evictions:  # moves come early: a fork would only cost
        relieved.extend(_in_turn(hot[probe:], relieve))
        return relieved
    half = probe + round((len(hot) - probe) * HERE)
    marks = {key: len(tracker.misses) for key, tracker in trackers.items()}

    def second_half() -> _Answer:
        relieved = _in_turn(hot[half:], relieve)
        return _Answer(relieved, {key: tracker.misses[marks[key] :] for key, tracker in trackers.items()})

    ahead = offload.start(second_half)
    try:
        relieved.extend(_in_turn(hot[probe:half], relieve, on_move=ahead.cancel))
        answer = None if relieved.evictions else ahead.result()
    finally:
        ahead.cancel()
    relieved.extend(_in_turn(hot[half:], relieve) if answer is None else _as_in_turn(answer, trackers))
    return relieved


def _in_turn(hot: Sequence[NodeDecision], relieve: Relieve, on_move: Callable[[], None] | None = None) -> Relieved:
    out = Relieved([], [], {})
    for decision in hot:
        chosen, records, why_none = relieve(decision)
        if chosen and on_move is not None:
            on_move()
            on_move = None
        out.evictions += chosen
        out.records += records
        if why_none is not None:
            out.unrelieved[decision.node] = why_none
    return out


def _as_in_turn(answer: _Answer, trackers: Mapping[str, RoomTracker]) -> Relieved:
    """The answer with the reasons of its searches that the first half's remembered searches cover."""
    covered: dict[PodKey, str] = {
        miss.pod: miss.reason
        for key, misses in answer.misses.items()
        for miss in misses
        if trackers[key].remembers(miss.memo, miss.need)
    }
    relieved = answer.relieved
    if covered:
        relieved.records = [
            msgspec.structs.replace(d, reason=REMEMBERED) if covered.get((d.namespace, d.name)) == d.reason else d
            for d in relieved.records
        ]
    return relieved
