"""Memory and pod-count thresholds beside CPU: a node is hot when any resource is over its target, cold when
every one is under its threshold; the pod chosen relieves the resource that is over; destinations keep every
resource under target; unknown memory is never read as zero."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rebalancer.app.render import plan_table
from rebalancer.domain.errors import ConfigError
from rebalancer.domain.model import ClusterFacts, Node, Pod, UsageReport
from rebalancer.planning.limits import CycleCounts, LimiterState, admit
from rebalancer.planning.plan import EvictionPlan, NodeClass
from rebalancer.policy.cycle import plan_cycle
from tests.builders import node, pod, policy
from tests.unit.limits_builders import limits, request

GI = 2**30
NOW = 1_700_000_000.0


def lnu(extra: str = "", *, memory: str = "{cpu: 30, memory: 40}", target: str = "{cpu: 70, memory: 80}") -> str:
    return (
        f"kind: LowNodeUtilization\nthresholds: {memory}\ntargetThresholds: {target}\npredictPlacement: false\n{extra}"
    )


def report(nodes: dict[str, tuple[int, int | None]], pods: dict[str, tuple[int, int | None]]) -> UsageReport:
    """CPU millicores and memory bytes (None: missing) per node and per pod (namespace default)."""
    return UsageReport(
        node_cpu_m={n: cpu for n, (cpu, _) in nodes.items()},
        pod_cpu_m={("default", p): cpu for p, (cpu, _) in pods.items()},
        node_memory={n: mem for n, (_, mem) in nodes.items() if mem is not None},
        pod_memory={("default", p): mem for p, (_, mem) in pods.items() if mem is not None},
    )


def run(strategy: str, nodes: list[Node], pods: list[Pod], usage: UsageReport) -> EvictionPlan:
    return plan_cycle(ClusterFacts(tuple(nodes), tuple(pods)), usage, policy(strategy), NOW)[1]


def classes(plan: EvictionPlan) -> dict[str, NodeClass]:
    return {d.node: d.node_class for d in plan.results[0].node_decisions}


# -- settings --------------------------------------------------------------------------------------


def test_memory_above_its_target_is_refused_naming_the_field() -> None:
    with pytest.raises(ConfigError, match=r"thresholds\.memory.*90 must not be above targetThresholds\.memory"):
        policy(lnu(memory="{cpu: 30, memory: 90}", target="{cpu: 70, memory: 80}"))


def test_a_resource_on_one_side_only_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"targetThresholds\.pods.*missing: thresholds\.pods is set"):
        policy(lnu(memory="{cpu: 30, pods: 20}", target="{cpu: 70}"))


def test_memory_thresholds_with_a_cpu_prediction_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"targetThresholds\.memory.*forecasts CPU alone"):
        policy(lnu("classifyBy: predicted"))


def test_only_memory_on_real_usage_reads_memory() -> None:
    assert policy(lnu()).reads_memory
    assert not policy(lnu("classifyBy: requests")).reads_memory
    assert not policy(lnu(memory="{cpu: 30, pods: 20}", target="{cpu: 70, pods: 80}")).reads_memory
    assert not policy(lnu(memory="{cpu: 30}", target="{cpu: 70}")).reads_memory


# -- classes ----------------------------------------------------------------------------------------


NODES = [node("a", 10_000, memory=10 * GI), node("b", 10_000, memory=10 * GI), node("c", 10_000, memory=10 * GI)]


def test_memory_hot_node_with_cool_cpu_sheds_the_memory_heavy_pod() -> None:
    pods = [pod("heavy", "a"), pod("light", "a"), pod("busy", "a"), pod("idle", "b"), pod("idle2", "c")]
    usage = report(
        {"a": (5_000, 9 * GI), "b": (1_000, 2 * GI), "c": (1_000, 2 * GI)},
        {
            "heavy": (500, 3 * GI),
            "light": (500, GI // 2),
            "busy": (3_000, GI // 2),
            "idle": (900, GI),
            "idle2": (900, GI),
        },
    )
    plan = run(lnu(), NODES, pods, usage)

    assert classes(plan) == {"a": NodeClass.HOT, "b": NodeClass.COLD, "c": NodeClass.COLD}
    decision = plan.results[0].node_decisions[0]
    assert "memory 90.0% > target 80.0%" in decision.reason
    assert [e.name for e in plan.evictions] == ["heavy"]  # 1 GiB over: the 3 GiB pod covers it alone
    chosen = next(d for d in plan.results[0].pod_decisions if d.name == "heavy")
    assert "memory 3.00 GiB covers the remaining 1.00 GiB above target" in chosen.reason


def test_a_node_is_cold_only_when_every_resource_is_under_its_threshold() -> None:
    usage = report({"a": (1_000, 5 * GI), "b": (1_000, 2 * GI), "c": (5_000, 5 * GI)}, {})
    plan = run(lnu(), NODES, [], usage)
    assert classes(plan) == {"a": NodeClass.NORMAL, "b": NodeClass.COLD, "c": NodeClass.NORMAL}
    assert plan.results[0].node_decisions[0].others[0].resource == "memory"


def test_unknown_memory_makes_the_node_unknown_never_cold() -> None:
    usage = report({"a": (1_000, None), "b": (1_000, 2 * GI), "c": (1_000, 2 * GI)}, {})
    plan = run(lnu(), NODES, [], usage)
    assert classes(plan)["a"] is NodeClass.UNKNOWN
    assert "memory unknown: no memory usage data for this node" in plan.results[0].node_decisions[0].reason


def test_a_cpu_move_that_would_push_memory_over_target_is_refused() -> None:
    # a is CPU-hot; b is cold but its memory would pass 80% with the big pod's 4 GiB
    nodes = NODES[:2]
    pods = [pod("big", "a")]
    usage = report({"a": (8_000, 6 * GI), "b": (1_000, 3 * GI + GI // 2)}, {"big": (2_000, 5 * GI)})
    plan = run(lnu(), nodes, pods, usage)

    assert plan.evictions == ()
    refused = next(d for d in plan.results[0].pod_decisions if d.name == "big")
    assert "would put b's memory at 85.0% > target 80.0% (8.50 GiB of 10.00 GiB)" in refused.reason


def test_a_pod_of_unknown_memory_is_never_moved() -> None:
    nodes = NODES[:2]
    pods = [pod("mystery", "a")]
    usage = report({"a": (8_000, 3 * GI), "b": (1_000, GI)}, {"mystery": (2_000, None)})
    plan = run(lnu(), nodes, pods, usage)
    assert plan.evictions == ()
    assert "memory usage unknown" in plan.results[0].pod_decisions[0].reason


def test_pod_count_makes_a_node_hot_and_destinations_keep_under_it() -> None:
    nodes = [node("a", max_pods=10), node("b", max_pods=10), node("c", max_pods=10)]
    pods = [pod(f"p{i}", "a") for i in range(9)] + [pod(f"q{i}", "b") for i in range(7)]
    usage = report({"a": (1_000, None), "b": (1_000, None), "c": (1_000, None)}, {p.name: (100, None) for p in pods})
    plan = run(lnu(memory="{cpu: 30, pods: 50}", target="{cpu: 70, pods: 80}"), nodes, pods, usage)

    assert classes(plan) == {"a": NodeClass.HOT, "b": NodeClass.NORMAL, "c": NodeClass.COLD}
    assert len(plan.evictions) == 1  # 9 of 10 pods > 80%: one pod brings it to 8
    assert plan.evictions[0].room_on == "c"


def test_memory_by_requests() -> None:
    pods = [pod("fat", "a", memory_request=5 * GI), pod("thin", "a", memory_request=4 * GI), pod("x", "b")]
    usage = report({"a": (1_000, None), "b": (1_000, None)}, {})
    plan = run(lnu("classifyBy: requests"), NODES[:2], pods, usage)
    assert classes(plan) == {"a": NodeClass.HOT, "b": NodeClass.COLD}
    assert [e.name for e in plan.evictions] == ["thin"]  # 1 GiB over: the closest fit that covers it


# -- property: no destination ends any configured resource over target -----------------------------


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[Node], list[Pod], UsageReport]:
    count = draw(st.integers(2, 6))
    nodes = [node(f"n{i}", 8_000, memory=8 * GI, max_pods=draw(st.integers(4, 12))) for i in range(count)]
    pods: list[Pod] = []
    node_usage: dict[str, tuple[int, int | None]] = {}
    pod_usage: dict[str, tuple[int, int | None]] = {}
    for n in nodes:
        cpu = mem = 0
        for j in range(draw(st.integers(0, 6))):
            p = pod(f"{n.name}-p{j}", n.name)
            pods.append(p)
            pc = draw(st.integers(1, 2_000))
            pm = draw(st.one_of(st.none(), st.integers(1, 4 * GI)))
            pod_usage[p.name] = (pc, pm)
            cpu, mem = cpu + pc, mem + (pm or GI // 2)
        node_usage[n.name] = (cpu + 200, mem + draw(st.integers(0, 4 * GI)))  # system daemons, page cache
    return nodes, pods, report(node_usage, pod_usage)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.booleans())
def test_no_destination_ends_over_any_target(cluster: tuple[list[Node], list[Pod], UsageReport], predict: bool) -> None:
    nodes, pods, usage = cluster
    strategy = lnu(memory="{cpu: 40, memory: 40, pods: 40}", target="{cpu: 60, memory: 60, pods: 70}")
    strategy = strategy.replace("predictPlacement: false", f"predictPlacement: {str(predict).lower()}")
    plan = run(strategy, nodes, pods, usage)
    by_name = {n.name: n for n in nodes}
    memory = dict(usage.pod_memory)
    cpu = dict(usage.node_cpu_m)
    mem = dict(usage.node_memory or {})
    count = {n.name: sum(1 for p in pods if p.node_name == n.name) for n in nodes}
    for e in plan.evictions:
        key = (e.namespace, e.name)
        assert key in memory, "a pod of unknown memory was moved"
        cpu[e.node] -= e.usage_m
        cpu[e.room_on] += e.usage_m
        mem[e.node] -= memory[key]
        mem[e.room_on] += memory[key]
        count[e.node] -= 1
        count[e.room_on] += 1
    for destination in {e.room_on for e in plan.evictions}:
        n = by_name[destination]
        assert cpu[destination] <= int(n.allocatable_cpu_m * 0.6)
        assert mem[destination] <= int(n.allocatable_memory * 0.6)
        assert count[destination] <= int(n.allocatable_pods * 0.7)


def test_a_cpu_only_policy_reads_no_memory_and_reports_no_other_resource() -> None:
    usage = report({"a": (1_000, 9 * GI), "b": (1_000, GI)}, {})
    plan = run(lnu(memory="{cpu: 30}", target="{cpu: 70}"), NODES[:2], [], msgspec.structs.replace(usage))
    assert all(d.others == () for d in plan.results[0].node_decisions)


def test_the_plan_table_shows_memory_columns_only_when_memory_is_configured() -> None:
    usage = report({"a": (5_000, 9 * GI), "b": (1_000, 2 * GI)}, {})
    with_memory = plan_table(run(lnu(), NODES[:2], [], usage), "test")
    cpu_only = plan_table(run(lnu(memory="{cpu: 30}", target="{cpu: 70}"), NODES[:2], [], usage), "test")

    assert "MEM GiB" in with_memory and "MEM%" in with_memory and "PODS%" not in with_memory
    row = next(line for line in with_memory.splitlines() if line.startswith("a "))
    assert "9.00" in row and "90.0" in row
    assert "MEM" not in cpu_only


def test_a_predicted_landing_on_a_destination_over_its_memory_target_counts_as_landing_risk() -> None:
    # b (cold) and c (normal: memory 75%) score the same for the scheduler: the replacement lands on each
    # with 50%; on c the pod's 1 GiB would put c's memory at 85% > 80%
    pods = [pod("big", "a"), *(pod(f"sys-{i}", "a", namespace="kube-system") for i in range(3))]
    usage = report({"a": (8_000, 3 * GI), "b": (1_000, 2 * GI), "c": (1_000, 7 * GI + GI // 2)}, {"big": (2_000, GI)})
    strict = lnu().replace("predictPlacement: false", "predictPlacement: true")

    refused = run(strict, NODES, pods, usage)

    assert refused.evictions == ()
    reason = next(d.reason for d in refused.results[0].pod_decisions if d.name == "big")
    assert reason.startswith("predicted landing risk 50% > maxLandingRisk 10%: 50% on destinations the move")
    assert "it would put c's memory at 85.0% > target 80.0%" in reason

    accepted = run(f"{strict}maxLandingRisk: 0.6\n", NODES, pods, usage)
    assert [(e.name, e.room_on) for e in accepted.evictions] == [("big", "b")]
    assert "; 50% on destinations the move would put over a target" in accepted.evictions[0].reason


def test_memory_alone_may_make_nodes_hot() -> None:
    # targetThresholds.cpu 100 selects no node by CPU, but memory over 50% still does
    text = lnu(memory="{cpu: 20, memory: 20}", target="{cpu: 100, memory: 50}")
    usage = report({"a": (1_000, 6 * GI), "b": (1_000, GI)}, {})
    assert classes(run(text, NODES[:2], [], usage)) == {"a": NodeClass.HOT, "b": NodeClass.COLD}
    with pytest.raises(ConfigError, match=r"targetThresholds\.cpu: 100 makes no node hot"):
        policy(lnu(memory="{cpu: 20, memory: 20}", target="{cpu: 100, memory: 100}"))


def test_deviation_thresholds_take_each_resources_pool_mean() -> None:
    text = lnu("useDeviationThresholds: true", memory="{cpu: 10, memory: 10}", target="{cpu: 10, memory: 10}")
    usage = report({"a": (4_000, 9 * GI), "b": (4_000, 5 * GI)}, {})
    plan = run(text, NODES[:2], [], usage)
    # CPU 40% on both (mean 40%: neither hot nor cold); memory mean 70%: a 90% > 80% hot, b 50% < 60% cold
    assert classes(plan) == {"a": NodeClass.HOT, "b": NodeClass.NORMAL}
    assert (
        "memory 90.0% > target 80.0% (pool default: mean 70.0% - 10 = 60.0% cold"
        in plan.results[0].node_decisions[0].reason
    )


def test_a_node_far_over_its_memory_target_is_relieved_before_one_barely_over_on_cpu() -> None:
    # a: CPU 71% against a 70% target (1% above it); b: CPU cool, memory 98% against 80% (22% above it)
    pods = [pod("cpu-pod", "a"), pod("memory-pod", "b"), pod("idle", "c")]
    usage = report(
        {"a": (7_100, 5 * GI), "b": (5_000, 9 * GI + GI * 8 // 10), "c": (1_000, 2 * GI)},
        {"cpu-pod": (500, GI // 2), "memory-pod": (500, 2 * GI), "idle": (900, GI)},
    )
    plan = run(lnu(), NODES, pods, usage)

    assert classes(plan) == {"a": NodeClass.HOT, "b": NodeClass.HOT, "c": NodeClass.COLD}
    assert [e.name for e in plan.evictions] == ["memory-pod", "cpu-pod"]
    # the evictor admits the plan's evictions in order: with one eviction a cycle, the memory-hot node's goes
    settings = limits("global: {maxPerCycle: 1}")
    state, cycle, admitted = LimiterState(), CycleCounts(), []
    for eviction in plan.evictions:
        verdict, state, cycle = admit(request(eviction.name, node=eviction.node), state, cycle, settings, NOW)
        if verdict.allowed:
            admitted.append(eviction.name)
    assert admitted == ["memory-pod"]
