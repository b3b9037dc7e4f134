"""A cycle focused on an alert's nodes decides what the cycle over the whole cluster decides for them,
while it writes the decision records of the nodes it needs only (hypothesis, generated clusters).

- its node decision records are the full plan's records of those nodes: the focused ones, every hot or
  unknown one, those carrying the landing guard's key, and its evictions' destinations;
- focused on the hottest nodes the full plan relieves first (any number of them), it plans exactly the full
  plan's evictions from them;
- the landing guard's pass decides on it exactly what it decides with every node's record.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rebalancer.actions.guard.decide import decide, guarded_nodes, pool_sizes
from rebalancer.actions.guard.inputs import planned_nodes
from rebalancer.domain.guard_marks import carries_guard_key
from rebalancer.domain.model import ClusterFacts, UsageReport
from rebalancer.planning.plan import EvictionPlan, NodeClass
from rebalancer.policy import Policy
from rebalancer.policy.cycle import plan_cycle
from tests.unit.test_guard_pass_scope import guard_settings, marked_clusters
from tests.unit.test_landing_guard import ME, NOW
from tests.unit.test_planner_properties import policies


def with_records_of(plan: EvictionPlan, other: EvictionPlan) -> EvictionPlan:
    """``plan`` with ``other``'s node decision records."""
    results = tuple(
        replace(r, node_decisions=o.node_decisions) for r, o in zip(plan.results, other.results, strict=True)
    )
    return replace(plan, results=results)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(marked_clusters(), policies(), st.floats(0.0, 1.0), st.booleans(), st.data())
def test_a_focused_plan_decides_as_the_full_plan_for_its_nodes(
    cluster: tuple[ClusterFacts, UsageReport], pol: Policy, fraction: float, guarded: bool, data: st.DataObject
) -> None:
    facts, report = cluster
    guard = guard_settings(fraction, "a")
    if guarded:  # the guard's marks ahead of the evictions are counted by the landing prediction
        pol = pol.model_copy(update={"landing_guard": guard})
    snapshot, full = plan_cycle(facts, report, pol, NOW)
    records = full.results[0].node_decisions
    names = [d.node for d in records]
    focus = data.draw(st.sets(st.sampled_from(names), min_size=1).map(frozenset))
    focused_snapshot, focused = plan_cycle(facts, report, pol, NOW, focus)

    result = focused.results[0]
    assert all(e.node in focus for e in focused.evictions)
    wanted = set(focus) | {e.room_on for e in focused.evictions}
    wanted |= {d.node for d in records if d.node_class in (NodeClass.HOT, NodeClass.UNKNOWN)}
    wanted |= {n.name for n in facts.nodes if carries_guard_key(n)}
    assert result.node_decisions == tuple(d for d in records if d.node in wanted)

    if pol.strategies[0].kind == "LowNodeUtilization":
        hot = sorted((d for d in records if d.node_class is NodeClass.HOT), key=lambda d: -(d.usage_pct or 0.0))
        first = frozenset(d.node for d in hot[: data.draw(st.integers(1, max(1, len(hot))))])
        if first:
            from_first = plan_cycle(facts, report, pol, NOW, first)[1]
            assert from_first.evictions == tuple(e for e in full.evictions if e.node in first)

    everyone = with_records_of(focused, full)  # as the focused plan was when it classified every node
    for relieved in (planned_nodes(focused), frozenset()):
        scoped = decide(guarded_nodes(focused_snapshot, focused, relieved), guard, ME, NOW, pool_sizes(snapshot))
        assert scoped == decide(guarded_nodes(focused_snapshot, everyone, relieved, every_node=True), guard, ME, NOW)
