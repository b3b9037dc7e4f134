"""How the pods of one node share its cores (pure).

A node's CPU is its allocatable plus the system reserve, which the system's own usage
(``SimConfig.system_cpu_m``) fills: the pods share the allocatable. When their demand on a node is above it,
they are throttled as the kernel's CFS does with CPU requests as ``cpu.shares``: each pod is offered a share
of the allocatable in proportion to its request; a pod that needs less keeps its demand and what it leaves
is offered again to the others, in the same proportions, until every pod either has its demand or is held
at its share. The node then runs at its allocatable; what the pods asked beyond it is *unmet demand*.
Readings (what cAdvisor and the node exporter report) are the usage served, never the demand.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]


def share_cpu(demand: Floats, requests: Floats, capacity: float) -> Floats:
    """What each pod gets of ``capacity`` millicores: its demand when all fit, else its CFS share (by
    request, what a pod leaves offered to the others). A pod without a request weighs as 2 millicores, the
    kernel's minimum ``cpu.shares``."""
    if demand.sum() <= capacity:
        return demand.copy()
    weights = np.maximum(requests, 2.0)
    served = np.zeros_like(demand)
    active = demand > 0
    left = float(capacity)
    while active.any():
        offer = left * weights / weights[active].sum()
        satisfied = active & (demand <= offer)
        if not satisfied.any():
            served[active] = offer[active]
            break
        served[satisfied] = demand[satisfied]
        left -= float(demand[satisfied].sum())
        active &= ~satisfied
    return served


@dataclass(frozen=True, slots=True)
class Served:
    """One step on every node: ``slots`` what each slot's pod got (its demand where not bound),
    ``node_demand`` / ``node_served`` the sums of the bound pods, ``unmet`` per node (millicores)."""

    slots: Floats
    node_demand: Floats
    node_served: Floats

    @property
    def unmet(self) -> Floats:
        out: Floats = self.node_demand - self.node_served
        return out


def serve_step(demand: Floats, node_of_slot: Ints, requests: Floats, allocatable: Floats) -> Served:
    """Each node's bound pods throttled to its ``allocatable`` (slots with node -1 are not bound)."""
    bound = node_of_slot >= 0
    nodes = len(allocatable)
    node_demand = np.bincount(node_of_slot[bound], weights=demand[bound], minlength=nodes).astype(np.float64)
    served = demand.astype(np.float64, copy=True)
    node_served = np.minimum(node_demand, allocatable)
    for node in np.flatnonzero(node_demand > allocatable):
        mine = np.flatnonzero(node_of_slot == node)
        served[mine] = share_cpu(served[mine], requests[mine], float(allocatable[node]))
    return Served(served, node_demand, node_served)


def served_usage(
    usage: npt.NDArray[np.float32], node_of_slot: Ints, requests: Floats, allocatable: Floats
) -> npt.NDArray[np.float32]:
    """``usage`` (slots, steps) as served with the pods fixed on ``node_of_slot``."""
    sums = node_demand_sums(usage, node_of_slot, len(allocatable))
    out = usage.copy()
    for step in np.flatnonzero((sums > allocatable[:, None]).any(axis=0)):
        out[:, step] = serve_step(usage[:, step].astype(np.float64), node_of_slot, requests, allocatable).slots
    return out


def node_demand_sums(usage: npt.NDArray[np.float32], node_of_slot: Ints, nodes: int) -> Floats:
    """(nodes, steps): the demand of the pods fixed on ``node_of_slot``."""
    sums = np.zeros((nodes, usage.shape[1]))
    for node in range(nodes):
        sums[node] = usage[node_of_slot == node].sum(axis=0, dtype=np.float64)
    return sums
