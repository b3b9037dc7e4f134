"""The landing guard against the real kube-scheduler. On this cluster the relieved node holds the fewest
requests, so the scheduler would put a replacement right back on it: without the guard the plan sees that and
evicts nothing; with the guard it marks the node (a PreferNoSchedule taint), and the real scheduler, honouring
the taint, places the replacement on a cold node, as the plan predicted."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from rebalancer.actions.evictor import DryRun, Outcome
from rebalancer.app import root as app
from rebalancer.domain.guard_marks import GUARD_KEY
from rebalancer.policy import load_policy
from tests.adapters.cadvisor import CadvisorHistory, Container, NodeSpec, PodSpec, constant
from tests.adapters.prom_fixture import PrometheusServer, StartPrometheus
from tests.controlplane import ControlPlane
from tests.realcluster import objects as o
from tests.realcluster.scenario import cordon, running, wait_running, write_policy

NAMESPACE = "shop"
NODES = ("hot-1", "cold-1", "cold-2")
GUARD = "landingGuard: {pools: [{pool: default, maxMarkedFraction: 0.5}]}\n"


def usage(workload: str, node: str) -> float:
    """hot-1 runs at 85 %: its api pod at 0.45 cores, an agent that is never evicted at 0.35; the rest idles."""
    return {("api", "hot-1"): 0.45, ("agent", "hot-1"): 0.35}.get((workload, node), 0.05)


@pytest.fixture
def placed(cluster: ControlPlane) -> dict[str, tuple[str, str]]:
    """One api pod (100m) a node, an agent (50m) on hot-1, a web pod (400m) on each cold node: after the eviction
    hot-1 is the least requested node and the only one without an api pod, so the scheduler would put the
    replacement back there."""
    cluster.hollow_nodes(NODES)
    cluster.namespace(NAMESPACE)
    cluster.namespace("rebalancer")
    path = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/api"
    for node in NODES:
        cordon(cluster, node, True)
    for i, node in enumerate(NODES):
        cordon(cluster, node, False)
        if i == 0:
            cluster.admin.create(o.deployment("api", NAMESPACE, replicas=1, cpu="100m"))
        else:
            cluster.admin.patch(path, {"spec": {"replicas": i + 1}})
        wait_running(cluster, i + 1)
        cordon(cluster, node, True)
    cluster.namespace("monitoring")  # excluded from eviction by the policy
    cordon(cluster, "hot-1", False)
    cluster.admin.create(o.deployment("agent", "monitoring", replicas=1, cpu="50m"))
    agent = wait_running(cluster, 1, "monitoring")
    cordon(cluster, "hot-1", True)
    for node in NODES[1:]:
        cordon(cluster, node, False)
    cluster.admin.create(o.deployment("web", NAMESPACE, replicas=2, cpu="400m"))
    pods = {**wait_running(cluster, 5), **agent}
    cordon(cluster, "hot-1", False)
    return {n: (p["metadata"]["labels"]["app"], p["spec"]["nodeName"]) for n, p in pods.items()}


@pytest.fixture
def prometheus(placed: dict[str, tuple[str, str]], start_prometheus: StartPrometheus) -> PrometheusServer:
    end = float(int(time.time()))
    history = CadvisorHistory(
        nodes=tuple(NodeSpec(n, 0.05) for n in NODES),
        pods=tuple(
            PodSpec("monitoring" if w == "agent" else NAMESPACE, p, n, (Container("app", constant(usage(w, n))),))
            for p, (w, n) in placed.items()
        ),
        start=end - 3600,
        end=end,
    )
    return start_prometheus(history.series())


def run(plane: ControlPlane, policy: Path) -> app.RunOutcome:
    kubeconfig = plane.user_kubeconfig(policy.parent / "kubeconfig")
    return app.run_once(load_policy(policy), app.ClusterConnection(str(kubeconfig)), DryRun.OFF, clock=time.time)


def test_without_the_guard_a_replacement_would_land_back_and_nothing_is_evicted(
    cluster: ControlPlane, placed: dict[str, tuple[str, str]], prometheus: PrometheusServer, tmp_path: Path
) -> None:
    result = run(cluster, write_policy(tmp_path / "p.yaml", prometheus.url))
    assert result.planned.plan.evictions == ()
    assert result.report.results == ()
    assert set(running(cluster)) | set(running(cluster, "monitoring")) == set(placed)


def test_with_the_guard_the_real_scheduler_places_the_replacement_on_a_cold_node(
    cluster: ControlPlane, placed: dict[str, tuple[str, str]], prometheus: PrometheusServer, tmp_path: Path
) -> None:
    result = run(cluster, write_policy(tmp_path / "p.yaml", prometheus.url, extra=GUARD))

    evicted = [r.eviction for r in result.report.results if r.outcome is Outcome.EVICTED]
    assert evicted and {e.node for e in evicted} == {"hot-1"}
    assert all(e.landing in {"cold-1", "cold-2"} for e in evicted), [e.reason for e in evicted]
    node = cluster.admin.get("/api/v1/nodes/hot-1")
    assert GUARD_KEY in {t["key"] for t in node["spec"].get("taints", ())}
    replacements = cluster.admin.wait_for(
        "the replacements running",
        lambda: (
            (new := {n: p["spec"]["nodeName"] for n, p in running(cluster).items() if n not in placed})
            and len(new) == len(evicted)
            and new
        ),
    )
    assert set(replacements.values()) <= {"cold-1", "cold-2"}, replacements
