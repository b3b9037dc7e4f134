"""The simulated cluster every policy starts from: nodes, Deployments and their pods, each pod following a
usage shape, requests and the initial placement by the scheduler model (pure).

A *slot* is one replica of a Deployment: the pod in it is evicted and replaced, but the slot's usage trace
continues (the replacement carries the same load). Usage per slot is precomputed for the whole span,
history days first: ``usage[slot, step]`` in millicores, the pod's *demand* (what it would use alone on a
node); what it gets when its node's pods ask more than the node has is :mod:`cpu_share`'s.

**Sizes.** Each Deployment follows one trace entity (a VM) and each of its pods is the entity's provisioned
CPU times one cluster-wide factor, never above a node's allocatable; a pod uses the share of its size that
the entity used of its own provisioned CPU (each replica that share times 0.8 to 1.2, at most all of it), on
the history and the measured days alike. The factor is the one at which the pods' demand averages
``utilization`` of the nodes' allocatable over the history days (:func:`size_factor`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

from rebalancer.domain.errors import ConfigError
from rebalancer.domain.model import ClusterFacts, Node, Pod, UsageReport, WorkloadRef
from rebalancer.domain.settings.shared import PoolSettings
from rebalancer.offline.simulate.config import GI, SimConfig
from rebalancer.offline.simulate.cpu_share import Floats, node_demand_sums, served_usage
from rebalancer.offline.simulate.shapes import Shapes
from rebalancer.planning.scheduler_model import SchedulerModel
from rebalancer.planning.snapshot import build_snapshot

NAMESPACE = "sim"


@dataclass(frozen=True, slots=True)
class Workload:
    ref: WorkloadRef
    replicas: int
    cpu_request_m: int
    memory_request: int
    slots: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Cluster:
    config: SimConfig
    start: float  # time of usage column 0 (the first history day)
    nodes: tuple[Node, ...]
    workloads: tuple[Workload, ...]
    slot_workload: tuple[int, ...]  # slot -> index in workloads
    usage: npt.NDArray[np.float32]  # (slots, steps) millicores: the pods' demand
    initial: tuple[Pod, ...]  # one pod per slot, bound
    description: str
    warnings: tuple[str, ...] = ()  # what makes the cluster physically implausible
    served: npt.NDArray[np.float32] | None = None  # the usage served under the initial placement (None: not computed)

    @property
    def requests(self) -> npt.NDArray[np.float64]:
        """Each slot's CPU request (millicores)."""
        return np.array([self.workloads[w].cpu_request_m for w in self.slot_workload], dtype=np.float64)

    @property
    def allocatable(self) -> npt.NDArray[np.float64]:
        return np.array([n.allocatable_cpu_m for n in self.nodes], dtype=np.float64)

    def initial_nodes(self) -> npt.NDArray[np.int64]:
        """Each slot's node index at the start."""
        index = {n.name: i for i, n in enumerate(self.nodes)}
        return np.array([index[p.node_name or ""] for p in self.initial], dtype=np.int64)

    def served_at_start(self) -> npt.NDArray[np.float32]:
        """The usage as served with every pod on its initial node (what the history days read)."""
        if self.served is not None:
            return self.served
        return served_usage(self.usage, self.initial_nodes(), self.requests, self.allocatable)

    @property
    def measured_from(self) -> int:
        """The first measured step (after the history days)."""
        return self.config.history_days * self.config.steps_per_day

    def time_of(self, step: int) -> float:
        return self.start + step * self.config.step_seconds


def make_pod(workload: Workload, name: str, node: str | None, created: float) -> Pod:
    return Pod(
        namespace=NAMESPACE,
        name=name,
        uid=f"{name}-uid",
        node_name=node,
        phase="Running" if node else "Pending",
        ready=node is not None,
        workload=workload.ref,
        owner_kind="ReplicaSet",
        priority=0,
        priority_class="",
        qos="Burstable",
        cpu_request_m=workload.cpu_request_m,
        memory_request=workload.memory_request,
        created=created,
        restarts=0,
        labels=MappingProxyType({"app": workload.ref.name}),
    )


def build_cluster(config: SimConfig, shapes: Shapes) -> Cluster:
    if shapes.step_seconds != config.step_seconds:
        raise ValueError(f"shapes are on a {shapes.step_seconds} s grid, the simulation steps {config.step_seconds} s")
    spare_days = shapes.days - config.history_days - config.days
    if spare_days < 0:
        raise ValueError(
            f"the shapes cover {shapes.days} days; {config.history_days} history + {config.days} measured do not fit"
        )
    rng = np.random.default_rng(config.seed)
    total = config.nodes * config.pods_per_node
    sizes: list[int] = []
    while sum(sizes) < total:
        sizes.append(min(int(rng.integers(1, config.max_replicas + 1)), total - sum(sizes)))
    steps = (config.history_days + config.days) * config.steps_per_day
    shape_of = rng.integers(0, shapes.values.shape[0], len(sizes))
    offset_of = rng.integers(0, spare_days + 1, len(sizes)) * config.steps_per_day
    usage: npt.NDArray[np.float32] = np.empty((total, steps), dtype=np.float32)  # shares of the pod's size first
    slot = 0
    for w, size in enumerate(sizes):
        series = shapes.values[shape_of[w], offset_of[w] : offset_of[w] + steps]
        for _ in range(size):
            usage[slot] = np.minimum(series * rng.uniform(0.8, 1.2), 1.0)
            slot += 1
    history = config.history_days * config.steps_per_day or steps  # the level is set on the history days
    slot_workload = np.repeat(np.arange(len(sizes)), sizes)
    shares = np.bincount(slot_workload, weights=usage[:, :history].mean(axis=1, dtype=np.float64)).astype(np.float64)
    target = config.utilization * config.nodes * config.node_cpu_m
    provisioned = shapes.provisioned_m[shape_of]
    factor = size_factor(provisioned, shares, target, config.node_cpu_m)
    pod_size = np.minimum(factor * provisioned, config.node_cpu_m)
    usage *= pod_size[slot_workload, None].astype(np.float32)
    workloads, first = [], 0
    for w, size in enumerate(sizes):
        slots = tuple(range(first, first + size))
        mean = float(usage[first : first + size, :history].mean())
        cpu = max(10, int(np.ceil(mean * config.request_factor / 10.0)) * 10)
        memory = int(rng.integers(1, 9)) * GI // 4
        workloads.append(Workload(WorkloadRef("Deployment", NAMESPACE, f"w{w:03d}"), size, cpu, memory, slots))
        first += size
    nodes = tuple(
        Node(
            f"node-{i:03d}",
            {"kubernetes.io/hostname": f"node-{i:03d}"},
            config.node_cpu_m,
            config.node_memory,
            config.max_pods,
        )
        for i in range(config.nodes)
    )
    initial = _place(nodes, workloads, shapes.start, config.seed)
    capped = int(np.isin(slot_workload, np.flatnonzero(factor * provisioned >= config.node_cpu_m)).sum())
    cluster = Cluster(
        config, shapes.start, nodes, tuple(workloads), tuple(int(w) for w in slot_workload), usage, initial,
        f"{config.nodes} nodes x {config.node_cpu_m / 1000:g} cores, {total} pods of {len(workloads)} Deployments "
        f"(each its entity's provisioned CPU x {factor:.3g}, at most a node's; {capped} at a node's); usage: "
        f"{shapes.description}",
    )  # fmt: skip
    served = cluster.served_at_start()
    return replace(cluster, served=served, warnings=implausible(cluster, capped))


def size_factor(provisioned: Floats, shares: Floats, target_m: float, node_m: float) -> float:
    """The factor ``f`` at which the Deployments' mean demand, ``sum(min(f * provisioned, node) * shares)``
    (``shares``: each Deployment's mean share of its size, summed over its replicas), is ``target_m``;
    a ConfigError naming ``--utilization`` when even pods of a node's size fall short."""

    def demand(f: float) -> float:
        return float((np.minimum(f * provisioned, node_m) * shares).sum())

    most = float(node_m * shares.sum())
    if most < target_m:
        raise ConfigError("command line", [("--utilization", (
            f"the trace's entities cannot average {target_m / 1000:.0f} cores: with every pod as large as a node "
            f"they average {most / 1000:.0f}"))])  # fmt: skip
    low, high = 0.0, node_m / float(provisioned.min())
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if demand(middle) < target_m else (low, middle)
    return high


UNMET_WARNING = 0.01  # of the demand, under the initial placement
CAPPED_WARNING = 0.10  # of the pods
OVER_P95_WARNING = 0.05  # of the node-days


def implausible(cluster: Cluster, capped: int) -> tuple[str, ...]:
    """Warnings when the cluster built is physically implausible: many pods as large as a node, or the
    pods' demand beyond their nodes' CPU (under the initial placement, over the whole span)."""
    config, out = cluster.config, []
    pods = len(cluster.initial)
    if capped > CAPPED_WARNING * pods:
        out.append(f"{capped} of {pods} pods are as large as a node (their entity's provisioned CPU times the "
                   f"factor is above a node's allocatable): few pods carry the load")  # fmt: skip
    sums = node_demand_sums(cluster.usage, cluster.initial_nodes(), len(cluster.nodes))
    allocatable = cluster.allocatable[:, None]
    unmet = float(np.maximum(sums - allocatable, 0).sum())
    per_day = config.steps_per_day
    days = sums.shape[1] // per_day
    p95 = np.quantile(sums[:, : days * per_day].reshape(len(sums), days, per_day), 0.95, axis=2) / allocatable
    over = float((p95 > 1).mean()) if days else 0.0
    if unmet > UNMET_WARNING * float(cluster.usage.sum(dtype=np.float64)) or over > OVER_P95_WARNING:
        out.append(f"the pods ask more than their nodes have: {100 * unmet / max(float(cluster.usage.sum()), 1):.1f}% "
                   f"of their demand unmet under the initial placement, a node's daily P95 of demand up to "
                   f"{100 * float(p95.max(initial=0)):.0f}% of its allocatable ({100 * over:.0f}% of node-days above "
                   f"100%)")  # fmt: skip
    return tuple(out)


def _place(nodes: tuple[Node, ...], workloads: list[Workload], created: float, seed: int) -> tuple[Pod, ...]:
    """The Deployments created one after the other, each pod placed by the scheduler model."""
    empty = build_snapshot(ClusterFacts(nodes, ()), UsageReport(), PoolSettings(), created)
    model = SchedulerModel(empty)
    rng = random.Random(seed)
    placed: list[Pod | None] = [None] * sum(w.replicas for w in workloads)
    for workload in workloads:
        for i, slot in enumerate(workload.slots):
            pending = make_pod(workload, f"{workload.ref.name}-{i}", None, created)
            node = model.place(pending, rng=rng).node
            if node is None:
                raise ValueError(f"the initial pods do not fit: {workload.ref.name}-{i} finds no node")
            pod = make_pod(workload, pending.name, node, created)
            model.add(pod, node)
            placed[slot] = pod
    return tuple(p for p in placed if p is not None)
