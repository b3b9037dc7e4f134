"""The landing prediction with the landing guard's cap, against the real kube-scheduler. Two nodes are hot, and
``maxMarkedFraction`` lets the guard mark one of them: the prediction weighs the marks the guard really sets,
so it sends the marked node's replacement to a cold node and sees that the unmarked hot node's replacement
would land right back there (its predecessor's spreading count gone, no mark to keep it away). The plan
evicts the first and keeps the second, and the real scheduler, given that second eviction by hand, puts the
replacement back on the unmarked node, as predicted."""

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
HOT, COLD = ("hot-1", "hot-2"), ("cold-1", "cold-2")
NODES = (*HOT, *COLD)
GUARD = "landingGuard: {pools: [{pool: default, maxMarkedFraction: 0.25}]}\n"  # 1 mark of 4 nodes


def usage(workload: str, node: str) -> float:
    """hot-1 at 90 % (its api pod 0.45 cores, an agent never evicted 0.40), hot-2 at 80 % (0.40 and 0.35)."""
    cores = {("api", "hot-1"): 0.45, ("agent", "hot-1"): 0.40, ("api", "hot-2"): 0.40, ("agent", "hot-2"): 0.35}
    return cores.get((workload, node), 0.05)


def only_on(cluster: ControlPlane, node: str) -> None:
    """Every node but ``node`` cordoned: what is created now is placed there."""
    for other in NODES:
        cordon(cluster, other, other != node)


@pytest.fixture
def placed(cluster: ControlPlane) -> dict[str, tuple[str, str]]:
    """One api pod (100m) a node; an agent on each hot node, 50m on hot-1 and 300m on hot-2 (so a cold node is
    the least requested for the marked node's replacement): pod -> (workload, node)."""
    cluster.hollow_nodes(NODES)
    for namespace in (NAMESPACE, "monitoring", "rebalancer"):
        cluster.namespace(namespace)
    for i, node in enumerate(NODES):
        only_on(cluster, node)
        if i == 0:
            cluster.admin.create(o.deployment("api", NAMESPACE, replicas=1, cpu="100m"))
        else:
            cluster.admin.patch(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/api", {"spec": {"replicas": i + 1}})
        wait_running(cluster, i + 1)
    for i, (node, cpu) in enumerate((("hot-1", "50m"), ("hot-2", "300m"))):
        only_on(cluster, node)
        cluster.admin.create(o.deployment(f"agent-{i + 1}", "monitoring", replicas=1, cpu=cpu))
        wait_running(cluster, i + 1, "monitoring")
    for node in NODES:
        cordon(cluster, node, False)
    pods = {**running(cluster), **running(cluster, "monitoring")}
    return {n: (p["metadata"]["labels"]["app"].split("-")[0], p["spec"]["nodeName"]) for n, p in pods.items()}


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


def test_the_prediction_weighs_only_the_marks_the_cap_lets_the_guard_set(
    cluster: ControlPlane, placed: dict[str, tuple[str, str]], prometheus: PrometheusServer, tmp_path: Path
) -> None:
    policy = write_policy(tmp_path / "p.yaml", prometheus.url, extra=GUARD)
    kubeconfig = cluster.user_kubeconfig(tmp_path / "kubeconfig")

    result = app.run_once(load_policy(policy), app.ClusterConnection(str(kubeconfig)), DryRun.OFF, clock=time.time)

    marked = [
        n
        for n in HOT
        if GUARD_KEY in {t["key"] for t in cluster.admin.get(f"/api/v1/nodes/{n}")["spec"].get("taints", ())}
    ]
    assert len(marked) == 1, marked  # the cap: one mark in a pool of four
    unmarked = next(n for n in HOT if n not in marked)
    evicted = [r.eviction for r in result.report.results if r.outcome is Outcome.EVICTED]
    assert [e.node for e in evicted] == marked, [e.reason for e in evicted]
    assert evicted[0].landing in COLD, evicted[0].reason
    api = {name for name, (w, n) in placed.items() if w == "api" and n == unmarked}
    kept = [d for r in result.planned.plan.results for d in r.pod_decisions if d.name in api]
    assert kept and all(not d.chosen and d.lands_back for d in kept), kept
    assert all(f"back on {unmarked}" in d.reason for d in kept), [d.reason for d in kept]

    # the real scheduler: the marked node's replacement where predicted, the unmarked node's back on it
    def replacements() -> dict[str, str] | None:
        new = {n: p["spec"]["nodeName"] for n, p in running(cluster).items() if n not in placed}
        return new if len(new) == len(evicted) else None

    first = cluster.admin.wait_for("the replacement running", replacements)
    assert set(first.values()) <= set(COLD), first
    (name,) = api
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": NAMESPACE}}
    cluster.admin.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}/eviction", json=body)
    second = cluster.admin.wait_for(
        "the second replacement bound",
        lambda: next(
            (p["spec"]["nodeName"] for p in cluster.admin.items("v1", "Pod", NAMESPACE)
             if p["metadata"]["name"] not in placed and p["metadata"]["name"] not in first
             and p["spec"].get("nodeName")),
            None,
        ),
    )  # fmt: skip
    assert second == unmarked
