"""LowNodeUtilization on real CPU usage: cool hot nodes with the fewest evictions onto cold nodes
that really have room.

Where a move goes. With ``predictPlacement`` (the default) a candidate's destination is where the
default scheduler is predicted to put its replacement (:mod:`strategies.landing`: the scheduler model's
landing probabilities, with the pod vacated and the moves already planned this cycle applied). The pod
is chosen only if the probability of landing anywhere but a cold node of the pool
(``destinationsInSamePool``) with the real-usage room is at most ``maxLandingRisk``; the move's usage is
committed to the most probable such node, so ``room_on`` and ``landing`` name the same node, and a later
strategy of the cycle sees the load where it will most probably be. Without prediction, ``room_on``
is any cold node with room (a :class:`~strategies.placement.RoomTracker` search) and ``landing`` is None:
the room is bookkept, but nothing says the scheduler will use it.

How deep. With ``receiveThresholds`` a hot node is relieved down to its receive threshold, not only to
its target (:mod:`strategies.receive`), in two passes: every hot node, hottest first, is brought under
its target, then those relieved go on down with the room left. Pods are chosen, and their gain judged,
on the excess over the receive threshold in both (one pod covering it all is preferred).

Before the peak. With ``classifyBy: predicted`` and the pods' daily profiles (``predictor.nodePeak:
coincident``) the strategy relieves nodes before their coincident peak (:mod:`strategies.before_peak`):
the pods that make the peak leave, a destination is accepted only when its predicted peak with the pod's
replacement stays under target, and the targets of the nodes the plan leaves under them are kept for the
rest of the cycle (``StrategyResult.peak_caps``): a later strategy of the same cycle, a reactive one
included, never moves a pod onto such a node past its target.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Literal

from pydantic import Field, model_validator

from rebalancer.domain.model import PodKey
from rebalancer.domain.settings.shared import Duration, FieldProblems
from rebalancer.planning.plan import NodeClass, NodeDecision, PlannedEviction, PodDecision, StrategyResult, Unrelieved
from rebalancer.planning.predicted import PredictedLoad
from rebalancer.planning.protections import Protections
from rebalancer.planning.snapshot import ClusterSnapshot
from strategies.base import StrategySettings, percentage_of_nodes_to_score_field
from strategies.before_peak import PeakRelief, hold_until_due, over_peak_cap, peak_caps
from strategies.by_requests import UsageBasis, view
from strategies.candidates import BudgetLedger, Candidate, screen
from strategies.every_target import (
    UNKNOWN_MEMORY,
    amount_of,
    cpu_of,
    landing_under_every_target,
    placement_under_every_target,
    split_unknown_memory,
)
from strategies.expected_gain import PROFILE_HORIZON, RELIEF_MINUTES, MoveJudge, Receivers
from strategies.landing import Landing, LandingPredictor, LandingVerdict
from strategies.placement import RoomTracker
from strategies.receive import RECEIVE, ReceivingThresholds, coolest, with_receive
from strategies.resources import (
    Excess,
    ExtraRoom,
    ResourceBand,
    amount_text,
    bands_named,
    hot_text,
    pod_amount,
    relief_order,
    target_amount,
)
from strategies.thresholds import (
    Band,
    NodeClasses,
    names_memory,
    pool_bands,
    thresholds_problems,
)

KIND = "LowNodeUtilization"
CAP_REACHED = "maxNoOfPodsToEvictPerNode"


class LowNodeUtilizationSettings(StrategySettings, ReceivingThresholds):
    """Nodes above targetThresholds are hot; nodes below thresholds are cold and receive the load (with
    receiveThresholds, so do the nodes that stay under it)."""

    kind: Literal["LowNodeUtilization"] = Field(description="Strategy name.")
    use_deviation_thresholds: bool | None = Field(
        default=False,
        description="Thresholds are deviations from the pool's mean usage instead of absolute percentages.",
    )
    number_of_nodes: int = Field(
        default=0,
        ge=0,
        description="Act only when more than this many nodes of a pool are cold (with receiveThresholds: under "
        "it, cold ones included).",
    )
    pools: dict[str, ReceivingThresholds] = Field(
        default_factory=dict,
        description="Per-pool thresholds (pool name -> thresholds), overriding the above.",
    )
    max_no_of_pods_to_evict_per_node: int | None = Field(
        default=None,
        ge=1,
        description="At most this many evictions planned by this strategy per hot node. It applies first, while "
        "planning (the pods held back say so in the plan); limits.node.maxPerCycle applies afterwards, in the "
        "evictor, to the evictions of every strategy from a node together (the descheduler's top-level "
        "maxNoOfPodsToEvictPerNode).",
    )
    destinations_in_same_pool: bool = Field(
        default=True,
        description="Only count room on cold nodes (with receiveThresholds: receiving nodes) of the hot node's "
        "own pool.",
    )
    classify_by: UsageBasis = Field(
        default="current",
        description="What usage means for classes, pod choice and room: current (the usage window read now), "
        "predicted (the predictor's next daily peak, see predictor:), max (the higher of the two), or requests "
        "(the pods' CPU requests, as the community descheduler reads utilization; pods without a CPU request "
        "are then never moved). Run a predicted strategy on a cron schedule ahead of the daily peak to relieve "
        "nodes before it.",
    )
    predicted: ReceivingThresholds | None = Field(
        default=None,
        description="With classifyBy predicted or max: the thresholds and targetThresholds the classes use instead "
        "of the ones above (a predicted daily peak sits higher than a 10-minute window), for every pool; validated "
        "like them. null: the thresholds above.",
    )
    predict_placement: bool = Field(
        default=True,
        description="Predict where the default scheduler puts each evicted pod's replacement (filters: "
        "requests, taints and tolerations, nodeSelector, required node affinity; scores: least allocated, "
        "balanced allocation, PreferNoSchedule taints, spreading of the workload's pods; random ties and "
        "sampling of nodes as probabilities), with the moves already planned applied, and evict a pod only when "
        "the probability of a landing off the destinations with real-usage room is at most maxLandingRisk: a pod "
        "whose replacement would land back on its hot node (the relieved node is the least requested one when "
        "requests are balanced) is passed over, and the move's usage is counted on the most probable acceptable "
        "destination. false: any cold node with room is enough, wherever the scheduler really puts the "
        "replacement.",
    )
    max_landing_risk: float = Field(
        default=0.1,
        ge=0.0,
        lt=1.0,
        description="With predictPlacement: the highest accepted probability that an evicted pod's replacement "
        "lands where the move relieves nothing (back on its node, on a hot, unknown or other pool's node, or on a "
        "node that is no destination or lacks the real-usage room; destinations: the receiving nodes with "
        "receiveThresholds, else the cold nodes and, with landOnNormalNodes, the normal ones). The scheduler picks at random among equally scored nodes "
        "and, on clusters of 100 nodes or more, scores only a sample of the feasible ones "
        "(percentageOfNodesToScore), so a landing is a probability. 0: no chance of a bad landing is accepted "
        "(with every node scored, every tied best node must be a good destination).",
    )
    land_on_normal_nodes: bool = Field(
        default=True,
        description="With predictPlacement: a replacement landing on a normal node (between thresholds and "
        "targetThresholds) of the hot node's pool is a good landing when that node's real usage stays under "
        "targetThresholds with the pod's usage added: the hot node is relieved and nothing turns hot. false: only "
        "cold nodes with real-usage room are good landings (on clusters where most nodes are neither hot nor "
        "cold, almost every pod is then passed over). A pool still acts only when it has a cold node, and the "
        "room search counts cold nodes only; receiveThresholds, where set, replaces this: its receiving nodes "
        "make the pool act and count in the room search as in the prediction.",
    )
    percentage_of_nodes_to_score: int | None = percentage_of_nodes_to_score_field()
    before_peak: Duration | None = Field(
        default=None,
        description="With classifyBy predicted and the pods' daily profiles (predictor.nodePeak coincident): "
        "relieve a node predicted over target only from this long before its predicted peak's hour begins "
        "until it ends (the pre-peak schedule); until then it is reported normal. null: whenever it is "
        "predicted over target.",
    )
    min_expected_gain: float | None = Field(
        default=None,
        ge=0.0,
        allow_inf_nan=False,
        description="Plan an eviction for CPU only when its expected gain, in hot-node-minutes, is positive and at "
        "least this: the hot minutes it is expected to save on its node less those it may add on its destination "
        f"(from the pods' daily profiles over the next {PROFILE_HORIZON} hours with classifyBy predicted and "
        f"predictor.nodePeak coincident; otherwise from the current usage, a relief taken to last "
        f"{RELIEF_MINUTES:g} minutes and credited by the share of the node's excess the pod takes away, nothing "
        "when the pods that cannot leave keep the node hot). Whatever the value, a pod that alone is over the "
        "target of every node that could receive it, or whose burst above its CPU request is the node's whole "
        "excess, is not moved. The pods passed over say why in the plan. null: no such filter.",
    )

    @model_validator(mode="after")
    def _thresholds_ordered(self) -> LowNodeUtilizationSettings:
        default = bool(self.use_deviation_thresholds)
        problems = thresholds_problems(self, self.pools, default, targets_select_hot=True)
        if self.predicted is not None:
            if self.classify_by not in ("predicted", "max"):
                problems.append(
                    ("predicted", f"only read with classifyBy predicted or max; classifyBy is {self.classify_by}")
                )
            if self.pools:
                problems.append(
                    ("predicted", "applies to every pool: per-pool thresholds (pools) are not read with it")
                )
            problems += [
                (f"predicted.{path}", message)
                for path, message in self.predicted.band_problems(default, targets_select_hot=True)
            ]
        problems += self._receive_problems(default)
        problems += self._memory_by_prediction()
        if self.before_peak is not None:
            if self.classify_by != "predicted":
                problems.append(
                    ("beforePeak", f"only read with classifyBy predicted; classifyBy is {self.classify_by}")
                )
            if not timedelta(0) < self.before_peak <= timedelta(days=1):
                problems.append(("beforePeak", "must be more than 0 and at most 24h"))
        if problems:
            raise FieldProblems(problems)
        return self

    def _receive_problems(self, default: bool) -> list[tuple[str, str]]:
        """The receive thresholds in order, and read where set."""
        problems = self.receive_problems(default)
        for pool, settings in self.pools.items():
            problems += [(f"pools.{pool}.{path}", message) for path, message in settings.receive_problems(default)]
        if self.predicted is not None:
            problems += [(f"predicted.{path}", message) for path, message in self.predicted.receive_problems(default)]
            if self.receive_thresholds is not None and self.classify_by in ("predicted", "max"):
                problems.append((RECEIVE, f"not read with predicted: set predicted.{RECEIVE} instead"))
        return problems

    def _memory_by_prediction(self) -> list[tuple[str, str]]:
        """The predictor forecasts CPU alone: memory thresholds need classifyBy current or requests."""
        if self.classify_by not in ("predicted", "max"):
            return []
        every = [("", self), *((f"pools.{k}.", v) for k, v in self.pools.items())]
        if self.predicted is not None:
            every.append(("predicted.", self.predicted))
        return [
            (
                f"{prefix}targetThresholds.memory",
                f"classifyBy {self.classify_by} forecasts CPU alone: memory "
                "thresholds need classifyBy current or requests",
            )
            for prefix, settings in every
            if "memory" in settings.resources()
        ]

    def reads_memory_usage(self) -> bool:
        """Some thresholds name memory and the usage window is read: the memory working set is needed."""
        return self.enabled and self.classify_by == "current" and names_memory(self, self.pools)

    def other_resources(self) -> frozenset[str]:
        every = [self, *self.pools.values(), *([self.predicted] if self.predicted is not None else [])]
        return frozenset(resource for thresholds in every for resource in thresholds.resources())


_USAGE_WORDS: dict[UsageBasis, str] = {
    "current": "usage",
    "predicted": "predicted peak usage",
    "max": "max(current, predicted) usage",
    "requests": "CPU requests",
}


def _class_of(pct: float, band: Band) -> NodeClass:
    if pct > band.high_pct:
        return NodeClass.HOT
    return NodeClass.COLD if pct < band.low_pct else NodeClass.NORMAL


def _decider(classify_by: UsageBasis) -> Callable[[float, Band], tuple[NodeClass, str]]:
    usage = _USAGE_WORDS[classify_by]

    def decide(pct: float, band: Band) -> tuple[NodeClass, str]:
        node_class = _class_of(pct, band)
        if node_class is NodeClass.HOT:
            return node_class, f"{usage} {pct:.1f}% > target {band.high_pct:.1f}% ({band.explanation})"
        if node_class is NodeClass.COLD:
            return node_class, f"{usage} {pct:.1f}% < threshold {band.low_pct:.1f}% ({band.explanation})"
        return node_class, f"{usage} {pct:.1f}% within [{band.low_pct:.1f}%, {band.high_pct:.1f}%]"

    return decide


@dataclass(frozen=True, slots=True)
class LowNodeUtilization:
    settings: LowNodeUtilizationSettings

    @property
    def name(self) -> str:
        return KIND

    def plan(self, snapshot: ClusterSnapshot, protections: Protections) -> StrategyResult:
        s = self.settings
        snapshot = view(snapshot, s.classify_by)
        classes = self._classes(snapshot)
        if snapshot.usage_failure:
            return StrategyResult(KIND, (), classes.decisions(), (), (f"no evictions: {snapshot.usage_failure}",))
        coincident = self._coincident(snapshot)
        if coincident and s.before_peak is not None and snapshot.predicted is not None:
            hot_now = classes.named(NodeClass.HOT)
            hold_until_due(classes, hot_now, snapshot.predicted, snapshot.taken_at, s.before_peak)
        notes: list[str] = []
        inactive: dict[str, Unrelieved] = {}
        active_pools = self._active_pools(snapshot, classes, notes, inactive)
        pool_of = snapshot.pool_of
        caps = {  # a node an earlier strategy of the cycle empties receives nothing
            name: classes.receive_cap_m(name)
            for name in classes.of
            if classes.receives(name)
            and (pool_of[name] in active_pools or not s.destinations_in_same_pool)
            and name not in snapshot.emptying
        }
        trackers = self._trackers(snapshot, caps)
        hot_names = classes.named(NodeClass.HOT)
        if snapshot.focus is not None:
            focus = snapshot.focus
            hot_everywhere = [classes.decision(n) for n in hot_names if n in focus]
            notes.append(f"focused on {', '.join(sorted(focus))}: {len(hot_everywhere)} of them hot")
        else:
            hot_everywhere = [classes.decision(n) for n in hot_names]
        unrelieved = {d.node: inactive[d.pool] for d in hot_everywhere if d.pool in inactive}
        hot = relief_order(d for d in hot_everywhere if d.pool in active_pools)
        ledger = BudgetLedger(snapshot.budgets)
        predictor = self._predictor(snapshot, classes, caps) if hot and s.predict_placement else None
        extra_room = classes.extra_room()
        caps_kept = peak_caps(classes) if coincident else {}
        judge = self._judge(snapshot, classes, caps) if s.min_expected_gain is not None else None
        peaks = snapshot.predicted.with_caps(caps_kept) if snapshot.predicted is not None else None
        reliefs = _Reliefs()
        for deeper in (False, True):  # every hot node under its target first, then on down to its receive threshold
            for decision in hot:
                levels = _Levels.of(decision, classes, coincident)
                first = reliefs.first.get(decision.node, [])
                if deeper and (not first or levels.relief_m >= levels.target_m):
                    continue
                tracker = trackers[decision.pool if s.destinations_in_same_pool else ""]
                destinations = _Destinations(tracker, predictor, extra_room, peaks, coincident=coincident, judge=judge)
                found = self._relieve(decision, levels, snapshot, protections, ledger, destinations, first)
                reliefs.add(decision.node, found[0], found[1], deeper)
                if found[2] is not None and not deeper:
                    unrelieved[decision.node] = found[2]
                peaks = destinations.peaks
        evictions, pod_decisions = reliefs.in_order(d.node for d in hot)
        if peaks is not None:  # later strategies keep under target the nodes the plan leaves under it
            caps_kept = {n: cap for n, cap in caps_kept.items() if peaks.node_cpu_m.get(n, cap + 1) <= cap}
        capped = {d.node for d in pod_decisions if d.reason.startswith(CAP_REACHED)}
        if capped:
            notes.append(
                f"{CAP_REACHED} {s.max_no_of_pods_to_evict_per_node} on {len(capped)} node(s): this strategy's cap "
                "applies first, while planning; limits.node.maxPerCycle applies afterwards, in the evictor, to every "
                "strategy's evictions from a node"
            )
        ordered = classes.reported(e.room_on for e in evictions)
        return StrategyResult(
            KIND, tuple(evictions), ordered, tuple(pod_decisions), tuple(notes), unrelieved, peak_caps=caps_kept
        )

    def memory_sources(self, snapshot: ClusterSnapshot) -> frozenset[str]:
        """The nodes whose pods' memory a plan on ``snapshot`` needs: the hot ones it may relieve (in an
        alert's cycle, those focused). Destinations are weighed by their node's own memory reading."""
        classes = self._classes(view(snapshot, self.settings.classify_by), only=snapshot.focus)
        return frozenset(classes.named(NodeClass.HOT))

    def node_decisions(self, snapshot: ClusterSnapshot) -> tuple[NodeDecision, ...]:
        """Each node's class as :meth:`plan` finds it on ``snapshot`` (what the landing guard decides on)."""
        return self._classes(view(snapshot, self.settings.classify_by)).decisions()

    def _classes(self, snapshot: ClusterSnapshot, only: Collection[str] | None = None) -> NodeClasses:
        s = self.settings
        by_prediction = s.predicted is not None and s.classify_by in ("predicted", "max")
        default, pools = (s.predicted, {}) if by_prediction and s.predicted is not None else (s, s.pools)
        bands = pool_bands(snapshot, default, pools, bool(s.use_deviation_thresholds))
        bands = with_receive(snapshot, bands, default, pools, bool(s.use_deviation_thresholds))
        return NodeClasses(snapshot, KIND, bands, _class_of, _decider(s.classify_by), only=only)

    def _coincident(self, snapshot: ClusterSnapshot) -> bool:
        """Plans on the nodes' coincident peaks: classifyBy predicted with the pods' daily profiles."""
        predicted = snapshot.predicted
        return self.settings.classify_by == "predicted" and predicted is not None and predicted.book is not None

    def _active_pools(
        self, snapshot: ClusterSnapshot, classes: NodeClasses, notes: list[str], inactive: dict[str, Unrelieved]
    ) -> set[str]:
        """The pools with a hot node and more receiving nodes (cold, or under the receive threshold where
        set) than numberOfNodes; without destinationsInSamePool, every pool's receiving nodes count."""
        pool_of, same_pool = snapshot.pool_of, self.settings.destinations_in_same_pool
        counts = Counter((pool_of[name], node_class) for name, node_class in classes.of.items())
        receiving = Counter(pool_of[name] for name in classes.of if classes.receives(name))
        everywhere: Counter[NodeClass] = Counter(classes.of.values())
        limit = self.settings.number_of_nodes
        active = set()
        for pool in snapshot.pools():
            receivers = receiving[pool] if same_pool else receiving.total()
            mix = Counter({c: counts[(pool, c)] for c in NodeClass}) if same_pool else everywhere
            hot = counts[(pool, NodeClass.HOT)]
            receive = classes.pool_band(pool).receive_pct
            kind, under = ("cold node", "") if receive is None else ("node", f" under {RECEIVE}.cpu {receive:.1f}%")
            if hot == 0:
                notes.append(f"pool {pool}: no hot node")
            elif receivers == 0 and same_pool:
                notes.append(f"pool {pool}: {hot} hot node(s) but no {kind}{under} to take their load"
                             + coolest(snapshot, classes, pool))  # fmt: skip
                inactive[pool] = Unrelieved.NO_COLD_NODE if receive is None else Unrelieved.NO_RECEIVER
            elif receivers <= limit:
                notes.append(f"pool {pool}: {receivers} {kind}(s){under}, not more than numberOfNodes {limit}")
                none = Unrelieved.NO_COLD_NODE if receive is None else Unrelieved.NO_RECEIVER
                inactive[pool] = none if receivers == 0 else Unrelieved.NUMBER_OF_NODES
            elif mix[NodeClass.COLD] == mix.total() - mix[NodeClass.UNKNOWN]:
                notes.append(f"pool {pool}: every node is cold")
            else:
                active.add(pool)
        return active

    def _landing_caps(self, snapshot: ClusterSnapshot, classes: NodeClasses, caps: dict[str, int]) -> dict[str, int]:
        """The nodes a replacement may land on with their caps: the receiving ones (``caps``) and, with
        landOnNormalNodes where no receive threshold is set, the normal nodes of the active pools under target."""
        s = self.settings
        caps = dict(caps)
        if s.land_on_normal_nodes:
            pools = {snapshot.pool_of[n] for n in caps}  # the active pools' destinations
            for name in classes.named(NodeClass.NORMAL):
                if classes.band(name).receive_pct is not None:
                    continue  # the receive threshold decides, as in the room search
                if (
                    snapshot.pool_of[name] in pools or not s.destinations_in_same_pool
                ) and name not in snapshot.emptying:
                    caps[name] = classes.cap_m(name)
        return caps

    def _predictor(self, snapshot: ClusterSnapshot, classes: NodeClasses, caps: dict[str, int]) -> LandingPredictor:
        s = self.settings
        caps = self._landing_caps(snapshot, classes, caps)
        room = {}
        for name, cap in caps.items():
            usage_m = snapshot.load[name].usage_m
            if usage_m is not None:  # unknown usage: never a destination
                room[name] = cap - usage_m
        return LandingPredictor(
            snapshot,
            classes.of,
            room,
            marked=snapshot.marks_ahead,  # the landing guard's marks, as it will set them before the evictor
            same_pool=s.destinations_in_same_pool,
            max_risk=s.max_landing_risk,
            percentage_of_nodes_to_score=s.percentage_of_nodes_to_score,
        )

    def _judge(self, snapshot: ClusterSnapshot, classes: NodeClasses, caps: dict[str, int]) -> MoveJudge:
        """The expected-gain judge, its receivers the nodes a replacement may land on (:meth:`_landing_caps`;
        without placement prediction, the receiving nodes ``caps``)."""
        s = self.settings
        receivers = self._landing_caps(snapshot, classes, caps) if s.predict_placement else caps
        at_start = Receivers.of(snapshot, receivers, s.destinations_in_same_pool)
        return MoveJudge(snapshot, s.min_expected_gain or 0.0, classes.cap_m, at_start)

    def _trackers(self, snapshot: ClusterSnapshot, caps: dict[str, int]) -> dict[str, RoomTracker]:
        if not self.settings.destinations_in_same_pool:
            return {"": RoomTracker(snapshot, caps)}
        by_pool: dict[str, dict[str, int]] = {pool: {} for pool in snapshot.pools()}
        for name, cap in caps.items():
            by_pool[snapshot.pool_of[name]][name] = cap
        return {pool: RoomTracker(snapshot, pool_caps) for pool, pool_caps in by_pool.items()}

    def _relieve(
        self,
        decision: NodeDecision,
        levels: _Levels,
        snapshot: ClusterSnapshot,
        protections: Protections,
        ledger: BudgetLedger,
        destinations: _Destinations,
        before: Sequence[PlannedEviction] = (),
    ) -> tuple[list[PlannedEviction], list[PodDecision], Unrelieved | None]:
        """The evictions chosen on one hot node, the decision record, and why none when none. Pods are
        chosen, and their gain judged, on the node's CPU above its relief level; the first pass stops once
        the node is under its target, the second (``before``: the first's evictions, their usage taken off)
        goes on down to the relief level and records only the pods left (the others' record stands)."""
        node, relief_m = decision.node, levels.relief_m
        level = "target" if relief_m >= levels.target_m else "the receive threshold"
        bands = destinations.extra.bands_of(node) if destinations.extra is not None and not before else ()
        over = Excess.of(snapshot, node, (decision.usage_m or 0) - relief_m - sum(e.usage_m for e in before), bands)
        if not before:
            over.slack["cpu"] = levels.target_m - levels.relief_m
        pool, records = _candidates(node, snapshot, protections, ledger, destinations.extra, before)
        limit = self.settings.max_no_of_pods_to_evict_per_node
        limit = None if limit is None else limit - len(before)
        chosen: list[PlannedEviction] = []
        had_candidates = bool(pool)
        relief = PeakRelief(destinations.peaks, node) if destinations.coincident else None
        if relief is not None:  # CPU's excess is the node's predicted peak above target
            over.amounts["cpu"] = relief.excess(relief_m, over.amounts["cpu"])
            pool, passed = relief.coinciding(pool)
            records.extend(_passed(c, node, why) for c, why in passed)
        while (resource := over.over()) is not None and pool:
            if limit is not None and len(chosen) >= limit:
                break
            picked = None
            excess = over.amounts[resource]
            sizes = relief.sizes(pool) if relief is not None and resource == "cpu" else None
            amount = amount_of(snapshot, resource) if sizes is None else _sized(sizes)
            movable = pool if resource == "cpu" else [c for c in pool if amount(c) > 0]  # CPU: screened for usage
            for candidate in _ordered(movable, excess, amount):
                pool.remove(candidate)
                blocked = ledger.blocker(candidate.pod)  # earlier choices may have spent its budget
                if blocked is not None:
                    records.append(_passed(candidate, node, blocked))
                    continue
                room_on, why = destinations.find_worth(candidate, node, excess if resource == "cpu" else None, relief_m)
                if room_on is None:
                    records.append(_passed(candidate, node, why, lands_back=destinations.lands_back))
                    continue
                picked = candidate
                destinations.commit(candidate, node, room_on)
                ledger.take(candidate.pod)
                peak_word = "relief of the node's predicted peak" if sizes is not None else None
                reason = _why_chosen(resource, amount(candidate), excess, why, peak_word, level)
                landing = room_on if destinations.predictor is not None else None
                usage_word = _USAGE_WORDS[self.settings.classify_by]
                chosen.append(_eviction(candidate, decision, reason, room_on, landing, usage_word))
                records.append(
                    PodDecision(
                        KIND,
                        candidate.pod.namespace,
                        candidate.pod.name,
                        node,
                        True,
                        reason,
                        candidate.usage_m,
                    )
                )
                _take(over, snapshot, candidate, bands, (relief, destinations.peaks, relief_m, amount(candidate)))
                break
            if picked is None:
                break
        stop = _stop_reason(over.over() is not None, limit, len(chosen), level if before else "target", len(before))
        records.extend(_passed(c, node, stop) for c in pool)
        return chosen, records, None if chosen else _why_none(snapshot, node, had_candidates, destinations)


def _candidates(
    node: str,
    snapshot: ClusterSnapshot,
    protections: Protections,
    ledger: BudgetLedger,
    extra: ExtraRoom | None,
    before: Sequence[PlannedEviction],
) -> tuple[list[Candidate], list[PodDecision]]:
    """The node's movable pods but those evicted ``before``, and the record of the others (none when a
    pass before has recorded them)."""
    pool, screened = screen(KIND, node, snapshot, protections, ledger)[:2]
    records = [] if before else screened
    if extra is not None and "memory" in extra.resources:
        pool = _known_memory(pool, snapshot, node, records)
    gone = {e.key for e in before}
    return [c for c in pool if c.pod.key not in gone], records


@dataclass(frozen=True, slots=True)
class _Levels:
    """A hot node's CPU target and the level its relief goes down to (its receive threshold where set and
    lower, never with coincident peaks: a predicted daily peak is already the worst of the day), millicores."""

    target_m: int
    relief_m: int

    @classmethod
    def of(cls, decision: NodeDecision, classes: NodeClasses, coincident: bool) -> _Levels:
        target = target_amount(decision.allocatable_m, decision.high_pct or 0.0)
        return cls(target, target if coincident else min(target, classes.receive_cap_m(decision.node)))


@dataclass(slots=True)
class _Reliefs:
    """Each hot node's planned evictions, by pass, and its decision record (a later pass's record of a pod
    replaces the earlier one)."""

    first: dict[str, list[PlannedEviction]] = field(default_factory=dict)
    deeper: dict[str, list[PlannedEviction]] = field(default_factory=dict)
    records: dict[str, list[PodDecision]] = field(default_factory=dict)

    def add(self, node: str, evictions: list[PlannedEviction], records: list[PodDecision], deeper: bool) -> None:
        (self.deeper if deeper else self.first)[node] = evictions
        again = {(d.namespace, d.name) for d in records}
        kept = [d for d in self.records.get(node, []) if (d.namespace, d.name) not in again]
        self.records[node] = kept + records

    def in_order(self, nodes: Iterable[str]) -> tuple[list[PlannedEviction], list[PodDecision]]:
        """Every node's evictions of the first pass, then the deeper ones (the evictor's caps cut those
        first), and the decision records node by node."""
        order = list(nodes)
        evictions = [e for passed in (self.first, self.deeper) for n in order for e in passed.get(n, ())]
        return evictions, [d for n in order for d in self.records.get(n, ())]


@dataclass(slots=True)
class _Destinations:
    """Where a pod moved off a hot node goes. Without a predictor: any cold node with room (``room_on``;
    nothing says the scheduler will pick it). With one: the good destination (a cold node with room, or a
    normal one staying under target with ``landOnNormalNodes``) its replacement most probably lands on, if
    the landing risk is within the cap (``room_on`` and ``landing`` are that node); the scheduler model is
    only asked when the room search found some cold node with room (a query costs more than a search)."""

    tracker: RoomTracker
    predictor: LandingPredictor | None
    extra: ExtraRoom | None = None  # memory and pods room under their targets, when the thresholds name them
    peaks: PredictedLoad | None = None  # the predicted load with the moves planned so far, and its peak caps
    coincident: bool = False  # coincident peaks: pods chosen by how much they lower the node's peak
    no_room: bool = False  # some candidate found no cold node with room
    landed_wrong: bool = False  # some candidate's replacement risked landing back or off the cold nodes
    lands_back: bool = False  # the last candidate found was refused because its replacement would land back
    judge: MoveJudge | None = None  # minExpectedGain: judges each move a destination was found for
    not_worth_it: bool = False  # some candidate's move was refused as not worth it

    def find(self, candidate: Candidate, node: str) -> tuple[str | None, str]:
        self.lands_back = False
        placement = self.tracker.find(candidate.pod, candidate.usage_m, exclude=(node,))
        if self.extra is not None and placement.node is not None:
            placement = placement_under_every_target(self.tracker, self.extra, candidate, node, placement)
        if self.predictor is None or placement.node is None:  # no cold node has room: no prediction needed
            self.no_room |= placement.node is None
            return self._within_peak_cap(candidate, placement.node, placement.reason)
        landing: Landing = self.predictor.land(candidate.pod, node, candidate.usage_m)
        if landing.node is not None and self.extra is not None:
            landing = landing_under_every_target(self.predictor, self.extra, candidate, node, landing)
        self.no_room |= landing.refused in (LandingVerdict.NO_ROOM, LandingVerdict.UNSCHEDULABLE)
        self.landed_wrong |= landing.refused in (LandingVerdict.BACK, LandingVerdict.ELSEWHERE)
        self.lands_back = landing.refused is LandingVerdict.BACK
        return self._within_peak_cap(candidate, landing.node, landing.reason)

    def _within_peak_cap(self, candidate: Candidate, room_on: str | None, why: str) -> tuple[str | None, str]:
        """``room_on`` unless the pod's replacement would take its predicted peak past the cap a strategy that
        relieves nodes before their peak set on it."""
        refused = over_peak_cap(self.peaks, candidate.pod.key, room_on) if room_on and self.peaks else None
        if refused is None:
            return room_on, why
        self.no_room = True
        return None, refused

    def find_worth(self, candidate: Candidate, node: str, excess_m: int | None, level_m: int) -> tuple[str | None, str]:
        """:meth:`find`, then, with ``minExpectedGain`` and a CPU excess ``excess_m`` over ``level_m`` to cover,
        None and why when the move found is not worth it (its expected gain, :mod:`strategies.expected_gain`)."""
        room_on, why = self.find(candidate, node)
        if room_on is None or excess_m is None or self.judge is None:
            return room_on, why
        peaks = self.peaks if self.coincident else None
        refused = self.judge.refusal(candidate, node, room_on, excess_m, peaks, level_m)
        if refused is None:
            return room_on, why
        self.not_worth_it = True
        return None, refused

    def commit(self, candidate: Candidate, source: str, room_on: str) -> None:
        if self.judge is not None:
            self.judge.commit(room_on, candidate.usage_m)
        if room_on in self.tracker:  # a normal node a replacement lands on is the predictor's alone
            self.tracker.commit(room_on, candidate.pod, candidate.usage_m)
        if self.predictor is not None:
            self.predictor.commit(candidate.pod, room_on, candidate.usage_m)
        if self.extra is not None:
            self.extra.commit(room_on, candidate.pod)
        if self.peaks is not None:
            self.peaks = self.peaks.moved(candidate.pod.key, source, room_on)


def _take(
    over: Excess,
    snapshot: ClusterSnapshot,
    candidate: Candidate,
    bands: tuple[ResourceBand, ...],
    peak: tuple[PeakRelief | None, PredictedLoad | None, int, int],
) -> None:
    """Take a chosen pod off the node's excess. ``peak``: the coincident-peak relief, the predicted load
    with the moves so far, the node's target and what the move takes off its peak; with a relief, CPU's
    excess is the peak as the moves so far leave it."""
    relief, peaks, target_m, moved = peak
    over.take({r: pod_amount(snapshot, candidate.pod, r) for r in bands_named(bands)})
    if relief is None:
        over.take({"cpu": candidate.usage_m})
    else:
        relief.peaks = peaks
        over.amounts["cpu"] = relief.excess(target_m, over.amounts["cpu"] - moved)


def _why_none(snapshot: ClusterSnapshot, node: str, had_candidates: bool, destinations: _Destinations) -> Unrelieved:
    if had_candidates:
        if destinations.not_worth_it:
            return Unrelieved.NOT_WORTH
        if destinations.landed_wrong:
            return Unrelieved.PREDICTED_LANDING
        return Unrelieved.NO_ROOM if destinations.no_room else Unrelieved.DISRUPTION_BUDGET
    if any(pod.key in snapshot.moved for pod in snapshot.pods_on(node)):
        return Unrelieved.RECENTLY_MOVED
    return Unrelieved.NO_EVICTABLE_POD


def _known_memory(
    pool: list[Candidate], snapshot: ClusterSnapshot, node: str, records: list[PodDecision]
) -> list[Candidate]:
    known, unknown = split_unknown_memory(pool, snapshot)
    records.extend(_passed(c, node, UNKNOWN_MEMORY) for c in unknown)
    return known


def _ordered(pool: list[Candidate], excess: int, amount: Callable[[Candidate], int] = cpu_of) -> list[Candidate]:
    """Fewest evictions first: if one pod can cover the excess, the preferred one among those that can
    (closest fit on ties); otherwise the biggest pods first, so that the count stays minimal."""
    if amount is cpu_of:  # the usual case, without a call per key (a 150,000-pod plan sorts often)
        covering = [c for c in pool if c.usage_m >= excess]
        covering.sort(key=lambda c: (*c.preference[:3], c.usage_m, c.preference[3]))
        rest = [c for c in pool if c.usage_m < excess]
        rest.sort(key=lambda c: (-c.usage_m, c.preference))
        return covering + rest
    covering = [c for c in pool if amount(c) >= excess]
    covering.sort(key=lambda c: (*c.preference[:3], amount(c), c.preference[3]))
    rest = [c for c in pool if amount(c) < excess]
    rest.sort(key=lambda c: (-amount(c), c.preference))
    return covering + rest


def _sized(sizes: dict[PodKey, int]) -> Callable[[Candidate], int]:
    """What each candidate's move takes off the node's predicted peak."""
    return lambda c: sizes[c.pod.key]


def _why_chosen(
    resource: str, amount: int, excess: int, room: str, what: str | None = None, level: str = "target"
) -> str:
    covers = "covers" if amount >= excess else "reduces"
    what = what or ("usage" if resource == "cpu" else resource)
    above = level if resource == "cpu" else "target"
    return f"{what} {amount_text(resource, amount)} {covers} the remaining {amount_text(resource, excess)} above {above}; {room}"


def _stop_reason(over: bool, limit: int | None, chosen: int, level: str = "target", before: int = 0) -> str:
    if not over:
        return f"not needed: the node is under {level} after the chosen evictions"
    if limit is not None and chosen >= limit:
        return f"{CAP_REACHED} {limit + before} reached (this strategy's cap, applied while planning)"
    return "not chosen"


def _passed(candidate: Candidate, node: str, reason: str, *, lands_back: bool = False) -> PodDecision:
    pod = candidate.pod
    return PodDecision(KIND, pod.namespace, pod.name, node, False, reason, candidate.usage_m, lands_back)


def _eviction(
    candidate: Candidate, decision: NodeDecision, reason: str, room_on: str, landing: str | None, usage_word: str
) -> PlannedEviction:
    pod = candidate.pod
    return PlannedEviction(
        strategy=KIND,
        namespace=pod.namespace,
        name=pod.name,
        uid=pod.uid,
        node=decision.node,
        pool=decision.pool,
        workload=pod.workload,
        usage_m=candidate.usage_m,
        reason=f"node {decision.node} hot ({hot_text(decision, usage_word)}): {reason}",
        room_on=room_on,
        landing=landing,
    )
