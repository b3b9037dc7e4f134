"""Placement prediction in LowNodeUtilization: hand-built clusters whose landing is known.

Node names sort a < b < c, and every filler pod is its own workload, so only the scores the case is
about differ. Pods request 1000m CPU and 256Mi memory unless a case says otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rebalancer.actions.evictor import EvictorReport
from rebalancer.domain.model import ClusterFacts, Node, Pod, Taint, Toleration, UsageReport
from rebalancer.planning.plan import EvictionPlan, NodeClass, Unrelieved
from rebalancer.planning.scheduler_model import SchedulerModel
from rebalancer.policy.cycle import plan_cycle
from rebalancer.records import EfficiencySettings, EfficiencyState, compute_rates, observe_cycle
from strategies.resources import target_amount
from tests.builders import node, pod, policy, usage
from tests.unit.test_planner_properties import clusters

LNU = """
kind: LowNodeUtilization
thresholds: {cpu: 20}
targetThresholds: {cpu: 70}
"""

HARD = Taint("dedicated", "batch", "NoSchedule")
PREFER = Taint("dedicated", "batch", "PreferNoSchedule")


def filler(node_name: str, count: int) -> list[Pod]:
    """``count`` pods of their own workloads, their usage unknown (never candidates)."""
    return [pod(f"{node_name}-f{i}", node_name, workload=f"{node_name}-f{i}", cpu_request_m=1000) for i in range(count)]


def moving(name: str, node_name: str, workload: str = "web", **extra: object) -> Pod:
    return pod(name, node_name, workload=workload, cpu_request_m=1000, **extra)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Case:
    id: str
    nodes: Sequence[Node]
    pods: Sequence[Pod]
    node_usage: dict[str, int]
    pod_usage: dict[str, int]
    landed: list[tuple[str, str]]  # (pod, predicted landing) of the planned evictions, in order
    reasons: dict[str, str] = field(default_factory=dict)  # pod -> start of its decision record
    unrelieved: dict[str, Unrelieved] = field(default_factory=dict)
    extra: str = ""


CASES = [
    Case(
        "the relieved node is the least requested: the replacement lands back, so nothing is evicted",
        [node("a"), node("b"), node("c")],
        [moving("web-1", "a"), *filler("a", 1), *filler("b", 3), *filler("c", 3)],
        {"a": 9000, "b": 1000, "c": 1000},
        {"web-1": 3000},
        [],
        # web-1 terminates meanwhile, its requests still on a: a at 3000m and 768Mi with the replacement, least
        # allocated (70 + 98) // 2 = 84, balanced 50 + (50 + 85 - 90) // 2 = 72 (85 with the pod, 90 without),
        # taint 3 x 100, spread 2 x 100 (computed by hand); b and c 4000m: 79 + 72 + 500 = 651
        {"web-1": "predicted landing risk 100% > maxLandingRisk 10%: back on a 100% (score 656/700)"},
        {"a": Unrelieved.PREDICTED_LANDING},
    ),
    Case(
        "equal requests: a spread workload's pod goes to the cold node instead of the closest fit",
        [node("a"), node("b"), node("c")],
        [
            moving("web-1", "a"),
            moving("api-1", "a", "api"),
            moving("api-2", "a", "api"),
            *filler("b", 3),
            *filler("c", 4),
        ],
        {"a": 9000, "b": 1000, "c": 1000},
        {"web-1": 2100, "api-1": 2500, "api-2": 2600},
        [("api-1", "b")],
        {
            "web-1": "predicted landing risk 50% > maxLandingRisk 10%: back on a",  # a and b tie but for spread
            "api-1": "usage 2.500 cores covers the remaining 2.000 cores above target; predicted to land on b (100%",
        },
    ),
    Case(
        "the cold node is the least requested: the replacement lands there",
        [node("a"), node("b")],
        [moving("web-1", "a"), *filler("a", 3), *filler("b", 1)],
        {"a": 9000, "b": 1000},
        {"web-1": 3000},
        [("web-1", "b")],
        {
            "web-1": "usage 3.000 cores covers the remaining 2.000 cores above target; predicted to land on b (100%, scheduler score"
        },
    ),
    Case(
        "moves planned earlier in the cycle update the model: the second replacement goes to the other cold node",
        [node("a"), node("b"), node("c")],
        [moving("p1", "a", "w1"), moving("p2", "a", "w2"), *filler("a", 4), *filler("b", 2), *filler("c", 2)],
        {"a": 9500, "b": 1000, "c": 1000},
        {"p1": 1500, "p2": 1400},
        [("p1", "b"), ("p2", "c")],
    ),
    Case(
        "a NoSchedule taint on the emptiest cold node sends the replacement to a normal node without room: refused",
        [node("a"), node("b", taints=[HARD]), node("c"), node("d")],
        [moving("web-1", "a"), *filler("a", 2), *filler("c", 1), *filler("d", 3)],
        {"a": 9000, "b": 1000, "c": 5000, "d": 1000},
        {"web-1": 3000},
        [],
        {
            "web-1": "predicted landing risk 100% > maxLandingRisk 10%: on c 100% (2.000 cores of real-usage room, not 3.000 cores"
        },
        {"a": Unrelieved.NO_ROOM},  # c is a good landing but for its room
    ),
    Case(
        "a normal node that stays under target after the move is a good landing (landOnNormalNodes)",
        [node("a"), node("b", taints=[HARD]), node("c"), node("d")],
        [moving("web-1", "a"), *filler("a", 2), *filler("c", 1), *filler("d", 3)],
        {"a": 9000, "b": 1000, "c": 5000, "d": 1000},
        {"web-1": 1500},
        [("web-1", "c")],
        {"web-1": "usage 1.500 cores reduces the remaining 2.000 cores above target; predicted to land on c (100%"},
    ),
    Case(
        "with landOnNormalNodes false, only a cold node is a good landing",
        [node("a"), node("b", taints=[HARD]), node("c"), node("d")],
        [moving("web-1", "a"), *filler("a", 2), *filler("c", 1), *filler("d", 3)],
        {"a": 9000, "b": 1000, "c": 5000, "d": 1000},
        {"web-1": 1500},
        [],
        {"web-1": "predicted landing risk 100% > maxLandingRisk 10%: on normal c 100% (score"},
        {"a": Unrelieved.PREDICTED_LANDING},
        extra="landOnNormalNodes: false\n",
    ),
    Case(
        "tolerating the taint, the replacement lands on the tainted cold node",
        [node("a"), node("b", taints=[HARD]), node("c")],
        [
            moving("web-1", "a", tolerations=[Toleration("dedicated", "Exists", "", "")]),
            *filler("a", 2),
            *filler("c", 1),
        ],
        {"a": 9000, "b": 1000, "c": 5000},
        {"web-1": 3000},
        [("web-1", "b")],
    ),
    Case(
        "a nodeSelector steers the replacement to the cold node it matches, not the emptiest one",
        [node("a", labels={"disk": "ssd"}), node("b"), node("c", labels={"disk": "ssd"})],
        [moving("web-1", "a", node_selector={"disk": "ssd"}), *filler("a", 2), *filler("c", 1)],
        {"a": 9000, "b": 1000, "c": 1000},
        {"web-1": 3000},
        [("web-1", "c")],
    ),
    Case(
        "PreferNoSchedule on the hot node keeps the replacement away despite equal requests",
        [node("a", taints=[PREFER]), node("b"), node("c")],
        [moving("web-1", "a"), *filler("a", 2), *filler("b", 3), *filler("c", 3)],
        {"a": 9000, "b": 1000, "c": 1000},
        {"web-1": 3000},
        [("web-1", "b")],
        # b and c tie, both cold: no risk, the landing is the first of them by name
        {
            "web-1": "usage 3.000 cores covers the remaining 2.000 cores above target; predicted to land on b (50%, scheduler score"
        },
    ),
    Case(
        "landing on another hot node is refused, and that node's own pod would land back",
        [node("a"), node("b"), node("c")],
        [moving("web-1", "a"), *filler("a", 2), moving("db-1", "b", "db"), *filler("c", 2)],
        {"a": 9000, "b": 9000, "c": 1000},
        {"web-1": 3000, "db-1": 3000},
        [],
        {
            "web-1": "predicted landing risk 100% > maxLandingRisk 10%: on hot b 100%",
            "db-1": "predicted landing risk 100% > maxLandingRisk 10%: back on b 100%",
        },
        {"a": Unrelieved.PREDICTED_LANDING, "b": Unrelieved.PREDICTED_LANDING},
    ),
    Case(
        "the predicted cold node lacks the real-usage room: no-room",
        [node("a"), node("b"), node("c")],
        [moving("web-1", "a"), *filler("a", 2), *filler("c", 3)],
        {"a": 10_000, "b": 1900, "c": 0},
        {"web-1": 6000},
        [],
        {
            "web-1": "predicted landing risk 100% > maxLandingRisk 10%: on b 100% (5.100 cores of real-usage room, not 6.000 cores"
        },
        {"a": Unrelieved.NO_ROOM},
    ),
    Case(
        "tied best nodes: the relieved node ties with the cold node, a landing risk of 50% (above 10%)",
        [node("a"), node("b")],
        [moving("web-1", "b"), *filler("b", 1), *filler("a", 2)],
        {"a": 1000, "b": 9000},
        {"web-1": 3000},
        [],
        # both at 3000m requested with the replacement (web-1's requests stay on b while it terminates):
        # 84 + 72 + 300 + 200 (computed by hand, as in the first case)
        {"web-1": "predicted landing risk 50% > maxLandingRisk 10%: back on b 50% (score 656/700)"},
        {"b": Unrelieved.PREDICTED_LANDING},
    ),
    Case(
        "destinationsInSamePool: a landing in another pool is refused",
        [node("a", pool="web"), node("b", pool="batch"), node("c", pool="web")],
        [moving("web-1", "a"), *filler("a", 2), *filler("c", 2)],
        {"a": 9000, "b": 1000, "c": 1000},
        {"web-1": 3000},
        [],
        {"web-1": "predicted landing risk 100% > maxLandingRisk 10%: on b 100% (pool batch, not a destination"},
    ),
    Case(
        "destinationsInSamePool false: the other pool's cold node is a destination",
        [node("a", pool="web"), node("b", pool="batch"), node("c", pool="web")],
        [moving("web-1", "a"), *filler("a", 2), *filler("c", 2)],
        {"a": 9000, "b": 1000, "c": 1000},
        {"web-1": 3000},
        [("web-1", "b")],
        extra="destinationsInSamePool: false\n",
    ),
    Case(
        "no cold node accepts the pod: the room search says so, the model is not asked",
        [node("a"), node("b")],
        [moving("web-1", "a", node_selector={"zone": "x"}), *filler("a", 1)],
        {"a": 9000, "b": 1000},
        {"web-1": 3000},
        [],
        {"web-1": "no destination accepts it (1 node(s): nodeSelector zone=x does not match)"},
        {"a": Unrelieved.NO_ROOM},
    ),
]


def run(case: Case, extra: str = "") -> EvictionPlan:
    facts = ClusterFacts(tuple(case.nodes), tuple(case.pods), ())
    report = usage(case.node_usage, case.pod_usage)
    return plan_cycle(facts, report, policy(LNU + case.extra + extra), 1_700_000_000.0)[1]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_predicted_landing(case: Case) -> None:
    plan = run(case)
    assert [(e.name, e.landing) for e in plan.evictions] == case.landed
    assert all(e.room_on == e.landing for e in plan.evictions), "room is counted where the pod lands"
    reasons = {d.name: d.reason for d in plan.results[0].pod_decisions}
    for name, start in case.reasons.items():
        assert reasons[name].startswith(start), reasons[name]
    for name, _ in case.landed:
        assert next(d for d in plan.results[0].pod_decisions if d.name == name).chosen
    for hot, why in case.unrelieved.items():
        assert plan.results[0].unrelieved[hot] is why
    for d in plan.results[0].pod_decisions:  # the structured mark the efficiency records count
        assert d.lands_back == (not d.chosen and "back on " + d.node in d.reason.split(":", 1)[-1][:40])


def test_without_prediction_any_cold_node_with_room_is_enough_and_landing_stays_unknown() -> None:
    plan = run(CASES[0], "predictPlacement: false\n")
    assert [(e.name, e.room_on, e.landing) for e in plan.evictions] == [("web-1", "c", None)]


def test_the_eviction_reason_names_the_landing() -> None:
    plan = run(CASES[2])
    # b with the replacement: 2000m and 512Mi requested -> least allocated (80 + 99) // 2 = 89, balanced
    # 50 + (50 + 90 - 95) // 2 = 72 (90 with the pod, 95 without), taints 3 x 100, spread 2 x 100; room: 70% of
    # 10000m minus its 1000m of usage
    assert plan.evictions[0].reason == (
        "node a hot (usage 90.0% > 70.0%): usage 3.000 cores covers the remaining 2.000 cores above target; "
        "predicted to land on b (100%, scheduler score 661/700), 6.000 cores of real-usage room"
    )


def test_a_second_strategy_sees_the_first_ones_move_as_room_taken_on_the_landing() -> None:
    case = CASES[2]
    text = (
        "pools: {label: pool}\nstrategies:\n"
        "- {kind: LowNodeUtilization, thresholds: {cpu: 20}, targetThresholds: {cpu: 70}}\n"
        "- {kind: LowNodeUtilization, thresholds: {cpu: 20}, targetThresholds: {cpu: 50}}\n"
    )
    from rebalancer.policy import parse_policy

    facts = ClusterFacts(tuple(case.nodes), tuple(case.pods), ())
    plan = plan_cycle(facts, usage(case.node_usage, case.pod_usage), parse_policy(text), 1_700_000_000.0)[1]
    second = {d.node: d.usage_m for d in plan.results[1].node_decisions}
    assert second == {"a": 6000, "b": 4000}  # the move's usage went to the landing node


def tie_of_ten(extra: str = "", hot: str = "k") -> EvictionPlan:
    """a is hot and the most requested; b..k tie for the replacement (two fillers each: 656/700, the score of the
    first case), the ``hot`` ones are hot."""
    tied = "bcdefghijk"
    case = Case(
        "tie of ten",
        [node(n) for n in "a" + tied],
        [moving("web-1", "a"), *filler("a", 4), *(p for n in tied for p in filler(n, 2))],
        {"a": 9000, **{n: 9000 if n in hot else 1000 for n in tied}},
        {"web-1": 3000},
        [],
    )
    return run(case, extra)


def test_a_tie_with_one_hot_node_in_ten_is_a_landing_risk_of_10_percent_accepted_at_the_default_cap() -> None:
    plan = tie_of_ten()
    assert [(e.name, e.landing) for e in plan.evictions] == [("web-1", "b")]  # the first of the likeliest
    assert plan.evictions[0].reason.endswith(
        "predicted to land on b (10%, scheduler score 656/700), 6.000 cores of real-usage room; "
        "landing risk 10%: on hot k 10% (score 656/700)"
    )


def test_a_lower_cap_refuses_the_same_tie() -> None:
    plan = tie_of_ten("maxLandingRisk: 0.05\n")
    assert plan.evictions == ()
    (web,) = [d for d in plan.results[0].pod_decisions if d.name == "web-1"]
    assert web.reason == "predicted landing risk 10% > maxLandingRisk 5.0%: on hot k 10% (score 656/700)"
    assert plan.results[0].unrelieved["a"] is Unrelieved.PREDICTED_LANDING


def test_the_refusal_names_the_likeliest_bad_landings_first_by_name_and_sums_the_rest() -> None:
    plan = tie_of_ten(hot="fghijk")
    (web,) = [d for d in plan.results[0].pod_decisions if d.name == "web-1"]
    assert web.reason == (
        "predicted landing risk 60% > maxLandingRisk 10%: on hot f 10% (score 656/700), "
        "on hot g 10% (score 656/700), on hot h 10% (score 656/700), 3 more node(s) 30%"
    )


def test_max_landing_risk_zero_is_strict_on_ties() -> None:
    assert run(CASES[3], "maxLandingRisk: 0\n").evictions != ()  # a tie of cold nodes only: no risk
    assert tie_of_ten("maxLandingRisk: 0\n").evictions == ()


def sampled_cluster(extra: str) -> EvictionPlan:
    """200 nodes: the relieved node a is the best scored (the least requested), the 199 others tie below it.
    The scheduler scores 100 of them by default (49% of 200 is 98, at least 100), so a is sampled with
    probability 1/2."""
    others = [f"n{i:03}" for i in range(199)]
    case = Case(
        "sampled",
        [node("a"), *(node(n) for n in others)],
        [moving("web-1", "a"), *filler("a", 1), *(p for n in others for p in filler(n, 3))],
        {"a": 9000, **dict.fromkeys(others, 1000)},
        {"web-1": 3000},
        [],
    )
    return run(case, "maxLandingRisk: 0.6\n" + extra)


def test_the_scheduler_sampling_of_nodes_makes_a_sure_landing_back_a_50_percent_risk() -> None:
    plan = sampled_cluster("")
    assert [(e.name, e.landing) for e in plan.evictions] == [("web-1", "n000")]
    assert "landing risk 50%: back on a 50% (score 656/700)" in plan.evictions[0].reason
    assert "100 of 200 nodes scored" in plan.evictions[0].reason


def test_percentage_of_nodes_to_score_100_scores_every_node() -> None:
    plan = sampled_cluster("percentageOfNodesToScore: 100\n")
    assert plan.evictions == ()
    (web,) = [d for d in plan.results[0].pod_decisions if d.name == "web-1"]
    assert web.reason == "predicted landing risk 100% > maxLandingRisk 60%: back on a 100% (score 656/700)"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.booleans(), st.sampled_from([0.0, 0.1, 0.5]))
def test_no_accepted_eviction_risks_a_bad_landing_above_the_cap(
    cluster: tuple[ClusterFacts, UsageReport], same_pool: bool, cap: float
) -> None:
    """Replayed on a fresh model: each planned eviction's landing risk (the probability of landing back,
    off the cold nodes of its pool, or on one without the room left after the earlier moves) is at most
    maxLandingRisk, and its landing is the most probable acceptable node (a cold node with room, or a normal
    one staying under target)."""
    facts, report = cluster
    extra = f"maxLandingRisk: {cap}\n" + ("" if same_pool else "destinationsInSamePool: false\n")
    snapshot, plan = plan_cycle(facts, report, policy(LNU + extra), 1_700_000_000.0)
    decisions = {d.node: d for d in plan.results[0].node_decisions}
    room = {
        name: target_amount(d.allocatable_m, d.high_pct or 0.0) - d.usage_m
        for name, d in decisions.items()
        if d.node_class is NodeClass.COLD and d.usage_m is not None
    }
    receiving = {snapshot.pool_of[name] for name in room}
    room |= {  # landOnNormalNodes: a normal node of a pool with cold destinations, under target after the move
        name: target_amount(d.allocatable_m, d.high_pct or 0.0) - d.usage_m
        for name, d in decisions.items()
        if d.node_class is NodeClass.NORMAL and d.usage_m is not None and (d.pool in receiving or not same_pool)
    }
    pools, pods = snapshot.pool_of, {p.key: p for p in facts.pods}
    model = SchedulerModel(snapshot)
    for eviction in plan.evictions:

        def good(name: str, source: str = eviction.node, usage_m: int = eviction.usage_m) -> bool:
            same = pools[name] == pools[source] or not same_pool
            return name != source and same and room.get(name, -1) >= usage_m

        moved = pods[eviction.key]
        spread = model.full_distribution(moved, vacate=True).as_dict()
        assert sum(p for name, p in spread.items() if not good(name)) <= cap + 1e-9
        assert eviction.landing is not None and eviction.landing == eviction.room_on
        assert good(eviction.landing)
        assert spread[eviction.landing] == max(p for name, p in spread.items() if good(name))
        model.terminate(moved)
        model.add(moved, eviction.landing)
        room[eviction.landing] -= eviction.usage_m


@pytest.mark.parametrize("effect", ["PreferNoSchedule", "NoSchedule"])
def test_a_landing_guard_on_the_pool_is_modelled_on_the_hot_node_before_it_is_marked(effect: str) -> None:
    """The relieved node is the least requested: without a guard the replacement lands back (nothing evicted,
    see the first case);
    with the pool's landing guard, the hot node will carry the guard's taint when its pod is evicted (the
    guard marks it ahead of the evictor), so the replacement is predicted elsewhere and the move is made."""
    case = CASES[0]
    facts = ClusterFacts(tuple(case.nodes), tuple(case.pods), ())
    guard = f"landingGuard: {{pools: [{{pool: default, effect: {effect}}}]}}\n"
    snapshot, plan = plan_cycle(facts, usage(case.node_usage, case.pod_usage), policy(LNU, guard), 1_700_000_000.0)
    assert snapshot.relievable == {"a"} and [t.effect for t in snapshot.marks_ahead["a"].taints] == [effect]
    assert snapshot.nodes["a"].taints == ()  # the snapshot itself is untouched: only the model sees the mark
    ((name, landing),) = [(e.name, e.landing) for e in plan.evictions]
    assert name == "web-1" and landing in {"b", "c"}
    off = policy(LNU, "landingGuard: {pools: [{pool: default, maxMarkedFraction: 0}]}\n")
    assert plan_cycle(facts, usage(case.node_usage, case.pod_usage), off, 1_700_000_000.0)[1].evictions == ()


def test_a_pod_passed_over_as_landing_back_is_counted_as_a_bounce_back_avoided() -> None:
    case = CASES[0]  # equal requests: web-1's replacement would land back on a
    facts = ClusterFacts(tuple(case.nodes), tuple(case.pods), ())
    snapshot, plan = plan_cycle(facts, usage(case.node_usage, case.pod_usage), policy(LNU), 1_700_000_000.0)
    state = observe_cycle(EfficiencyState(), snapshot, plan, EvictorReport(()), "schedule", EfficiencySettings())
    assert state.cycles[-1].lands_back == {"default": 1} and state.cycles[-1].recently_moved == {}
    rates = compute_rates(state, None, {}, 1_700_000_000.0 - 60, 1_700_000_000.0 + 60)
    assert (rates.cluster.passed_lands_back, rates.cluster.passed_recently_moved) == (1, 0)
