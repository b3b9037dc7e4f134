"""HighNodeUtilization on real usage: empty nodes that are nearly idle onto nodes with real room, so that a
cluster autoscaler can remove them.

What is underutilized. CPU, and memory and pod count where the thresholds name them: as in the community
descheduler, a node is underutilized only when every resource named is under its threshold, and a node of
unknown usage in any of them is never emptied on a guess. A destination must keep every resource named
under targetThresholds with the whole group added (:class:`~strategies.resources.ExtraRoom` beside the CPU
room); a pod of unknown memory keeps its node, as its room on a destination cannot be told.

Where the group goes. The node is not cordoned, so its replacements can come right back: with its pods
gone it is the least requested node and holds none of their workloads' pods. With ``predictPlacement``
(the default) the replacements are placed one after another by the scheduler model
(:mod:`strategies.group_landing`), and the node is emptied only when the probability that any of them
lands back on it, on another underutilized node, or on a destination without the real-usage room is at
most ``maxLandingRisk``; each move's usage is committed to its predicted landing (``room_on`` and
``landing`` name the same node). The model scores as the default scheduler does (least allocated): a
cluster whose scheduler profile packs (``MostAllocated``, ``RequestedToCapacityRatio``) sets
``predictPlacement: false``, and then any destination with room is enough (a
:class:`~strategies.placement.RoomTracker` search, best fit decreasing).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from pydantic import Field, model_validator

from rebalancer.domain.settings.shared import FieldProblems, ResourceThresholds
from rebalancer.planning.plan import NodeClass, NodeDecision, PlannedEviction, PodDecision, StrategyResult
from rebalancer.planning.protections import Protections
from rebalancer.planning.snapshot import ClusterSnapshot
from strategies.base import StrategySettings, percentage_of_nodes_to_score_field
from strategies.by_requests import ByRequests, view
from strategies.candidates import BudgetLedger, Candidate, screen
from strategies.every_target import UNKNOWN_MEMORY, placement_under_every_target, split_unknown_memory
from strategies.group_landing import GroupLanding
from strategies.landing import LandingPredictor, LandingVerdict, percent
from strategies.placement import RoomTracker
from strategies.resources import ExtraRoom, bands_named, target_amount
from strategies.thresholds import (
    Band,
    NodeClasses,
    PoolThresholds,
    names_memory,
    pool_bands,
    thresholds_problems,
)

KIND = "HighNodeUtilization"
ARRIVING = "an earlier strategy of this cycle sends a pod onto it"


class HighNodeUtilizationSettings(StrategySettings, PoolThresholds):
    """Nodes below thresholds are emptied; destinations must stay under targetThresholds after the moves."""

    kind: Literal["HighNodeUtilization"] = Field(description="Strategy name.")
    target_thresholds: ResourceThresholds = Field(
        default=ResourceThresholds(cpu=70),
        description="Destinations' usage must stay under this after receiving the group, on every resource "
        "named (memory and pods: named here and in thresholds, or in neither).",
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
    predict_placement: bool = Field(
        default=True,
        description="Predict where the default scheduler puts the replacements of the node's group, placed one "
        "after another as they are created together (the node being emptied stays schedulable and, its pods "
        "gone, is the least requested), and empty the node only when the probability that any replacement lands "
        "back on it, on another underutilized node or on a destination without the real-usage room is at most "
        "maxLandingRisk; otherwise the node is passed over, its pods' records naming the likely landing. false: "
        "any destination with room is enough; set it when the cluster's scheduler profile packs (MostAllocated or "
        "RequestedToCapacityRatio scoring), which the model does not score.",
    )
    max_landing_risk: float = Field(
        default=0.1,
        ge=0.0,
        lt=1.0,
        description="With predictPlacement: the highest accepted probability that some replacement of the node's "
        "group lands where the move empties nothing (back on the node, on another underutilized node, on a node "
        "of another pool or of unknown usage, or on a destination without the real-usage room). 0: no chance of "
        "a bad landing is accepted.",
    )
    percentage_of_nodes_to_score: int | None = percentage_of_nodes_to_score_field()
    classify_by: Literal["current"] | ByRequests = Field(
        default="current",
        description="What usage means for classes and room: current (the usage window read now; memory: the "
        "working set) or requests (the pods' CPU and memory requests, as the community descheduler reads "
        "utilization).",
    )

    @model_validator(mode="after")
    def _valid(self) -> HighNodeUtilizationSettings:
        every = [("", self), *((f"pools.{k}.", v) for k, v in self.pools.items())]
        problems = [
            (f"{prefix}useDeviationThresholds", f"not supported by {KIND}")
            for prefix, pool_settings in every
            if pool_settings.use_deviation_thresholds
        ]
        if not problems:
            problems = thresholds_problems(self, self.pools, False, targets_select_hot=False)
        if problems:
            raise FieldProblems(problems)
        return self

    def reads_memory_usage(self) -> bool:
        """Some thresholds name memory and the usage window is read: the memory working set is needed."""
        return self.enabled and self.classify_by == "current" and names_memory(self, self.pools)


def _class_of(pct: float, band: Band) -> NodeClass:
    return NodeClass.COLD if pct < band.low_pct else NodeClass.NORMAL


def _decider(usage: str) -> Callable[[float, Band], tuple[NodeClass, str]]:
    def decide(pct: float, band: Band) -> tuple[NodeClass, str]:
        if _class_of(pct, band) is NodeClass.COLD:
            # with memory or pods, the node is underutilized only if they are too: their reasons follow
            verdict = "" if band.extra else ": underutilized, to be emptied"
            return NodeClass.COLD, f"{usage} {pct:.1f}% < threshold {band.low_pct:.1f}%{verdict}"
        return NodeClass.NORMAL, f"{usage} {pct:.1f}% >= threshold {band.low_pct:.1f}%"

    return decide


@dataclass(frozen=True, slots=True)
class HighNodeUtilization:
    settings: HighNodeUtilizationSettings

    @property
    def name(self) -> str:
        return KIND

    def plan(self, snapshot: ClusterSnapshot, protections: Protections) -> StrategyResult:
        s = self.settings
        snapshot = view(snapshot, s.classify_by)
        classes = self._classes(snapshot)
        if snapshot.focus is not None:
            note = f"no evictions: {snapshot.usage_failure}" if snapshot.usage_failure else None
            why = note or "not run: this cycle relieves the nodes an alert named"
            return StrategyResult(KIND, (), classes.reported(), (), (why,))
        ordered = classes.decisions()
        decisions = {d.node: d for d in ordered}
        if snapshot.usage_failure:
            return StrategyResult(KIND, (), ordered, (), (f"no evictions: {snapshot.usage_failure}",))
        notes: list[str] = []
        evictions: list[PlannedEviction] = []
        pod_decisions: list[PodDecision] = []
        ledger = BudgetLedger(snapshot.budgets)
        predictor = self._predictor(snapshot, decisions) if s.predict_placement else None
        extra = classes.extra_room()
        emptied: list[str] = []
        landing_back = 0
        for pool in snapshot.pools():
            in_pool = [d for d in ordered if d.pool == pool]
            low = sorted((d for d in in_pool if d.node_class is NodeClass.COLD), key=lambda d: d.usage_pct or 0.0)
            if len(low) <= s.number_of_nodes:
                notes.append(
                    f"pool {pool}: {len(low)} underutilized node(s), not more than numberOfNodes {s.number_of_nodes}"
                )
                continue
            tracker = RoomTracker(snapshot, _caps(in_pool, snapshot.emptying), pack=True)
            for decision in low:
                if s.max_nodes_to_empty is not None and len(emptied) >= s.max_nodes_to_empty:
                    notes.append(f"maxNodesToEmpty {s.max_nodes_to_empty} reached")
                    break
                group = _Group(decision, tracker, ledger, predictor, s.max_landing_risk, extra)
                chosen, records = group.empty(snapshot, protections)
                pod_decisions.extend(records)
                landing_back += group.landed_back
                if chosen:
                    evictions.extend(chosen)
                    emptied.append(decision.node)
        if landing_back:
            notes.append(
                f"{landing_back} node(s) passed over: a replacement is predicted to land back on the node or off the "
                "destinations (the default scheduler's least-allocated scoring; with a scheduler profile that packs, "
                "set predictPlacement: false)"
            )
        return StrategyResult(
            KIND, tuple(evictions), ordered, tuple(pod_decisions), tuple(notes), emptied=frozenset(emptied)
        )

    def memory_sources(self, snapshot: ClusterSnapshot) -> frozenset[str]:
        """The nodes whose pods' memory a plan on ``snapshot`` needs: the underutilized ones it may empty
        (none in an alert's cycle, which this strategy does not run). Destinations are weighed by their
        node's own memory reading."""
        if snapshot.focus is not None:
            return frozenset()
        return frozenset(self._classes(view(snapshot, self.settings.classify_by)).named(NodeClass.COLD))

    def _classes(self, snapshot: ClusterSnapshot) -> NodeClasses:
        s = self.settings
        bands = pool_bands(snapshot, s, s.pools, False)
        usage = "CPU requests" if s.classify_by == "requests" else "usage"
        return NodeClasses(snapshot, KIND, bands, _class_of, _decider(usage), targets_select_hot=False)

    def _predictor(self, snapshot: ClusterSnapshot, decisions: dict[str, NodeDecision]) -> LandingPredictor:
        """Destinations: the nodes that are not underutilized, with the room their real usage has under
        targetThresholds (of the emptied node's pool; unknown usage: never a destination)."""
        room = {}
        for name, cap in _caps(decisions.values(), snapshot.emptying).items():
            usage_m = snapshot.load[name].usage_m
            if usage_m is not None:
                room[name] = cap - usage_m
        s = self.settings
        return LandingPredictor(
            snapshot,
            {name: d.node_class for name, d in decisions.items()},
            room,
            marked=snapshot.marks_ahead,  # the landing guard's marks, as it will set them before the evictor
            same_pool=True,
            max_risk=s.max_landing_risk,
            percentage_of_nodes_to_score=s.percentage_of_nodes_to_score,
        )


def _caps(decisions: Iterable[NodeDecision], emptying: frozenset[str]) -> dict[str, int]:
    """The destinations (nodes that are not underutilized, nor emptied by an earlier strategy of the cycle)
    and the real usage each may reach."""
    return {
        d.node: target_amount(d.allocatable_m, d.high_pct or 0.0)
        for d in decisions
        if d.node_class is NodeClass.NORMAL and d.node not in emptying
    }


@dataclass(frozen=True, slots=True)
class _Placed:
    """A move of the group: its destination, its predicted landing (None: not predicted), and why there."""

    candidate: Candidate
    room_on: str
    landing: str | None
    room: str


@dataclass(frozen=True, slots=True)
class _Refused:
    """Why the group stays, and whether it is that a replacement would land back on the node."""

    why: str
    lands_back: bool = False


@dataclass(slots=True)
class _Group:
    """One underutilized node's movable pods, emptied all together or not at all."""

    decision: NodeDecision
    tracker: RoomTracker
    ledger: BudgetLedger
    predictor: LandingPredictor | None
    max_risk: float
    extra: ExtraRoom | None  # memory and pods room under their targets, when the thresholds name them
    landed_back: bool = False  # passed over because a replacement is predicted to land back or elsewhere

    def empty(
        self, snapshot: ClusterSnapshot, protections: Protections
    ) -> tuple[list[PlannedEviction], list[PodDecision]]:
        """All of the node's movable pods, or none: a node half emptied cannot be removed."""
        node = self.decision.node
        candidates, records, blocking = screen(KIND, node, snapshot, protections, self.ledger, need_usage=False)
        if node in snapshot.arriving:
            reason = f"node cannot be emptied: {ARRIVING}"
            return [], records + [_passed(c, node, reason) for c in candidates]
        if blocking:
            pod, why = blocking[0]
            reason = f"node cannot be emptied: {pod} stays ({why})"
            return [], records + [_passed(c, node, reason) for c in candidates]
        if not candidates:
            return [], records
        unknown = self._unknown_memory(candidates, snapshot)
        if unknown is not None:
            reason = f"node cannot be emptied: {unknown.pod} stays ({UNKNOWN_MEMORY})"
            return [], records + [_passed(c, node, reason) for c in candidates]
        ordered = sorted(candidates, key=lambda c: -c.usage_m)  # best-fit decreasing
        room_checkpoint, budget_checkpoint = self.tracker.checkpoint(), self.ledger.checkpoint()
        extra_checkpoint = self.extra.checkpoint() if self.extra is not None else 0
        group = (
            None
            if self.predictor is None
            else GroupLanding(self.predictor, node, [c.pod for c in ordered], self.max_risk, self.extra)
        )
        placed: list[_Placed] = []
        for candidate in ordered:
            where = self._place(candidate, group)
            if isinstance(where, _Refused):
                self.tracker.rollback(room_checkpoint)
                self.ledger.rollback(budget_checkpoint)
                if self.extra is not None:
                    self.extra.rollback(extra_checkpoint)
                if group is not None:
                    group.abandon()
                reason = f"node cannot be emptied: {candidate.pod} {where.why}"
                back = where.lands_back
                return [], records + [_passed(c, node, reason, lands_back=back and c is candidate) for c in candidates]
            if where.room_on in self.tracker:
                self.tracker.commit(where.room_on, candidate.pod, candidate.usage_m)
            if self.extra is not None:
                self.extra.commit(where.room_on, candidate.pod)
            self.ledger.take(candidate.pod)
            placed.append(where)
        self.tracker.remove(node)
        return self._evictions(placed, records, group)

    def _place(self, candidate: Candidate, group: GroupLanding | None) -> _Placed | _Refused:
        """Where ``candidate``'s move goes: some destination with room, and with a group prediction the
        one its replacement most probably lands on; or why the group stays."""
        node = self.decision.node
        placement = self.tracker.find(candidate.pod, candidate.usage_m, exclude=(node,))
        if self.extra is not None and placement.node is not None:
            placement = placement_under_every_target(self.tracker, self.extra, candidate, node, placement)
        blocked = self.ledger.blocker(candidate.pod)
        if blocked is not None:
            return _Refused(blocked)
        if placement.node is None:
            return _Refused(f"has nowhere to go ({placement.reason})")
        if group is None:
            return _Placed(candidate, placement.node, None, f"room on {placement.node}")
        predicted = group.land(candidate)
        if predicted.node is None:
            self.landed_back = True
            return _Refused(f"replacement: {predicted.reason}", predicted.refused is LandingVerdict.BACK)
        return _Placed(candidate, predicted.node, predicted.node, predicted.reason)

    def _unknown_memory(self, candidates: list[Candidate], snapshot: ClusterSnapshot) -> Candidate | None:
        """A pod of unknown memory, when the node's thresholds name memory: it keeps the node (its room on a
        destination cannot be told)."""
        if self.extra is None or "memory" not in bands_named(self.extra.bands_of(self.decision.node)):
            return None
        unknown = split_unknown_memory(candidates, snapshot)[1]
        return unknown[0] if unknown else None

    def _evictions(
        self,
        placed: list[_Placed],
        records: list[PodDecision],
        group: GroupLanding | None,
    ) -> tuple[list[PlannedEviction], list[PodDecision]]:
        d = self.decision
        risk = "" if group is None else f"; the group's landing risk {percent(group.risk)}"
        chosen = []
        for move in placed:
            candidate = move.candidate
            reason = f"emptying {d.node} ({_under_thresholds(d)}); {move.room}{risk}"
            pod = candidate.pod
            records.append(PodDecision(KIND, pod.namespace, pod.name, d.node, True, reason, candidate.usage_m))
            chosen.append(
                PlannedEviction(
                    KIND, pod.namespace, pod.name, pod.uid, d.node, d.pool, pod.workload, candidate.usage_m,
                    reason, move.room_on, move.landing,
                )
            )  # fmt: skip
        return chosen, records


def _under_thresholds(d: NodeDecision) -> str:
    """What makes the node underutilized: "12.0% < 20.0%", and "memory 5.0% < 20.0%" beside it."""
    parts = [f"{d.usage_pct:.1f}% < {d.low_pct:.1f}%"]
    parts += [f"{use.resource} {use.pct:.1f}% < {use.low_pct:.1f}%" for use in d.others if use.pct is not None]
    return ", ".join(parts)


def _passed(candidate: Candidate, node: str, reason: str, *, lands_back: bool = False) -> PodDecision:
    pod = candidate.pod
    return PodDecision(KIND, pod.namespace, pod.name, node, False, reason, candidate.usage_m, lands_back)
