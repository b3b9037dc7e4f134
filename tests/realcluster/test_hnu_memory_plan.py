"""HighNodeUtilization on memory end to end: the real kubernetes client against a real API
server (the cluster made through it by api_made.py), a real
Prometheus holding cAdvisor-shaped CPU and memory working-set history, the production planner.

Nodes of 4 cores and 16 GiB; thresholds {cpu: 20, memory: 20}, targetThresholds {cpu: 70, memory: 80}: a
node is underutilized below 0.8 core and 3.2 GiB, and a destination must stay under 2.8 cores and 12.8 GiB
with the whole group added."""

from __future__ import annotations

from pathlib import Path

import pytest

from rebalancer.planning.plan import NodeClass
from tests.adapters.cadvisor_memory import GiB
from tests.adapters.prom_fixture import StartPrometheus
from tests.controlplane import ControlPlane
from tests.realcluster.test_memory_plan import Loads, plan

pytestmark = pytest.mark.prometheus

HNU = (
    "{kind: HighNodeUtilization, thresholds: {cpu: 20, memory: 20}, targetThresholds: {cpu: 70, memory: 80}, "
    "predictPlacement: false}"
)
IDLE = {"batch-0": ("idle", 0.1, GiB), "batch-1": ("idle", 0.05, GiB // 2)}


def test_a_node_cool_on_cpu_is_emptied_only_when_its_memory_is_under_threshold_too(
    api_cluster: ControlPlane, api_kubeconfig: Path, start_prometheus: StartPrometheus, tmp_path: Path
) -> None:
    # idle: 0.45 core (11%), 2 GiB (12.5%); cache: 0.4 core (10%) but 8 GiB (50%); dest: 2 cores, 5.5 GiB
    loads: Loads = {**IDLE, "cache-0": ("cache", 0.1, GiB), "app-0": ("dest", 1.0, GiB + GiB // 2)}
    system = {"idle": (0.3, GiB // 2), "cache": (0.3, 7 * GiB), "dest": (1.0, 4 * GiB)}

    outcome = plan(api_cluster, api_kubeconfig, start_prometheus, tmp_path, loads, system, strategy=HNU)

    assert outcome.plan.blocked is None
    result = outcome.plan.results[0]
    by_node = {d.node: d for d in result.node_decisions}
    assert {n: d.node_class for n, d in by_node.items()} == {
        "idle": NodeClass.COLD,
        "cache": NodeClass.NORMAL,
        "dest": NodeClass.NORMAL,
    }
    assert by_node["cache"].usage_pct is not None and by_node["cache"].usage_pct < 20  # CPU alone: underutilized
    assert "memory 50.0% within [20.0%, 80.0%]" in by_node["cache"].reason
    assert sorted(e.name for e in outcome.plan.evictions) == ["batch-0", "batch-1"]
    assert {e.node for e in outcome.plan.evictions} == {"idle"}
    assert {e.room_on for e in outcome.plan.evictions} <= {"cache", "dest"}
    assert "memory 12.5% < 20.0%" in outcome.plan.evictions[0].reason
    # only the pods of the node to empty have their memory read: destinations by their own node reading
    assert set(outcome.snapshot.pod_memory) == {("shop", "batch-0"), ("shop", "batch-1")}


def test_a_group_that_would_push_its_destination_over_the_memory_target_stays_with_that_reason(
    api_cluster: ControlPlane, api_kubeconfig: Path, start_prometheus: StartPrometheus, tmp_path: Path
) -> None:
    # dest: 2 cores (50%, CPU room for the group) but 11.5 GiB (72%): the group's 2 GiB make 13.5 GiB (84.4%)
    loads: Loads = {"batch-0": ("idle", 0.1, 2 * GiB), "app-0": ("dest", 1.0, GiB + GiB // 2)}
    system = {"idle": (0.3, GiB // 2), "dest": (1.0, 10 * GiB)}

    outcome = plan(api_cluster, api_kubeconfig, start_prometheus, tmp_path, loads, system, strategy=HNU)

    assert outcome.plan.blocked is None
    result = outcome.plan.results[0]
    assert {d.node: d.node_class for d in result.node_decisions} == {"idle": NodeClass.COLD, "dest": NodeClass.NORMAL}
    assert outcome.plan.evictions == ()
    (record,) = [d for d in result.pod_decisions if d.name == "batch-0"]
    assert record.reason.startswith("node cannot be emptied: shop/batch-0 has nowhere to go (no destination keeps")
    assert "would put dest's memory at 84.4% > target 80.0% (13.50 GiB of 16.00 GiB)" in record.reason
