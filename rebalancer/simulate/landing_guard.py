"""The landing guard in the simulation (pure): the production rules (``guarded_nodes``, ``decide``,
``apply_change``) after each cycle's evictor, and a sweep at every other step as serve's housekeeping does
every minute; each change is made on the simulated node's taints and annotation, which the scheduler model
then reads (PreferNoSchedule: TaintToleration scoring; NoSchedule: a filter)."""

from __future__ import annotations

from collections import Counter

import msgspec

from rebalancer.evictor import EvictorReport
from rebalancer.guard.decide import GuardDecision, apply_change, decide, guarded_nodes
from rebalancer.guard.inputs import relieved_nodes, unknown_nodes
from rebalancer.guard.marks import GUARD_KEY, Mark, read_mark
from rebalancer.plan import EvictionPlan
from rebalancer.policy import Policy
from rebalancer.simulate.world import World
from rebalancer.snapshot import ClusterSnapshot

OWNER = "rebalancer/simulate"


class SimGuard:
    """The guard of one run: applies its decisions on the world and counts them (action -> reason -> n)."""

    def __init__(self, world: World, policy: Policy) -> None:
        self.world, self.policy = world, policy
        self.changes: Counter[tuple[str, str]] = Counter()  # (action, reason) -> changes made
        self.skipped = 0  # the node no longer carried the mark a change was decided on (never in one thread)

    def after_cycle(self, snapshot: ClusterSnapshot, plan: EvictionPlan, report: EvictorReport) -> None:
        nodes = guarded_nodes(snapshot, plan, relieved_nodes(report))
        self._apply(decide(nodes, self.policy.landing_guard, OWNER, snapshot.taken_at))

    def sweep(self, now: float) -> None:
        """Serve's periodic housekeeping: expired marks go even when no cycle runs."""
        nodes = unknown_nodes(self.policy.pools, self.world.nodes)
        self._apply(decide(nodes, self.policy.landing_guard, OWNER, now))

    def _apply(self, decision: GuardDecision) -> None:
        for change in decision.changes:
            node = self.world.node(change.node)
            edit = apply_change(change, node.taints, node.annotations.get(GUARD_KEY))
            if edit is None:
                self.skipped += 1
                continue
            annotations = {k: v for k, v in node.annotations.items() if k != GUARD_KEY}
            if edit.annotation is not None:
                annotations[GUARD_KEY] = edit.annotation
            self.world.set_node(msgspec.structs.replace(node, taints=edit.taints, annotations=annotations))
            self.changes[(change.action.value, change.reason)] += 1

    def marked(self) -> dict[str, Mark]:
        """The nodes carrying a mark of the project's now."""
        out = {}
        for node in self.world.nodes:
            state = read_mark(node.taints, node.annotations.get(GUARD_KEY))
            if isinstance(state, Mark):
                out[node.name] = state
        return out
