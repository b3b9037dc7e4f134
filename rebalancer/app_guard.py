"""Composition of the landing guard: the pure rules (``rebalancer.guard``) on the cluster's nodes, made
through the node adapter. Called by run --once and serve after each cycle, by serve's periodic sweep
(expired marks go even when no cycle runs) and at its graceful shutdown (own marks released)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from rebalancer.evictor import DryRun, EvictorReport
from rebalancer.guard.applier import GuardApplier, GuardOutcome, GuardReport, GuardResult
from rebalancer.guard.decide import GuardDecision, decide, release
from rebalancer.guard.inputs import after_evictions, ahead_of_evictions, unknown_nodes, with_changes
from rebalancer.guard.marks import GUARD_KEY, Foreign, read_mark
from rebalancer.kube import ApiClient, KubeActions, KubeSource
from rebalancer.kube.node_guard import NodeMarker
from rebalancer.model import Node
from rebalancer.plan import EvictionPlan
from rebalancer.policy import Policy
from rebalancer.snapshot import ClusterSnapshot


def carries_mark(nodes: Iterable[Node]) -> bool:
    """Some node carries the project's mark (or its annotation): the guard has something to clear."""
    return any(
        GUARD_KEY in n.annotations and not isinstance(read_mark(n.taints, n.annotations[GUARD_KEY]), Foreign)
        for n in nodes
    )


MADE = frozenset({GuardOutcome.APPLIED, GuardOutcome.DRY_RUN, GuardOutcome.SERVER_DRY_RUN})


def guard_before_evictions(
    policy: Policy,
    api: ApiClient,
    snapshot: ClusterSnapshot,
    plan: EvictionPlan,
    dry_run: DryRun,
    owner: str,
    may_act: Callable[[], bool],
) -> tuple[GuardReport, ClusterSnapshot]:
    """Mark the nodes the plan is about to relieve (and the other hot ones) *before* the evictor: the
    ReplicaSet controller creates a replacement within moments of an eviction and the scheduler binds it at
    once, so a mark set after the evictor comes too late for the first eviction from a node. Returns the
    report and the snapshot with the marks made (for the pass after the evictor)."""
    if not policy.landing_guard.enabled or not plan.evictions:
        return GuardReport(), snapshot
    report = _apply(api, ahead_of_evictions(snapshot, plan, policy.landing_guard, owner), dry_run, may_act)
    return report, with_changes(snapshot, (r.change for r in report.results if r.outcome in MADE))


def guard_after_cycle(
    policy: Policy,
    api: ApiClient,
    snapshot: ClusterSnapshot,
    plan: EvictionPlan,
    report: EvictorReport,
    dry_run: DryRun,
    owner: str,
    may_act: Callable[[], bool],
) -> GuardReport:
    """Mark, renew and clear after a cycle. With no pool guarded, only marks left from an earlier policy are
    cleared (guard-off), and nothing is read or written when there are none."""
    if not policy.landing_guard.enabled and not carries_mark(snapshot.nodes.values()):
        return GuardReport()
    return _apply(api, after_evictions(snapshot, plan, report, policy.landing_guard, owner), dry_run, may_act)


PLAN_OWNER = "rebalancer/plan"


def preview(policy: Policy, snapshot: ClusterSnapshot, plan: EvictionPlan) -> GuardReport | None:
    """What the guard would do if the planned evictions happened (`rebalancer plan`): nothing is written.
    None when no pool has a guard and no node carries a mark."""
    if not policy.landing_guard.enabled and not carries_mark(snapshot.nodes.values()):
        return None
    decision = ahead_of_evictions(snapshot, plan, policy.landing_guard, PLAN_OWNER)
    return GuardReport(tuple(GuardResult(c, GuardOutcome.DRY_RUN) for c in decision.changes), decision.notes)


def sweep(
    policy: Policy,
    api: ApiClient,
    nodes: Sequence[Node],
    owner: str,
    now: float,
    may_act: Callable[[], bool],
    dry_run: DryRun = DryRun.OFF,
) -> GuardReport:
    """Without a cycle, on ``nodes`` as recently read: every class unknown, so only expired marks, marks of
    pools without a guard and annotations without their taint are cleared (at start: what a crashed
    instance left). Each change re-reads its node before writing."""
    if not policy.landing_guard.enabled and not carries_mark(nodes):
        return GuardReport()
    return _apply(api, decide(unknown_nodes(policy.pools, nodes), policy.landing_guard, owner, now), dry_run, may_act)


def release_marks(policy: Policy, api: ApiClient, owner: str, dry_run: DryRun = DryRun.OFF) -> GuardReport:
    """Graceful shutdown: every mark ``owner`` wrote is removed (marks another instance renewed since stay)."""
    nodes = KubeSource(api, frozenset(), list_mode=policy.kubernetes.list_mode).read_nodes()
    return _apply(api, release(unknown_nodes(policy.pools, nodes), owner), dry_run, lambda: True)


def _apply(api: ApiClient, decision: GuardDecision, dry_run: DryRun, may_act: Callable[[], bool]) -> GuardReport:
    applier = GuardApplier(NodeMarker(api), dry_run=dry_run, may_act=may_act, events=KubeActions(api))
    return applier.apply(decision)
