"""HighNodeUtilization on real CPU usage: empty nodes that are nearly idle onto nodes with real room,
so that a cluster autoscaler can remove them.

No placement prediction here (unlike LowNodeUtilization): the node being emptied is not cordoned, and
under the default scheduler's least-allocated scoring (the only scoring the scheduler model knows) the
replacements would go back to it or to other underutilized nodes. This strategy assumes a scheduler
profile that packs (MostAllocated / RequestedToCapacityRatio), as the descheduler's does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import Field, model_validator

from rebalancer.plan import NodeClass, NodeDecision, PlannedEviction, PodDecision, StrategyResult
from rebalancer.protections import Protections
from rebalancer.settings import FieldProblems, ResourceThresholds
from rebalancer.snapshot import ClusterSnapshot
from strategies.base import Offload, StrategySettings
from strategies.candidates import BudgetLedger, Candidate, screen
from strategies.placement import RoomTracker
from strategies.thresholds import Band, PoolThresholds, cap_millis, classify_nodes, pool_bands

KIND = "HighNodeUtilization"


class HighNodeUtilizationSettings(StrategySettings, PoolThresholds):
    """Nodes below thresholds are emptied; destinations must stay under targetThresholds after the moves."""

    kind: Literal["HighNodeUtilization"] = Field(description="Strategy name.")
    target_thresholds: ResourceThresholds = Field(
        default=ResourceThresholds(cpu=70),
        description="Destinations' real usage must stay under this after receiving pods.",
    )
    use_deviation_thresholds: bool | None = Field(
        default=False, description="Deviation thresholds are not supported by HighNodeUtilization."
    )
    number_of_nodes: int = Field(
        default=0, ge=0, description="Act only when more than this many nodes of a pool are underutilized."
    )
    pools: dict[str, PoolThresholds] = Field(default_factory=dict, description="Per-pool thresholds.")
    max_nodes_to_empty: int | None = Field(
        default=None, ge=1, description="At most this many nodes emptied per cycle (per strategy)."
    )

    @model_validator(mode="after")
    def _valid(self) -> HighNodeUtilizationSettings:
        problems: list[tuple[str, str]] = []
        every = [("", self), *((f"pools.{k}.", v) for k, v in self.pools.items())]
        for prefix, pool_settings in every:
            if pool_settings.use_deviation_thresholds:
                problems.append((f"{prefix}useDeviationThresholds", f"not supported by {KIND}"))
            elif (problem := pool_settings.order_problem(False)) is not None:
                problems.append((prefix + problem[0], problem[1]))
        if problems:
            raise FieldProblems(problems)
        return self


def _decide(pct: float, band: Band) -> tuple[NodeClass, str]:
    if pct < band.low_pct:
        return (
            NodeClass.COLD,
            f"usage {pct:.1f}% < threshold {band.low_pct:.1f}%: underutilized, to be emptied",
        )
    return NodeClass.NORMAL, f"usage {pct:.1f}% >= threshold {band.low_pct:.1f}%"


@dataclass(frozen=True, slots=True)
class HighNodeUtilization:
    settings: HighNodeUtilizationSettings

    @property
    def name(self) -> str:
        return KIND

    def plan(
        self, snapshot: ClusterSnapshot, protections: Protections, offload: Offload | None = None
    ) -> StrategyResult:
        del offload  # nothing here is worth a second CPU
        s = self.settings
        bands = pool_bands(snapshot, s, s.pools, False)
        decisions = classify_nodes(snapshot, KIND, bands, _decide)
        ordered = tuple(decisions.values())
        if snapshot.usage_failure:
            return StrategyResult(KIND, (), ordered, (), (f"no evictions: {snapshot.usage_failure}",))
        if snapshot.focus is not None:
            return StrategyResult(KIND, (), ordered, (), ("not run: this cycle relieves the nodes an alert named",))
        notes: list[str] = []
        evictions: list[PlannedEviction] = []
        pod_decisions: list[PodDecision] = []
        ledger = BudgetLedger(snapshot.budgets)
        emptied = 0
        for pool in snapshot.pools():
            in_pool = [d for d in ordered if d.pool == pool]
            low = sorted((d for d in in_pool if d.node_class is NodeClass.COLD), key=lambda d: d.usage_pct or 0.0)
            if len(low) <= s.number_of_nodes:
                notes.append(
                    f"pool {pool}: {len(low)} underutilized node(s), not more than numberOfNodes {s.number_of_nodes}"
                )
                continue
            caps = {
                d.node: cap_millis(d.allocatable_m, d.high_pct or 0.0)
                for d in in_pool
                if d.node_class is NodeClass.NORMAL
            }
            tracker = RoomTracker(snapshot, caps, pack=True)
            for decision in low:
                if s.max_nodes_to_empty is not None and emptied >= s.max_nodes_to_empty:
                    notes.append(f"maxNodesToEmpty {s.max_nodes_to_empty} reached")
                    break
                chosen, records = _empty(decision, snapshot, protections, ledger, tracker)
                pod_decisions.extend(records)
                if chosen:
                    evictions.extend(chosen)
                    emptied += 1
        return StrategyResult(KIND, tuple(evictions), ordered, tuple(pod_decisions), tuple(notes))


def _empty(
    decision: NodeDecision,
    snapshot: ClusterSnapshot,
    protections: Protections,
    ledger: BudgetLedger,
    tracker: RoomTracker,
) -> tuple[list[PlannedEviction], list[PodDecision]]:
    """All of the node's movable pods, or none: a node half emptied cannot be removed."""
    node = decision.node
    candidates, records, blocking = screen(KIND, node, snapshot, protections, ledger, need_usage=False)
    if blocking:
        pod, why = blocking[0]
        reason = f"node cannot be emptied: {pod} stays ({why})"
        return [], records + [_passed(c, node, reason) for c in candidates]
    if not candidates:
        return [], records
    room_checkpoint, budget_checkpoint = tracker.checkpoint(), ledger.checkpoint()
    placed: list[tuple[Candidate, str]] = []
    for candidate in sorted(candidates, key=lambda c: -c.usage_m):  # best-fit decreasing
        placement = tracker.find(candidate.pod, candidate.usage_m, exclude=(node,))
        blocked = ledger.blocker(candidate.pod)
        if placement.node is None or blocked is not None:
            tracker.rollback(room_checkpoint)
            ledger.rollback(budget_checkpoint)
            why = blocked or f"has nowhere to go ({placement.reason})"
            reason = f"node cannot be emptied: {candidate.pod} {why}"
            return [], records + [_passed(c, node, reason) for c in candidates]
        tracker.commit(placement.node, candidate.pod, candidate.usage_m)
        ledger.take(candidate.pod)
        placed.append((candidate, placement.node))
    tracker.remove(node)
    chosen = []
    for candidate, room_on in placed:
        reason = f"emptying {node} ({decision.usage_pct:.1f}% < {decision.low_pct:.1f}%); room on {room_on}"
        records.append(
            PodDecision(KIND, candidate.pod.namespace, candidate.pod.name, node, True, reason, candidate.usage_m)
        )
        pod = candidate.pod
        chosen.append(
            PlannedEviction(
                KIND,
                pod.namespace,
                pod.name,
                pod.uid,
                node,
                decision.pool,
                pod.workload,
                candidate.usage_m,
                reason,
                room_on,
            )
        )
    return chosen, records


def _passed(candidate: Candidate, node: str, reason: str) -> PodDecision:
    pod = candidate.pod
    return PodDecision(KIND, pod.namespace, pod.name, node, False, reason, candidate.usage_m)
