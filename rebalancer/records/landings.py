"""Where the replacements of evicted pods really went (pure), against where they were predicted to land.

An evicted pod's replacement is taken to be the first pod of its workload created after the eviction
(within the creationTimestamp's one-second slack) and no later than the follow-up window after it,
bound to a node, that no other eviction claimed: the same inference as the bounce-back memory (a scale-up
in the same seconds can be mistaken for it). Evictions of one workload are matched oldest first, with its
new pods in creation order. A replacement still Pending waits for a later cycle (however late: a CronJob
sees it at its next run, by its creation time); one never seen is left unobserved (``landed`` stays None),
never guessed. ``landed`` is the node the replacement is on when first seen bound.

The records then say, per pool, how many evictions landed back on the node they left (pure disruption:
the node did not cool by them) and how often the landing prediction named the node the scheduler chose.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from rebalancer.domain.efficiency_records import EfficiencyState, EvictedPod, Relief
from rebalancer.domain.model import ClusterFacts, Pod
from rebalancer.records.moves import CLOCK_SLACK_SECONDS, pods_of, workload_ref


def observe_landings(state: EfficiencyState, facts: ClusterFacts, now: float, window_seconds: float) -> EfficiencyState:
    """``state`` with the replacements found in ``facts`` recorded on the evictions still waiting for one."""
    waiting = [
        (r, i, pod)
        for r, relief in enumerate(state.reliefs)
        if relief.at <= now
        for i, pod in enumerate(relief.evicted)
        if pod.workload is not None and pod.replacement is None
    ]
    if not waiting:
        return state
    claimed = {p.replacement for relief in state.reliefs for p in relief.evicted if p.replacement is not None}
    wanted = {workload_ref(pod.workload) for _, _, pod in waiting if pod.workload is not None}
    candidates: dict[str, list[Pod]] = {}
    for pod in pods_of(facts, wanted):
        if pod.node_name and f"{pod.namespace}/{pod.name}" not in claimed:
            candidates.setdefault(str(pod.workload), []).append(pod)
    for pods in candidates.values():
        pods.sort(key=lambda p: (p.created, p.name))
    found: dict[tuple[int, int], Pod] = {}
    for r, i, evicted in sorted(waiting, key=lambda w: (state.reliefs[w[0]].at, w[0], w[1])):
        replacement = _first_after(candidates.get(evicted.workload or "", []), state.reliefs[r].at, window_seconds)
        if replacement is not None:
            found[(r, i)] = replacement
    if not found:
        return state
    return msgspec.structs.replace(state, reliefs=tuple(_landed(state.reliefs, found)))


def _first_after(pods: list[Pod], at: float, window: float) -> Pod | None:
    """Takes (removes) the first pod created after ``at``, within ``window`` of it."""
    for index, pod in enumerate(pods):
        if at - CLOCK_SLACK_SECONDS <= pod.created <= at + window:
            return pods.pop(index)
    return None


def _landed(reliefs: tuple[Relief, ...], found: dict[tuple[int, int], Pod]) -> Iterable[Relief]:
    for r, relief in enumerate(reliefs):
        if not any((r, i) in found for i in range(len(relief.evicted))):
            yield relief
            continue
        evicted = tuple(_with(pod, found[(r, i)]) if (r, i) in found else pod for i, pod in enumerate(relief.evicted))
        yield msgspec.structs.replace(relief, evicted=evicted)


def _with(evicted: EvictedPod, replacement: Pod) -> EvictedPod:
    return msgspec.structs.replace(
        evicted, landed=replacement.node_name, replacement=f"{replacement.namespace}/{replacement.name}"
    )
