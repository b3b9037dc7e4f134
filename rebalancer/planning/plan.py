"""What strategies return: planned evictions and the decision record that explains them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, TypeVar

import msgspec

from rebalancer.domain.model import PodKey, WorkloadRef
from rebalancer.planning.inflight import Correction


class NodeClass(StrEnum):
    HOT = "hot"
    COLD = "cold"
    NORMAL = "normal"
    UNKNOWN = "unknown"


class Unrelieved(StrEnum):
    """Why a strategy planned no eviction on a node it classified hot (the efficiency metrics count these)."""

    NO_COLD_NODE = "no-cold-node"  # the pool has no cold node to take the load
    NO_RECEIVER = "no-receiver"  # no node of the pool is under its receiveThresholds to take the load
    NUMBER_OF_NODES = "number-of-nodes"  # not more cold nodes than numberOfNodes
    NO_EVICTABLE_POD = "no-evictable-pod"  # every pod protected, of unknown usage, or without usage
    RECENTLY_MOVED = "recently-moved"  # the only candidates just moved here (bounce-back guard)
    NO_ROOM = "no-room"  # candidates, but no cold node with room accepts any of them
    DISRUPTION_BUDGET = "disruption-budget"  # candidates, but their disruption budgets allow none
    PREDICTED_LANDING = (
        "predicted-landing"  # candidates, but their replacements would land back (or not on a cold node)
    )
    NOT_WORTH = "not-worth-moving"  # candidates, but no move's expected gain clears minExpectedGain


@dataclass(frozen=True, slots=True)
class ResourceUse:
    """A node's use of a resource other than CPU that a strategy's thresholds name (memory in bytes, pods):
    ``used`` and ``pct`` None when unknown."""

    resource: str
    used: int | None
    allocatable: int
    pct: float | None
    low_pct: float
    high_pct: float


@dataclass(frozen=True, slots=True)
class NodeDecision:
    """Why a node got its class from one strategy."""

    strategy: str
    node: str
    pool: str
    node_class: NodeClass
    reason: str
    usage_m: int | None
    allocatable_m: int
    usage_pct: float | None
    low_pct: float | None
    high_pct: float | None
    others: tuple[ResourceUse, ...] = ()  # memory, pods: only when the thresholds name them
    usage_source: str | None = None  # the node source usage_m came from (prometheus.nodeSources)


class PodDecision(msgspec.Struct, frozen=True, gc=False):
    """Why a pod on a node the strategy acted on was chosen or passed over (a struct: a 150,000-pod plan
    makes tens of thousands, and a frozen dataclass costs ten times as much to build)."""

    strategy: str
    namespace: str
    name: str
    node: str
    chosen: bool
    reason: str
    usage_m: int | None
    lands_back: bool = False  # passed over: placement prediction sends its replacement back onto ``node``


@dataclass(frozen=True, slots=True)
class PlannedEviction:
    strategy: str
    namespace: str
    name: str
    uid: str
    node: str
    pool: str
    workload: WorkloadRef | None
    usage_m: int
    reason: str
    room_on: str  # the concrete node whose real room made the move acceptable
    landing: str | None = None  # where the default scheduler is predicted to put the replacement (None: not predicted)

    @property
    def key(self) -> PodKey:
        return (self.namespace, self.name)


@dataclass(frozen=True, slots=True)
class PlannedCostPatch:
    """A pod-deletion-cost to set on a pod (deletion-cost steering): a merge patch of its annotations only.

    ``current``: the annotation's value in the snapshot (None: unset); ``owned``: rebalancer set that value
    (its ownership annotation records it), so changing it overwrites nobody's choice."""

    strategy: str
    namespace: str
    name: str
    uid: str
    node: str
    pool: str
    workload: WorkloadRef | None
    current: str | None
    owned: bool
    cost: int
    reason: str

    @property
    def key(self) -> PodKey:
        return (self.namespace, self.name)


@dataclass(frozen=True, slots=True)
class StrategyResult:
    strategy: str
    evictions: tuple[PlannedEviction, ...]
    node_decisions: tuple[NodeDecision, ...]
    pod_decisions: tuple[PodDecision, ...]
    notes: tuple[str, ...] = ()
    unrelieved: Mapping[str, Unrelieved] = field(default_factory=dict)  # hot node -> why nothing was planned
    cost_patches: tuple[PlannedCostPatch, ...] = ()  # deletion-cost steering: annotations, never evictions
    peak_caps: Mapping[str, int] = field(default_factory=dict)  # node -> predicted peak later moves must not pass
    emptied: frozenset[str] = frozenset()  # nodes emptied whole: later strategies send nothing there


@dataclass(frozen=True, slots=True)
class EvictionPlan:
    """The outcome of planning one cycle. ``blocked`` set: no eviction may happen, and why."""

    taken_at: float
    results: tuple[StrategyResult, ...]
    blocked: str | None = None
    in_flight: tuple[Correction, ...] = ()  # nodes planned on with usage corrected by earlier reliefs, and why
    in_flight_off: str | None = None  # why earlier reliefs could not be counted this cycle

    @property
    def evictions(self) -> tuple[PlannedEviction, ...]:
        return () if self.blocked else _first_per_pod(e for r in self.results for e in r.evictions)

    @property
    def cost_patches(self) -> tuple[PlannedCostPatch, ...]:
        """Every planned pod-deletion-cost, the first strategy's where two name the same pod; none when blocked."""
        return () if self.blocked else _first_per_pod(p for r in self.results for p in r.cost_patches)


class _PerPod(Protocol):
    @property
    def key(self) -> PodKey: ...


_P = TypeVar("_P", bound=_PerPod)


def _first_per_pod(items: Iterable[_P]) -> tuple[_P, ...]:
    """``items`` in order, without a second one for a pod already given."""
    seen: set[PodKey] = set()
    out: list[_P] = []
    for item in items:
        if item.key not in seen:
            seen.add(item.key)
            out.append(item)
    return tuple(out)
