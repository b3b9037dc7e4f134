"""``classifyBy: requests``: LowNodeUtilization and HighNodeUtilization read utilization as the pods' CPU
requests, as the community descheduler does, whatever the usage reading says."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rebalancer.domain.model import ClusterFacts, UsageReport
from rebalancer.planning.plan import EvictionPlan, NodeClass
from rebalancer.policy.cycle import plan_cycle
from strategies.by_requests import requests_view
from tests.builders import node, pod, policy, snapshot, usage

LNU = """
kind: LowNodeUtilization
thresholds: {cpu: 20}
targetThresholds: {cpu: 50}
classifyBy: requests
predictPlacement: false
"""
HNU = """
kind: HighNodeUtilization
thresholds: {cpu: 20}
targetThresholds: {cpu: 100}
classifyBy: requests
predictPlacement: false
"""
NOW = 1_700_000_000.0


def run(strategy: str, nodes, pods, report: UsageReport) -> EvictionPlan:
    return plan_cycle(ClusterFacts(tuple(nodes), tuple(pods)), report, policy(strategy), NOW)[1]


def test_a_node_hot_by_requests_is_relieved_though_its_real_usage_is_low():
    # busy requests 8000m of 10000m (80% > 50%) but uses 1000m; idle requests 1000m (10% < 20%) but uses 9000m
    pods = [pod(f"p{i}", "busy", cpu_request_m=2000) for i in range(4)] + [pod("q", "idle", cpu_request_m=1000)]
    report = usage({"busy": 1000, "idle": 9000}, {p.name: 250 for p in pods})
    plan = run(LNU, [node("busy"), node("idle")], pods, report)
    classes = {d.node: d.node_class for d in plan.results[0].node_decisions}
    assert classes == {"busy": NodeClass.HOT, "idle": NodeClass.COLD}
    # 8000m - 5000m target: 3000m to move, 2000m pods: two of them (idle's room: 5000m - 1000m = 4000m)
    assert len(plan.evictions) == 2
    assert all(e.room_on == "idle" and e.usage_m == 2000 for e in plan.evictions)
    assert "CPU requests 80.0% > target 50.0%" in plan.results[0].node_decisions[0].reason


def test_real_usage_does_not_make_a_node_hot_by_requests():
    pods = [pod("p", "busy", cpu_request_m=3000), pod("q", "idle", cpu_request_m=500)]
    report = usage({"busy": 9500, "idle": 100}, {"p": 9000, "q": 100})
    plan = run(LNU, [node("busy"), node("idle")], pods, report)
    assert {d.node: d.node_class for d in plan.results[0].node_decisions}["busy"] is NodeClass.NORMAL
    assert plan.evictions == ()


def test_pods_without_a_cpu_request_are_not_moved():
    pods = [pod("be", "busy", cpu_request_m=0), pod("big", "busy", cpu_request_m=9000)]
    plan = run(LNU, [node("busy"), node("idle")], pods, usage({"busy": 1, "idle": 1}, {"be": 1, "big": 1}))
    decisions = {d.name: d for d in plan.results[0].pod_decisions}
    assert not decisions["be"].chosen


def test_missing_usage_does_not_hide_requests_but_a_not_ready_node_stays_unknown():
    pods = [pod("p", "busy", cpu_request_m=9000)]
    view = requests_view(snapshot([node("busy"), node("down", ready=False)], pods, usage({}, {})))
    assert view.load["busy"].usage_m == 9000
    assert view.load["down"].usage_m is None and "not Ready" in (view.load["down"].unknown_reason or "")
    assert view.pod_usage[("default", "p")] == 9000


def test_high_node_utilization_empties_a_node_with_few_requests():
    pods = [pod("a", "low", cpu_request_m=500), pod("x", "full", cpu_request_m=6000)]
    report = usage({"low": 9000, "full": 100}, {"a": 9000, "x": 100})  # real usage says the opposite
    plan = run(HNU, [node("low"), node("full")], pods, report)
    assert {d.node: d.node_class for d in plan.results[0].node_decisions} == {
        "low": NodeClass.COLD,
        "full": NodeClass.NORMAL,
    }
    assert [(e.name, e.room_on) for e in plan.evictions] == [("a", "full")]


def test_requests_classification_needs_no_prediction():
    from rebalancer.app.prediction import needs_prediction

    assert not needs_prediction(policy(LNU))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 4000), min_size=1, max_size=6), st.lists(st.integers(0, 4000), max_size=6))
def test_node_usage_is_the_sum_of_its_pods_requests(hot: list[int], cold: list[int]):
    pods = [pod(f"h{i}", "a", cpu_request_m=r) for i, r in enumerate(hot)]
    pods += [pod(f"c{i}", "b", cpu_request_m=r) for i, r in enumerate(cold)]
    view = requests_view(snapshot([node("a"), node("b")], pods, usage({"a": 1, "b": 2})))
    assert view.load["a"].usage_m == sum(hot) and view.load["b"].usage_m == sum(cold)
    assert all(view.pod_usage[p.key] == p.cpu_request_m for p in pods)
