"""The efficiency story: a cluster in two pools, made through a real API server alone (api_made.py), with its
cAdvisor and kube-state-metrics history for a real Prometheus, told around the first cycle's time ``t1``; and
serve's cycle object driven by hand at chosen times (:class:`Serve`).

The pools (node label ``pool``):

* general: hot-1 (api-0 evicted and its load gone: cools), hot-3 (cart-0 evicted, its replacement cart-9
  lands back on hot-3 a minute later: lands back; at the second cycle the bounce-back guard passes cart-9
  over), cold-1;
* batch: hot-2 (only a DaemonSet pod: nothing to evict), cold-2 (hot for 20 minutes three hours before
  the first cycle, when rebalancer did not run: the reference saw it, rebalancer missed it).

So over the period: hot by the reference 4, found 3 (discovery 3/4), acted on 2 (eviction 2/3), cooled 1
of 2 judged (effective 1/2). The second cycle runs at ``end`` = t1 + 30 min.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from rebalancer.actions.evictor import DryRun
from rebalancer.adapters.kube import KubeSource, connect
from rebalancer.app.runtime import Runtime
from rebalancer.app.serve import CycleObservers, _ClusterCache, _Cycles, _KnownNodes
from rebalancer.app.serve_efficiency import EfficiencyPublisher
from rebalancer.policy import load_policy
from rebalancer.service.metrics import Metrics
from rebalancer.service.runner import CycleResult, Trigger
from tests.adapters.cadvisor import CadvisorHistory, Container, NodeSpec, PodSpec, Rate, constant, spike
from tests.adapters.prom_fixture import Series
from tests.controlplane import ControlPlane
from tests.fake_clock import FakeClock
from tests.realcluster import api_made
from tests.realcluster import objects as o

NAMESPACES = ("shop", "monitoring", "rebalancer")
CORES = {"hot-1": 4, "hot-2": 4, "hot-3": 4, "cold-1": 8, "cold-2": 8}
POOL = {"hot-1": "general", "hot-3": "general", "cold-1": "general", "hot-2": "batch", "cold-2": "batch"}
# (namespace, name) -> (node, deployment or None for the DaemonSet's pods)
PLACES: dict[tuple[str, str], tuple[str, str | None]] = {
    ("shop", "api-0"): ("hot-1", "api"),
    ("shop", "web-0"): ("hot-1", "web"),
    ("shop", "web-5"): ("hot-1", "web"),
    ("monitoring", "exporter-hot-1"): ("hot-1", None),
    ("monitoring", "exporter-hot-2"): ("hot-2", None),
    ("monitoring", "exporter-hot-3"): ("hot-3", None),
    ("shop", "cart-0"): ("hot-3", "cart"),
    ("shop", "cart-9"): ("hot-3", "cart"),
    ("shop", "web-1"): ("cold-1", "web"),
    ("shop", "web-2"): ("cold-2", "web"),
    ("batch", "report-1"): ("cold-2", None),  # a finished job: gone from the API
}
IN_API_AT_T1 = {key for key in PLACES if key[1] not in ("cart-9", "report-1")}


def until(t: float, cores: float) -> Rate:
    return lambda at: cores if at <= t else 0.0


def after(t: float, cores: float) -> Rate:
    return lambda at: cores if at > t else 0.0


@dataclass(frozen=True)
class Story:
    t1: float  # the first cycle

    @property
    def end(self) -> float:  # the second cycle
        return self.t1 + 1800

    @property
    def start(self) -> float:
        return self.end - 4 * 3600

    @property
    def spike(self) -> tuple[float, float]:
        return (self.end - 3 * 3600 - 1200, self.end - 3 * 3600)

    def loads(self) -> dict[tuple[str, str], Rate]:
        gone, back = self.t1 + 30, self.t1 + 60  # the evicted pods' load stops; cart-9 starts on hot-3
        return {
            ("shop", "api-0"): until(gone, 1.6),
            ("shop", "web-0"): constant(0.4),
            ("shop", "web-5"): constant(0.4),
            ("monitoring", "exporter-hot-1"): constant(0.8),
            ("monitoring", "exporter-hot-2"): constant(3.2),
            ("monitoring", "exporter-hot-3"): constant(2.0),
            ("shop", "cart-0"): until(gone, 1.2),
            ("shop", "cart-9"): after(back, 1.2),
            ("shop", "web-1"): constant(0.1),
            ("shop", "web-2"): constant(0.1),
            ("batch", "report-1"): spike(0.0, 6.5, *self.spike),
        }

    def history(self) -> list[Series]:
        cadvisor = CadvisorHistory(
            nodes=tuple(NodeSpec(n, 0.3) for n in CORES),
            pods=tuple(
                PodSpec(ns, name, PLACES[(ns, name)][0], (Container("app", load),))
                for (ns, name), load in self.loads().items()
            ),
            start=self.start,
            end=self.end,
        )
        stamps = [self.start + 30 * i for i in range(int((self.end - self.start) // 30) + 1)]
        allocatable = [
            Series(
                "kube_node_status_allocatable",
                {"job": "kube-state-metrics", "node": node, "resource": "cpu", "unit": "core"},
                [(t, float(cores)) for t in stamps],
                kind="gauge",
            )
            for node, cores in CORES.items()
        ]
        return cadvisor.series() + allocatable


class Cluster:
    """The story's nodes, workloads and pods on a real API server alone."""

    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        admin = plane.admin
        for namespace in NAMESPACES:
            plane.namespace(namespace)
        for node, cores in CORES.items():
            api_made.ready_node(admin, o.node(node, cpu=str(cores), memory="32Gi", labels={"pool": POOL[node]}))
        self.owners = {name: api_made.deployment(admin, name, "shop", replicas=3) for name in ("api", "web", "cart")}
        self.exporter = api_made.daemon_set(admin, "exporter", "monitoring")
        for namespace, name in sorted(IN_API_AT_T1):
            self.add_pod(namespace, name)

    def add_pod(self, namespace: str, name: str) -> dict[str, Any]:
        node, workload = PLACES[(namespace, name)]
        owner, app = (self.exporter, "exporter") if workload is None else (self.owners[workload], workload)
        return api_made.running_pod(self.plane.admin, name, namespace, node, owner, {"app": app})

    def clear(self) -> None:
        api_made.clear(self.plane.admin, NAMESPACES)


def write_policy(path: Path, prometheus_url: str, extra: str = "") -> Path:
    path.write_text(
        f"prometheus: {{url: '{prometheus_url}', maxDataAge: 10m}}\n"
        "pools: {label: pool}\n"
        "protections: {evictableNamespaces: {exclude: [kube-system, monitoring]}}\n"
        # predictPlacement off: the story places cart-9 back on hot-3 by hand; by the scheduler model both
        # replacements would tie between cold-1 and cold-2 (pool batch), so prediction would evict neither
        "strategies:\n- {kind: LowNodeUtilization, thresholds: {cpu: 30}, targetThresholds: {cpu: 70},"
        " predictPlacement: false}\n"
        "state: {namespace: rebalancer}\n"
        "service: {watchCache: {enabled: false}}\n" + extra
    )
    return path


class Serve:
    """serve's cycle object and metrics, driven by hand at chosen times (no scheduler, no HTTP)."""

    def __init__(self, kubeconfig: Path, policy: Path, at: float, dry_run: DryRun = DryRun.OFF) -> None:
        self.clock = FakeClock(at)
        self.policy = load_policy(policy)
        self.metrics = Metrics()
        api = connect(kubeconfig=str(kubeconfig))
        self.cache = _ClusterCache(api)
        known = _KnownNodes(KubeSource(api, frozenset()), self.cache, self.clock)
        publisher = EfficiencyPublisher(self.metrics)
        runtime = Runtime(self.policy, api, self.clock, dry_run, requester="rebalancer/test")
        self.cycles = _Cycles(
            runtime, known, self.cache, CycleObservers(efficiency=publisher, on_guard=self.metrics.observe_guard)
        )

    def cycle(self, at: float) -> CycleResult:
        self.clock.now = at
        return self.cycles(self.policy, Trigger("schedule", (0,)))

    def samples(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        body, _ = self.metrics.exposition()
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body.decode())
            for s in family.samples
        }

    def close(self) -> None:
        self.cycles.close()
        self.cache.stop()
