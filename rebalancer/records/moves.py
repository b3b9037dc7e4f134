"""Bounce-back memory: which pods just moved (and must not be moved again), and which evictions bounced."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from rebalancer.domain.efficiency_records import EfficiencyState
from rebalancer.domain.model import ClusterFacts, Pod, PodKey, WorkloadRef
from rebalancer.domain.settings.efficiency import EfficiencySettings
from rebalancer.domain.times import rfc3339

CLOCK_SLACK_SECONDS = 1.0
"""creationTimestamp has whole seconds: a replacement created in the second of the eviction may read up to
one second earlier than the eviction's time."""


@dataclass(frozen=True, slots=True)
class LastEviction:
    at: float
    node: str


def last_evictions(state: EfficiencyState, now: float, memory_seconds: float) -> dict[str, LastEviction]:
    """Per workload ("Kind/namespace/name"), its latest eviction within the memory."""
    found: dict[str, LastEviction] = {}
    for relief in state.reliefs:
        if relief.at <= now - memory_seconds or relief.at > now:
            continue
        for pod in relief.evicted:
            if pod.workload is None:
                continue
            seen = found.get(pod.workload)
            if seen is None or relief.at > seen.at:
                found[pod.workload] = LastEviction(relief.at, relief.node)
    return found


def is_replacement(pod_created: float, eviction: LastEviction) -> bool:
    """A pod of the workload created after the eviction: most likely the evicted pod's replacement."""
    return pod_created >= eviction.at - CLOCK_SLACK_SECONDS


def recently_moved(
    state: EfficiencyState, facts: ClusterFacts, now: float, settings: EfficiencySettings
) -> Mapping[PodKey, str]:
    """The pods the bounce-back guard keeps in place, with the reason the decision record shows."""
    if not settings.enabled or not settings.bounce_back_guard:
        return {}
    memory = settings.bounce_back_memory.total_seconds()
    evictions = last_evictions(state, now, memory)
    if not evictions:
        return {}
    wanted = {workload_ref(key): eviction for key, eviction in evictions.items()}
    moved: dict[PodKey, str] = {}
    for pod in pods_of(facts, wanted):
        eviction = wanted[pod.workload]  # type: ignore[index]  # pods_of yields pods with a wanted workload
        if is_replacement(pod.created, eviction):
            moved[pod.key] = (
                f"bounce-back guard: {pod.workload} had a pod evicted from {eviction.node} at {rfc3339(eviction.at)} "
                f"and this pod was created after it (most likely its replacement, just moved): not moved again "
                f"before {rfc3339(eviction.at + memory)}"
            )
    return moved


def workload_ref(key: str) -> WorkloadRef:
    """The workload a record names ("Kind/namespace/name")."""
    kind, namespace, name = key.split("/", 2)
    return WorkloadRef(kind, namespace, name)


def pods_of(facts: ClusterFacts, wanted: Collection[WorkloadRef]) -> Iterable[Pod]:
    """The pods of the ``wanted`` workloads (from the watch cache's groups when the facts have them)."""
    if facts.by_workload is not None:  # serve's watch cache: no scan of every pod
        for workload in wanted:
            yield from facts.by_workload.get(workload, ())
        return
    for pod in facts.pods:
        if pod.workload in wanted:
            yield pod
