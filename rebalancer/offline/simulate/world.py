"""The live state of one simulated cluster under one policy, and the in-memory stand-ins for the
Kubernetes API the production evictor talks to (pure).

* :class:`World`: which pod fills each slot and where it runs; an eviction empties the slot's node at
  once, the ReplicaSet creates the replacement (Pending) at the same moment, and the scheduler model binds
  it ``replacement_delay_seconds`` later. Whether it landed back on the node its pod was evicted from is
  recorded per eviction.
* :class:`SimActions` (the evictor's ``ClusterActions``): reads a pod, evicts it with
  PodDisruptionBudget semantics (429 when the budget allows no disruption), records no Event.
* :class:`MemoryStore` (the evictor's ``StateStore``): the limiter or backoff ConfigMap, with
  resourceVersion conflicts, kept in memory.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

from rebalancer.domain.errors import EvictionConflict, EvictionRejected, PodGone, StateConflict
from rebalancer.domain.guard_marks import GUARD_KEY
from rebalancer.domain.labels import LabelSelector
from rebalancer.domain.model import ClusterFacts, DisruptionBudget, Node, Pod, PodKey, UsageReport
from rebalancer.domain.settings.shared import PoolSettings
from rebalancer.offline.simulate.cluster import Cluster, make_pod
from rebalancer.offline.simulate.cpu_share import Served, serve_step
from rebalancer.planning.scheduler_model import SchedulerModel
from rebalancer.planning.snapshot import build_snapshot

TERMINATION_GRACE_SECONDS = 30  # a pod's default terminationGracePeriodSeconds


@dataclass(frozen=True, slots=True)
class Move:
    """One eviction and where its replacement went (None: not bound yet, or nowhere to go)."""

    at: float
    slot: int
    pod: str
    source: str
    destination: str | None = None
    bound_at: float | None = None
    marked: str | None = None  # the effect of the landing guard's taint on the destination when bound (None: none)

    @property
    def landed_back(self) -> bool:
        return self.destination == self.source


@dataclass(slots=True)
class _Pending:
    slot: int
    due: float
    move: int  # index in World.moves
    planned: str | None = None  # the node the plan counted the room on (bound there when placement is ideal)
    terminating: Pod | None = None  # the evicted pod, still on its node (its requests counted) until this binds


class World:
    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.node_names = tuple(n.name for n in cluster.nodes)
        self._node_index = {name: i for i, name in enumerate(self.node_names)}
        self.node_index: Mapping[str, int] = MappingProxyType(self._node_index)
        self.nodes = list(cluster.nodes)
        self.pods: list[Pod] = list(cluster.initial)
        self._slot_of: dict[PodKey, int] = {p.key: i for i, p in enumerate(self.pods)}
        self.node_of_slot: npt.NDArray[np.int64] = np.array(
            [self._node_index[p.node_name or ""] for p in self.pods], dtype=np.int64
        )
        facts = ClusterFacts(cluster.nodes, tuple(self.pods))
        self.model = SchedulerModel(build_snapshot(facts, UsageReport(), PoolSettings(), cluster.start))
        self._pending: list[_Pending] = []
        self._ties = random.Random(cluster.config.seed)  # the scheduler picks at random among equal scores
        self._generation = [0] * len(self.pods)
        self.moves: list[Move] = []
        self.requests = cluster.requests
        self.allocatable = cluster.allocatable
        self.served = cluster.served_at_start().copy()  # (slots, steps): what the pods got, as read

    def serve(self, step: int) -> Served:
        """The pods' demand at ``step`` shared out on their current nodes; the step's readings are then what
        they got (a slot not bound keeps its demand: a pod bound within a window is read over all of it)."""
        served = serve_step(self.cluster.usage[:, step].astype(np.float64), self.node_of_slot, self.requests,
                            self.allocatable)  # fmt: skip
        self.served[:, step] = served.slots
        return served

    def slot_of(self, pod: Pod) -> int:
        return self._slot_of[pod.key]

    def pod(self, namespace: str, name: str) -> Pod | None:
        slot = self._slot_of.get((namespace, name))
        return None if slot is None else self.pods[slot]

    def facts(self) -> ClusterFacts:
        return ClusterFacts(tuple(self.nodes), tuple(self.pods), self.budgets() if self.cluster.config.budgets else ())

    def node(self, name: str) -> Node:
        return self.nodes[self._node_index[name]]

    def set_node(self, node: Node) -> None:
        """A node changed (a taint, a cordon): the next facts and the scheduler model see it."""
        self.nodes[self._node_index[node.name]] = node
        self.model.replace_node(node)

    def unavailable(self, workload: int) -> int:
        return sum(1 for s in self.cluster.workloads[workload].slots if not self.pods[s].ready)

    def budgets(self) -> tuple[DisruptionBudget, ...]:
        out = []
        for w, workload in enumerate(self.cluster.workloads):
            if workload.replicas < 2:
                continue
            ready = workload.replicas - self.unavailable(w)
            selector = LabelSelector((("app", workload.ref.name),))
            out.append(
                DisruptionBudget(
                    workload.ref.namespace,
                    workload.ref.name,
                    selector,
                    None,
                    1,
                    max(0, ready - (workload.replicas - 1)),
                    ready,
                    workload.replicas - 1,
                    workload.replicas,
                )
            )
        return tuple(out)

    def evict(self, pod: Pod, now: float) -> None:
        """The pod leaves its node; its replacement is created now and bound when due. As on a real node the
        evicted pod terminates during its grace period, its requests still counted by the scheduler: when the
        replacement is due within it, it is placed with the evicted pod still there, which leaves at that
        binding (its usage goes with the slot at once)."""
        slot = self._slot_of.pop(pod.key)
        lingering = self.cluster.config.replacement_delay_seconds < TERMINATION_GRACE_SECONDS
        if lingering:
            self.model.terminate(pod)  # off the workload's spreading, its requests kept
        else:
            self.model.remove(pod)
        source = pod.node_name or ""
        self._generation[slot] += 1
        workload = self.cluster.workloads[self.cluster.slot_workload[slot]]
        index = workload.slots.index(slot)
        replacement = make_pod(workload, f"{workload.ref.name}-{index}-r{self._generation[slot]}", None, now)
        self.pods[slot] = replacement
        self._slot_of[replacement.key] = slot
        self.node_of_slot[slot] = -1
        self.moves.append(Move(now, slot, str(pod), source))
        due = now + self.cluster.config.replacement_delay_seconds
        self._pending.append(_Pending(slot, due, len(self.moves) - 1, terminating=pod if lingering else None))

    def plan_destination(self, pod: str, node: str) -> None:
        """The node the plan chose for the replacement of ``pod`` ("namespace/name", evicted and pending)."""
        for pending in self._pending:
            if self.moves[pending.move].pod == pod:
                pending.planned = node

    def bind_due(self, now: float, ideal: bool = False) -> None:
        """The scheduler model places every replacement that is due, in eviction order, each with the evicted
        pods still terminating counted on their nodes (they all leave after these bindings). ``ideal``: on the
        node the plan counted room on instead, when the scheduler's filters allow it there (an upper bound
        for landing control, not something the default scheduler does)."""
        waiting: list[_Pending] = []
        gone: list[Pod] = []
        for pending in self._pending:
            if pending.due > now:
                waiting.append(pending)
                continue
            pod = self.pods[pending.slot]
            node = self._ideal(pod, pending.planned) if ideal else None
            node = node or self.model.place(pod, rng=self._ties).node
            if pending.terminating is not None:  # terminated by the next step (at least a minute)
                gone.append(pending.terminating)
                pending.terminating = None
            if node is None:
                waiting.append(pending)  # stays Pending; tried again next step
                continue
            bound = make_pod(self.cluster.workloads[self.cluster.slot_workload[pending.slot]], pod.name, node,
                             pod.created)  # fmt: skip
            self.pods[pending.slot] = bound
            self.model.add(bound, node)
            self.node_of_slot[pending.slot] = self._node_index[node]
            move = self.moves[pending.move]
            marked = next((t.effect for t in self.node(node).taints if t.key == GUARD_KEY), None)
            self.moves[pending.move] = Move(move.at, move.slot, move.pod, move.source, node, now, marked)
        for pod in gone:  # every replacement due was placed with all the pods still terminating counted
            if pod.node_name is not None:
                self.model.restore(pod, pod.node_name)
                self.model.remove(pod)
        self._pending = waiting

    def _ideal(self, pod: Pod, planned: str | None) -> str | None:
        if planned is None:
            return None
        others = [n for n in self.node_names if n != planned]
        return self.model.place(pod, exclude=others).node

    @property
    def pending(self) -> int:
        return len(self._pending)


class SimActions:
    """The Eviction API of the simulated cluster (ClusterActions)."""

    def __init__(self, world: World, now: float) -> None:
        self.world = world
        self.now = now

    def get_pod(self, namespace: str, name: str, annotations: frozenset[str]) -> Pod | None:
        return self.world.pod(namespace, name)

    def evict(self, namespace: str, name: str, uid: str, *, dry_run: bool, annotations: Mapping[str, str]) -> None:
        pod = self.world.pod(namespace, name)
        if pod is None:
            raise PodGone(f"pods {name!r} not found")
        if pod.uid != uid:
            raise EvictionConflict(f"pod {name} has uid {pod.uid}, not {uid}")
        workload = self.world.cluster.slot_workload[self.world.slot_of(pod)]
        guarded = self.world.cluster.config.budgets and self.world.cluster.workloads[workload].replicas >= 2
        if guarded and pod.ready and self.world.unavailable(workload) >= 1:
            raise EvictionRejected("Cannot evict pod as it would violate the pod's disruption budget.")
        if not dry_run:
            self.world.evict(pod, self.now)

    def record_event(self, pod: Pod, *, reason: str, message: str, action: str) -> bool:
        return True


class MemoryStore:
    """A ConfigMap's one key, with resourceVersion semantics (StateStore)."""

    where = "the simulated state"

    def __init__(self) -> None:
        self._text: str | None = None
        self._version = 0

    def load(self) -> tuple[str | None, str | None]:
        return self._text, str(self._version) if self._text is not None else None

    def save(self, text: str, resource_version: str | None) -> str:
        current = str(self._version) if self._text is not None else None
        if resource_version != current:
            raise StateConflict(f"resourceVersion {resource_version} is stale (now {current})")
        self._text = text
        self._version += 1
        return str(self._version)
