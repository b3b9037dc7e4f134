"""Alert cycles without the watch cache list only the alerted nodes and take every other node's pods from
the last cycle's facts. Those facts were read before that cycle's evictions: a pod it evicted must not count
as ready there, or the next alert cycle sees its workload whole and workload.maxUnavailable is exceeded.

The cluster is the Python test API server (evictions as the real server answers them, the ReplicaSet
controller's replacement added by the test), the usage a real Prometheus with a cAdvisor-shaped history.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rebalancer.actions.evictor import DryRun, Outcome
from rebalancer.adapters.kube import KubeSource, connect
from rebalancer.app.runtime import Runtime
from rebalancer.app.serve import _ClusterCache, _Cycles, _KnownNodes
from rebalancer.policy import load_policy
from rebalancer.service.runner import Trigger
from tests.adapters.cadvisor import CadvisorHistory, Container, NodeSpec, PodSpec, constant
from tests.adapters.prom_fixture import PrometheusServer, StartPrometheus
from tests.fake_clock import FakeClock
from tests.kubeapi import TestApiServer
from tests.kubeapi import builders as b

END = 1_700_000_000.0
NS, RS = "shop", "web-5f7d8"
# each hot node (4 cores): 0.3 system + 1.0 of its web pod + 1.0 of an exporter (not evictable), 57%; the
# cold nodes idle at ~10%
LOADS = {"web-0": ("hot-1", 1.0), "web-1": ("hot-2", 1.0), "web-2": ("cold-1", 0.1), "web-3": ("cold-2", 0.1)}
EXPORTERS = {"exporter-hot-1": "hot-1", "exporter-hot-2": "hot-2"}
NODES = ("hot-1", "hot-2", "cold-1", "cold-2")
HISTORY = CadvisorHistory(
    nodes=tuple(NodeSpec(n, 0.3) for n in NODES),
    pods=(
        *(PodSpec(NS, name, node, (Container("app", constant(cores)),)) for name, (node, cores) in LOADS.items()),
        *(PodSpec("monitoring", name, node, (Container("app", constant(1.0)),)) for name, node in EXPORTERS.items()),
    ),
    start=END - 3600,
    end=END,
)


@pytest.fixture(scope="module")
def prometheus(start_prometheus: StartPrometheus) -> PrometheusServer:
    return start_prometheus(HISTORY.series())


def web_pod(name: str, node: str | None, *, ready: bool = True) -> dict[str, object]:
    return b.pod(name, namespace=NS, node=node, owners=[b.owner("ReplicaSet", RS)], labels={"app": "web"},
                 containers=[b.container(cpu="200m", memory="256Mi")], ready=ready,
                 phase="Running" if node else "Pending")  # fmt: skip


def test_an_alert_cycle_counts_a_pod_the_last_cycle_evicted_elsewhere_as_unavailable(
    kube_server: TestApiServer, kubeconfig: Path, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    for name in NODES:
        kube_server.add(b.node(name, cpu="4", memory="16Gi"))
    kube_server.add(b.deployment("web", NS, replicas=4), b.replica_set(RS, NS, deployment="web", replicas=4))
    for name, (node, _) in LOADS.items():
        kube_server.add(web_pod(name, node))
    for name, node in EXPORTERS.items():
        kube_server.add(b.pod(name, namespace="monitoring", node=node, owners=[b.owner("DaemonSet", "exporter")],
                              containers=[b.container(cpu="1500m", memory="256Mi")]))  # fmt: skip
    path = tmp_path / "policy.yaml"
    path.write_text(
        f"prometheus: {{url: '{prometheus.url}', maxDataAge: 10m}}\n"
        "protections: {evictableNamespaces: {exclude: [kube-system, monitoring]}}\n"
        "strategies:\n- {kind: LowNodeUtilization, thresholds: {cpu: 30}, targetThresholds: {cpu: 50},"
        " predictPlacement: false}\n"
        "limits: {workload: {maxUnavailable: 1}}\n"
        "state: {namespace: rebalancer}\n"
        "efficiency: {enabled: false}\n"
        "service: {watchCache: {enabled: false}, alertFactsMaxAge: 10m}\n"
    )
    policy = load_policy(path)
    api = connect(kubeconfig=str(kubeconfig))
    cache = _ClusterCache(api)
    known = _KnownNodes(KubeSource(api, frozenset()), cache, FakeClock(0.0))
    cycles = _Cycles(Runtime(policy, api, lambda: END, DryRun.OFF, requester="rebalancer/test"), known, cache)
    try:
        first = cycles(policy, Trigger("alert", (0,), frozenset({"hot-1"})))
        assert first.report is not None
        assert [(r.eviction.name, r.outcome) for r in first.report.results] == [("web-0", Outcome.EVICTED)]
        kube_server.add(web_pod("web-4", None, ready=False))  # the ReplicaSet's replacement, not scheduled yet
        listed_before = len(kube_server.requests)

        second = cycles(policy, Trigger("alert", (0,), frozenset({"hot-2"})))

        pod_lists = [r.query for r in kube_server.requests[listed_before:] if r.path == "/api/v1/pods"]
        assert pod_lists and all(q.get("fieldSelector") == "spec.nodeName=hot-2" for q in pod_lists), pod_lists
        assert second.report is not None
        assert [(r.eviction.name, r.outcome, r.limiter) for r in second.report.results] == [
            ("web-1", Outcome.BLOCKED, "workload.maxUnavailable")
        ]
        assert {p["metadata"]["name"] for p in kube_server.store.objects("pods", NS)} == {
            "web-1", "web-2", "web-3", "web-4"
        }  # fmt: skip
    finally:
        cycles.close()
        cache.stop()
