"""The simulated cluster every policy starts from: nodes, Deployments and their pods, each pod following a
usage shape, requests and the initial placement by the scheduler model (pure).

A *slot* is one replica of a Deployment: the pod in it is evicted and replaced, but the slot's usage trace
continues (the replacement carries the same load). Usage per slot is precomputed for the whole span,
history days first: ``usage[slot, step]`` in millicores.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

from rebalancer.domain.model import ClusterFacts, Node, Pod, UsageReport, WorkloadRef
from rebalancer.domain.settings.shared import PoolSettings
from rebalancer.offline.simulate.config import GI, SimConfig
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
    usage: npt.NDArray[np.float32]  # (slots, steps) millicores
    initial: tuple[Pod, ...]  # one pod per slot, bound
    description: str

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
    peak_of = np.clip(rng.lognormal(0.0, 0.7, len(sizes)), 0.2, 6.0)
    usage: npt.NDArray[np.float32] = np.empty((total, steps), dtype=np.float32)
    slot = 0
    for w, size in enumerate(sizes):
        series = shapes.values[shape_of[w], offset_of[w] : offset_of[w] + steps] * peak_of[w]
        for _ in range(size):
            usage[slot] = series * rng.uniform(0.8, 1.2)
            slot += 1
    history = config.history_days * config.steps_per_day or steps  # the level is set on the history days
    mean = float(usage[:, :history].mean(dtype=np.float64))
    usage *= np.float32(config.utilization * config.nodes * config.node_cpu_m / max(mean * total, 1e-9))
    workloads, slot_workload, first = [], [], 0
    for w, size in enumerate(sizes):
        slots = tuple(range(first, first + size))
        mean = float(usage[first : first + size, :history].mean())
        cpu = max(10, int(np.ceil(mean * config.request_factor / 10.0)) * 10)
        memory = int(rng.integers(1, 9)) * GI // 4
        workloads.append(Workload(WorkloadRef("Deployment", NAMESPACE, f"w{w:03d}"), size, cpu, memory, slots))
        slot_workload.extend([w] * size)
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
    return Cluster(
        config, shapes.start, nodes, tuple(workloads), tuple(slot_workload), usage, initial,
        f"{config.nodes} nodes x {config.node_cpu_m / 1000:g} cores, {total} pods of {len(workloads)} Deployments; usage: "
        f"{shapes.description}",
    )  # fmt: skip


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
