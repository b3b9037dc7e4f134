"""Deletion-cost steering with the real ReplicaSet controller: after one `run --once`, scaling the Deployment
down removes the pods of the hot node and of the costly pool first, and evicts nothing."""

from __future__ import annotations

import time
from pathlib import Path

from rebalancer.actions.evictor import DryRun
from rebalancer.actions.steerer import SteerOutcome
from rebalancer.app import root as app
from rebalancer.policy import load_policy
from tests.adapters.cadvisor import CadvisorHistory, Container, NodeSpec, PodSpec, constant
from tests.adapters.prom_fixture import StartPrometheus
from tests.controlplane import ControlPlane
from tests.realcluster import objects as o
from tests.realcluster.scenario import cordon, running, wait_running
from tests.service.test_deletion_cost_scenario import POLICY

NAMESPACE = "shop"
POOLS = {"payg-hot": "payg", "payg-cool": "payg", "reserved-1": "reserved", "reserved-2": "reserved"}
CORES = {"payg-hot": 0.4, "payg-cool": 0.05, "reserved-1": 0.1, "reserved-2": 0.1}  # per pod, two pods a node
COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"


def place_two_per_node(plane: ControlPlane) -> dict[str, str]:
    """The Deployment ``api`` scaled up two replicas at a time with one node schedulable: pod -> node."""
    nodes = list(POOLS)
    for node in nodes:
        cordon(plane, node, True)
    path = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/api"
    for i, node in enumerate(nodes):
        cordon(plane, node, False)
        if i == 0:
            plane.admin.create(o.deployment("api", NAMESPACE, replicas=2, cpu="200m"))
        else:
            plane.admin.patch(path, {"spec": {"replicas": 2 * (i + 1)}})
        wait_running(plane, 2 * (i + 1))
        cordon(plane, node, True)
    for node in nodes:
        cordon(plane, node, False)
    return {name: p["spec"]["nodeName"] for name, p in running(plane).items()}


def scale_to(plane: ControlPlane, replicas: int) -> set[str]:
    plane.admin.patch(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/api", {"spec": {"replicas": replicas}})
    return set(wait_running(plane, replicas))


def test_a_scale_down_after_steering_removes_the_hot_node_and_the_costly_pool_first(
    cluster: ControlPlane, start_prometheus: StartPrometheus, tmp_path: Path
) -> None:
    for node, pool in POOLS.items():
        cluster.hollow_nodes([node], labels={"pool": pool})
    cluster.namespace(NAMESPACE)
    cluster.namespace("rebalancer")
    placed = place_two_per_node(cluster)
    end = float(int(time.time()))
    history = CadvisorHistory(
        nodes=tuple(NodeSpec(n, 0.05) for n in POOLS),
        pods=tuple(PodSpec(NAMESPACE, p, n, (Container("app", constant(CORES[n])),)) for p, n in placed.items()),
        start=end - 3600,
        end=end,
    )
    prometheus = start_prometheus(history.series())
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY.format(url=prometheus.url))
    assert cluster.pki is not None
    kubeconfig = cluster.kubeconfig(tmp_path / "kubeconfig", cluster.pki.admin_token)

    outcome = app.run_once(load_policy(policy), app.ClusterConnection(str(kubeconfig)), DryRun.OFF, time.time)

    assert outcome.steering.count(SteerOutcome.PATCHED) == 8 and not outcome.report.results  # zero evictions
    costs = {n: int(p["metadata"]["annotations"][COST_ANNOTATION]) for n, p in running(cluster).items()}
    by_node = {node: {costs[p] for p, n in placed.items() if n == node} for node in POOLS}
    assert max(by_node["payg-hot"]) < min(by_node["payg-cool"]) < min(by_node["reserved-1"] | by_node["reserved-2"])

    on = {node: {p for p, n in placed.items() if n == node} for node in POOLS}
    assert scale_to(cluster, 6) == set(placed) - on["payg-hot"]  # the real ReplicaSet controller's choice
    assert scale_to(cluster, 4) == on["reserved-1"] | on["reserved-2"]
    assert [e for e in cluster.audit("test-admin") if e.resource == "pods/eviction"] == []
