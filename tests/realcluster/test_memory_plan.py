"""Memory thresholds end to end: the real kubernetes client against a real API
server (the cluster made through it by api_made.py), a real Prometheus
holding cAdvisor-shaped CPU and memory working-set history, the production planner.

Nodes of 4 cores and 16 GiB; thresholds {cpu: 30, memory: 40}, targetThresholds {cpu: 70, memory: 80}: a
node is hot above 2.8 cores or 12.8 GiB, cold below 1.2 cores and 6.4 GiB."""

from __future__ import annotations

from pathlib import Path

import pytest

from rebalancer.app import root as app
from rebalancer.app.efficiency import RECORDS_KEY
from rebalancer.domain.efficiency_records import TOO_LITTLE_MOVED
from rebalancer.planning.plan import EvictionPlan, NodeClass
from rebalancer.policy import load_policy
from rebalancer.records import EfficiencyState
from tests.adapters.cadvisor import CadvisorHistory, Container, NodeSpec, PodSpec, constant
from tests.adapters.cadvisor_memory import GiB, memory_series
from tests.adapters.prom_fixture import StartPrometheus
from tests.controlplane import ControlPlane
from tests.kubeapi import builders as b
from tests.realcluster import api_made

pytestmark = pytest.mark.prometheus

END = 1_700_000_000.0
RS = "shop-7d9c2"
Loads = dict[str, tuple[str, float, int]]  # pod -> (node, cores, working-set bytes)
LNU = "{kind: LowNodeUtilization, thresholds: {cpu: 30, memory: 40}, targetThresholds: {cpu: 70, memory: 80}}"


def plan(
    plane: ControlPlane,
    kubeconfig: Path,
    start: StartPrometheus,
    tmp: Path,
    loads: Loads,
    system: dict[str, tuple[float, int]],
    queries: str = "",
    strategy: str = LNU,
) -> app.PlanOutcome:
    """The cluster and its history (``system``: each node's daemons, cores and bytes), then a plan
    (``queries``: the policy's prometheus.queries, in YAML flow style; ``strategy``: its one strategy)."""
    policy = cluster(plane, start, tmp, loads, system, queries, strategy)
    runtime = app.connect_runtime(load_policy(policy), app.ClusterConnection(str(kubeconfig)), clock=lambda: END)
    return app.plan_live(runtime)


def planned(
    plane: ControlPlane,
    kubeconfig: Path,
    start: StartPrometheus,
    tmp: Path,
    loads: Loads,
    system: dict[str, tuple[float, int]],
) -> EvictionPlan:
    outcome = plan(plane, kubeconfig, start, tmp, loads, system)
    assert outcome.plan.blocked is None
    return outcome.plan


def cluster(
    plane: ControlPlane,
    start: StartPrometheus,
    tmp: Path,
    loads: Loads,
    system: dict[str, tuple[float, int]],
    queries: str = "",
    strategy: str = LNU,
) -> Path:
    """The cluster and its history in the API server and a real Prometheus; the policy's path."""
    for name in system:
        api_made.add(plane, b.node(name, cpu="4", memory="16Gi"))
    api_made.add(plane, b.deployment("shop", "shop", replicas=len(loads)), b.replica_set(RS, "shop", deployment="shop"))
    for pod, (node, _, _) in loads.items():
        api_made.add(
            plane,
            b.pod(pod, namespace="shop", node=node, owners=[b.owner("ReplicaSet", RS)], labels={"app": "shop"},
                  containers=[b.container(cpu="200m", memory="256Mi")])
        )  # fmt: skip
    history = CadvisorHistory(
        nodes=tuple(NodeSpec(n, cores) for n, (cores, _) in system.items()),
        pods=tuple(PodSpec("shop", p, node, (Container("app", constant(c)),)) for p, (node, c, _) in loads.items()),
        start=END - 3600,
        end=END,
    )
    pod_bytes = {("shop", p): memory for p, (_, _, memory) in loads.items()}
    prometheus = start([*history.series(), *memory_series(history, pod_bytes, {n: m for n, (_, m) in system.items()})])
    policy = tmp / "policy.yaml"
    policy.write_text(
        f"prometheus: {{url: '{prometheus.url}', maxDataAge: 10m{', queries: ' + queries if queries else ''}}}\n"
        f"strategies:\n- {strategy}\nstate: {{namespace: rebalancer}}\n"
    )
    return policy


# mem-1: 1.0 core (25%, CPU-cold) but 4.5 + 8 + 1 + 0.5 GiB = 14 GiB (87.5%): 1.2 GiB over its 12.8 GiB
# target, which cache-0 (8 GiB) alone covers; the cold nodes then hold 9.5 GiB (59%)
MEMORY_HOT: Loads = {
    "cache-0": ("mem-1", 0.2, 8 * GiB),
    "api-0": ("mem-1", 0.3, GiB),
    "web-0": ("mem-1", 0.2, GiB // 2),
    "web-1": ("cold-1", 0.1, GiB // 2),
    "web-2": ("cold-2", 0.1, GiB // 2),
}
MEMORY_HOT_SYSTEM = {"mem-1": (0.3, 4 * GiB + GiB // 2), "cold-1": (0.3, GiB), "cold-2": (0.3, GiB)}


def test_a_memory_hot_node_with_cool_cpu_sheds_its_memory_heavy_pod(
    api_cluster: ControlPlane, api_kubeconfig: Path, start_prometheus: StartPrometheus, tmp_path: Path
) -> None:
    found = planned(api_cluster, api_kubeconfig, start_prometheus, tmp_path, MEMORY_HOT, MEMORY_HOT_SYSTEM)

    result = found.results[0]
    by_node = {d.node: d for d in result.node_decisions}
    assert {n: d.node_class for n, d in by_node.items()} == {
        "mem-1": NodeClass.HOT,
        "cold-1": NodeClass.COLD,
        "cold-2": NodeClass.COLD,
    }
    assert by_node["mem-1"].usage_pct is not None and by_node["mem-1"].usage_pct < 30  # CPU cool
    assert "memory 87.5% > target 80.0%" in by_node["mem-1"].reason
    assert [(e.name, e.node) for e in found.evictions] == [("cache-0", "mem-1")]
    assert found.evictions[0].room_on in {"cold-1", "cold-2"}
    assert found.evictions[0].reason.startswith("node mem-1 hot (memory 87.5% > 80.0%): memory 8.00 GiB covers")
    chosen = next(d for d in result.pod_decisions if d.name == "cache-0")
    assert "memory 8.00 GiB covers the remaining 1.20 GiB above target" in chosen.reason


def test_a_cpu_move_that_would_push_a_destination_over_its_memory_target_is_refused(
    api_cluster: ControlPlane, api_kubeconfig: Path, start_prometheus: StartPrometheus, tmp_path: Path
) -> None:
    # cpu-1: 1.8 cores of daemons + 1.2 = 3.0 cores (75%), 0.2 core over target, 8 GiB (50%); big-0 covers the
    # CPU but holds 7 GiB: a cold node's 6 GiB would become 13 GiB (81.25%) > 80%
    loads = {
        "big-0": ("cpu-1", 1.2, 7 * GiB),
        "web-1": ("cold-1", 0.1, GiB),
        "web-2": ("cold-2", 0.1, GiB),
    }
    five = 5 * GiB - 2 * 600 * 1024  # with their pods and pause containers: 6 GiB each
    system = {"cpu-1": (1.8, GiB), "cold-1": (0.3, five), "cold-2": (0.3, five)}

    found = planned(api_cluster, api_kubeconfig, start_prometheus, tmp_path, loads, system)

    result = found.results[0]
    assert {d.node: d.node_class for d in result.node_decisions}["cpu-1"] is NodeClass.HOT
    assert found.evictions == ()
    reasons = {d.name: d.reason for d in result.pod_decisions}
    assert reasons["big-0"].startswith("no destination keeps every resource under target: the move would put cold-")
    assert "'s memory at 81.2% > target 80.0% (13.00 GiB of 16.00 GiB)" in reasons["big-0"]


def test_only_the_pods_of_the_nodes_to_relieve_have_their_memory_read(
    api_cluster: ControlPlane, api_kubeconfig: Path, start_prometheus: StartPrometheus, tmp_path: Path
) -> None:
    outcome = plan(api_cluster, api_kubeconfig, start_prometheus, tmp_path, MEMORY_HOT, MEMORY_HOT_SYSTEM)
    assert [(e.name, e.node) for e in outcome.plan.evictions] == [("cache-0", "mem-1")]
    on_hot_node = {("shop", p): memory for p, (node, _, memory) in MEMORY_HOT.items() if node == "mem-1"}
    assert dict(outcome.snapshot.pod_memory) == on_hot_node
    assert {n: outcome.snapshot.load[n].memory_usage is not None for n in MEMORY_HOT_SYSTEM} == dict.fromkeys(
        MEMORY_HOT_SYSTEM, True
    )  # the destinations are weighed by their own node reading


def test_a_failed_pod_memory_read_blocks_the_cycle_with_its_cause(
    api_cluster: ControlPlane, api_kubeconfig: Path, start_prometheus: StartPrometheus, tmp_path: Path
) -> None:
    broken = (
        "{podMemory: 'sum by (namespace, pod) (container_memory_working_set_bytes{{container!=\"\"{pod_filter}}}) +'}"
    )

    outcome = plan(api_cluster, api_kubeconfig, start_prometheus, tmp_path, MEMORY_HOT, MEMORY_HOT_SYSTEM, broken)

    assert outcome.plan.blocked is not None
    assert "MetricsUnavailable: query pod_memory" in outcome.plan.blocked
    assert outcome.plan.evictions == ()
    decisions = {d.node: d.node_class for d in outcome.plan.results[0].node_decisions}
    assert decisions["mem-1"] is NodeClass.HOT  # the classes still say what was found


def test_a_memory_relief_is_followed_up_on_memory_not_on_cpu(
    api_cluster: ControlPlane, api_kubeconfig: Path, start_prometheus: StartPrometheus, tmp_path: Path
) -> None:
    # cache-0 is evicted 20 minutes before the history ends, but its working set stays in the history: at the
    # follow-up's close mem-1 still holds 87.5% of its memory while its CPU (25%) is far under target
    policy = load_policy(cluster(api_cluster, start_prometheus, tmp_path, MEMORY_HOT, MEMORY_HOT_SYSTEM))
    connection = app.ClusterConnection(str(api_kubeconfig))
    first = app.run_once(policy, connection, clock=lambda: END - 1200)
    assert first.report is not None and [r.eviction.name for r in first.report.results] == ["cache-0"]

    (relief,) = records(api_cluster).reliefs
    assert relief.judged_on == (("memory", 80.0),) and round(relief.others[0].pct or 0, 1) == 87.5
    assert relief.remaining_memory is not None and len(relief.remaining_memory) == 2

    app.run_once(policy, connection, clock=lambda: END)  # the window closed at END - 300, judged on that reading
    judged = next(r for r in records(api_cluster).reliefs if r.at == END - 1200)
    assert judged.result == TOO_LITTLE_MOVED and judged.judged_at == relief.deadline
    assert judged.detail.startswith("memory 87.5% >= target 80.0%: no pod came")
    assert judged.usage_pct_after is not None and judged.usage_pct_after < 30  # CPU alone would have cooled


def test_a_memory_relief_is_not_made_again_while_the_reading_still_holds_the_evicted_pod(
    api_cluster: ControlPlane, api_kubeconfig: Path, start_prometheus: StartPrometheus, tmp_path: Path
) -> None:
    # 86 s after cache-0 left, Prometheus still reads mem-1 at 87.5%: its window holds the minutes before. The
    # pods left on mem-1 are of cache-0's workload and newer than its eviction (the server stamped them now, the
    # runs' clock is the history's end):
    # with the bounce-back guard and placement prediction off, only the in-flight correction keeps them in place
    path = cluster(api_cluster, start_prometheus, tmp_path, MEMORY_HOT, MEMORY_HOT_SYSTEM)
    text = path.read_text().replace("memory: 80}}", "memory: 80}, predictPlacement: false}")
    path.write_text(text + "efficiency: {bounceBackGuard: false}\n")
    policy = load_policy(path)
    connection = app.ClusterConnection(str(api_kubeconfig))
    first = app.run_once(policy, connection, clock=lambda: END)
    assert [r.eviction.name for r in first.report.results] == ["cache-0"]
    (relief,) = records(api_cluster).reliefs
    assert [p.memory for p in relief.evicted] == [8 * GiB] and round((relief.measured_memory or 0) / GiB) == 14

    second = app.run_once(policy, connection, clock=lambda: END + 86)

    assert second.report.results == ()
    (correction,) = second.planned.plan.in_flight
    assert correction.node == "mem-1" and correction.memory is not None
    assert correction.memory.measured == relief.measured_memory  # the reading has not moved yet
    assert correction.memory.corrected == correction.memory.measured - 8 * GiB
    assert "memory: 8.00 GiB moved, reads 87.5%, expected 37.5% until the usage window has caught up" in (
        correction.note
    )
    decisions = {d.node: d.node_class for d in second.planned.plan.results[0].node_decisions}
    assert decisions["mem-1"] is not NodeClass.HOT
    assert len(records(api_cluster).reliefs) == 1


def records(plane: ControlPlane) -> EfficiencyState:
    config_map = plane.admin.get("/api/v1/namespaces/rebalancer/configmaps/rebalancer-efficiency")
    return EfficiencyState.from_json(config_map["data"][RECORDS_KEY], END)
