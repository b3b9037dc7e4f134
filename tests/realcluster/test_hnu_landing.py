"""HighNodeUtilization's predicted landings end to end: `plan` and `run --once` with the real clients
against a real API server (the cluster made through it by api_made.py) and a real Prometheus with
cAdvisor-shaped history; the evictions read from its audit log.

idle (4 cores) runs two llm-router pods and one feature-cache pod at about 11%; busy-1..3 run two pods
each at about 57%. idle's pods request 200m, the busy nodes' 400m, so idle stays the least requested node
while its evicted group terminates (their requests still count there): the replacements would land back,
and the node is passed over. With the cluster autoscaler's soft taint on
idle they land on the busy nodes, one after another, and the node is emptied.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from rebalancer.actions.evictor import DryRun, Outcome
from rebalancer.app import root as app
from rebalancer.app.render import plan_table
from rebalancer.policy import load_policy
from tests.adapters.cadvisor import CadvisorHistory, Container, NodeSpec, PodSpec, constant
from tests.adapters.prom_fixture import PrometheusServer, StartPrometheus
from tests.controlplane import ControlPlane
from tests.kubeapi import builders as b
from tests.realcluster import api_made

END = 1_700_000_000.0
NODES = ("idle", "busy-1", "busy-2", "busy-3")
GROUP = {"llm-router-0", "llm-router-1", "feature-cache-0"}
LOADS = {  # pod -> (node, workload, cores)
    "llm-router-0": ("idle", "llm-router", 0.06),
    "llm-router-1": ("idle", "llm-router", 0.06),
    "feature-cache-0": ("idle", "feature-cache", 0.03),
    **{f"{n}-w{i}": (n, f"{n}-w{i}", 1.0) for n in NODES[1:] for i in range(2)},
}
HISTORY = CadvisorHistory(
    nodes=tuple(NodeSpec(n, 0.3) for n in NODES),
    pods=tuple(
        PodSpec("ml", name, node, (Container("app", constant(cores)),)) for name, (node, _, cores) in LOADS.items()
    ),
    start=END - 3600,
    end=END,
)
SCALE_DOWN_CANDIDATE = b.taint("DeletionCandidateOfClusterAutoscaler", "PreferNoSchedule", "1699999000")


@pytest.fixture(scope="module")
def prometheus(start_prometheus: StartPrometheus) -> PrometheusServer:
    return start_prometheus(HISTORY.series())


def build(plane: ControlPlane, *, idle_taints: list[dict[str, str]]) -> None:
    for name in NODES:
        api_made.add(plane, b.node(name, cpu="4", memory="16Gi", taints=idle_taints if name == "idle" else ()))
    replicas = Counter(w for _, w, _ in LOADS.values())
    for workload, count in sorted(replicas.items()):
        api_made.add(
            plane,
            b.deployment(workload, "ml", replicas=count),
            b.replica_set(f"{workload}-rs", "ml", deployment=workload, replicas=count),
        )
    for name, (node, workload, _) in LOADS.items():
        api_made.add(
            plane,
            b.pod(name, namespace="ml", node=node, owners=[b.owner("ReplicaSet", f"{workload}-rs")],
                  labels={"app": workload},
                  containers=[b.container(cpu="200m" if node == "idle" else "400m", memory="256Mi")])
        )  # fmt: skip


def write_policy(path: Path, prometheus_url: str) -> Path:
    path.write_text(
        f"prometheus: {{url: '{prometheus_url}', maxDataAge: 10m}}\n"
        "strategies:\n- {kind: HighNodeUtilization, thresholds: {cpu: 20}, targetThresholds: {cpu: 70}}\n"
        "state: {namespace: rebalancer}\n"
    )
    return path


def test_a_group_that_would_land_back_is_passed_over_and_nothing_is_evicted(
    api_cluster: ControlPlane, api_kubeconfig: Path, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    build(api_cluster, idle_taints=[])
    policy = load_policy(write_policy(tmp_path / "policy.yaml", prometheus.url))

    planned = app.plan_live(app.connect_runtime(policy, app.ClusterConnection(str(api_kubeconfig)), clock=lambda: END))

    assert planned.plan.evictions == ()
    records = {d.name: d for d in planned.plan.results[0].pod_decisions if d.node == "idle"}
    assert set(records) == GROUP and not any(d.chosen for d in records.values())
    first = records["llm-router-0"]
    assert first.reason.startswith("node cannot be emptied: ml/llm-router-0 replacement: predicted landing risk 100%")
    assert "back on idle 100%" in first.reason and first.lands_back
    table = plan_table(planned.plan, planned.source)
    assert "back on idle" in table and "predictPlacement: false" in table

    ran = app.run_once(policy, app.ClusterConnection(str(api_kubeconfig)), DryRun.OFF, clock=lambda: END)
    assert ran.report.results == ()
    assert api_made.evictions(api_cluster) == []


def test_a_group_predicted_to_leave_is_emptied_with_each_replacements_landing(
    api_cluster: ControlPlane, api_kubeconfig: Path, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    build(api_cluster, idle_taints=[SCALE_DOWN_CANDIDATE])
    policy = load_policy(write_policy(tmp_path / "policy.yaml", prometheus.url))

    planned = app.plan_live(app.connect_runtime(policy, app.ClusterConnection(str(api_kubeconfig)), clock=lambda: END))

    landed = {e.name: e.landing for e in planned.plan.evictions}
    assert set(landed) == GROUP
    # placed one after another: each replacement lands on a different busy node
    assert sorted(landed.values()) == ["busy-1", "busy-2", "busy-3"]
    assert all(e.room_on == e.landing and "predicted to land on" in e.reason for e in planned.plan.evictions)
    table = plan_table(planned.plan, planned.source)
    assert "PREDICTED LANDING" in table
    assert all(f"ml/{name}" in table for name in GROUP)

    ran = app.run_once(policy, app.ClusterConnection(str(api_kubeconfig)), DryRun.OFF, clock=lambda: END)
    assert {r.eviction.name: r.outcome for r in ran.report.results} == dict.fromkeys(GROUP, Outcome.EVICTED)
    assert {e.name for e in api_made.evictions(api_cluster)} == GROUP
    assert all(
        (e.body or {})["metadata"]["annotations"]["rebalancer.io/strategy"] == "HighNodeUtilization"
        for e in api_made.evictions(api_cluster)
    )
