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

from rebalancer.cycle import plan_cycle
from rebalancer.model import ClusterFacts, Node, Pod, Taint, Toleration, UsageReport
from rebalancer.plan import EvictionPlan, NodeClass, Unrelieved
from rebalancer.policy import Policy
from rebalancer.scheduler_model import SchedulerModel
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
        "equal requests: the relieved node wins by least-allocated, so nothing is evicted",
        [node("a"), node("b"), node("c")],
        [moving("web-1", "a"), *filler("a", 2), *filler("b", 3), *filler("c", 3)],
        {"a": 9000, "b": 1000, "c": 1000},
        {"web-1": 3000},
        [],
        # least allocated 84 + balanced 85 + taint 3 x 100 + spread 2 x 100 (computed by hand)
        {"web-1": "predicted to land back on a (scheduler score 669/700)"},
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
        {"web-1": "predicted to land back on a", "api-1": "usage 2500m covers the remaining 2000m above target; "},
    ),
    Case(
        "the cold node is the least requested: the replacement lands there",
        [node("a"), node("b")],
        [moving("web-1", "a"), *filler("a", 3), *filler("b", 1)],
        {"a": 9000, "b": 1000},
        {"web-1": 3000},
        [("web-1", "b")],
        {"web-1": "usage 3000m covers the remaining 2000m above target; predicted to land on b (scheduler score"},
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
        "a NoSchedule taint on the emptiest cold node sends the replacement to a normal node: refused",
        [node("a"), node("b", taints=[HARD]), node("c"), node("d")],
        [moving("web-1", "a"), *filler("a", 2), *filler("c", 1), *filler("d", 3)],
        {"a": 9000, "b": 1000, "c": 5000, "d": 1000},
        {"web-1": 3000},
        [],
        {"web-1": "predicted to land on c, a normal node, not a destination (scheduler score"},
        {"a": Unrelieved.PREDICTED_LANDING},
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
        {"web-1": "usage 3000m covers the remaining 2000m above target; predicted to land on b (scheduler score"},
    ),
    Case(
        "landing on another hot node is refused, and that node's own pod would land back",
        [node("a"), node("b"), node("c")],
        [moving("web-1", "a"), *filler("a", 2), moving("db-1", "b", "db"), *filler("c", 2)],
        {"a": 9000, "b": 9000, "c": 1000},
        {"web-1": 3000, "db-1": 3000},
        [],
        {"web-1": "predicted to land on b, a hot node, not a destination", "db-1": "predicted to land back on b"},
        {"a": Unrelieved.PREDICTED_LANDING, "b": Unrelieved.PREDICTED_LANDING},
    ),
    Case(
        "the predicted cold node lacks the real-usage room: no-room",
        [node("a"), node("b"), node("c")],
        [moving("web-1", "a"), *filler("a", 2), *filler("c", 3)],
        {"a": 10_000, "b": 1900, "c": 0},
        {"web-1": 6000},
        [],
        {"web-1": "predicted to land on b, which has 5100m of real-usage room, not 6000m"},
        {"a": Unrelieved.NO_ROOM},
    ),
    Case(
        "tied best nodes: the model's choice is the cold node, but the relieved node ties, so it may land back",
        [node("a"), node("b")],
        [moving("web-1", "b"), *filler("b", 1), *filler("a", 1)],
        {"a": 1000, "b": 9000},
        {"web-1": 3000},
        [],
        # both at 2000m requested with the replacement: 89 + 90 + 300 + 200 (computed by hand)
        {"web-1": "may land back on b (scheduler score 679/700, tied with 1 other node(s): the scheduler picks"},
        {"b": Unrelieved.PREDICTED_LANDING},
    ),
    Case(
        "destinationsInSamePool: a landing in another pool is refused",
        [node("a", pool="web"), node("b", pool="batch"), node("c", pool="web")],
        [moving("web-1", "a"), *filler("a", 2), *filler("c", 2)],
        {"a": 9000, "b": 1000, "c": 1000},
        {"web-1": 3000},
        [],
        {"web-1": "predicted to land on b of pool batch, not a destination of this pool"},
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


def test_without_prediction_any_cold_node_with_room_is_enough_and_landing_stays_unknown() -> None:
    plan = run(CASES[0], "predictPlacement: false\n")
    assert [(e.name, e.room_on, e.landing) for e in plan.evictions] == [("web-1", "c", None)]


def test_the_eviction_reason_names_the_landing() -> None:
    plan = run(CASES[2])
    # b with the replacement: 2000m and 512Mi requested -> least allocated (80 + 99) // 2 = 89, balanced 90,
    # taints 3 x 100, spread 2 x 100; room: 70% of 10000m minus its 1000m of usage
    assert plan.evictions[0].reason == (
        "node a hot (usage 90.0% > 70.0%): usage 3000m covers the remaining 2000m above target; "
        "predicted to land on b (scheduler score 679/700), 6000m of real-usage room"
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


PREDICTING: Policy = policy(LNU)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.booleans())
def test_no_planned_replacement_lands_back_or_on_a_hot_node(
    cluster: tuple[ClusterFacts, UsageReport], same_pool: bool
) -> None:
    facts, report = cluster
    pol = PREDICTING if same_pool else policy(LNU + "destinationsInSamePool: false\n")
    snapshot, plan = plan_cycle(facts, report, pol, 1_700_000_000.0)
    decisions = {d.node: d for d in plan.results[0].node_decisions}
    pods = {p.key: p for p in facts.pods}
    model = SchedulerModel(snapshot)  # replayed: each landing is the model's choice after the earlier moves
    for eviction in plan.evictions:
        assert eviction.landing is not None and eviction.landing == eviction.room_on
        assert eviction.landing != eviction.node
        assert decisions[eviction.landing].node_class is NodeClass.COLD
        moved = pods[eviction.key]
        scheduled = model.place(moved, vacate=True)
        assert scheduled.node == eviction.landing
        assert all(decisions[t].node_class is NodeClass.COLD for t in scheduled.tied)
        model.remove(moved)
        model.add(moved, eviction.landing)
