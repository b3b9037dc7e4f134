"""The line `serve` logs per cycle: found, planned, done, how long, and why nothing was done."""

from __future__ import annotations

from rebalancer.actions.evictor import EvictionResult, EvictorReport, Outcome
from rebalancer.planning.plan import EvictionPlan, NodeClass, NodeDecision, PlannedEviction, StrategyResult, Unrelieved
from rebalancer.service.cycle_summary import cycle_line

KIND = "LowNodeUtilization"


def node(name: str, node_class: NodeClass) -> NodeDecision:
    usage = None if node_class is NodeClass.UNKNOWN else 1000
    return NodeDecision(KIND, name, "general", node_class, "test", usage, 4000, None, 20.0, 70.0)


def eviction(name: str, on: str = "hot-1") -> PlannedEviction:
    return PlannedEviction(KIND, "shop", name, f"uid-{name}", on, "general", None, 500, "test", "cold-1")


def plan(*results: StrategyResult, blocked: str | None = None) -> EvictionPlan:
    return EvictionPlan(0.0, results, blocked)


def result(
    nodes: tuple[NodeDecision, ...] = (),
    evictions: tuple[PlannedEviction, ...] = (),
    notes: tuple[str, ...] = (),
    unrelieved: dict[str, Unrelieved] | None = None,
) -> StrategyResult:
    return StrategyResult(KIND, evictions, nodes, (), notes, unrelieved or {})


def test_evictions_done_and_blocked_with_the_limiter_that_blocked_them() -> None:
    planned = (eviction("api-0"), eviction("api-1"), eviction("web-0"))
    report = EvictorReport(
        (
            EvictionResult(planned[0], Outcome.EVICTED, ""),
            EvictionResult(planned[1], Outcome.EVICTED, ""),
            EvictionResult(planned[2], Outcome.BLOCKED, "cap", limiter="node.maxPerCycle"),
        )
    )
    nodes = (node("hot-1", NodeClass.HOT), node("cold-1", NodeClass.COLD), node("x", NodeClass.UNKNOWN))
    line = cycle_line("schedule", None, plan(result(nodes, planned)), report, 0.5234)
    assert line == (
        "schedule cycle: 1 hot node(s), 1 of unknown usage, 3 planned, 2 evicted, 1 blocked (node.maxPerCycle); 0.52 s"
    )


def test_nothing_done_because_the_plan_was_blocked() -> None:
    line = cycle_line("schedule", None, plan(result(), blocked="MetricsStale: no series"), EvictorReport(), 0.1)
    assert (
        line == "schedule cycle: 0 hot node(s), 0 planned, nothing done: plan blocked: MetricsStale: no series; 0.10 s"
    )


def test_nothing_done_names_the_hot_nodes_left_and_why() -> None:
    hot = tuple(node(f"hot-{i}", NodeClass.HOT) for i in range(1, 6))
    unrelieved = {"hot-1": Unrelieved.NO_COLD_NODE, **{f"hot-{i}": Unrelieved.NO_ROOM for i in range(2, 6)}}
    line = cycle_line("alert", frozenset({"hot-2", "hot-1"}), plan(result(hot, unrelieved=unrelieved)), None, 2)
    assert line == (
        "alert cycle for hot-1, hot-2: 5 hot node(s), 0 planned, nothing done: not relieved: "
        "no-cold-node (hot-1), no-room (hot-2, hot-3, hot-4, +1 more); 2.00 s"
    )


def test_nothing_done_without_a_hot_node_says_so_once_for_every_pool() -> None:
    notes = ("pool a: no hot node", "pool b: no hot node", "pool c: every node is cold")
    line = cycle_line("schedule", None, plan(result((node("n", NodeClass.NORMAL),), notes=notes)), EvictorReport(), 0)
    assert (
        line
        == "schedule cycle: 0 hot node(s), 0 planned, nothing done: no hot node; pool c: every node is cold; 0.00 s"
    )


def test_an_aborted_cycle_and_the_evictors_problems_are_in_the_line() -> None:
    planned = (eviction("api-0"),)
    report = EvictorReport(
        (EvictionResult(planned[0], Outcome.SKIPPED, "aborted"),), ("events not recorded",), "state conflict"
    )
    line = cycle_line("schedule", None, plan(result((node("hot-1", NodeClass.HOT),), planned)), report, 1)
    assert line == (
        "schedule cycle: 1 hot node(s), 1 planned, 1 skipped, aborted: state conflict, "
        "problem: events not recorded; 1.00 s"
    )
