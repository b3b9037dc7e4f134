"""Classification by requests, the community descheduler's meaning of utilization (pure).

With ``classifyBy: requests`` a utilization strategy reads a node's "usage" as the CPU (and memory) its
non-terminal pods request and a pod's as its own request, both from the cluster listing: what the descheduler's
LowNodeUtilization and HighNodeUtilization compare with their thresholds. Prometheus plays no part in the
classification (a failed read still blocks the cycle's evictions, as for every strategy). A node that is
not Ready, or reports no allocatable CPU, stays unknown, as the descheduler skips it.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import Literal

from rebalancer.domain.model import PodKey
from rebalancer.planning.predicted import ClassifyBy
from rebalancer.planning.snapshot import ClusterSnapshot, NodeLoad
from rebalancer.planning.usage_view import usage_view

ByRequests = Literal["requests"]
UsageBasis = ClassifyBy | ByRequests
"""What a utilization strategy reads as usage: the usage window, a prediction, or requests."""


def requests_view(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """The snapshot with each node's usage its pods' CPU requests and each pod's usage its CPU request; the
    same for memory."""
    load: dict[str, NodeLoad] = {}
    for name, current in snapshot.load.items():
        node = snapshot.nodes[name]
        why = None
        if not node.ready:
            why = "node is not Ready (classifyBy requests)"
        elif node.allocatable_cpu_m <= 0:
            why = "node reports no allocatable CPU"
        value = None if why else current.requested_cpu_m
        memory = None if why else current.requested_memory
        load[name] = replace(current, usage_m=value, unknown_reason=why, memory_usage=memory, memory_unknown_reason=why)
    every = [pod for pods in snapshot.pods_by_node.values() for pod in pods]
    pods: dict[PodKey, int] = {pod.key: pod.cpu_request_m for pod in every}
    return replace(
        snapshot,
        load=MappingProxyType(load),
        pod_usage=MappingProxyType(pods),
        pod_memory=MappingProxyType({pod.key: pod.memory_request for pod in every}),
        in_flight=MappingProxyType({}),  # corrections of a usage reading: requests need none
    )


def view(snapshot: ClusterSnapshot, basis: UsageBasis) -> ClusterSnapshot:
    """The snapshot as a strategy with ``classifyBy: basis`` reads it."""
    if basis == "requests":
        return requests_view(snapshot)
    return usage_view(snapshot, basis)
