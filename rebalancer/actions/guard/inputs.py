"""What the landing guard's rules are fed besides a plan (pure): the nodes a plan is about to relieve (the
guard marks them *before* the evictor, since a replacement is scheduled within moments of its eviction),
the nodes an evictor report relieved, the snapshot as those first marks left it, and the nodes as a sweep
without a cycle sees them. Shared by the service (``rebalancer.app.guard``) and the simulator."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import msgspec

from rebalancer.actions.evictor import EvictorReport, Outcome
from rebalancer.actions.guard.decide import (
    Change,
    GuardDecision,
    GuardedNode,
    apply_change,
    decide,
    guarded_nodes,
    pool_sizes,
    takes_pods,
)
from rebalancer.domain.guard_marks import GUARD_KEY, NodeEdit
from rebalancer.domain.model import Node
from rebalancer.domain.settings.guard import LandingGuardSettings
from rebalancer.domain.settings.shared import PoolSettings
from rebalancer.planning.plan import EvictionPlan, NodeClass
from rebalancer.planning.snapshot import ClusterSnapshot, PoolResolver

RELIEVING = frozenset({Outcome.EVICTED, Outcome.DRY_RUN, Outcome.SERVER_DRY_RUN})  # a dry run marks what it would


def planned_nodes(plan: EvictionPlan) -> frozenset[str]:
    """The nodes the plan's evictions are about to relieve."""
    return frozenset(e.node for e in plan.evictions)


def edited(node: Node, edit: NodeEdit) -> Node:
    """``node`` with a mark's edit made: its taints, and the annotation set or removed."""
    annotations = {k: v for k, v in node.annotations.items() if k != GUARD_KEY}
    if edit.annotation is not None:
        annotations[GUARD_KEY] = edit.annotation
    return msgspec.structs.replace(node, taints=edit.taints, annotations=annotations)


def with_changes(snapshot: ClusterSnapshot, changes: Iterable[Change]) -> ClusterSnapshot:
    """The snapshot as the guard's first changes of a cycle left its nodes (its second pass, after the
    evictor, decides on these rather than on the marks read before them)."""
    nodes = dict(snapshot.nodes)
    for change in changes:
        node = nodes.get(change.node)
        edit = None if node is None else apply_change(change, node.taints, node.annotations.get(GUARD_KEY))
        if node is not None and edit is not None:
            nodes[change.node] = edited(node, edit)
    return replace(snapshot, nodes=nodes)


def ahead_of_evictions(
    snapshot: ClusterSnapshot, plan: EvictionPlan, settings: LandingGuardSettings, owner: str
) -> GuardDecision:
    """The marks to make before the evictor: the nodes the plan is about to relieve count as relieved, and every
    node it might have relieved ranks with them under the cap (``snapshot.relievable``: the decision the
    landing prediction was made on, :func:`rebalancer.policy.cycle.with_marks_ahead`)."""
    nodes = guarded_nodes(snapshot, plan, planned_nodes(plan), relievable=snapshot.relievable)
    return decide(nodes, settings, owner, snapshot.taken_at, pool_sizes(snapshot))


def after_evictions(
    snapshot: ClusterSnapshot, plan: EvictionPlan, report: EvictorReport, settings: LandingGuardSettings, owner: str
) -> GuardDecision:
    """The marks after the evictor, on what it really relieved (``snapshot`` as the first pass left it)."""
    nodes = guarded_nodes(snapshot, plan, relieved_nodes(report))
    return decide(nodes, settings, owner, snapshot.taken_at, pool_sizes(snapshot))


def relieved_nodes(report: EvictorReport) -> frozenset[str]:
    """The nodes pods were evicted from this cycle (in a dry run: would have been)."""
    return frozenset(r.eviction.node for r in report.results if r.outcome in RELIEVING)


def unknown_nodes(pools: PoolSettings, nodes: Iterable[Node]) -> list[GuardedNode]:
    """``nodes`` as a sweep sees them, without a cycle: every class unknown and nothing relieved, so the
    rules only clear expired marks, marks of pools without a guard, annotations without their taint, and
    marks over a pool's cap (a node cordoned or NotReady since the last cycle shrinks it)."""
    resolver = PoolResolver(pools)
    return [
        GuardedNode(
            n.name,
            resolver.pool_of(n),
            NodeClass.UNKNOWN,
            False,
            n.taints,
            n.annotations.get(GUARD_KEY),
            takes_pods=takes_pods(n),
        )
        for n in nodes
    ]
