"""Frozen domain types. CPU is integer millicores, memory integer bytes, time epoch seconds.

They are msgspec Structs (frozen, slotted): a cluster holds 150,000 pods, and a Struct is built about
five times faster than a frozen dataclass and is left out of the cyclic garbage collector (gc=False:
none of these objects can take part in a reference cycle).

These are built once by the adapters (``rebalancer.adapters.kube``, ``rebalancer.adapters.prom``) or by test
builders, and never mutated: strategies receive them inside a :class:`ClusterSnapshot`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import msgspec

from rebalancer.domain.labels import LabelSelector, NodeSelectorTerm, PodAffinity, PreferredTerm

SYSTEM_CRITICAL_PRIORITY = 2_000_000_000

DELETION_COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})  # pod phases that hold no node resources

# strconv.ParseInt(value, 10, 32) after the ReplicaSet controller's first-character check: no "+", no leading 0
_DELETION_COST_TEXT = re.compile(r"-[0-9]+|0|[1-9][0-9]*")


def parse_deletion_cost(raw: str | None) -> tuple[int, bool]:
    """The cost the ReplicaSet controller reads from a pod-deletion-cost value, and whether it is valid.

    Absent: (0, True). Invalid (``+5``, ``007``, ``1.5``, ``1_000``, `` 5``, beyond int32): (0, False): the
    controller counts it as 0 (and the API server refuses to store a new invalid value)."""
    if raw is None:
        return 0, True
    if not _DELETION_COST_TEXT.fullmatch(raw):
        return 0, False
    value = int(raw)
    return (value, True) if INT32_MIN <= value <= INT32_MAX else (0, False)


PodKey = tuple[str, str]
"""(namespace, name): the key Prometheus and the Eviction API both use for a pod."""


class WorkloadRef(msgspec.Struct, frozen=True, gc=False):
    """The controller a pod belongs to, resolved through ReplicaSets to Deployments."""

    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"


class Taint(msgspec.Struct, frozen=True, gc=False):
    key: str
    value: str
    effect: str  # NoSchedule | PreferNoSchedule | NoExecute


class Toleration(msgspec.Struct, frozen=True, gc=False):
    key: str  # "" with operator Exists tolerates every taint
    operator: str  # Equal | Exists
    value: str
    effect: str  # "" means every effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.value == taint.value


class Node(msgspec.Struct, frozen=True, gc=False):
    name: str
    labels: Mapping[str, str]
    allocatable_cpu_m: int
    allocatable_memory: int
    allocatable_pods: int
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ready: bool = True
    addresses: tuple[str, ...] = ()  # status.addresses (IPs, host names): how a scrape target names the node
    annotations: Mapping[str, str] = msgspec.field(default_factory=dict)  # only those rebalancer reads (its guard mark)


class Pod(msgspec.Struct, frozen=True, gc=False):
    namespace: str
    name: str
    uid: str
    node_name: str | None
    phase: str
    ready: bool
    workload: WorkloadRef | None  # None: a bare pod, nothing would recreate it
    owner_kind: str | None  # the direct controller's kind (ReplicaSet, DaemonSet, Node, ...)
    priority: int
    priority_class: str
    qos: str  # Guaranteed | Burstable | BestEffort
    cpu_request_m: int
    memory_request: int
    created: float
    restarts: int
    labels: Mapping[str, str] = msgspec.field(default_factory=dict)
    annotations: Mapping[str, str] = msgspec.field(default_factory=dict)  # only the annotations rebalancer reads
    volume_kinds: frozenset[str] = frozenset()  # emptyDir, hostPath, persistentVolumeClaim, ...
    tolerations: tuple[Toleration, ...] = ()
    node_selector: Mapping[str, str] = msgspec.field(default_factory=dict)
    required_affinity: tuple[NodeSelectorTerm, ...] = ()
    terminating: bool = False
    mirror: bool = False
    preferred_affinity: tuple[PreferredTerm, ...] = ()  # preferred node affinity (the scheduler's score)
    pod_affinity: PodAffinity | None = None  # inter-pod affinity and anti-affinity (None: no term)

    @property
    def key(self) -> PodKey:
        return (self.namespace, self.name)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def deletion_cost(self) -> int:
        """The pod-deletion-cost annotation as the ReplicaSet controller reads it (invalid: 0)."""
        return parse_deletion_cost(self.annotations.get(DELETION_COST_ANNOTATION))[0]


class DisruptionBudget(msgspec.Struct, frozen=True, gc=False):
    """A policy/v1 PodDisruptionBudget, with the status the disruption controller computed."""

    namespace: str
    name: str
    selector: LabelSelector | None  # None selects no pod; an empty selector selects all in the namespace
    min_available: int | str | None
    max_unavailable: int | str | None
    disruptions_allowed: int
    current_healthy: int
    desired_healthy: int
    expected_pods: int

    def selects(self, pod: Pod) -> bool:
        return self.selector is not None and pod.namespace == self.namespace and self.selector.matches(pod.labels)

    def lets_go(self, pod: Pod, healthy_gone: int = 0) -> bool:
        """The Eviction API evicts ``pod`` without spending this budget: the pod is not ready and the budget is
        met, its healthy pods (less ``healthy_gone``, those already planned away) at least the desired ones
        (more than none). A pod not ready under a budget not met spends it like a ready one, as with the default
        unhealthyPodEvictionPolicy (IfHealthyBudget; AlwaysAllow, which is not read, would let it go too)."""
        return not pod.ready and 0 < self.desired_healthy <= self.current_healthy - healthy_gone


class NodePods(msgspec.Struct, frozen=True, gc=False):
    """The non-terminal pods bound to one node (in the order of the facts' pods), their request sums,
    how many of them request no CPU / no memory (the scheduler scores those with default requests) and how
    many carry inter-pod terms."""

    pods: tuple[Pod, ...]
    cpu_request_m: int
    memory_request: int
    cpu_unrequested: int
    memory_unrequested: int
    inter_pod: int = 0  # how many carry inter-pod terms (the scheduler model reads only their nodes)


class ClusterFacts(msgspec.Struct, frozen=True, gc=False):
    """What the Kubernetes API said, as read by one snapshot.

    ``by_node`` and ``by_workload``: the same pods, non-terminal ones only, grouped by ``node_name`` (""
    for none) and by workload, when the reader keeps them so (the serve mode's watch cache, event by
    event); None: the snapshot groups them by node, and the evictor finds a workload's pods by a scan."""

    nodes: tuple[Node, ...]
    pods: tuple[Pod, ...]
    budgets: tuple[DisruptionBudget, ...] = ()
    resource_version: str = ""
    by_node: Mapping[str, NodePods] | None = None
    by_workload: Mapping[WorkloadRef, tuple[Pod, ...]] | None = None


class UsageReport(msgspec.Struct, frozen=True, gc=False):
    """Real CPU usage (and memory working set, when asked) as a window statistic, read from Prometheus.

    A node or pod missing from the mappings is *unknown*, never zero. ``failure`` set means the
    source as a whole failed or cannot be trusted: no eviction may follow from this cycle.
    """

    node_cpu_m: Mapping[str, int] = msgspec.field(default_factory=dict)
    pod_cpu_m: Mapping[PodKey, int] = msgspec.field(default_factory=dict)
    node_problems: Mapping[str, str] = msgspec.field(default_factory=dict)  # why the node sources do not know them
    failure: str | None = None
    # the node source that gave each node of node_cpu_m (prometheus.nodeSources' names)
    node_source: Mapping[str, str] = msgspec.field(default_factory=dict)
    # the sum of its pods' usage is a node's usage when no node source before it knows the node (podSum)
    node_from_pods: bool = False
    fresh_nodes: frozenset[str] | None = None  # nodes podSum's freshness query answered for (None: not checked)
    pod_sum_problems: Mapping[str, str] = msgspec.field(default_factory=dict)  # nodes podSum cannot read
    sources: tuple[str, ...] = ()  # the node sources, in the order they were tried
    description: str = ""
    # memory working set in bytes, read only when a strategy has memory thresholds (None: not read)
    node_memory: Mapping[str, int] | None = None
    pod_memory: Mapping[PodKey, int] = msgspec.field(default_factory=dict)

    @classmethod
    def failed(cls, reason: str) -> UsageReport:
        return cls(node_cpu_m={}, pod_cpu_m={}, node_problems={}, failure=reason)
