"""The landing guard's pass over a cycle decides on the nodes it can change or note only (hot, relieved,
carrying the key or its annotation), with the pools' sizes for the caps: over random clusters, marks and
policies, full or focused cycles, it decides exactly what a pass over every node decides."""

from __future__ import annotations

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rebalancer.actions.guard.decide import decide, guarded_nodes, pool_sizes
from rebalancer.actions.guard.inputs import planned_nodes
from rebalancer.domain.guard_marks import GUARD_KEY
from rebalancer.domain.model import ClusterFacts, Node, UsageReport
from rebalancer.domain.settings.guard import LandingGuardSettings
from rebalancer.policy import Policy
from rebalancer.policy.cycle import plan_cycle
from tests.unit.test_landing_guard import FOREIGN_TAINTS, MARKS, ME, NOW
from tests.unit.test_planner_properties import clusters, policies


@st.composite
def marked_clusters(draw: st.DrawFn) -> tuple[ClusterFacts, UsageReport]:
    """A generated cluster whose nodes carry marks of the project's, orphaned annotations or foreign taints."""
    facts, report = draw(clusters())
    nodes: list[Node] = []
    for n in facts.nodes:
        taints, annotations = (*n.taints, *draw(FOREIGN_TAINTS)), dict(n.annotations)
        mark = draw(MARKS)
        if mark is not None:
            annotations[GUARD_KEY] = mark.annotation()
            if draw(st.booleans()) and not any(t.key == GUARD_KEY for t in taints):
                taints = (*taints, mark.taint())
        nodes.append(msgspec.structs.replace(n, taints=taints, annotations=annotations))
    return msgspec.structs.replace(facts, nodes=tuple(nodes)), report


def guard_settings(fraction: float, pool: str) -> LandingGuardSettings:
    return LandingGuardSettings.model_validate(
        {"pools": [{"pool": pool, "holdAfterRelief": "10m", "markTtl": "15m", "maxMarkedFraction": fraction}]}
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(marked_clusters(), policies(), st.floats(0.0, 1.0), st.sampled_from(["a", "b"]), st.data())
def test_the_pass_on_the_nodes_that_matter_decides_as_a_pass_on_every_node(
    cluster: tuple[ClusterFacts, UsageReport], pol: Policy, fraction: float, pool: str, data: st.DataObject
) -> None:
    facts, report = cluster
    names = sorted(n.name for n in facts.nodes)
    focus = data.draw(st.none() | st.sets(st.sampled_from(names), min_size=1).map(frozenset))
    snapshot, plan = plan_cycle(facts, report, pol, NOW, focus)
    settings_ = guard_settings(fraction, pool)
    relieved = data.draw(st.sampled_from([planned_nodes(plan), frozenset(names[:1])]))
    every = decide(guarded_nodes(snapshot, plan, relieved, every_node=True), settings_, ME, NOW)
    scoped = guarded_nodes(snapshot, plan, relieved)
    assert decide(scoped, settings_, ME, NOW, pool_sizes(snapshot)) == every
    assert len(scoped) <= len(names)
