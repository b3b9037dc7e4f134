"""DeletionCostSteering: rebalance with zero evictions by steering the ReplicaSet controller's scale-downs.

Each selected pod gets a ``controller.kubernetes.io/pod-deletion-cost`` computed from where it runs: a
base cost per pool (say a pay-as-you-go pool 0, a reserved pool 100000) plus a term that is lower on
hotter nodes (``utilizationWeight`` points per percent of CPU the node has left). The next scale-down
(by hand or by an HPA) then deletes the pods of the costly pool and of the hot nodes first. Pure: the
planner returns the cost patches and why; ``rebalancer.actions.steerer`` applies them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import Field

from rebalancer.domain.labels import LabelSelector
from rebalancer.domain.model import (
    DELETION_COST_ANNOTATION,
    INT32_MAX,
    INT32_MIN,
    Pod,
    WorkloadRef,
    parse_deletion_cost,
)
from rebalancer.domain.settings.shared import LabelSelectorSpec, Model, NamespaceFilter
from rebalancer.planning.plan import PlannedCostPatch, PodDecision, StrategyResult
from rebalancer.planning.predicted import ClassifyBy
from rebalancer.planning.protections import DELETION_COST_OWNER_ANNOTATION, Protections, foreign_deletion_cost
from rebalancer.planning.snapshot import ClusterSnapshot
from rebalancer.planning.usage_view import usage_view
from strategies.base import StrategySettings

KIND = "DeletionCostSteering"
Int32 = Annotated[int, Field(ge=INT32_MIN, le=INT32_MAX)]


class PatchRate(Model):
    """A token bucket: ``burst`` patches at once, then ``perSecond`` (the steerer paces its writes by it)."""

    per_second: float = Field(default=5.0, gt=0, le=1000, description="Steady rate of annotation patches.")
    burst: int = Field(default=10, ge=1, le=10000, description="Patches allowed back to back.")


class DeletionCostSteeringSettings(StrategySettings):
    """Set pod-deletion-cost so that scale-downs remove pods from hot nodes and costly pools first."""

    kind: Literal["DeletionCostSteering"] = Field(description="Strategy name.")
    namespaces: NamespaceFilter = Field(
        default_factory=NamespaceFilter,
        description="Namespaces whose workloads are steered (besides protections.evictableNamespaces).",
    )
    label_selector: LabelSelectorSpec | None = Field(
        default=None, description="When set, only pods matching it are steered (besides protections.labelSelector)."
    )
    pool_costs: dict[str, Int32] = Field(
        default_factory=dict,
        description="Base cost per pool (or per value of costLabel): a higher cost keeps pods there longer. "
        "For example {payg: 0, reserved: 100000}: scale-downs empty the pay-as-you-go pool first.",
    )
    default_pool_cost: Int32 = Field(default=0, description="Base cost of a pool poolCosts does not name.")
    cost_label: str | None = Field(
        default=None,
        min_length=1,
        description="Node label whose value picks the base cost in poolCosts (default: the node's pool, see pools).",
    )
    utilization_weight: int = Field(
        default=10,
        ge=0,
        le=1_000_000,
        description="Cost points per percent of CPU the node has left: pods on hotter nodes get lower costs and go "
        "first. Keep weight x 100 below the gaps between poolCosts for the pools to come first.",
    )
    classify_by: ClassifyBy = Field(
        default="current",
        description="Node usage the term reads: current, predicted (the predictor's next peak) or max.",
    )
    min_change: int = Field(
        default=1,
        ge=1,
        description="Patch only when the cost moves by at least this much (fewer writes as usage drifts).",
    )
    overwrite_foreign: bool = Field(
        default=False,
        description="Overwrite a pod-deletion-cost someone else set (one rebalancer did not record in its "
        f"{DELETION_COST_OWNER_ANNOTATION} annotation). Off: such pods are left alone.",
    )
    max_patches_per_cycle: int = Field(
        default=100,
        ge=1,
        le=100_000,
        description="At most this many pods are patched per cycle, the largest changes first.",
    )
    rate: PatchRate = Field(default_factory=PatchRate, description="Pace of the patches within a cycle.")


def clamp_int32(value: int) -> int:
    return max(INT32_MIN, min(INT32_MAX, value))


@dataclass(frozen=True, slots=True)
class DeletionCostSteering:
    settings: DeletionCostSteeringSettings

    @property
    def name(self) -> str:
        return KIND

    def plan(self, snapshot: ClusterSnapshot, protections: Protections) -> StrategyResult:
        s = self.settings
        view = usage_view(snapshot, s.classify_by)
        if view.usage_failure is not None:  # costs are left as they are rather than computed from other numbers
            return StrategyResult(KIND, (), (), (), (f"no patches: {view.usage_failure}",))
        selector = s.label_selector.to_selector() if s.label_selector else None
        candidates = [p for p in _pods(snapshot) if _in_scope(p, s.namespaces, selector)]
        opted_out = _opted_out_workloads(snapshot, candidates, protections)
        decisions: list[PodDecision] = []
        patches: list[PlannedCostPatch] = []
        unchanged = 0
        node_costs: dict[str, tuple[int, str]] = {}  # one computation per node, not per pod
        for pod in candidates:
            assert pod.node_name is not None
            why = self._skip(pod, view, protections, opted_out)
            if why is not None:
                decisions.append(PodDecision(KIND, pod.namespace, pod.name, pod.node_name, False, why, None))
                continue
            if pod.node_name not in node_costs:
                node_costs[pod.node_name] = self._cost(view, pod.node_name)
            cost, reason = node_costs[pod.node_name]
            current = pod.annotations.get(DELETION_COST_ANNOTATION)
            if current is not None and abs(parse_deletion_cost(current)[0] - cost) < s.min_change and _valid(current):
                unchanged += 1
                continue
            pool = view.pool_of.get(pod.node_name, "")
            owned = current is not None and pod.annotations.get(DELETION_COST_OWNER_ANNOTATION) == current
            patches.append(
                PlannedCostPatch(
                    KIND,
                    pod.namespace,
                    pod.name,
                    pod.uid,
                    pod.node_name,
                    pool,
                    pod.workload,
                    current,
                    owned,
                    cost,
                    reason,
                )
            )
        patches.sort(key=lambda p: (-_change(p), p.namespace, p.name))
        kept, over = patches[: s.max_patches_per_cycle], patches[s.max_patches_per_cycle :]
        decisions += [PodDecision(KIND, p.namespace, p.name, p.node, True, p.reason, None) for p in kept]
        later = f"over maxPatchesPerCycle {s.max_patches_per_cycle}: next cycle"
        decisions += [PodDecision(KIND, p.namespace, p.name, p.node, False, later, None) for p in over]
        notes = [f"{len(candidates)} pod(s) of ReplicaSets in scope, {unchanged} already at their cost, "
                 f"{len(kept)} to patch"]  # fmt: skip
        if over:
            notes.append(f"{len(over)} change(s) left for later cycles (maxPatchesPerCycle {s.max_patches_per_cycle})")
        return StrategyResult(KIND, (), (), tuple(decisions), tuple(notes), cost_patches=tuple(kept))

    def _skip(
        self, pod: Pod, view: ClusterSnapshot, protections: Protections, opted_out: dict[WorkloadRef, str]
    ) -> str | None:
        why = protections.steering_reason(pod)
        if why is not None:
            return why
        if pod.workload is not None and pod.workload in opted_out:
            return f"workload {pod.workload} opted out: {opted_out[pod.workload]}"
        foreign = foreign_deletion_cost(pod.annotations)
        if foreign is not None and not self.settings.overwrite_foreign:
            return f"pod-deletion-cost {foreign!r} was set by someone else (overwriteForeign is off)"
        assert pod.node_name is not None
        load = view.load.get(pod.node_name)
        if load is None or load.usage_m is None:
            reason = load.unknown_reason if load is not None else "node not in the snapshot"
            return f"usage of node {pod.node_name} unknown ({reason}): its cost is left as it is"
        return None

    def _cost(self, view: ClusterSnapshot, node_name: str) -> tuple[int, str]:
        s = self.settings
        node = view.nodes[node_name]
        key = node.labels.get(s.cost_label, "") if s.cost_label else view.pool_of.get(node_name, "")
        base = s.pool_costs.get(key, s.default_pool_cost)
        usage_m = view.load[node_name].usage_m
        assert usage_m is not None
        pct = 100.0 * usage_m / node.allocatable_cpu_m if node.allocatable_cpu_m > 0 else 100.0
        term = round(s.utilization_weight * (100.0 - pct))
        cost = clamp_int32(base + term)
        what = f"{s.cost_label}={key}" if s.cost_label else f"pool {key}"
        return cost, f"{what} base {base} + {s.utilization_weight} x (100 - {pct:.1f}% CPU used) = {cost}"


def _pods(snapshot: ClusterSnapshot) -> Iterable[Pod]:
    """Running pods of ReplicaSets on known nodes: the only pods whose deletion cost matters to a scale-down
    (Pending pods are deleted first whatever their cost). In a cycle focused on an alert's nodes, only theirs."""
    for node in sorted(snapshot.focus & snapshot.nodes.keys()) if snapshot.focus is not None else snapshot.nodes:
        for pod in snapshot.pods_on(node):
            if pod.owner_kind == "ReplicaSet" and pod.phase == "Running":
                yield pod


def _in_scope(pod: Pod, namespaces: NamespaceFilter, selector: LabelSelector | None) -> bool:
    if namespaces.include and pod.namespace not in namespaces.include:
        return False
    if pod.namespace in namespaces.exclude:
        return False
    return selector is None or selector.matches(pod.labels)


def _opted_out_workloads(
    snapshot: ClusterSnapshot, pods: Iterable[Pod], protections: Protections
) -> dict[WorkloadRef, str]:
    """The workloads of ``pods`` left alone whole because any of their pods opted out (a template annotation
    reaches every pod of the template; during a rollout only the new ones carry it), wherever that pod is:
    on a node the cycle does not steer (an alert's cycle steers its nodes' pods), or not running yet."""
    wanted = {pod.workload for pod in pods if pod.workload is not None}
    out: dict[WorkloadRef, str] = {}
    for pod in _pods_of(snapshot, wanted):
        if pod.workload is None or pod.workload in out:
            continue
        why = protections.steering_opt_out(pod.annotations)
        if why is not None:
            out[pod.workload] = f"{pod}: {why}"
    return out


def _pods_of(snapshot: ClusterSnapshot, workloads: set[WorkloadRef]) -> Iterable[Pod]:
    """The non-terminal pods of ``workloads``, bound or not."""
    if snapshot.by_workload is not None:
        for workload in workloads:
            yield from snapshot.by_workload.get(workload, ())
        return
    for pods in (*snapshot.pods_by_node.values(), snapshot.unbound):
        yield from (pod for pod in pods if pod.workload in workloads)


def _valid(text: str) -> bool:
    return parse_deletion_cost(text)[1]


def _change(patch: PlannedCostPatch) -> int:
    return abs(patch.cost - parse_deletion_cost(patch.current)[0])
