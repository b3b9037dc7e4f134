"""The landing guard in the simulation (pure): the production rules (``guarded_nodes``, ``decide``,
``apply_change``) before each cycle's evictor (the nodes about to be relieved) and after it, and a sweep at every other step as serve's housekeeping does
every minute; each change is made on the simulated node's taints and annotation, which the scheduler model
then reads (PreferNoSchedule: TaintToleration scoring; NoSchedule: a filter)."""

from __future__ import annotations

from collections import Counter

from rebalancer.actions.evictor import EvictorReport
from rebalancer.actions.guard.decide import Change, GuardDecision, apply_change, decide
from rebalancer.actions.guard.inputs import after_evictions, ahead_of_evictions, edited, unknown_nodes, with_changes
from rebalancer.domain.guard_marks import GUARD_KEY, Mark, read_mark
from rebalancer.offline.simulate.world import World
from rebalancer.planning.plan import EvictionPlan
from rebalancer.planning.snapshot import ClusterSnapshot
from rebalancer.policy import Policy

OWNER = "rebalancer/offline/simulate"


class SimGuard:
    """The guard of one run: applies its decisions on the world and counts them (action -> reason -> n)."""

    def __init__(self, world: World, policy: Policy) -> None:
        self.world, self.policy = world, policy
        self.changes: Counter[tuple[str, str]] = Counter()  # (action, reason) -> changes made
        self.skipped = 0  # the node no longer carried the mark a change was decided on (never in one thread)

    def before_evictions(self, snapshot: ClusterSnapshot, plan: EvictionPlan) -> ClusterSnapshot:
        """As the service does: the nodes about to be relieved are marked before the evictor; returns the
        snapshot with the marks made, for :meth:`after_cycle`."""
        if not plan.evictions:
            return snapshot
        made = self._apply(ahead_of_evictions(snapshot, plan, self.policy.landing_guard, OWNER))
        return with_changes(snapshot, made)

    def after_cycle(self, snapshot: ClusterSnapshot, plan: EvictionPlan, report: EvictorReport) -> None:
        self._apply(after_evictions(snapshot, plan, report, self.policy.landing_guard, OWNER))

    def sweep(self, now: float) -> None:
        """Serve's periodic housekeeping: expired marks go even when no cycle runs."""
        nodes = unknown_nodes(self.policy.pools, self.world.nodes)
        self._apply(decide(nodes, self.policy.landing_guard, OWNER, now))

    def _apply(self, decision: GuardDecision) -> list[Change]:
        made = []
        for change in decision.changes:
            node = self.world.node(change.node)
            edit = apply_change(change, node.taints, node.annotations.get(GUARD_KEY))
            if edit is None:
                self.skipped += 1
                continue
            self.world.set_node(edited(node, edit))
            self.changes[(change.action.value, change.reason)] += 1
            made.append(change)
        return made

    def marked(self) -> dict[str, Mark]:
        """The nodes carrying a mark of the project's now."""
        out = {}
        for node in self.world.nodes:
            state = read_mark(node.taints, node.annotations.get(GUARD_KEY))
            if isinstance(state, Mark):
                out[node.name] = state
        return out
