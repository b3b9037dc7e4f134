"""HighNodeUtilization on memory and pod count beside CPU, as the community descheduler's: a node is
underutilized only when every resource named is under its threshold; its group moves only onto destinations
that stay under every target with the whole group added; unknown memory is never read as zero.

Nodes of 10 cores and 10 GiB; thresholds {cpu: 20, memory: 20}, targetThresholds {cpu: 70, memory: 80}
unless a test says otherwise."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from rebalancer.domain.errors import ConfigError
from rebalancer.domain.model import ClusterFacts, Node, Pod, Taint, UsageReport
from rebalancer.planning.plan import EvictionPlan, NodeClass
from rebalancer.policy import parse_policy
from rebalancer.policy.cycle import plan_cycle, pod_memory_nodes
from strategies.every_target import UNKNOWN_MEMORY
from tests.builders import node, pod, policy
from tests.unit.test_memory_thresholds import GI, NOW, classes, report

NODES = [node("idle", memory=10 * GI), node("busy", memory=10 * GI)]
SCALE_DOWN_CANDIDATE = Taint("DeletionCandidateOfClusterAutoscaler", "1700000000", "PreferNoSchedule")


def hnu(extra: str = "", *, low: str = "{cpu: 20, memory: 20}", high: str = "{cpu: 70, memory: 80}") -> str:
    return f"kind: HighNodeUtilization\nthresholds: {low}\ntargetThresholds: {high}\npredictPlacement: false\n{extra}"


def run(strategy: str, nodes: list[Node], pods: list[Pod], found: UsageReport) -> EvictionPlan:
    return plan_cycle(ClusterFacts(tuple(nodes), tuple(pods)), found, policy(strategy), NOW)[1]


def reasons(plan: EvictionPlan) -> dict[str, str]:
    return {d.name: d.reason for d in plan.results[0].pod_decisions}


# -- settings --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("low", "high", "message"),
    [
        ("{cpu: 20, memory: 20}", "{cpu: 70}", r"targetThresholds\.memory: missing: thresholds\.memory is set"),
        ("{cpu: 20, pods: 90}", "{cpu: 70, pods: 80}", r"thresholds\.pods: 90 must not be above targetThresholds"),
        ("{cpu: 20, memory: 0}", "{cpu: 70, memory: 80}", r"thresholds\.memory: 0 makes no node cold.*emptied"),
    ],
)
def test_memory_and_pods_thresholds_are_validated_naming_the_field(low: str, high: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        policy(hnu(low=low, high=high))


def test_a_pools_thresholds_are_validated_under_its_name() -> None:
    pools = "pools:\n  gpu: {thresholds: {cpu: 10, pods: 10}, targetThresholds: {cpu: 50}}\n"
    with pytest.raises(ConfigError, match=r"pools\.gpu\.targetThresholds\.pods: missing"):
        policy(hnu(pools))


def test_only_memory_on_real_usage_reads_memory() -> None:
    assert policy(hnu()).reads_memory
    assert not policy(hnu("classifyBy: requests")).reads_memory
    assert not policy(hnu(low="{cpu: 20, pods: 20}", high="{cpu: 70, pods: 80}")).reads_memory
    assert not policy(hnu(low="{cpu: 20}", high="{cpu: 70}")).reads_memory


# -- classes ----------------------------------------------------------------------------------------


def test_a_node_is_underutilized_only_when_every_resource_is_under_its_threshold() -> None:
    nodes = [*NODES, node("cache", memory=10 * GI), node("full", memory=10 * GI)]
    found = report(
        {"idle": (1_000, GI), "busy": (5_000, 5 * GI), "cache": (1_000, 5 * GI), "full": (1_000, 9 * GI)}, {}
    )
    plan = run(hnu(), nodes, [], found)

    # cache: CPU 10% but memory 50%; full: memory 90% over its target, which only caps destinations: normal
    assert classes(plan) == {
        "idle": NodeClass.COLD,
        "busy": NodeClass.NORMAL,
        "cache": NodeClass.NORMAL,
        "full": NodeClass.NORMAL,
    }
    by_node = {d.node: d.reason for d in plan.results[0].node_decisions}
    assert by_node["idle"].startswith("CPU usage 10.0% < threshold 20.0%; memory 10.0% < threshold 20.0%")
    assert "memory 50.0% within [20.0%, 80.0%]" in by_node["cache"]
    assert "memory 90.0% > target 80.0%" in by_node["full"]


def test_pod_count_keeps_a_crowded_node_from_being_emptied() -> None:
    nodes = [node("idle", max_pods=10), node("crowded", max_pods=10), node("busy", max_pods=10)]
    pods = [pod("a", "idle"), *(pod(f"c{i}", "crowded") for i in range(5)), pod("x", "busy")]
    found = report(
        {"idle": (500, None), "crowded": (500, None), "busy": (5_000, None)}, {p.name: (50, None) for p in pods}
    )
    plan = run(hnu(low="{cpu: 20, pods: 20}", high="{cpu: 70, pods: 80}"), nodes, pods, found)

    assert classes(plan) == {"idle": NodeClass.COLD, "crowded": NodeClass.NORMAL, "busy": NodeClass.NORMAL}
    assert [(e.name, e.room_on) for e in plan.evictions] == [("a", "busy")]
    assert plan.evictions[0].reason.startswith("emptying idle (5.0% < 20.0%, pods 10.0% < 20.0%); room on busy")


def test_a_node_of_unknown_memory_is_never_emptied_on_a_guess() -> None:
    pods = [pod("a", "idle"), pod("x", "busy")]
    found = report({"idle": (500, None), "busy": (5_000, 5 * GI)}, {"a": (100, GI // 4), "x": (4_000, GI)})
    plan = run(hnu(), NODES, pods, found)

    assert classes(plan)["idle"] is NodeClass.UNKNOWN
    by_node = {d.node: d.reason for d in plan.results[0].node_decisions}
    assert "memory unknown: no memory usage data for this node" in by_node["idle"]
    assert plan.evictions == ()


def test_memory_by_requests() -> None:
    # idle requests 3 GiB (30%): not underutilized by memory, whatever its CPU
    pods = [pod("fat", "idle", memory_request=3 * GI), pod("thin", "small", memory_request=GI), pod("x", "busy")]
    nodes = [*NODES, node("small", memory=10 * GI)]
    found = report({"idle": (100, None), "small": (100, None), "busy": (100, None)}, {})
    plan = run(hnu("classifyBy: requests"), nodes, pods, found)

    assert classes(plan) == {"idle": NodeClass.NORMAL, "busy": NodeClass.COLD, "small": NodeClass.COLD}
    by_node = {d.node: d.reason for d in plan.results[0].node_decisions}
    assert by_node["idle"] == "CPU requests 1.0% < threshold 20.0%; memory 30.0% within [20.0%, 80.0%]"


# -- destinations -----------------------------------------------------------------------------------


def test_a_destination_the_group_would_push_over_its_memory_target_is_refused_with_that_reason() -> None:
    # busy has CPU room, but 6 GiB + the group's 2.5 GiB = 8.5 GiB (85%) > 80%: the group stays, whole
    pods = [pod("a", "idle"), pod("b", "idle"), pod("x", "busy")]
    found = report(
        {"idle": (1_000, GI * 3 // 2), "busy": (5_000, 6 * GI)},
        {"a": (300, GI + GI // 2), "b": (200, GI), "x": (4_000, 5 * GI)},
    )
    plan = run(hnu(), NODES, pods, found)

    assert plan.evictions == ()
    found_reasons = reasons(plan)
    assert found_reasons["a"] == found_reasons["b"]
    assert found_reasons["a"].startswith("node cannot be emptied: default/b has nowhere to go (no destination keeps")
    assert "would put busy's memory at 85.0% > target 80.0% (8.50 GiB of 10.00 GiB)" in found_reasons["a"]


def test_a_pod_of_unknown_memory_keeps_its_node() -> None:
    pods = [pod("a", "idle"), pod("mystery", "idle"), pod("x", "busy")]
    found = report({"idle": (1_000, GI), "busy": (5_000, 5 * GI)}, {"a": (300, GI // 2), "mystery": (200, None)})
    plan = run(hnu(), NODES, pods, found)

    assert plan.evictions == ()
    assert reasons(plan)["a"] == f"node cannot be emptied: default/mystery stays ({UNKNOWN_MEMORY})"


def test_the_room_of_a_group_that_stays_is_given_back_to_the_next_one() -> None:
    # idle-1's first pod fits busy (3 GiB) but its second does not (3 + 3 + 3 > 8): the whole group stays, and
    # the 4 GiB of idle-2 (CPU 11%, after idle-1's 10%) then fits busy's memory room of 5 GiB
    nodes = [node("idle-1", memory=10 * GI), node("idle-2", memory=10 * GI), node("busy", memory=10 * GI)]
    pods = [pod("a", "idle-1"), pod("b", "idle-1"), pod("c", "idle-2"), pod("x", "busy")]
    found = report(
        {"idle-1": (1_000, GI), "idle-2": (1_100, GI), "busy": (4_000, 3 * GI)},
        {"a": (200, 3 * GI), "b": (100, 3 * GI), "c": (300, 4 * GI)},
    )
    plan = run(hnu(low="{cpu: 20, memory: 50}", high="{cpu: 70, memory: 80}"), nodes, pods, found)

    assert [(e.name, e.room_on) for e in plan.evictions] == [("c", "busy")]
    assert "would put busy's memory at 90.0% > target 80.0%" in reasons(plan)["a"]


def test_a_predicted_landing_on_a_destination_over_its_memory_target_counts_as_landing_risk() -> None:
    # n1 and n2 score the same for the scheduler: the replacement lands on each with 50%; on n2 the pod's
    # 1 GiB would put n2's memory at 85% > 80%
    nodes = [
        node("idle", memory=10 * GI, taints=[SCALE_DOWN_CANDIDATE]),
        *(node(n, memory=10 * GI) for n in ("n1", "n2")),
    ]
    pods = [pod("solo", "idle", workload="solo"), pod("w1", "n1", workload="w1"), pod("w2", "n2", workload="w2")]
    found = report(
        {"idle": (500, GI), "n1": (5_000, 2 * GI), "n2": (5_000, 7 * GI + GI // 2)},
        {"solo": (300, GI), "w1": (4_000, GI), "w2": (4_000, GI)},
    )
    strict = hnu().replace("predictPlacement: false\n", "")

    refused = run(strict, nodes, pods, found)

    assert refused.evictions == ()
    reason = reasons(refused)["solo"]
    assert reason.startswith("node cannot be emptied: default/solo replacement: predicted landing risk 50% > ")
    assert "it would put n2's memory at 85.0% > target 80.0%" in reason

    accepted = run(f"{strict}maxLandingRisk: 0.6\n", nodes, pods, found)
    assert [(e.name, e.landing) for e in accepted.evictions] == [("solo", "n1")]
    assert accepted.evictions[0].reason.endswith("the group's landing risk 50%")


def test_a_live_cycle_reads_the_pods_memory_of_the_underutilized_nodes_only() -> None:
    nodes = [*NODES, node("cache", memory=10 * GI)]
    pods = [pod("a", "idle"), pod("x", "busy"), pod("y", "cache")]
    found = report({"idle": (1_000, GI), "busy": (5_000, 5 * GI), "cache": (1_000, 5 * GI)}, {})
    strategy = policy(hnu())
    snapshot = plan_cycle(ClusterFacts(tuple(nodes), tuple(pods)), found, strategy, NOW)[0]

    assert pod_memory_nodes(snapshot, strategy) == {"idle"}
    assert pod_memory_nodes(snapshot, policy(hnu("classifyBy: requests"))) == frozenset()


def test_a_strategy_without_memory_thresholds_has_its_pods_memory_read_when_another_reads_memory() -> None:
    """Its evictions keep their pods' memory in the records: the nodes they leave and land on stay known to
    the in-flight memory correction instead of turning memory-unknown for the gauge's lag."""
    pods = [pod("a", "idle"), pod("x", "busy")]
    found = report({"idle": (1_000, GI), "busy": (5_000, 5 * GI)}, {})
    emptier = "{kind: HighNodeUtilization, thresholds: {cpu: 20}, targetThresholds: {cpu: 70}}"
    reliever = "{kind: LowNodeUtilization, thresholds: {cpu: 20, memory: 20}, targetThresholds: {cpu: 50, memory: 80}}"
    both = parse_policy(f"pools: {{label: pool}}\nstrategies:\n- {emptier}\n- {reliever}\n", "two strategies")
    alone = parse_policy(f"pools: {{label: pool}}\nstrategies:\n- {emptier}\n", "no memory")
    snapshot = plan_cycle(ClusterFacts(tuple(NODES), tuple(pods)), found, both, NOW)[0]

    assert pod_memory_nodes(snapshot, both) == {"idle"}  # the emptier's underutilized node; nothing is hot
    assert pod_memory_nodes(snapshot, alone) == frozenset()  # no strategy reads memory: none is read


# -- property: every destination of a planned group stays under every target ------------------------


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[Node], list[Pod], UsageReport]:
    """Idle nodes beside busier ones; now and then a pod's or a node's memory missing, page cache on every
    node."""
    nodes, pods = [], []
    node_usage: dict[str, tuple[int, int | None]] = {}
    pod_usage: dict[str, tuple[int, int | None]] = {}
    for i in range(draw(st.integers(2, 7))):
        idle = i == 0 or draw(st.booleans())
        name = f"n{i}"
        nodes.append(node(name, 8_000, memory=8 * GI, max_pods=draw(st.integers(6, 16))))
        cpu = mem = 0
        for j in range(draw(st.integers(0, 3) if idle else st.integers(2, 5))):
            p = pod(f"{name}-p{j}", name, workload=f"w{j}")
            pods.append(p)
            pc = draw(st.integers(1, 600) if idle else st.integers(300, 1_200))
            pm = None if draw(st.integers(0, 7)) == 0 else draw(st.integers(1, GI // 2 if idle else GI))
            pod_usage[p.name] = (pc, pm)
            cpu, mem = cpu + pc, mem + (pm or GI // 4)
        cache = draw(st.integers(0, GI // 2 if idle else GI))
        node_usage[name] = (cpu + (100 if idle else 1_500), None if draw(st.integers(0, 9)) == 0 else mem + cache)
    return nodes, pods, report(node_usage, pod_usage)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.booleans())
def test_every_destination_of_a_planned_group_stays_under_every_target(
    cluster: tuple[list[Node], list[Pod], UsageReport], predict: bool
) -> None:
    nodes, pods, found = cluster
    strategy = hnu(low="{cpu: 25, memory: 30, pods: 40}", high="{cpu: 60, memory: 70, pods: 80}")
    strategy = strategy.replace("predictPlacement: false", f"predictPlacement: {str(predict).lower()}")
    plan = run(strategy, nodes, pods, found)
    by_name = {n.name: n for n in nodes}
    memory, cpu, mem = dict(found.pod_memory), dict(found.node_cpu_m), dict(found.node_memory or {})
    count = {n.name: sum(1 for p in pods if p.node_name == n.name) for n in nodes}
    node_classes = classes(plan)
    emptied = {e.node for e in plan.evictions}
    event(f"nodes emptied: {len(emptied)}")
    for source in emptied:
        assert node_classes[source] is NodeClass.COLD and source in mem, "a node emptied on a guess"
        assert {e.name for e in plan.evictions if e.node == source} == {p.name for p in pods if p.node_name == source}
    for e in plan.evictions:
        key = (e.namespace, e.name)
        assert key in memory, "a pod of unknown memory was placed"
        cpu[e.room_on] += e.usage_m
        mem[e.room_on] += memory[key]
        count[e.room_on] += 1
    for destination in {e.room_on for e in plan.evictions}:
        n = by_name[destination]
        assert destination not in emptied
        assert cpu[destination] <= int(n.allocatable_cpu_m * 0.6)
        assert mem[destination] <= int(n.allocatable_memory * 0.7)
        assert count[destination] <= int(n.allocatable_pods * 0.8)
