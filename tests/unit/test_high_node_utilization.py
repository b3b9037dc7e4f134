"""HighNodeUtilization on real usage: empty nearly idle nodes, all or nothing."""

from __future__ import annotations

from rebalancer.cycle import plan_cycle
from rebalancer.model import ClusterFacts
from rebalancer.plan import EvictionPlan, NodeClass
from tests.builders import budget, node, pod, policy, usage

HNU = """
kind: HighNodeUtilization
thresholds: {cpu: 20}
targetThresholds: {cpu: 70}
"""


def run(nodes, pods, report, extra: str = "", budgets=()) -> EvictionPlan:
    facts = ClusterFacts(tuple(nodes), tuple(pods), tuple(budgets))
    return plan_cycle(facts, report, policy(HNU + extra), 1_700_000_000.0)[1]


def test_idle_node_is_emptied_onto_busy_nodes():
    pods = [pod("a", "idle"), pod("b", "idle"), pod("ds", "idle", kind="DaemonSet"), pod("x", "busy")]
    report = usage({"idle": 900, "busy": 5000}, {"a": 400, "b": 300, "ds": 100, "x": 4000})
    plan = run([node("idle"), node("busy")], pods, report)
    decisions = {d.node: d.node_class for d in plan.results[0].node_decisions}
    assert decisions == {"idle": NodeClass.COLD, "busy": NodeClass.NORMAL}
    assert sorted(e.name for e in plan.evictions) == ["a", "b"]  # the DaemonSet pod stays, as it should
    assert {e.room_on for e in plan.evictions} == {"busy"}


def test_node_is_not_drained_when_one_pod_does_not_fit():
    pods = [pod("a", "idle"), pod("big", "idle", cpu_request_m=6000), pod("x", "busy", cpu_request_m=5000)]
    report = usage({"idle": 1500, "busy": 5000}, {"a": 400, "big": 1000, "x": 4000})
    plan = run([node("idle"), node("busy")], pods, report)
    assert plan.evictions == ()
    reasons = {d.name: d.reason for d in plan.results[0].pod_decisions}
    assert "cannot be emptied" in reasons["a"] and "big" in reasons["a"]


def test_node_with_a_protected_pod_is_left_alone():
    pods = [pod("a", "idle"), pod("bare", "idle", workload=None), pod("x", "busy")]
    report = usage({"idle": 800, "busy": 5000}, {"a": 300, "bare": 300, "x": 4000})
    plan = run([node("idle"), node("busy")], pods, report)
    assert plan.evictions == ()
    assert any("bare" in d.reason and "cannot be emptied" in d.reason for d in plan.results[0].pod_decisions)


def test_destinations_keep_under_target_after_moves():
    # busy has 7000 - 6500 = 500m of room: the 600m pod does not fit, so nothing moves
    pods = [pod("a", "idle"), pod("x", "busy")]
    report = usage({"idle": 1000, "busy": 6500}, {"a": 600, "x": 6000})
    assert run([node("idle"), node("busy")], pods, report).evictions == ()


def test_unknown_pod_usage_blocks_draining():
    pods = [pod("a", "idle"), pod("mystery", "idle"), pod("x", "busy")]
    report = usage({"idle": 1000, "busy": 5000}, {"a": 300, "x": 4000})
    assert run([node("idle"), node("busy")], pods, report).evictions == ()


def test_number_of_nodes_and_max_nodes_to_empty():
    nodes = [node("i1"), node("i2"), node("i3"), node("busy", cpu_m=100_000)]
    pods = [pod("a", "i1"), pod("b", "i2"), pod("c", "i3")]
    report = usage({"i1": 100, "i2": 200, "i3": 300, "busy": 30_000}, {"a": 50, "b": 50, "c": 50})
    assert run(nodes, pods, report, "numberOfNodes: 3\n").evictions == ()
    plan = run(nodes, pods, report, "maxNodesToEmpty: 2\n")
    assert sorted(e.node for e in plan.evictions) == ["i1", "i2"]  # least used first


def test_budget_all_or_nothing():
    pods = [pod("a", "idle", labels={"app": "db"}), pod("b", "idle", labels={"app": "db"}), pod("x", "busy")]
    report = usage({"idle": 800, "busy": 4000}, {"a": 300, "b": 300, "x": 3000})
    plan = run([node("idle"), node("busy")], pods, report, budgets=[budget("db", {"app": "db"}, allowed=1)])
    assert plan.evictions == ()  # one of the two would stay: the node could not be removed anyway
