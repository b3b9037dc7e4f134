"""LowNodeUtilization's receiveThresholds: destinations under a receive threshold, not only cold ones."""

from __future__ import annotations

import pytest

from rebalancer.domain.errors import ConfigError
from rebalancer.domain.model import ClusterFacts, Node, Pod, UsageReport
from rebalancer.planning.plan import EvictionPlan, Unrelieved
from rebalancer.policy import Policy, parse_policy
from rebalancer.policy.cycle import plan_cycle
from tests.builders import node, pod, policy, usage
from tests.unit.test_low_node_utilization import run
from tests.unit.test_predictive_lnu import predicted

SHIPPED = "kind: LowNodeUtilization\nthresholds: {cpu: 20}\ntargetThresholds: {cpu: 70}\n"
RECEIVE = SHIPPED + "receiveThresholds: {cpu: 50}\n"


def hot_and_warm(hot: dict[str, int], others: dict[str, int | None]) -> tuple[list[Node], list[Pod], UsageReport]:
    """Nodes of 10 cores: each hot one runs five pods of 1.5 cores (a 1.5-core excess over 70 % at 85 %),
    each other node one small pod (the least requested nodes: replacements land there). None: no usage read."""
    nodes = [node(name) for name in (*hot, *others)]
    pods = [pod(f"{name}-{i}", name) for name in hot for i in range(5)]
    pods += [pod(f"{name}-0", name, workload="small") for name in others]
    pod_usage = {f"{name}-{i}": 1500 for name in hot for i in range(5)} | {f"{name}-0": 500 for name in others}
    node_usage = {name: pct * 100 for name, pct in (hot | others).items() if pct is not None}
    return nodes, pods, usage(node_usage, pod_usage)


def moves(plan: EvictionPlan) -> list[tuple[str, str]]:
    """(source, destination) of each planned eviction."""
    return sorted((e.node, e.room_on) for e in plan.evictions)


PREDICTED = ""
ROOM_SEARCH = "predictPlacement: false\n"

# strategy, hot nodes' usage %, the others' (None: unknown), the moves planned, why the hot nodes got none
CASES = {
    "without it, warm neighbours are no destination (the descheduler's rule)": (
        SHIPPED, {"hot-1": 85, "hot-2": 84}, {"warm-1": 26, "warm-2": 26}, [],
        {"hot-1": Unrelieved.NO_COLD_NODE, "hot-2": Unrelieved.NO_COLD_NODE},
    ),
    "with it, nodes under the receive threshold take the load": (
        RECEIVE, {"hot-1": 85, "hot-2": 84}, {"warm-1": 26, "warm-2": 26},
        [("hot-1", "warm-1"), ("hot-2", "warm-2")], {},
    ),
    "the same through the room search, without prediction": (
        RECEIVE + ROOM_SEARCH, {"hot-1": 85, "hot-2": 84}, {"warm-1": 26, "warm-2": 26},
        [("hot-1", "warm-2"), ("hot-2", "warm-1")], {},
    ),
    "the moves planned this cycle count: one pod fits under 50 %": (
        RECEIVE, {"hot-1": 85, "hot-2": 84}, {"warm-1": 34}, [("hot-1", "warm-1")], {"hot-2": Unrelieved.NO_ROOM},
    ),
    "... and so in the room search": (
        RECEIVE + ROOM_SEARCH, {"hot-1": 85, "hot-2": 84}, {"warm-1": 34}, [("hot-1", "warm-1")],
        {"hot-2": Unrelieved.NO_ROOM},
    ),
    "a node under the receive threshold without room for the pod under it is none": (
        RECEIVE, {"hot-1": 85}, {"warm-1": 40}, [], {"hot-1": Unrelieved.NO_ROOM},
    ),
    "no node under the receive threshold: the pool does not act, and says why": (
        RECEIVE, {"hot-1": 85}, {"warm-1": 55, "warm-2": 60}, [], {"hot-1": Unrelieved.NO_RECEIVER},
    ),
    "a node of unknown usage never receives": (
        RECEIVE, {"hot-1": 85}, {"unknown-1": None}, [], {"hot-1": Unrelieved.NO_RECEIVER},
    ),
    "a cold node receives up to the receive threshold, not up to the target": (
        SHIPPED + "receiveThresholds: {cpu: 30}\n", {"hot-1": 85}, {"cold-1": 19}, [], {"hot-1": Unrelieved.NO_ROOM},
    ),
    "... which the descheduler's rule fills up to the target": (
        SHIPPED, {"hot-1": 85}, {"cold-1": 19}, [("hot-1", "cold-1")], {},
    ),
    "numberOfNodes counts the receiving nodes": (
        RECEIVE + "numberOfNodes: 1\n", {"hot-1": 85}, {"warm-1": 26, "warm-2": 60}, [],
        {"hot-1": Unrelieved.NUMBER_OF_NODES},
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_destinations_under_the_receive_threshold(case: str) -> None:
    strategy, hot, others, planned, unrelieved = CASES[case]
    nodes, pods, report = hot_and_warm(hot, others)
    plan = run(nodes, pods, report, policy(strategy))
    assert moves(plan) == planned, plan.results[0].pod_decisions
    assert dict(plan.results[0].unrelieved) == unrelieved


def test_the_plan_says_which_node_came_closest_when_none_receives() -> None:
    nodes, pods, report = hot_and_warm({"hot-1": 85}, {"warm-1": 55, "warm-2": 60})
    notes = run(nodes, pods, report, policy(RECEIVE)).results[0].notes
    expected = "pool default: 1 hot node(s) but no node under receiveThresholds.cpu 50.0% to take their load"
    assert f"{expected} (the coolest: warm-1 at 55.0%)" in notes, notes


def test_other_pools_receive_without_destinations_in_same_pool() -> None:
    nodes = [node("hot-1", pool="web"), node("warm-1", pool="batch")]
    pods = [pod(f"hot-1-{i}", "hot-1") for i in range(5)] + [pod("warm-1-0", "warm-1", workload="small")]
    report = usage({"hot-1": 8500, "warm-1": 2600}, {**{f"hot-1-{i}": 1500 for i in range(5)}, "warm-1-0": 500})
    same_pool = run(nodes, pods, report, policy(RECEIVE))
    assert same_pool.evictions == ()
    assert dict(same_pool.results[0].unrelieved) == {"hot-1": Unrelieved.NO_RECEIVER}
    anywhere = run(nodes, pods, report, policy(RECEIVE + "destinationsInSamePool: false\n"))
    assert moves(anywhere) == [("hot-1", "warm-1")]


def test_a_pool_of_its_own_keeps_its_own_receive_threshold() -> None:
    pools = "pools:\n  web: {thresholds: {cpu: 20}, targetThresholds: {cpu: 70}, receiveThresholds: {cpu: 25}}\n"
    nodes = [node("hot-1", pool="web"), node("warm-1", pool="web")]
    pods = [pod(f"hot-1-{i}", "hot-1") for i in range(5)] + [pod("warm-1-0", "warm-1", workload="small")]
    report = usage({"hot-1": 8500, "warm-1": 2600}, {**{f"hot-1-{i}": 1500 for i in range(5)}, "warm-1-0": 500})
    plan = run(nodes, pods, report, policy(RECEIVE + pools))
    assert plan.evictions == ()  # 26 % is under the strategy's 50 % but not under web's 25 %
    assert dict(plan.results[0].unrelieved) == {"hot-1": Unrelieved.NO_RECEIVER}


def _policy(strategy: str) -> Policy:
    indented = "\n".join("    " + line for line in strategy.strip().splitlines()).strip()
    return parse_policy(f"pools:\n  label: pool\nstrategies:\n  - {indented}\n", "p.yaml")


BAD = {
    "above the target": (SHIPPED + "receiveThresholds: {cpu: 80}\n", "receiveThresholds.cpu",
                         "80 must not be above targetThresholds.cpu (70)"),
    "below the cold threshold": (SHIPPED + "receiveThresholds: {cpu: 10}\n", "receiveThresholds.cpu",
                                 "10 must not be below thresholds.cpu (20)"),
    "memory": (SHIPPED + "receiveThresholds: {cpu: 50, memory: 50}\n", "receiveThresholds.memory",
               "only cpu is read"),
    "a pool's": (SHIPPED + "pools:\n  web: {thresholds: {cpu: 20}, targetThresholds: {cpu: 70}, "
                 "receiveThresholds: {cpu: 75}}\n", "pools.web.receiveThresholds.cpu", "must not be above"),
    "the predicted one": (SHIPPED + "classifyBy: predicted\npredicted: {thresholds: {cpu: 60}, "
                          "targetThresholds: {cpu: 70}, receiveThresholds: {cpu: 50}}\n",
                          "predicted.receiveThresholds.cpu", "must not be below thresholds.cpu (60)"),
    "beside predicted, not read": (RECEIVE + "classifyBy: predicted\npredicted: {thresholds: {cpu: 60}, "
                                   "targetThresholds: {cpu: 70}}\n", "receiveThresholds",
                                   "not read with predicted"),
}  # fmt: skip


@pytest.mark.parametrize("case", BAD)
def test_problems_name_the_field(case: str) -> None:
    strategy, path, message = BAD[case]
    with pytest.raises(ConfigError) as info:
        _policy(strategy)
    problems = [(p.removeprefix("strategies.0."), m) for p, m in info.value.problems]
    assert any(p == path and message in m for p, m in problems), info.value.problems


def test_the_receive_threshold_replaces_land_on_normal_nodes() -> None:
    # normal-1 (55 %) is the least requested node: the replacement lands there. landOnNormalNodes takes it
    # (70 % after the move, at the target); the receive threshold of 50 % does not, though cold-1 has room
    nodes = [node("hot-1"), node("cold-1"), node("normal-1")]
    pods = [pod(f"hot-1-{i}", "hot-1") for i in range(5)] + [pod("cold-1-0", "cold-1", cpu_request_m=5000)]
    report = usage({"hot-1": 8500, "cold-1": 1000, "normal-1": 5500}, {f"hot-1-{i}": 1500 for i in range(5)})
    landed = run(nodes, pods, report, policy(SHIPPED))
    assert [(e.name, e.landing) for e in landed.evictions] == [("hot-1-0", "normal-1")]
    refused = run(nodes, pods, report, policy(RECEIVE))
    assert refused.evictions == ()
    assert dict(refused.results[0].unrelieved) == {"hot-1": Unrelieved.PREDICTED_LANDING}


@pytest.mark.parametrize(
    ("peak_pct", "planned"),
    [(30, [("hot-1", "warm-1")]), (40, [])],  # with the pod: 45 % under 50 %; 55 % over it
)
def test_with_classify_by_max_the_predicted_peak_must_stay_under_it(
    peak_pct: int, planned: list[tuple[str, str]]
) -> None:
    nodes, pods, report = hot_and_warm({"hot-1": 85}, {"warm-1": 26})
    peaks = predicted({"hot-1": 8500, "warm-1": peak_pct * 100}, {p.name: 1500 for p in pods if p.node_name == "hot-1"})
    facts = ClusterFacts(tuple(nodes), tuple(pods), ())
    plan = plan_cycle(facts, report, policy(RECEIVE + "classifyBy: max\n"), 1_700_000_000.0, None, peaks)[1]
    assert moves(plan) == planned


DEEPER = {
    # 85 % less 3 pods of 1.5 cores: 40 %, under the receive threshold of 50 % (one pod would do for 70 %)
    "a hot node is relieved down to the receive threshold": (
        {"hot-1": 85}, {"cold-1": 2}, [("hot-1", "cold-1")] * 3, {},
    ),
    # room for two pods under 50 % on cold-1: each hot node gets under target first, neither goes deeper
    "room cools every hot node before any goes deeper": (
        {"hot-1": 85, "hot-2": 84}, {"cold-1": 19}, [("hot-1", "cold-1"), ("hot-2", "cold-1")], {},
    ),
}  # fmt: skip


@pytest.mark.parametrize("search", [PREDICTED, ROOM_SEARCH], ids=["predicted", "room search"])
@pytest.mark.parametrize("case", DEEPER)
def test_relief_goes_down_to_the_receive_threshold(case: str, search: str) -> None:
    hot, others, planned, unrelieved = DEEPER[case]
    nodes, pods, report = hot_and_warm(hot, others)
    plan = run(nodes, pods, report, policy(RECEIVE + search))
    assert moves(plan) == planned, plan.results[0].pod_decisions
    assert dict(plan.results[0].unrelieved) == unrelieved
    chosen = [d.reason for d in plan.results[0].pod_decisions if d.node == "hot-1" and d.chosen]
    assert chosen[0].startswith("usage 1.500 cores reduces the remaining 3.500 cores above the receive threshold"), (
        chosen
    )
    if len(planned) == 3:
        left = [d.reason for d in plan.results[0].pod_decisions if d.node == "hot-1" and not d.chosen]
        assert left == ["not needed: the node is under the receive threshold after the chosen evictions"] * 2


def test_without_a_receive_threshold_a_node_is_relieved_to_its_target() -> None:
    nodes, pods, report = hot_and_warm({"hot-1": 85}, {"cold-1": 2})
    plan = run(nodes, pods, report, policy(SHIPPED))
    assert moves(plan) == [("hot-1", "cold-1")]
    assert "above target" in next(d.reason for d in plan.results[0].pod_decisions if d.chosen)
