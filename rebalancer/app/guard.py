"""Composition of the landing guard: the pure rules (``rebalancer.actions.guard``) on the cluster's nodes, made
through the node adapter. Called by run --once and serve after each cycle, by serve's periodic sweep
(expired marks go even when no cycle runs) and at its graceful shutdown (own marks released)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rebalancer.actions.evictor import EvictorReport
from rebalancer.actions.guard.applier import GuardApplier, GuardOutcome, GuardReport, GuardResult
from rebalancer.actions.guard.decide import GuardDecision, decide, release
from rebalancer.actions.guard.inputs import after_evictions, ahead_of_evictions, unknown_nodes, with_changes
from rebalancer.adapters.kube import KubeActions, KubeSource
from rebalancer.adapters.kube.node_guard import NodeMarker
from rebalancer.app.runtime import Runtime
from rebalancer.domain.guard_marks import GUARD_KEY, Foreign, read_mark
from rebalancer.domain.model import Node
from rebalancer.planning.plan import EvictionPlan
from rebalancer.planning.snapshot import ClusterSnapshot
from rebalancer.policy import Policy


def carries_mark(nodes: Iterable[Node]) -> bool:
    """Some node carries the project's mark (or its annotation): the guard has something to clear."""
    return any(
        GUARD_KEY in n.annotations and not isinstance(read_mark(n.taints, n.annotations[GUARD_KEY]), Foreign)
        for n in nodes
    )


MADE = frozenset({GuardOutcome.APPLIED, GuardOutcome.DRY_RUN, GuardOutcome.SERVER_DRY_RUN})


def guard_before_evictions(
    runtime: Runtime, snapshot: ClusterSnapshot, plan: EvictionPlan
) -> tuple[GuardReport, ClusterSnapshot]:
    """Mark the nodes the plan is about to relieve (and the other hot ones) *before* the evictor: the
    ReplicaSet controller creates a replacement within moments of an eviction and the scheduler binds it at
    once, so a mark set after the evictor comes too late for the first eviction from a node. Returns the
    report and the snapshot with the marks made (for the pass after the evictor)."""
    guard = runtime.policy.landing_guard
    if not guard.enabled or not plan.evictions:
        return GuardReport(), snapshot
    report = _apply(runtime, ahead_of_evictions(snapshot, plan, guard, runtime.requester))
    return report, with_changes(snapshot, (r.change for r in report.results if r.outcome in MADE))


def guard_after_cycle(
    runtime: Runtime, snapshot: ClusterSnapshot, plan: EvictionPlan, report: EvictorReport
) -> GuardReport:
    """Mark, renew and clear after a cycle. With no pool guarded, only marks left from an earlier policy are
    cleared (guard-off), and nothing is read or written when there are none."""
    guard = runtime.policy.landing_guard
    if not guard.enabled and not carries_mark(snapshot.nodes.values()):
        return GuardReport()
    return _apply(runtime, after_evictions(snapshot, plan, report, guard, runtime.requester))


PLAN_OWNER = "rebalancer/plan"


def preview(policy: Policy, snapshot: ClusterSnapshot, plan: EvictionPlan) -> GuardReport | None:
    """What the guard would do if the planned evictions happened (`rebalancer plan`): nothing is written.
    None when no pool has a guard and no node carries a mark."""
    if not policy.landing_guard.enabled and not carries_mark(snapshot.nodes.values()):
        return None
    decision = ahead_of_evictions(snapshot, plan, policy.landing_guard, PLAN_OWNER)
    return GuardReport(tuple(GuardResult(c, GuardOutcome.DRY_RUN) for c in decision.changes), notes=decision.notes)


def sweep(runtime: Runtime, nodes: Sequence[Node]) -> GuardReport:
    """Without a cycle, on ``nodes`` as recently read: every class unknown, so only expired marks, marks of
    pools without a guard and annotations without their taint are cleared (at start: what a crashed
    instance left). Each change re-reads its node before writing."""
    policy = runtime.policy
    if not policy.landing_guard.enabled and not carries_mark(nodes):
        return GuardReport()
    now = runtime.clock()
    return _apply(runtime, decide(unknown_nodes(policy.pools, nodes), policy.landing_guard, runtime.requester, now))


def release_marks(runtime: Runtime) -> GuardReport:
    """Graceful shutdown: every mark the runtime's requester wrote is removed (marks another instance renewed
    since stay), each only while ``runtime.may_act`` (still the leader: one that lost its lease meanwhile
    writes nothing more, the marks go at their expiry or by the new leader's rules)."""
    nodes = KubeSource(
        runtime.api,
        frozenset(),
        list_mode=runtime.policy.kubernetes.list_mode,
        encoding=runtime.policy.kubernetes.encoding,
    ).read_nodes()
    decision = release(unknown_nodes(runtime.policy.pools, nodes), runtime.requester)
    return _apply(runtime, decision)


def _apply(runtime: Runtime, decision: GuardDecision) -> GuardReport:
    api = runtime.api
    applier = GuardApplier(NodeMarker(api), dry_run=runtime.dry_run, may_act=runtime.may_act, events=KubeActions(api))
    return applier.apply(decision)
