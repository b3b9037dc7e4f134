"""The immutable cluster snapshot strategies plan on (pure: no I/O, no clock)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

import msgspec

from rebalancer.domain.labels import LabelSelector
from rebalancer.domain.model import (
    TERMINAL_PHASES,
    ClusterFacts,
    DisruptionBudget,
    Node,
    NodePods,
    Pod,
    PodKey,
    UsageReport,
    WorkloadRef,
)
from rebalancer.domain.settings.node_sources import POD_SUM
from rebalancer.domain.settings.shared import PoolSettings
from rebalancer.planning.inflight import Correction
from rebalancer.planning.plan import PlannedEviction
from rebalancer.planning.predicted import PredictedLoad


@dataclass(frozen=True, slots=True)
class NodeLoad:
    """What is on a node: requests of its non-terminal pods and its real usage (None: unknown). Memory
    usage (working set, bytes) is read only for memory thresholds: None with no reason when not read."""

    requested_cpu_m: int
    requested_memory: int
    pod_count: int
    usage_m: int | None
    unknown_reason: str | None
    memory_usage: int | None = None
    memory_unknown_reason: str | None = None
    usage_source: str | None = None  # the node source its usage came from (prometheus.nodeSources)


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    taken_at: float
    nodes: Mapping[str, Node]
    pool_of: Mapping[str, str]
    pods_by_node: Mapping[str, tuple[Pod, ...]]
    load: Mapping[str, NodeLoad]
    pod_usage: Mapping[PodKey, int]
    budgets: tuple[DisruptionBudget, ...]
    usage_failure: str | None
    focus: frozenset[str] | None = None  # an alert's nodes: only these may be relieved this cycle
    unbound: tuple[Pod, ...] = ()  # non-terminal pods on no (known) node: Pending replicas count as unavailable
    predicted: PredictedLoad | None = None  # next-peak load, when a strategy classifies by prediction
    # non-terminal pods by workload: the facts' (serve's watch cache), else grouped with pods_by_node; None
    # after planned moves (counting must then see pods_by_node)
    by_workload: Mapping[WorkloadRef, tuple[Pod, ...]] | None = None
    # pods_by_node's groups with their request sums, as the facts' reader or the snapshot grouped them (serve's
    # watch cache keeps them event by event, so the scheduler model need not sum 150,000 pods per cycle);
    # None after planned moves
    groups: Mapping[str, NodePods] | None = None
    moved: Mapping[PodKey, str] = field(default_factory=dict)  # pods the bounce-back guard keeps in place, and why
    # landing guard: the nodes whose mark the guard changes ahead of this cycle's evictions, as it leaves them
    # (decided once before planning: the landing prediction sees the marks the guard will really set), and the
    # nodes that decision took as about to be relieved (the plan may relieve any of them)
    marks_ahead: Mapping[str, Node] = field(default_factory=dict)
    relievable: frozenset[str] = frozenset()
    # nodes whose ``load`` usage (CPU, memory) is the reading corrected by earlier reliefs still in its reach
    # (the reading, the corrected value and why); ``in_flight_off``: why no correction could be made this cycle
    in_flight: Mapping[str, Correction] = field(default_factory=dict)
    in_flight_off: str | None = None
    pod_memory: Mapping[PodKey, int] = field(default_factory=dict)  # working set in bytes (read for memory thresholds)
    # the nodes earlier strategies of this cycle send pods onto (never emptied), and those they empty (never
    # a destination): a node half emptied cannot be removed
    arriving: frozenset[str] = frozenset()
    emptying: frozenset[str] = frozenset()

    def memory_of(self, pod: Pod) -> int | None:
        return self.pod_memory.get(pod.key)

    def pods_on(self, node: str) -> tuple[Pod, ...]:
        return self.pods_by_node.get(node, ())

    def measured_usage(self, node: str) -> int | None:
        """The node's usage as read, before any in-flight correction (None: unknown or not in the snapshot)."""
        correction = self.in_flight.get(node)
        if correction is not None:
            return correction.measured_m
        load = self.load.get(node)
        return None if load is None else load.usage_m

    def measured_memory(self, node: str) -> int | None:
        """The node's memory working set as read, before any in-flight correction (None: unknown or not read)."""
        correction = self.in_flight.get(node)
        if correction is not None and correction.memory is not None:
            return correction.memory.measured
        load = self.load.get(node)
        return None if load is None else load.memory_usage

    def usage_of(self, pod: Pod) -> int | None:
        return self.pod_usage.get(pod.key)

    def pools(self) -> tuple[str, ...]:
        return tuple(sorted(set(self.pool_of.values())))


class PoolResolver:
    """Maps a node to its resource pool (first matching definition, then the label, then default)."""

    def __init__(self, settings: PoolSettings) -> None:
        self._definitions: tuple[tuple[str, LabelSelector], ...] = tuple(
            (d.name, d.node_selector.to_selector()) for d in settings.definitions
        )
        self._label = settings.label
        self._default = settings.default_pool

    def pool_of(self, node: Node) -> str:
        for name, selector in self._definitions:
            if selector.matches(node.labels):
                return name
        if self._label and self._label in node.labels:
            return node.labels[self._label]
        return self._default


def build_snapshot(
    facts: ClusterFacts,
    usage: UsageReport,
    pools: PoolSettings,
    taken_at: float,
    focus: frozenset[str] | None = None,
) -> ClusterSnapshot:
    resolver = PoolResolver(pools)
    nodes = {n.name: n for n in sorted(facts.nodes, key=lambda n: n.name)}
    by_workload = facts.by_workload
    if facts.by_node is not None:
        groups = facts.by_node
    else:  # one pass for both groupings (the scheduler model then counts a workload's pods when asked)
        groups, workloads = group_pods_and_workloads(facts.pods)
        by_workload = MappingProxyType(workloads)
    pods_by_node = {name: groups[name].pods if name in groups else () for name in nodes}
    unbound = tuple(pod for name, group in groups.items() if name not in nodes for pod in group.pods)
    load = {name: _node_load(node, groups.get(name, _NO_PODS), usage) for name, node in nodes.items()}
    return ClusterSnapshot(
        taken_at=taken_at,
        nodes=MappingProxyType(nodes),
        pool_of=MappingProxyType({name: resolver.pool_of(node) for name, node in nodes.items()}),
        pods_by_node=MappingProxyType(pods_by_node),
        load=MappingProxyType(load),
        pod_usage=MappingProxyType(_fresh_pod_usage(usage, pods_by_node)),
        pod_memory=MappingProxyType(copied(usage.pod_memory)) if usage.node_memory is not None else {},
        budgets=facts.budgets,
        usage_failure=usage.failure,
        focus=focus,
        unbound=unbound,
        by_workload=by_workload,
        groups=MappingProxyType(groups),
    )


def copied(mapping: Mapping[PodKey, int]) -> dict[PodKey, int]:
    """A private copy of a pod-keyed mapping. ``dict(m)`` of a read-only proxy goes key by key through the
    mapping protocol (150,000 pod usages: 36 ms in a microbenchmark); a dict, or a proxy of one, is copied
    in C (1.4 ms)."""
    if isinstance(mapping, MappingProxyType | dict):
        with contextlib.suppress(AttributeError):  # a proxy of a mapping without copy()
            found = mapping.copy()
            if type(found) is dict:
                return found
    return dict(mapping)


def _fresh_pod_usage(usage: UsageReport, pods_by_node: Mapping[str, tuple[Pod, ...]]) -> dict[PodKey, int]:
    """The pods' usage, but for the pods on a node whose pod series are known to be old (podSum's freshness
    check: no sample within Prometheus' lookback, or older than maxDataAge): their window statistic is read
    from those old samples (a kubelet whose cAdvisor endpoint stopped answering while node-exporter still
    reads the node), so it is unknown."""
    found = copied(usage.pod_cpu_m)
    fresh = usage.fresh_nodes
    stale = [n for n in pods_by_node if n in usage.pod_sum_problems or (fresh is not None and n not in fresh)]
    for name in stale:
        for pod in pods_by_node[name]:
            found.pop(pod.key, None)
    return found


def group_pods(pods: Iterable[Pod]) -> dict[str, NodePods]:
    """The non-terminal pods by ``node_name`` ("" for none), in the given order, with their request sums
    (what :attr:`ClusterFacts.by_node` holds when the reader keeps it)."""
    return group_pods_and_workloads(pods)[0]


def group_pods_and_workloads(
    pods: Iterable[Pod],
) -> tuple[dict[str, NodePods], dict[WorkloadRef, tuple[Pod, ...]]]:
    """:func:`group_pods`, and the same pods by workload (those with one), in the given order: what
    :attr:`ClusterFacts.by_node` and :attr:`ClusterFacts.by_workload` hold when the reader keeps them."""
    grouped: dict[str, list[Pod]] = {}
    by_workload: dict[WorkloadRef, list[Pod]] = {}
    for pod in pods:
        if pod.phase not in TERMINAL_PHASES:
            node = pod.node_name or ""
            if node in grouped:
                grouped[node].append(pod)
            else:
                grouped[node] = [pod]
            workload = pod.workload
            if workload is not None:
                if workload in by_workload:
                    by_workload[workload].append(pod)
                else:
                    by_workload[workload] = [pod]
    return (
        {node: node_pods(members) for node, members in grouped.items()},
        {workload: tuple(members) for workload, members in by_workload.items()},
    )


def node_pods(pods: Iterable[Pod]) -> NodePods:
    members = tuple(pods)
    cpu = [pod.cpu_request_m for pod in members]
    memory = [pod.memory_request for pod in members]
    inter_pod = len(members) - [pod.pod_affinity for pod in members].count(None)
    return NodePods(members, sum(cpu), sum(memory), cpu.count(0), memory.count(0), inter_pod)


_NO_PODS = NodePods((), 0, 0, 0, 0)


def _node_load(node: Node, group: NodePods, usage: UsageReport) -> NodeLoad:
    pods = group.pods
    pod_sum = missing = 0
    # only a node no node query knows is summed from its pods (5,000 nodes: skip the others)
    if usage.node_from_pods and node.name not in usage.node_cpu_m:
        pod_cpu = usage.pod_cpu_m
        for pod in pods:
            value = pod_cpu.get((pod.namespace, pod.name))
            if value is None:
                if pod.phase == "Running":
                    missing += 1
            else:
                pod_sum += value
    usage_m, why, source = _node_usage(node, usage, pod_sum, missing)
    memory, memory_why = _node_memory(node, usage, why)
    return NodeLoad(group.cpu_request_m, group.memory_request, len(pods), usage_m, why, memory, memory_why, source)


def _node_memory(node: Node, usage: UsageReport, cpu_unknown: str | None) -> tuple[int | None, str | None]:
    """The node's memory working set, when read; unknown with its CPU (the same data, as old or as young)."""
    if usage.node_memory is None:
        return None, None
    if cpu_unknown is not None:
        return None, cpu_unknown
    if node.allocatable_memory <= 0:
        return None, "node reports no allocatable memory"
    value = usage.node_memory.get(node.name)
    if value is None:
        return None, "no memory usage data for this node"
    return value, None


def _node_usage(
    node: Node, usage: UsageReport, pod_sum: int, missing: int
) -> tuple[int | None, str | None, str | None]:
    """The node's usage, why it is unknown, and the node source it came from: the first of the sources that
    knows it (prometheus.nodeSources), the sum of its pods (podSum) last."""
    if usage.failure:
        return None, f"usage source failed: {usage.failure}", None
    if not node.ready:
        return None, "node is not Ready: its usage cannot be trusted", None
    if node.allocatable_cpu_m <= 0:
        return None, "node reports no allocatable CPU", None
    earlier = usage.node_problems.get(node.name)
    value = usage.node_cpu_m.get(node.name)
    if value is not None and earlier is None:
        return value, None, usage.node_source.get(node.name)
    if not usage.node_from_pods:
        return None, earlier or _no_data(usage.sources), None
    if node.name in usage.pod_sum_problems:
        why = usage.pod_sum_problems[node.name]
    elif usage.fresh_nodes is not None and node.name not in usage.fresh_nodes:
        why = "no freshness sample for this node: its pods' data may be old or missing"
    elif missing:
        why = f"usage of {missing} running pod(s) unknown, so the node sum is unknown"
    else:
        return pod_sum, None, POD_SUM
    if len(usage.sources) < 2:  # podSum alone: its reason, as before there was an order of sources
        return None, why, None
    found = earlier or f"no usage data for this node from {', '.join(usage.sources[:-1])}"
    return None, f"{found}; {POD_SUM}: {why}", None


def _no_data(sources: tuple[str, ...]) -> str:
    if len(sources) < 2:
        return "no usage data for this node"
    return f"no usage data for this node from {', '.join(sources)}"


def after_evictions(
    snapshot: ClusterSnapshot, evictions: Iterable[PlannedEviction], emptied: frozenset[str] = frozenset()
) -> ClusterSnapshot:
    """The snapshot as the next strategy of the same cycle must see it: each planned pod moved from its
    node to the node whose room accepted it (usage, requests and pod count), and the disruption budgets
    it spends taken. Strategies so never book the same room or the same budget twice. ``emptied``: the
    nodes the strategy empties (a later one sends nothing there); the moves' destinations are never emptied."""
    moved = {e.key: e for e in evictions}
    if not moved:
        return snapshot if not emptied else replace(snapshot, emptying=snapshot.emptying | emptied)
    load = dict(snapshot.load)
    pods_by_node = dict(snapshot.pods_by_node)
    spent: dict[tuple[str, str], int] = {}  # disruptions planned per budget
    healthy_gone: dict[tuple[str, str], int] = {}  # of them, ready pods
    predicted = snapshot.predicted
    for node in sorted({e.node for e in moved.values()}):  # only the nodes pods leave: not 150,000 pods
        pods = snapshot.pods_on(node)
        leaving = [p for p in pods if p.key in moved]
        if not leaving:
            continue
        pods_by_node[node] = tuple(p for p in pods if p.key not in moved)
        for pod in leaving:
            # the pod's current usage (a predictive strategy planned with its predicted usage)
            usage = snapshot.pod_usage.get(pod.key, moved[pod.key].usage_m)
            memory = snapshot.pod_memory.get(pod.key)
            load[node] = _shifted(load[node], pod, -usage, -1, memory)
            destination = moved[pod.key].room_on
            if destination in load:
                load[destination] = _shifted(load[destination], pod, usage, 1, memory)
            if predicted is not None:
                predicted = predicted.moved(pod.key, node, destination)
            for budget in snapshot.budgets:
                key = (budget.namespace, budget.name)
                if budget.selects(pod) and not budget.lets_go(pod, healthy_gone.get(key, 0)):
                    spent[key] = spent.get(key, 0) + 1
                    healthy_gone[key] = healthy_gone.get(key, 0) + pod.ready
    budgets = tuple(
        msgspec.structs.replace(
            b,
            disruptions_allowed=b.disruptions_allowed - spent.get((b.namespace, b.name), 0),
            current_healthy=b.current_healthy - healthy_gone.get((b.namespace, b.name), 0),
        )
        for b in snapshot.budgets
    )
    return replace(
        snapshot,
        pods_by_node=MappingProxyType(pods_by_node),
        load=MappingProxyType(load),
        budgets=budgets,
        predicted=predicted,
        by_workload=None,  # the moved pods left pods_by_node: counting from it must see that too
        groups=None,
        arriving=snapshot.arriving | {e.room_on for e in moved.values()},
        emptying=snapshot.emptying | emptied,
    )


def _shifted(load: NodeLoad, pod: Pod, usage_m: int, count: int, memory: int | None) -> NodeLoad:
    """The load with ``pod`` added (count 1) or taken away (-1); a pod of unknown memory leaves the node's
    memory unknown (the sum can no longer be told)."""
    sign = 1 if count > 0 else -1
    memory_usage, memory_why = load.memory_usage, load.memory_unknown_reason
    if memory_usage is not None:
        if memory is None:
            memory_usage, memory_why = None, f"memory of moved pod {pod.namespace}/{pod.name} unknown"
        else:
            memory_usage += sign * memory
    return NodeLoad(
        requested_cpu_m=load.requested_cpu_m + sign * pod.cpu_request_m,
        requested_memory=load.requested_memory + sign * pod.memory_request,
        pod_count=load.pod_count + count,
        usage_m=None if load.usage_m is None else load.usage_m + usage_m,
        unknown_reason=load.unknown_reason,
        memory_usage=memory_usage,
        memory_unknown_reason=memory_why,
        usage_source=load.usage_source,
    )
