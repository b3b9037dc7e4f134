"""What the landing guard's rules are fed besides a plan (pure): the nodes an evictor report relieved, and
the nodes as a sweep without a cycle sees them. Shared by the service (``app_guard``) and the simulator."""

from __future__ import annotations

from collections.abc import Iterable

from rebalancer.evictor import EvictorReport, Outcome
from rebalancer.guard.decide import GuardedNode
from rebalancer.guard.marks import GUARD_KEY
from rebalancer.model import Node
from rebalancer.plan import NodeClass
from rebalancer.settings import PoolSettings
from rebalancer.snapshot import PoolResolver

RELIEVING = frozenset({Outcome.EVICTED, Outcome.DRY_RUN, Outcome.SERVER_DRY_RUN})  # a dry run marks what it would


def relieved_nodes(report: EvictorReport) -> frozenset[str]:
    """The nodes pods were evicted from this cycle (in a dry run: would have been)."""
    return frozenset(r.eviction.node for r in report.results if r.outcome in RELIEVING)


def unknown_nodes(pools: PoolSettings, nodes: Iterable[Node]) -> list[GuardedNode]:
    """``nodes`` as a sweep sees them, without a cycle: every class unknown and nothing relieved, so the
    rules only clear expired marks, marks of pools without a guard and annotations without their taint."""
    resolver = PoolResolver(pools)
    return [
        GuardedNode(n.name, resolver.pool_of(n), NodeClass.UNKNOWN, False, n.taints, n.annotations.get(GUARD_KEY))
        for n in nodes
    ]
