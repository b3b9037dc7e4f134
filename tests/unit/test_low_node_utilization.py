"""LowNodeUtilization on real usage: table-driven cases over plain builders."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

import msgspec

from rebalancer.domain.model import ClusterFacts, Taint, Toleration, UsageReport
from rebalancer.planning.plan import EvictionPlan, NodeClass, PlannedEviction
from rebalancer.planning.protections import Protections
from rebalancer.planning.snapshot import after_evictions
from rebalancer.policy import Policy
from rebalancer.policy.cycle import plan_cycle
from strategies import build
from strategies.candidates import BudgetLedger
from strategies.low_node_utilization import KIND
from tests.builders import budget, node, pod, policy, snapshot, usage

LNU = """
kind: LowNodeUtilization
thresholds: {cpu: 20}
targetThresholds: {cpu: 70}
"""


# Placement prediction (predictPlacement, on by default) is tested in test_placement_prediction.py. Several
# clusters here have one pod on the hot node and none on the cold ones: once it is evicted, both are empty,
# the scheduler model scores them equal and the replacement may land back (a random tie: a landing risk of
# 50%, above maxLandingRisk), so with prediction nothing is planned. Those tests are about classes, pod choice and room, and use NO_PREDICTION.
NO_PREDICTION = LNU + "predictPlacement: false\n"


def run(nodes, pods, report, pol: Policy | None = None, budgets=()) -> EvictionPlan:
    facts = ClusterFacts(tuple(nodes), tuple(pods), tuple(budgets))
    return plan_cycle(facts, report, pol or policy(LNU), 1_700_000_000.0)[1]


def classes(plan: EvictionPlan) -> dict[str, NodeClass]:
    return {d.node: d.node_class for d in plan.results[0].node_decisions}


def evicted(plan: EvictionPlan) -> list[str]:
    return [e.name for e in plan.evictions]


def why(plan: EvictionPlan, pod_name: str) -> str:
    return next(d.reason for d in plan.results[0].pod_decisions if d.name == pod_name)


def test_hot_node_relieved_onto_cold_node_with_fewest_evictions():
    # hot: 9000m of 10000m (90%), target 70% -> 2000m must go. One 2500m pod covers it; 3 x 800m would too.
    pods = [pod("big", "hot"), pod("a", "hot"), pod("b", "hot"), pod("c", "hot")]
    report = usage({"hot": 9000, "cold": 1000}, {"big": 2500, "a": 800, "b": 800, "c": 800})
    plan = run([node("hot"), node("cold")], pods, report)
    assert classes(plan) == {"hot": NodeClass.HOT, "cold": NodeClass.COLD}
    assert evicted(plan) == ["big"]
    assert plan.evictions[0].room_on == "cold"
    assert "not needed" in why(plan, "a")


def test_closest_fit_when_several_pods_cover_the_excess():
    pods = [pod("huge", "hot"), pod("fits", "hot"), pod("small", "hot")]
    report = usage({"hot": 8000, "cold": 500}, {"huge": 5000, "fits": 1200, "small": 300})
    assert evicted(run([node("hot"), node("cold")], pods, report)) == ["fits"]


def test_biggest_first_when_no_single_pod_covers():
    # excess 3000m: 1500 + 1400 leave 100m, which the smallest covering pod (200m) closes: three evictions
    pods = [pod(n, "hot") for n in ("p1500", "p1400", "p1200", "p300", "p200")]
    report = usage({"hot": 10_000, "cold": 0}, {"p1500": 1500, "p1400": 1400, "p1200": 1200, "p300": 300, "p200": 200})
    nodes = [node("hot"), node("cold")]
    assert evicted(run(nodes, pods, report, policy(NO_PREDICTION))) == ["p1500", "p1400", "p200"]
    # with prediction, after two moves each node holds two web pods once a third leaves hot, a tie on spreading,
    # but the evicted pods' requests stay on hot while they terminate: every replacement lands on cold
    plan = run(nodes, pods, report)
    assert [(e.name, e.landing) for e in plan.evictions] == [("p1500", "cold"), ("p1400", "cold"), ("p200", "cold")]


def test_preference_breaks_ties_lower_priority_then_not_ready():
    pods = [
        pod("important", "hot", priority=1000),
        pod("ready", "hot"),
        pod("unready", "hot", ready=False),
    ]
    report = usage({"hot": 8000, "cold": 1000}, {"important": 1500, "ready": 1500, "unready": 1500})
    assert evicted(run([node("hot"), node("cold")], pods, report)) == ["unready"]


def test_lower_deletion_cost_preferred():
    cost = "controller.kubernetes.io/pod-deletion-cost"
    pods = [pod("costly", "hot", annotations={cost: "100"}), pod("cheap", "hot", annotations={cost: "-5"})]
    report = usage({"hot": 8000, "cold": 1000}, {"costly": 1500, "cheap": 1500})
    assert evicted(run([node("hot"), node("cold")], pods, report)) == ["cheap"]


def test_no_cold_node_means_no_eviction():
    pods = [pod("a", "hot")]
    report = usage({"hot": 9000, "mid": 5000}, {"a": 3000})
    plan = run([node("hot"), node("mid")], pods, report)
    assert evicted(plan) == []
    assert any("no cold node" in n for n in plan.results[0].notes)


def test_all_hot_means_no_eviction():
    pods = [pod("a", "n1"), pod("b", "n2")]
    plan = run([node("n1"), node("n2")], pods, usage({"n1": 9000, "n2": 9500}, {"a": 3000, "b": 3000}))
    assert set(classes(plan).values()) == {NodeClass.HOT}
    assert evicted(plan) == []


def test_unknown_node_is_neither_hot_nor_cold_nor_destination():
    pods = [pod("a", "hot"), pod("x", "mystery")]
    report = usage({"hot": 9000}, {"a": 3000})  # 'mystery' has no data: unknown, never zero
    plan = run([node("hot"), node("mystery")], pods, report)
    assert classes(plan)["mystery"] is NodeClass.UNKNOWN
    assert evicted(plan) == []


def test_pod_with_unknown_usage_is_not_chosen():
    pods = [pod("known", "hot"), pod("unknown", "hot")]
    plan = run([node("hot"), node("cold")], pods, usage({"hot": 9000, "cold": 0}, {"known": 500}))
    assert evicted(plan) == ["known"]
    assert "usage unknown" in why(plan, "unknown")


def test_usage_failure_blocks_the_plan():
    pods = [pod("a", "hot")]
    plan = run([node("hot"), node("cold")], pods, UsageReport.failed("prometheus down"))
    assert plan.blocked is not None and "prometheus down" in plan.blocked
    assert plan.evictions == ()
    assert set(classes(plan).values()) == {NodeClass.UNKNOWN}


def test_room_runs_out_on_concrete_cold_nodes():
    # hot: 30000m on 30000m, 9000m above target -> three 3000m pods needed; each cold node has 5100m
    # of room under its 70% target, so it takes one 3000m pod and not a second: only two moves fit
    pods = [pod(f"p{i}", "hot") for i in range(4)]
    nodes = [node("hot", cpu_m=30_000), node("c1"), node("c2")]
    report = usage({"hot": 30_000, "c1": 1900, "c2": 1900}, {f"p{i}": 3000 for i in range(4)})
    plan = run(nodes, pods, report, policy(NO_PREDICTION))  # with it, the third pod's replacement ties with hot
    assert len(plan.evictions) == 2
    assert {e.room_on for e in plan.evictions} == {"c1", "c2"}
    assert any("real-usage room" in d.reason for d in plan.results[0].pod_decisions if not d.chosen)


def test_room_is_not_a_pooled_total():
    # 2 x 3000m of room in total, but no single cold node can take a 4000m pod
    pods = [pod("big", "hot")]
    report = usage({"hot": 10_000, "c1": 4000, "c2": 4000}, {"big": 4000})
    plan = run([node("hot"), node("c1"), node("c2")], pods, report)
    assert evicted(plan) == []


def test_requests_must_fit_allocatable_on_the_destination():
    pods = [pod("a", "hot", cpu_request_m=3000), pod("filler", "cold", cpu_request_m=8000)]
    report = usage({"hot": 9000, "cold": 500}, {"a": 3000, "filler": 100})
    plan = run([node("hot"), node("cold")], pods, report)
    assert evicted(plan) == []
    assert "CPU requests" in why(plan, "a")


def test_taints_and_node_selectors_limit_destinations():
    gpu_taint = Taint("gpu", "true", "NoSchedule")
    nodes = [node("hot"), node("tainted", taints=[gpu_taint]), node("labelled", labels={"disk": "ssd"})]
    pods = [
        pod("needs-ssd", "hot", node_selector={"disk": "ssd"}),
        pod("tolerates", "hot", tolerations=[Toleration("gpu", "Exists", "", "")], node_selector={"zone": "x"}),
    ]
    report = usage({"hot": 9500, "tainted": 0, "labelled": 0}, {"needs-ssd": 1500, "tolerates": 1500})
    plan = run(nodes, pods, report)
    assert [(e.name, e.room_on) for e in plan.evictions] == [("needs-ssd", "labelled")]
    assert why(plan, "tolerates") == "no destination accepts it (2 node(s): nodeSelector zone=x does not match)"


def test_pools_have_their_own_thresholds_and_destinations():
    pol = policy(  # without prediction: w1, w2 and g2 would tie once wa left (and g2 is in another pool)
        NO_PREDICTION + "pools:\n  gpu: {thresholds: {cpu: 10}, targetThresholds: {cpu: 90}}\n",
    )
    nodes = [node("g1", pool="gpu"), node("g2", pool="gpu"), node("w1", pool="web"), node("w2", pool="web")]
    pods = [pod("ga", "g1"), pod("wa", "w1")]
    # 85% is normal in the gpu pool (target 90) but hot in the web pool (default target 70)
    report = usage({"g1": 8500, "g2": 500, "w1": 8500, "w2": 500}, {"ga": 2000, "wa": 2000})
    plan = run(nodes, pods, report, pol)
    assert classes(plan) == {"g1": NodeClass.NORMAL, "g2": NodeClass.COLD, "w1": NodeClass.HOT, "w2": NodeClass.COLD}
    assert [(e.name, e.room_on) for e in plan.evictions] == [("wa", "w2")]


def test_destinations_stay_in_the_pool():
    nodes = [node("w1", pool="web"), node("b1", pool="batch"), node("b2", pool="batch")]
    pods = [pod("wa", "w1")]
    report = usage({"w1": 9000, "b1": 0, "b2": 9000}, {"wa": 2500})
    assert evicted(run(nodes, pods, report)) == []


def test_deviation_thresholds_follow_the_pool_mean():
    pol = policy("""
kind: LowNodeUtilization
useDeviationThresholds: true
thresholds: {cpu: 10}
targetThresholds: {cpu: 10}
predictPlacement: false
""")  # a single pod: once evicted, every node is empty and ties
    # mean 40%: below 30% cold, above 50% hot
    nodes = [node("a"), node("b"), node("c"), node("d")]
    pods = [pod("p", "a")]
    report = usage({"a": 6000, "b": 4000, "c": 4000, "d": 2000}, {"p": 1000})
    plan = run(nodes, pods, report, pol)
    assert classes(plan) == {"a": NodeClass.HOT, "b": NodeClass.NORMAL, "c": NodeClass.NORMAL, "d": NodeClass.COLD}
    assert evicted(plan) == ["p"]


def test_number_of_nodes_guard():
    pol = policy(LNU + "numberOfNodes: 1\n")
    pods = [pod("a", "hot")]
    plan = run([node("hot"), node("cold")], pods, usage({"hot": 9000, "cold": 0}, {"a": 3000}), pol)
    assert evicted(plan) == []
    assert any("numberOfNodes" in n for n in plan.results[0].notes)


def test_max_pods_per_node():
    pol = policy(LNU + "maxNoOfPodsToEvictPerNode: 1\n")
    pods = [pod("a", "hot"), pod("b", "hot")]
    plan = run([node("hot"), node("cold")], pods, usage({"hot": 10_000, "cold": 0}, {"a": 2000, "b": 2000}), pol)
    assert evicted(plan) == ["a"]
    assert "maxNoOfPodsToEvictPerNode 1 reached (this strategy's cap, applied while planning)" in why(plan, "b")
    (note,) = [n for n in plan.results[0].notes if n.startswith("maxNoOfPodsToEvictPerNode")]
    assert "applies first, while planning; limits.node.maxPerCycle applies afterwards, in the evictor" in note


def test_no_cap_note_when_the_cap_held_nothing_back():
    pol = policy(LNU + "maxNoOfPodsToEvictPerNode: 2\n")
    plan = run([node("hot"), node("cold")], [pod("a", "hot")], usage({"hot": 10_000, "cold": 0}, {"a": 4000}), pol)
    assert not any(n.startswith("maxNoOfPodsToEvictPerNode") for n in plan.results[0].notes)


def test_disruption_budget_spent_across_the_plan():
    pods = [pod("a", "hot", labels={"app": "db"}), pod("b", "hot", labels={"app": "db"})]
    report = usage({"hot": 10_000, "cold": 0}, {"a": 2000, "b": 2000})
    plan = run([node("hot"), node("cold")], pods, report, budgets=[budget("db", {"app": "db"}, allowed=1)])
    assert len(plan.evictions) == 1
    assert any("allows no more disruptions" in d.reason for d in plan.results[0].pod_decisions)


def test_an_unready_pod_spends_a_budget_that_is_not_met():
    # a single replica under minAvailable 1, running but not ready: the budget is not met (0 healthy of 1), so
    # the Eviction API decides by disruptionsAllowed (0) and refuses; it is never planned
    pods = [pod("only", "hot", labels={"app": "db"}, ready=False)]
    strict = budget("db", {"app": "db"}, allowed=0, healthy=(0, 1))
    plan = run([node("hot"), node("cold")], pods, usage({"hot": 9000, "cold": 0}, {"only": 3000}), budgets=[strict])
    assert evicted(plan) == []
    assert "allows no more disruptions" in why(plan, "only")


def test_an_unready_pod_goes_without_the_budget_only_while_it_is_met():
    # 3 healthy of 2 desired, one disruption allowed: the ready pod spends it and leaves the budget just met,
    # so the unready pods may go without it while no more ready ones leave
    pods = [
        pod("ready", "hot", labels={"app": "db"}),
        pod("unready-1", "hot", labels={"app": "db"}, ready=False),
        pod("unready-2", "hot", labels={"app": "db"}, ready=False),
    ]
    report = usage({"hot": 10_000, "cold": 0}, {"ready": 1500, "unready-1": 1000, "unready-2": 1000})
    met = budget("db", {"app": "db"}, allowed=1, healthy=(3, 2))
    plan = run([node("hot"), node("cold")], pods, report, policy(NO_PREDICTION), budgets=[met])
    assert sorted(evicted(plan)) == ["ready", "unready-1", "unready-2"]
    unmet = budget("db", {"app": "db"}, allowed=1, healthy=(2, 2))
    plan = run([node("hot"), node("cold")], pods, report, policy(NO_PREDICTION), budgets=[unmet])
    assert evicted(plan) == ["ready"]  # it leaves the budget unmet: the unready pods then need a disruption too


def test_a_later_strategy_sees_the_healthy_pods_an_earlier_one_planned_away():
    db = {"app": "db"}
    ready, unready = pod("ready", "hot", labels=db), pod("unready", "hot", labels=db, ready=False)
    met = budget("db", db, allowed=1, healthy=(2, 2))
    snap = snapshot([node("hot"), node("cold")], [ready, unready], usage({"hot": 9000, "cold": 0}), budgets=[met])
    assert BudgetLedger(snap.budgets).blocker(unready) is None  # the budget is met: it may go without it
    moved = PlannedEviction(KIND, "default", "ready", ready.uid, "hot", "default", ready.workload, 0, "", "cold")
    (left,) = after_evictions(snap, [moved]).budgets
    assert (left.disruptions_allowed, left.current_healthy) == (0, 1)
    assert "allows no more disruptions" in (BudgetLedger([left]).blocker(unready) or "")


def test_room_is_never_booked_on_a_node_the_landing_guard_marks_no_schedule_ahead():
    # c1 has the most room, but the guard's pass before the evictions taints it NoSchedule: no replacement can
    # land there, so the room search books c2
    pods = [pod("a", "hot", workload="a"), pod("b", "hot", workload="b")]
    report = usage({"hot": 9000, "c1": 0, "c2": 1000}, {"a": 3000, "b": 500})
    snap = snapshot([node("hot"), node("c1"), node("c2")], pods, report)
    pol = policy(NO_PREDICTION)
    lnu, protections = build(pol.strategies[0]), Protections.from_settings(pol.protections)
    assert [e.room_on for e in lnu.plan(snap, protections).evictions] == ["c1"]
    guard = Taint("rebalancer.io/landing-guard", "relieved", "NoSchedule")
    ahead = MappingProxyType({"c1": msgspec.structs.replace(snap.nodes["c1"], taints=(guard,))})
    assert [e.room_on for e in lnu.plan(dataclasses.replace(snap, marks_ahead=ahead), protections).evictions] == ["c2"]


def test_pod_matched_by_two_budgets_is_passed_over():
    pods = [pod("a", "hot", labels={"app": "db", "tier": "x"})]
    budgets = [budget("one", {"app": "db"}, 5), budget("two", {"tier": "x"}, 5)]
    plan = run([node("hot"), node("cold")], pods, usage({"hot": 9000, "cold": 0}, {"a": 3000}), budgets=budgets)
    assert evicted(plan) == []
    assert "2 PodDisruptionBudgets" in why(plan, "a")


def test_protected_pods_are_never_chosen():
    pods = [
        pod("ds", "hot", kind="DaemonSet"),
        pod("bare", "hot", workload=None),
        pod("local", "hot", volumes=["emptyDir"]),
        pod("critical", "hot", priority=2_000_000_000),
        pod("system", "hot", namespace="kube-system"),
        pod("mirror", "hot", mirror=True, workload=None, owner_kind="Node"),
        pod("leaving", "hot", terminating=True),
        pod("optout", "hot", annotations={"rebalancer.io/evict": "false"}),
    ]
    pod_usage = {(p.namespace, p.name): 1500 for p in pods}
    plan = run([node("hot"), node("cold")], pods, UsageReport({"hot": 9500, "cold": 0}, pod_usage))
    assert evicted(plan) == []
    reasons = {d.name: d.reason for d in plan.results[0].pod_decisions}
    assert reasons["ds"] == "DaemonSet pod"
    assert reasons["bare"].startswith("bare pod")
    assert reasons["local"].startswith("local storage")
    assert reasons["critical"].startswith("system-critical")
    assert "kube-system" in reasons["system"]
    assert reasons["mirror"].startswith("mirror pod") or reasons["mirror"].startswith("static pod")
    assert reasons["leaving"] == "terminating"
    assert reasons["optout"].startswith("opted out")


def test_descheduler_opt_in_annotation_allows_local_storage():
    annotated = pod("local", "hot", volumes=["emptyDir"], annotations={"descheduler.alpha.kubernetes.io/evict": ""})
    report = usage({"hot": 9000, "cold": 0}, {"local": 2500})
    plan = run([node("hot"), node("cold")], [annotated], report, policy(NO_PREDICTION))  # one pod: a tie
    assert evicted(plan) == ["local"]


def test_hottest_node_gets_room_first():
    pods = [pod("warm-pod", "warm"), pod("hot-pod", "hot")]
    report = usage({"warm": 7500, "hot": 9900, "cold": 5000}, {"warm-pod": 1500, "hot-pod": 1500})
    # cold (5000m, below 55%) has room for one 1500m pod under 70%: the hotter node gets it
    pol = policy(NO_PREDICTION.replace("cpu: 20", "cpu: 55"))  # one pod a node: hot and cold would tie
    plan = run([node("warm"), node("hot"), node("cold")], pods, report, pol)
    assert evicted(plan) == ["hot-pod"]


def test_focus_relieves_only_the_alerted_nodes():
    pods = [pod("a", "hot-a"), pod("b", "hot-b")]
    report = usage({"hot-a": 9500, "hot-b": 9000, "cold": 0}, {"a": 3000, "b": 3000})
    facts = ClusterFacts((node("hot-a"), node("hot-b"), node("cold")), tuple(pods), ())
    pol = policy(NO_PREDICTION)  # one pod a node: hot-b and cold would tie
    plan = plan_cycle(facts, report, pol, 1_700_000_000.0, focus=frozenset({"hot-b"}))[1]
    assert evicted(plan) == ["b"]
    assert any("focused on hot-b" in n for n in plan.results[0].notes)


def test_destinations_in_other_pools_when_allowed():
    pol = policy(NO_PREDICTION + "destinationsInSamePool: false\n")  # one pod: w1 and b1 would tie
    nodes = [node("w1", pool="web"), node("b1", pool="batch")]
    plan = run(nodes, [pod("wa", "w1")], usage({"w1": 9000, "b1": 0}, {"wa": 2500}), pol)
    assert [(e.name, e.room_on) for e in plan.evictions] == [("wa", "b1")]


def test_pod_sum_mode_node_without_freshness_sample_is_unknown():
    # n2 has no running pod (its sum would be 0) and Prometheus has no sample for it: unknown, not cold
    report = UsageReport(pod_cpu_m={("default", "a"): 3000}, node_from_pods=True, fresh_nodes=frozenset({"n1"}))
    plan = run([node("n1"), node("n2")], [pod("a", "n1")], report)
    assert classes(plan)["n2"] is NodeClass.UNKNOWN
    assert plan.evictions == ()


def test_two_strategies_never_book_the_same_room_or_budget_twice():
    # one cold node with 5000m of room under 70%; the first strategy sends x (2500m) there, the second
    # would send y (3500m) too (75% in all) -- it must see the room already taken, and the budget spent
    text = """
pools: {label: pool}
strategies:
- {kind: LowNodeUtilization, thresholds: {cpu: 20}, targetThresholds: {cpu: 70}, predictPlacement: false}
- {kind: LowNodeUtilization, thresholds: {cpu: 20}, targetThresholds: {cpu: 60}, predictPlacement: false}
"""  # one pod a node: with prediction, the relieved node and the cold one would tie
    from rebalancer.policy import parse_policy

    pods = [pod("x", "h1", labels={"app": "db"}), pod("y", "h2", labels={"app": "db"})]
    report = usage({"h1": 9500, "h2": 6500, "cold": 1900}, {"x": 2500, "y": 3500})
    facts = ClusterFacts((node("h1"), node("h2"), node("cold")), tuple(pods), (budget("db", {"app": "db"}, 5),))
    plan = plan_cycle(facts, report, parse_policy(text), 1_700_000_000.0)[1]
    assert evicted(plan) == ["x"]
    facts = ClusterFacts(facts.nodes, facts.pods, (budget("db", {"app": "db"}, 1),))
    report = usage({"h1": 9500, "h2": 6500, "cold": 0, "cold2": 0}, {"x": 2500, "y": 1500})
    facts = ClusterFacts((*facts.nodes, node("cold2")), facts.pods, facts.budgets)
    plan = plan_cycle(facts, report, parse_policy(text), 1_700_000_000.0)[1]
    assert len(plan.evictions) == 1  # the budget allows one disruption across both strategies
