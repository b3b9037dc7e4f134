"""HighNodeUtilization on real usage: empty nearly idle nodes, all or nothing; with placement
prediction only when the group's replacements are predicted to leave the node.

Room and all-or-nothing cases run with ``predictPlacement: false`` (any destination with room); the
prediction cases build clusters whose landings the scheduler model decides (node names sort
idle < n1 < n2 < n3).
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

import msgspec
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from rebalancer.domain.model import ClusterFacts, Pod, Taint, UsageReport
from rebalancer.planning.plan import EvictionPlan, NodeClass, PlannedEviction
from rebalancer.planning.protections import Protections
from rebalancer.planning.scheduler_model import SchedulerModel
from rebalancer.policy import Policy, parse_policy
from rebalancer.policy.cycle import plan_cycle
from strategies import build
from tests.builders import budget, node, pod, policy, snapshot, usage
from tests.unit.test_planner_properties import clusters

HNU = """
kind: HighNodeUtilization
thresholds: {cpu: 20}
targetThresholds: {cpu: 70}
"""


NO_PREDICTION = "predictPlacement: false\n"


def run(nodes, pods, report, extra: str = NO_PREDICTION, budgets=()) -> EvictionPlan:
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


LNU_BESIDE = """
kind: LowNodeUtilization
thresholds: {cpu: 20}
targetThresholds: {cpu: 70}
predictPlacement: false
"""


def two_strategies(first: str, second: str) -> Policy:
    strategies = {"lnu": LNU_BESIDE, "hnu": HNU + NO_PREDICTION}
    indented = "\n".join("  - " + strategies[k].strip().replace("\n", "\n    ") for k in (first, second))
    return parse_policy(f"pools:\n  label: pool\nstrategies:\n{indented}\n", "test-policy")


def test_a_node_another_strategy_sends_pods_onto_or_off_is_never_half_emptied():
    # LowNodeUtilization relieves hot onto its only cold node, the one HighNodeUtilization would empty: in
    # either order, the plan never both sends a pod there and empties it (the node would stay)
    pods = [pod("h1", "hot", workload="a"), pod("h2", "hot", workload="b"), pod("c1", "cold", workload="c")]
    pods.append(pod("n1", "normal", workload="d"))
    report = usage({"hot": 8000, "cold": 500, "normal": 4000}, {"h1": 1000, "h2": 5000, "c1": 500, "n1": 4000})
    facts = ClusterFacts((node("hot"), node("cold"), node("normal")), tuple(pods), ())
    for first, second in (("lnu", "hnu"), ("hnu", "lnu")):
        plan = plan_cycle(facts, report, two_strategies(first, second), 1_700_000_000.0)[1]
        onto = {e.room_on for e in plan.evictions}
        off = {e.node for e in plan.evictions if e.strategy == "HighNodeUtilization"}
        assert plan.evictions and not onto & off, (first, [(e.name, e.node, e.room_on) for e in plan.evictions])
    plan = plan_cycle(facts, report, two_strategies("lnu", "hnu"), 1_700_000_000.0)[1]
    assert "an earlier strategy of this cycle sends a pod onto it" in next(
        d.reason for d in plan.results[1].pod_decisions if d.name == "c1"
    )


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
    assert run(nodes, pods, report, NO_PREDICTION + "numberOfNodes: 3\n").evictions == ()
    plan = run(nodes, pods, report, NO_PREDICTION + "maxNodesToEmpty: 2\n")
    assert sorted(e.node for e in plan.evictions) == ["i1", "i2"]  # least used first


def test_budget_all_or_nothing():
    pods = [pod("a", "idle", labels={"app": "db"}), pod("b", "idle", labels={"app": "db"}), pod("x", "busy")]
    report = usage({"idle": 800, "busy": 4000}, {"a": 300, "b": 300, "x": 3000})
    plan = run([node("idle"), node("busy")], pods, report, budgets=[budget("db", {"app": "db"}, allowed=1)])
    assert plan.evictions == ()  # one of the two would stay: the node could not be removed anyway


# --- placement prediction: the group's replacements, placed one after another by the scheduler model

# the cluster autoscaler's soft taint on a node it considers removing
SCALE_DOWN_CANDIDATE = Taint("DeletionCandidateOfClusterAutoscaler", "1700000000", "PreferNoSchedule")


def group(node_name: str) -> list[Pod]:
    """Two llm-router pods and one feature-cache pod, 1000m requested each."""
    return [
        pod("router-1", node_name, workload="llm-router", cpu_request_m=1000),
        pod("router-2", node_name, workload="llm-router", cpu_request_m=1000),
        pod("cache-1", node_name, workload="feature-cache", cpu_request_m=1000),
    ]


def busy(node_name: str) -> list[Pod]:
    """Four pods of their own workloads, 1000m requested each and 1200m used each."""
    return [pod(f"{node_name}-w{i}", node_name, workload=f"{node_name}-w{i}", cpu_request_m=1000) for i in range(4)]


def prediction_cluster(*idle_taints: Taint) -> tuple[list, list[Pod], object]:
    nodes = [node("idle", taints=idle_taints), node("n1"), node("n2"), node("n3")]
    pods = group("idle") + busy("n1") + busy("n2") + busy("n3")
    pod_usage = {"router-1": 300, "router-2": 300, "cache-1": 200}
    pod_usage |= {p.name: 1200 for p in pods if p.node_name != "idle"}
    report = usage({"idle": 900, "n1": 5000, "n2": 5000, "n3": 5000}, pod_usage)
    return nodes, pods, report


def test_group_whose_replacements_would_land_back_is_passed_over_with_the_reason():
    """Requests follow usage: with its group gone, idle is the least requested node and holds no
    llm-router or feature-cache pod, so the first replacement lands back on it."""
    nodes, pods, report = prediction_cluster()
    plan = run(nodes, pods, report, extra="")
    assert plan.evictions == ()
    result = plan.results[0]
    records = {d.name: d for d in result.pod_decisions if d.node == "idle"}
    assert set(records) == {"router-1", "router-2", "cache-1"} and not any(d.chosen for d in records.values())
    reason = records["router-1"].reason
    assert reason.startswith("node cannot be emptied: default/router-1 replacement: predicted landing risk 100%")
    assert "back on idle 100%" in reason
    assert records["router-1"].lands_back and not records["cache-1"].lands_back
    assert any("1 node(s) passed over" in note and "predictPlacement: false" in note for note in result.notes)


def test_same_cluster_without_prediction_empties_the_node_anyway():
    nodes, pods, report = prediction_cluster()
    plan = run(nodes, pods, report)
    assert sorted(e.name for e in plan.evictions) == ["cache-1", "router-1", "router-2"]
    assert all(e.landing is None for e in plan.evictions)


def test_group_predicted_to_leave_is_emptied_with_each_replacements_landing():
    """The autoscaler's PreferNoSchedule taint keeps the replacements off idle; they are placed one
    after another, so the second llm-router replacement avoids the node the first one landed on."""
    nodes, pods, report = prediction_cluster(SCALE_DOWN_CANDIDATE)
    plan = run(nodes, pods, report, extra="")
    landed = [(e.name, e.landing) for e in plan.evictions]
    assert landed == [("router-1", "n1"), ("router-2", "n2"), ("cache-1", "n3")]
    assert all(e.room_on == e.landing for e in plan.evictions)
    first = plan.evictions[0].reason
    assert first.startswith("emptying idle (9.0% < 20.0%); predicted to land on n1 (33%, scheduler score")
    assert first.endswith("the group's landing risk 0%")


def test_replacements_are_predicted_with_the_landing_guards_marks_ahead():
    # n1, the least requested destination, is about to be marked by the landing guard (NoSchedule) before the
    # evictions: the replacement is predicted on n2, where it can land
    nodes = [node("idle", taints=[SCALE_DOWN_CANDIDATE]), node("n1"), node("n2")]
    pods = [pod("a", "idle", workload="a", cpu_request_m=500), pod("x", "n1", workload="x", cpu_request_m=2000)]
    pods.append(pod("y", "n2", workload="y", cpu_request_m=4000))
    snap = snapshot(nodes, pods, usage({"idle": 500, "n1": 3000, "n2": 3000}, {"a": 300, "x": 2500, "y": 2500}))
    pol = policy(HNU)
    hnu, protections = build(pol.strategies[0]), Protections.from_settings(pol.protections)
    assert [e.landing for e in hnu.plan(snap, protections).evictions] == ["n1"]
    guard = Taint("rebalancer.io/landing-guard", "hot", "NoSchedule")
    ahead = {"n1": msgspec.structs.replace(snap.nodes["n1"], taints=(guard,))}
    planned = hnu.plan(dataclasses.replace(snap, marks_ahead=MappingProxyType(ahead)), protections)
    assert [(e.room_on, e.landing) for e in planned.evictions] == [("n2", "n2")]


def test_group_landing_risk_is_capped_over_all_replacements():
    """Equal requests on three destinations and another underutilized node c: the first replacement
    risks 1/4 (c among four tied nodes), the second, n1 now fuller, 1/3; the group 1 - 3/4 * 2/3 = 50%."""
    nodes = [node("idle", taints=[SCALE_DOWN_CANDIDATE]), node("c"), node("n1"), node("n2"), node("n3")]
    pods = [
        pod("router-1", "idle", workload="llm-router", cpu_request_m=1000),
        pod("cache-1", "idle", workload="feature-cache", cpu_request_m=1000),
        *busy("c"),
        *busy("n1"),
        *busy("n2"),
        *busy("n3"),
    ]
    pod_usage = {"router-1": 300, "cache-1": 200} | {p.name: 1200 for p in pods if p.node_name != "idle"}
    report = usage({"idle": 900, "c": 1500, "n1": 5000, "n2": 5000, "n3": 5000}, pod_usage)
    plan = run(nodes, pods, report, extra="maxLandingRisk: 0.5\n")
    from_idle = [e for e in plan.evictions if e.node == "idle"]
    assert [(e.name, e.landing) for e in from_idle] == [("router-1", "n1"), ("cache-1", "n2")]
    assert from_idle[1].reason.endswith("the group's landing risk 50%")
    refused = run(nodes, pods, report, extra="maxLandingRisk: 0.4\n")
    assert [e for e in refused.evictions if e.node == "idle"] == []
    reason = next(d.reason for d in refused.results[0].pod_decisions if d.name == "router-1")
    assert reason.startswith(
        "node cannot be emptied: default/cache-1 replacement: the group's predicted landing risk 50% > "
        "maxLandingRisk 40%, this replacement predicted to land on n2 (33%"
    )
    assert reason.endswith("landing risk 33%: on cold c 33% (score 646/700)"), reason


@st.composite
def consolidation_clusters(draw: st.DrawFn) -> tuple[ClusterFacts, UsageReport]:
    """A few idle nodes (some soft-tainted or cordoned by an autoscaler) beside busier ones, pods of three
    workloads with random requests, every pod's usage known."""
    nodes, pods, node_usage = [], [], {}
    for i in range(draw(st.integers(2, 8))):
        idle = i < 2 or draw(st.booleans())
        mark = draw(st.sampled_from(["none", "none", "taint", "cordon"])) if idle else "none"
        name = f"n{i}"
        nodes.append(
            node(name, taints=[SCALE_DOWN_CANDIDATE] if mark == "taint" else [], unschedulable=mark == "cordon")
        )
        for j in range(draw(st.integers(1, 4))):  # over-requested idle pods: the node looks full until vacated
            app = draw(st.sampled_from(["llm-router", "feature-cache", "web"]))
            request = draw(st.integers(500, 3000) if idle else st.integers(0, 2000))
            pods.append(pod(f"{name}-p{j}", name, workload=app, cpu_request_m=request))
        node_usage[name] = draw(st.integers(100, 1500)) if idle else draw(st.integers(2500, 6500))
    pod_usage = {p.name: draw(st.integers(0, 400)) for p in pods}
    return ClusterFacts(tuple(nodes), tuple(pods), ()), usage(node_usage, pod_usage)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(consolidation_clusters(), clusters()), st.sampled_from([0.0, 0.1, 0.5]))
def test_no_group_leaves_when_its_replacements_risk_landing_back_above_the_cap(
    cluster: tuple[ClusterFacts, UsageReport], cap: float
) -> None:
    """Replayed on a scheduler model of its own, node by node (every node scored), each emptied group:
    its pods are evicted together (terminating, their requests still on it), each replacement is bound where the plan says it lands, and the
    probability that any of them lands back on the emptied node is at most maxLandingRisk; each landing
    is a node the scheduler can choose, never the emptied node."""
    facts, report = cluster
    snap, plan = plan_cycle(facts, report, policy(HNU + f"maxLandingRisk: {cap}\n"), 1_700_000_000.0)
    model = SchedulerModel(snap, percentage_of_nodes_to_score=100)
    groups: dict[str, list[PlannedEviction]] = {}
    for e in plan.evictions:
        groups.setdefault(e.node, []).append(e)
    event(f"nodes emptied: {len(groups)}")
    for emptied, evictions in groups.items():
        pods = {p.key: p for p in snap.pods_on(emptied)}
        leaving = [pods[e.key] for e in evictions]
        for p in leaving:
            model.terminate(p)
        stays = 1.0
        for e, p in zip(evictions, leaving, strict=True):
            odds = model.full_distribution(p, vacate=True).as_dict()
            assert e.landing is not None and e.landing == e.room_on != emptied
            assert odds.get(e.landing, 0.0) > 0.0, f"{e.name} predicted on {e.landing}, which cannot win: {odds}"
            stays *= 1.0 - odds.get(emptied, 0.0)
            model.add(p, e.landing)
        assert 1.0 - stays <= cap + 1e-9, f"{emptied}: landing-back risk {1.0 - stays:.3f} > {cap}"
