"""One small cluster shared by the end-to-end tests: the same nodes and pods in the test API server and,
as cAdvisor-shaped history, in a real Prometheus."""

from __future__ import annotations

from pathlib import Path

from tests.adapters.cadvisor import CadvisorHistory, Container, NodeSpec, PodSpec, constant
from tests.kubeapi import TestApiServer
from tests.kubeapi import builders as b

END = 1_700_000_000.0
NODES = ("hot-1", "cold-1", "cold-2")
RS = "shop-5f7d8"
# hot-1 (4 cores): 0.3 system + 1.2 + 0.9 + 0.6 + 0.5 (+ pause) = 3.5 cores, 87%; the cold nodes idle at ~10%
LOADS = {
    ("shop", "api-0"): ("hot-1", 1.2),
    ("shop", "api-1"): ("hot-1", 0.9),
    ("shop", "web-0"): ("hot-1", 0.6),
    ("monitoring", "exporter-hot-1"): ("hot-1", 0.5),
    ("shop", "web-1"): ("cold-1", 0.1),
    ("shop", "web-2"): ("cold-2", 0.1),
}
HISTORY = CadvisorHistory(
    nodes=tuple(NodeSpec(n, 0.3) for n in NODES),
    pods=tuple(
        PodSpec(ns, name, node, (Container("app", constant(cores)),)) for (ns, name), (node, cores) in LOADS.items()
    ),
    start=END - 3600,
    end=END,
)


def build_cluster(server: TestApiServer) -> None:
    for name in NODES:
        server.add(b.node(name, cpu="4", memory="16Gi"))
    server.add(b.deployment("shop", "shop", replicas=5), b.replica_set(RS, "shop", deployment="shop", replicas=5))
    for (namespace, name), (node, _) in LOADS.items():
        owners = [b.owner("DaemonSet", "exporter")] if namespace == "monitoring" else [b.owner("ReplicaSet", RS)]
        labels = {"app": "exporter"} if namespace == "monitoring" else {"app": "shop"}
        server.add(
            b.pod(name, namespace=namespace, node=node, owners=owners, labels=labels,
                  containers=[b.container(cpu="200m", memory="256Mi")])
        )  # fmt: skip
    server.disruption.sync_all()


def write_policy(path: Path, prometheus_url: str, *, target: int = 70, extra: str = "") -> Path:
    path.write_text(
        f"prometheus: {{url: '{prometheus_url}', maxDataAge: 10m}}\n"
        "protections: {evictableNamespaces: {exclude: [kube-system, monitoring]}}\n"
        f"strategies:\n- {{kind: LowNodeUtilization, thresholds: {{cpu: 30}}, targetThresholds: {{cpu: {target}}}}}\n"
        "state: {namespace: rebalancer}\n" + extra
    )
    return path


def live_pods(server: TestApiServer, namespace: str = "shop") -> set[str]:
    return {p["metadata"]["name"] for p in server.store.objects("pods", namespace)}
