"""`explain-scale-down` against the Python test API server and a real Prometheus: the ReplicaSet controller's
order now and after steering. It stays on the Python server because the order turns on creation times the
test chooses (four pods created in one second two hours ago, the rest 13 days ago: a tie, then an older log2
bucket), and a real API server stamps creationTimestamp itself. The scale-down itself, by the real ReplicaSet
controller after one `run --once`, is tested on the real control plane (tests/realcluster/test_deletion_cost.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rebalancer.app import root as app
from rebalancer.app.cli import main
from rebalancer.app.explain import explanation_record
from rebalancer.policy import load_policy
from tests.adapters.cadvisor import CadvisorHistory, Container, NodeSpec, PodSpec, constant
from tests.adapters.prom_fixture import PrometheusServer, StartPrometheus
from tests.kubeapi import TestApiServer
from tests.kubeapi import builders as b

END = 1_700_000_000.0  # 2023-11-14T22:13:20Z
RS = "api-7d9f8"
OLD, NEW = "2023-11-01T08:00:00Z", "2023-11-14T20:00:00Z"  # 13 days and 2 hours before END
# payg is the pay-as-you-go pool to give back first; payg-hot runs at 0.3 + 2 x 1.6 = 3.5 of 4 cores
PODS = {
    "api-hot-a": ("payg-hot", 1.6, OLD),
    "api-hot-b": ("payg-hot", 1.6, OLD),
    "api-cool-a": ("payg-cool", 0.2, OLD),
    "api-cool-b": ("payg-cool", 0.2, OLD),
    "api-res1-a": ("reserved-1", 0.4, NEW),
    "api-res1-b": ("reserved-1", 0.4, NEW),
    "api-res2-a": ("reserved-2", 0.4, NEW),
    "api-res2-b": ("reserved-2", 0.4, NEW),
}
POOLS = {"payg-hot": "payg", "payg-cool": "payg", "reserved-1": "reserved", "reserved-2": "reserved"}
HISTORY = CadvisorHistory(
    nodes=tuple(NodeSpec(n, 0.3) for n in POOLS),
    pods=tuple(
        PodSpec("shop", name, node, (Container("app", constant(cores)),)) for name, (node, cores, _) in PODS.items()
    ),
    start=END - 3600,
    end=END,
)
POLICY = """prometheus: {{url: '{url}', maxDataAge: 10m}}
pools: {{label: pool}}
strategies:
- kind: DeletionCostSteering
  namespaces: {{include: [shop]}}
  poolCosts: {{payg: 0, reserved: 100000}}
  utilizationWeight: 10
state: {{namespace: rebalancer}}
"""


@pytest.fixture(scope="module")
def prometheus(start_prometheus: StartPrometheus) -> PrometheusServer:
    return start_prometheus(HISTORY.series())


def build(server: TestApiServer) -> None:
    for name, pool in POOLS.items():
        server.add(b.node(name, cpu="4", memory="16Gi", labels={"pool": pool}))
    server.add(b.deployment("api", "shop", replicas=8), b.replica_set(RS, "shop", deployment="api", replicas=8))
    for name, (node, _, created) in PODS.items():
        server.add(b.pod(name, namespace="shop", node=node, owners=[b.owner("ReplicaSet", RS)], labels={"app": "api"},
                         created=created, containers=[b.container(cpu="200m", memory="256Mi")]))  # fmt: skip


def test_explain_scale_down_now_and_after_steering(
    kube_server: TestApiServer,
    kubeconfig: Path,
    prometheus: PrometheusServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    build(kube_server)
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(POLICY.format(url=prometheus.url))
    explained = app.explain_scale_down(
        load_policy(policy_file), app.ClusterConnection(str(kubeconfig)), "shop/api", 2, lambda: END
    )
    record = explanation_record(explained)
    now = [r for r in record["now"] if r["deleted"]]
    after = [r for r in record["afterSteering"] if r["deleted"]]
    assert {r["pool"] for r in now} == {"reserved"}
    # the four reserved pods were created in the same second (equal on every rule: the controller's order
    # among them is undefined), 2 h ago; the others 13 days ago (an older log2 bucket: after them)
    assert [r["rule"] for r in record["now"][:4]] == ["TIE"] * 3 + ["CREATED"]
    assert {r["pod"] for r in after} == {"api-hot-a", "api-hot-b"}
    assert after[1]["rule"] == "DELETION_COST" and after[1]["reason"].startswith("before api-cool-")
    assert record["afterSteeringNote"] == "8 pod(s) of the namespace get a new cost"
    assert kube_server.store.get("pods", "api-hot-a", "shop")["metadata"].get("annotations") is None  # explains only

    code = main(["explain-scale-down", "shop/deployment/api", "2", "--kubeconfig", str(kubeconfig)])
    text = capsys.readouterr().out
    assert code == 0
    assert "Scale-down of Deployment/shop/api by 2" in text and "after steering: not shown (no --policy given)" in text
    assert main(["explain-scale-down", "shop/statefulset/db", "1", "--kubeconfig", str(kubeconfig)]) == 2
    assert "WORKLOAD: 'shop/statefulset/db': expected NAMESPACE/NAME" in capsys.readouterr().err
