"""What the limiter engine is asked, what it answers, and what one cycle has reserved so far."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from rebalancer.domain.model import Node, Pod, WorkloadRef

_EMPTY: Mapping[str, int] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class ReplicaCounts:
    """A workload's replicas as the snapshot saw them."""

    desired: int  # spec.replicas
    ready: int  # status.readyReplicas
    unavailable: int  # its pods that exist but are not ready


@dataclass(frozen=True, slots=True)
class EvictionRequest:
    """One planned eviction, as the limiters see it."""

    namespace: str
    pod: str
    node: str
    pool: str
    workload: WorkloadRef | None
    pod_labels: Mapping[str, str] = field(default_factory=dict)
    node_labels: Mapping[str, str] = field(default_factory=dict)
    priority_class: str = ""
    replicas: ReplicaCounts | None = None  # None: unknown (blocks when workload.maxUnavailable is set)
    pod_ready: bool = True  # evicting a pod that is not ready makes no further replica unavailable

    @classmethod
    def of(cls, pod: Pod, node: Node, pool: str, replicas: ReplicaCounts | None = None) -> EvictionRequest:
        return cls(
            namespace=pod.namespace,
            pod=pod.name,
            node=node.name,
            pool=pool,
            workload=pod.workload,
            pod_labels=pod.labels,
            node_labels=node.labels,
            priority_class=pod.priority_class,
            replicas=replicas,
            pod_ready=pod.ready,
        )

    @property
    def workload_key(self) -> str | None:
        """``Kind/namespace/name`` of the workload, as stored in the limiter state."""
        return str(self.workload) if self.workload is not None else None


@dataclass(frozen=True, slots=True)
class CycleCounts:
    """Evictions this cycle already reserved: in total, per pool, per node, per workload key and per
    namespace; and per workload the evicted pods that were ready (they still count as ready in the cycle's
    snapshot)."""

    total: int = 0
    pools: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    nodes: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    workloads: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    ready_evicted: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    namespaces: Mapping[str, int] = field(default_factory=lambda: _EMPTY)

    def add(self, request: EvictionRequest) -> CycleCounts:
        key = request.workload_key
        return CycleCounts(
            total=self.total + 1,
            pools=_bump(self.pools, request.pool),
            nodes=_bump(self.nodes, request.node),
            workloads=self.workloads if key is None else _bump(self.workloads, key),
            ready_evicted=self.ready_evicted
            if key is None or not request.pod_ready
            else _bump(self.ready_evicted, key),
            namespaces=_bump(self.namespaces, request.namespace),
        )

    def remove(self, request: EvictionRequest) -> CycleCounts:
        """The counts without ``request`` (added before; its eviction did not happen)."""
        key = request.workload_key
        return CycleCounts(
            total=self.total - 1,
            pools=_bump(self.pools, request.pool, -1),
            nodes=_bump(self.nodes, request.node, -1),
            workloads=self.workloads if key is None else _bump(self.workloads, key, -1),
            ready_evicted=self.ready_evicted
            if key is None or not request.pod_ready
            else _bump(self.ready_evicted, key, -1),
            namespaces=_bump(self.namespaces, request.namespace, -1),
        )


def _bump(counts: Mapping[str, int], key: str, by: int = 1) -> Mapping[str, int]:
    out = dict(counts)
    out[key] = out.get(key, 0) + by
    return MappingProxyType(out)


@dataclass(frozen=True, slots=True)
class Verdict:
    """Allowed (``limiter`` None), or blocked by ``limiter`` (a stable machine name such as
    ``global.maxPerPeriod[1h]``) with a human ``reason`` and, when time alone can lift the block,
    ``retry_at``: the earliest epoch second at which that limiter could pass (others may still block)."""

    limiter: str | None = None
    reason: str = "allowed"
    retry_at: float | None = None

    @property
    def allowed(self) -> bool:
        return self.limiter is None


ALLOWED = Verdict()
