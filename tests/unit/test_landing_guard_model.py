"""The landing prediction sees the landing guard's marks as the guard really sets them: one decision, made
before planning, on which relieved nodes the cap (maxMarkedFraction) leaves unmarked."""

from __future__ import annotations

from rebalancer.actions.guard.decide import Action
from rebalancer.actions.guard.inputs import ahead_of_evictions
from rebalancer.domain.guard_marks import GUARD_KEY
from rebalancer.domain.model import ClusterFacts, Pod
from rebalancer.policy.cycle import plan_cycle
from tests.builders import node, pod, policy, usage

LNU = """
kind: LowNodeUtilization
thresholds: {cpu: 20}
targetThresholds: {cpu: 70}
"""
NODES = [node(name) for name in ("a", "b", "c", "d", "e")]


def filler(node_name: str, count: int) -> list[Pod]:
    return [pod(f"{node_name}-f{i}", node_name, workload=f"{node_name}-f{i}", cpu_request_m=1000) for i in range(count)]


# equal requests everywhere (an evicted pod's requests stay on its node while it terminates); api's other pods
# run on c, d and e, so api-1's replacement lands back on b (spreading) unless b is marked
PODS = [
    pod("web-1", "a", workload="web", cpu_request_m=1000),
    pod("api-1", "b", workload="api", cpu_request_m=1000),
    *filler("a", 2),
    *filler("b", 2),
    *(p for name in "cde" for p in [pod(f"{name}-api", name, workload="api", cpu_request_m=1000), *filler(name, 2)]),
]
USAGE = usage({"a": 9500, "b": 9000, "c": 1000, "d": 1000, "e": 1000}, {"web-1": 3000, "api-1": 2500})


def test_a_relieved_node_the_cap_leaves_unmarked_is_predicted_as_the_scheduler_sees_it() -> None:
    """maxMarkedFraction 0.2 of five nodes: one mark, for a (the most over its target). b, hot as well, stays
    unmarked: its pod's replacement would land back on it (api's other pods are on c, d and e), and a's may
    land on it as on any cold node."""
    guarded = policy(LNU, "landingGuard: {pools: [{pool: default, maxMarkedFraction: 0.2}]}\n")
    snapshot, plan = plan_cycle(ClusterFacts(tuple(NODES), tuple(PODS)), USAGE, guarded, 1_700_000_000.0)
    assert snapshot.relievable == {"a", "b"} and set(snapshot.marks_ahead) == {"a"}
    reasons = {d.name: d.reason for d in plan.results[0].pod_decisions if d.name in ("web-1", "api-1")}
    assert reasons == {
        "web-1": "predicted landing risk 25% > maxLandingRisk 10%: on hot b 25% (score 651/700)",
        "api-1": "predicted landing risk 100% > maxLandingRisk 10%: back on b 100% (score 651/700)",
    }
    assert plan.evictions == ()
    ahead = ahead_of_evictions(snapshot, plan, guarded.landing_guard, "rebalancer-0")
    assert {c.node for c in ahead.changes if c.action is Action.SET} == {"a"}  # the marks the prediction assumed
    assert [n.why for n in ahead.notes if n.node == "b"] == ["capped: 1 of 5 node(s) may be marked"]

    risky = policy(LNU + "maxLandingRisk: 0.3\n", "landingGuard: {pools: [{pool: default, maxMarkedFraction: 0.2}]}\n")
    snapshot, plan = plan_cycle(ClusterFacts(tuple(NODES), tuple(PODS)), USAGE, risky, 1_700_000_000.0)
    assert [(e.name, e.node) for e in plan.evictions] == [("web-1", "a")]  # a 25% chance of landing on b
    assert plan.evictions[0].landing in {"c", "d", "e"}
    ahead = ahead_of_evictions(snapshot, plan, risky.landing_guard, "rebalancer-0")
    assert {c.node for c in ahead.changes if c.action is Action.SET} == set(snapshot.marks_ahead) == {"a"}
    assert all(t.key == GUARD_KEY for t in snapshot.marks_ahead["a"].taints)


def test_with_room_for_both_marks_both_relieved_nodes_are_marked_and_predicted_so() -> None:
    guarded = policy(LNU, "landingGuard: {pools: [{pool: default, maxMarkedFraction: 0.4}]}\n")
    snapshot, plan = plan_cycle(ClusterFacts(tuple(NODES), tuple(PODS)), USAGE, guarded, 1_700_000_000.0)
    assert set(snapshot.marks_ahead) == {"a", "b"}
    assert sorted(e.name for e in plan.evictions) == ["api-1", "web-1"]
    ahead = ahead_of_evictions(snapshot, plan, guarded.landing_guard, "rebalancer-0")
    assert {c.node for c in ahead.changes if c.action is Action.SET} == {"a", "b"}
