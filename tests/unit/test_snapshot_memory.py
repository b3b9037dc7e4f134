"""The snapshot's memory: unknown (never zero) when not read, missing or on a node of unknown CPU, and moved
with the pods a strategy plans to evict (a pod of unknown memory leaves its nodes' memory unknown)."""

from __future__ import annotations

from rebalancer.domain.model import UsageReport
from rebalancer.planning.plan import PlannedEviction
from rebalancer.planning.snapshot import after_evictions
from tests.builders import node, pod, snapshot

GI = 2**30


def move(name: str, source: str, destination: str) -> PlannedEviction:
    return PlannedEviction("LowNodeUtilization", "default", name, "uid", source, "default", None, 100, "", destination)


def test_memory_not_read_is_unknown_without_a_reason() -> None:
    snap = snapshot([node("a")], [pod("p", "a")], UsageReport(node_cpu_m={"a": 1_000}, pod_cpu_m={("default", "p"): 1}))
    assert snap.load["a"].memory_usage is None and snap.load["a"].memory_unknown_reason is None
    assert snap.memory_of(snap.pods_on("a")[0]) is None


def test_missing_memory_and_stale_nodes_are_unknown_with_the_reason() -> None:
    report = UsageReport(
        node_cpu_m={"a": 1_000, "b": 1_000},
        node_problems={"c": "newest sample 900s old > maxDataAge 5m"},
        node_memory={"a": 3 * GI, "c": GI},
    )
    snap = snapshot([node("a"), node("b"), node("c")], [], report)
    assert snap.load["a"].memory_usage == 3 * GI
    assert snap.load["b"].memory_unknown_reason == "no memory usage data for this node"
    assert snap.load["c"].memory_usage is None  # its CPU is unknown: so is the same data's memory
    assert snap.load["c"].memory_unknown_reason == "newest sample 900s old > maxDataAge 5m"


def test_planned_moves_carry_their_memory_and_unknown_memory_spreads() -> None:
    pods = [pod("known", "a"), pod("mystery", "a")]
    report = UsageReport(
        node_cpu_m={"a": 3_000, "b": 500, "c": 500},
        pod_cpu_m={("default", "known"): 1_000, ("default", "mystery"): 1_000},
        node_memory={"a": 6 * GI, "b": GI, "c": GI},
        pod_memory={("default", "known"): 2 * GI},
    )
    snap = snapshot([node("a"), node("b"), node("c")], pods, report)

    moved = after_evictions(snap, [move("known", "a", "b")])
    assert moved.load["a"].memory_usage == 4 * GI and moved.load["b"].memory_usage == 3 * GI

    lost = after_evictions(moved, [move("mystery", "a", "c")])
    assert lost.load["a"].memory_usage is None and lost.load["c"].memory_usage is None
    assert lost.load["c"].memory_unknown_reason == "memory of moved pod default/mystery unknown"
    assert lost.load["b"].memory_usage == 3 * GI
