"""Two ways a cluster's Prometheus is commonly set up, as real scrape configs over live test exporters.

:class:`LiveExporter` serves, over HTTP on 127.0.0.1, what the kubelet's ``/metrics/cadvisor`` serves for
each node (every cgroup: the root ``id="/"``, a system slice, each pod's cgroup, its containers and pause
container), what node_exporter serves on each node it runs on, and what kube-state-metrics serves. The
counters advance with the wall clock at constant rates, so any ``rate()`` reads the rate itself.

A real Prometheus scrapes it with one of two configs:

* :func:`kube_prometheus_stack`: as the kube-prometheus-stack chart sets it up with its default values. The
  kubelet's cAdvisor endpoint carries the chart's default ``cAdvisorMetricRelabelings``, among them "Drop
  cgroup metrics with no pod" (``sourceLabels: [id, pod]``, ``regex: '.+;'``, ``action: drop``): the root
  cgroup is dropped. The Prometheus Operator adds ``node`` to a target of the kubelet's Endpoints (address
  target kind Node) and ``namespace``/``pod`` to a node-exporter target (kind Pod); node-exporter's
  ``relabelings`` are empty, so its ``instance`` stays the pod's ip:port. kube-state-metrics is scraped
  with ``honorLabels: true``.
  With ``resource=True``, as with ``kubelet.serviceMonitor.resource: true``, the kubelet's
  ``/metrics/resource`` endpoint is scraped too: the same containers' CPU and working set a second time,
  under the same ``job`` (``kubelet``) and told apart only by ``metrics_path``.
* :func:`plain_cadvisor`: a hand-written scrape of the kubelet's cAdvisor endpoint that keeps every cgroup
  and names the node in ``node``; no node_exporter.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COUNTER_START = 5000.0
CPUS = 4
IOWAIT = 0.01
GI = 2**30
NODE_EXPORTER_CORES = 0.05


@dataclass(frozen=True)
class LivePod:
    namespace: str
    name: str
    node: str
    cores: float
    memory: int = GI // 4
    pause_cores: float = 0.002


@dataclass(frozen=True)
class LiveNode:
    name: str
    ip: str
    system_cores: float = 0.3
    system_memory: int = GI
    memory: int = 16 * GI
    node_exporter: bool = True  # a node-exporter pod runs there


@dataclass
class LiveCluster:
    nodes: tuple[LiveNode, ...]
    pods: tuple[LivePod, ...]
    started: float = field(default_factory=time.time)

    def pods_on(self, node: str) -> list[LivePod]:
        return [p for p in self.all_pods() if p.node == node]

    def node_cores(self, node: str) -> float:
        """The whole node, as its root cgroup counts it: system, every container, every pause container."""
        spec = self.node(node)
        return spec.system_cores + sum(p.cores + p.pause_cores for p in self.pods_on(node))

    def pod_sum_cores(self, node: str) -> float:
        """What the sum of the node's pods reads (real containers only)."""
        return sum(p.cores for p in self.pods_on(node))

    def node_memory(self, node: str) -> int:
        return self.node(node).system_memory + sum(p.memory for p in self.pods_on(node))

    def node(self, name: str) -> LiveNode:
        return next(n for n in self.nodes if n.name == name)

    def counter(self, cores: float) -> str:
        return repr(COUNTER_START + cores * (time.time() - self.started))

    # -- expositions -------------------------------------------------------------------------------

    def cadvisor(self, node: str) -> str:
        """The kubelet's /metrics/cadvisor of ``node`` (no node label: the scrape adds it)."""
        lines = ["# TYPE container_cpu_usage_seconds_total counter", "# TYPE container_memory_working_set_bytes gauge"]
        system = self.node(node)

        def both(labels: str, cores: float, memory: int) -> None:
            lines.append(f"container_cpu_usage_seconds_total{{{labels}}} {self.counter(cores)}")
            lines.append(f"container_memory_working_set_bytes{{{labels}}} {memory}")

        both('id="/"', self.node_cores(node), self.node_memory(node))
        both('id="/system.slice/kubelet.service"', system.system_cores, system.system_memory)
        for index, pod in enumerate(self.pods_on(node)):
            cgroup = f"/kubepods/burstable/pod{node}-{index}"
            base = f'namespace="{pod.namespace}",pod="{pod.name}"'
            both(f'container="",id="{cgroup}",{base}', pod.cores + pod.pause_cores, pod.memory)
            both(f'container="app",id="{cgroup}/app",image="app:1",{base}', pod.cores, pod.memory)
            both(f'container="POD",id="{cgroup}/pause",image="pause:3.9",{base}', pod.pause_cores, 0)
        return "\n".join(lines) + "\n"

    def resource(self, node: str) -> str:
        """The kubelet's /metrics/resource of ``node``: each container once (no pod-level or pause series, no
        ``id``), the pod and the node, every sample with its own timestamp as the kubelet gives it."""
        stamp = int(time.time() * 1000)
        lines = ["# TYPE container_cpu_usage_seconds_total counter", "# TYPE container_memory_working_set_bytes gauge"]
        for pod in self.pods_on(node):
            labels = f'container="app",namespace="{pod.namespace}",pod="{pod.name}"'
            lines.append(f"container_cpu_usage_seconds_total{{{labels}}} {self.counter(pod.cores)} {stamp}")
            lines.append(f"container_memory_working_set_bytes{{{labels}}} {pod.memory} {stamp}")
        lines.append("# TYPE pod_cpu_usage_seconds_total counter")
        for pod in self.pods_on(node):
            cores = self.counter(pod.cores + pod.pause_cores)
            lines.append(f'pod_cpu_usage_seconds_total{{namespace="{pod.namespace}",pod="{pod.name}"}} {cores} {stamp}')
        lines += [
            "# TYPE node_cpu_usage_seconds_total counter",
            f"node_cpu_usage_seconds_total {self.counter(self.node_cores(node))} {stamp}",
            "# TYPE resource_scrape_error gauge",
            "resource_scrape_error 0",
        ]
        return "\n".join(lines) + "\n"

    def node_exporter(self, node: str) -> str:
        busy = self.node_cores(node) / CPUS
        lines = ["# TYPE node_cpu_seconds_total counter"]
        for cpu in range(CPUS):
            for mode, cores in (("user", busy), ("iowait", IOWAIT), ("idle", 1.0 - IOWAIT - busy)):
                lines.append(f'node_cpu_seconds_total{{cpu="{cpu}",mode="{mode}"}} {self.counter(cores)}')
        total = self.node(node).memory
        lines += [
            "# TYPE node_memory_MemTotal_bytes gauge",
            f"node_memory_MemTotal_bytes {total}",
            "# TYPE node_memory_MemAvailable_bytes gauge",
            f"node_memory_MemAvailable_bytes {total - self.node_memory(node)}",
        ]
        return "\n".join(lines) + "\n"

    def kube_state_metrics(self) -> str:
        lines = ["# TYPE kube_pod_info gauge", "# TYPE kube_node_status_allocatable gauge"]
        for pod in self.all_pods():
            lines.append(
                f'kube_pod_info{{namespace="{pod.namespace}",pod="{pod.name}",node="{pod.node}",'
                f'created_by_kind="ReplicaSet",uid="{pod.namespace}-{pod.name}"}} 1'
            )
        for node in self.nodes:
            lines.append(f'kube_node_status_allocatable{{node="{node.name}",resource="cpu",unit="core"}} {CPUS}')
            lines.append(
                f'kube_node_status_allocatable{{node="{node.name}",resource="memory",unit="byte"}} {node.memory}'
            )
        return "\n".join(lines) + "\n"

    def all_pods(self) -> Iterator[LivePod]:
        """The workload pods and the node-exporter pods (kube-state-metrics lists both)."""
        yield from self.pods
        for node in self.nodes:
            if node.node_exporter:
                yield LivePod("monitoring", node_exporter_pod(node.name), node.name, NODE_EXPORTER_CORES)


def node_exporter_pod(node: str) -> str:
    return f"node-exporter-{node}"


class LiveExporter:
    """The cluster's endpoints over HTTP: ``/kubelet/<node>/metrics/cadvisor`` and ``/metrics/resource``,
    ``/node-exporter/<node>/metrics`` (only on nodes that run one), ``/kube-state-metrics/metrics``."""

    def __init__(self, cluster: LiveCluster) -> None:
        self.cluster = cluster
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = outer.body(self.path)
                self.send_response(200 if body is not None else 404)
                data = (body or "not found\n").encode()
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    def body(self, path: str) -> str | None:
        parts = path.strip("/").split("/")
        names = {n.name for n in self.cluster.nodes}
        if parts[:1] == ["kubelet"] and len(parts) == 4 and parts[1] in names and parts[2] == "metrics":
            if parts[3] == "cadvisor":
                return self.cluster.cadvisor(parts[1])
            if parts[3] == "resource":
                return self.cluster.resource(parts[1])
        if parts[:1] == ["node-exporter"] and len(parts) == 3 and parts[1] in names:
            return self.cluster.node_exporter(parts[1]) if self.cluster.node(parts[1]).node_exporter else None
        if parts == ["kube-state-metrics", "metrics"]:
            return self.cluster.kube_state_metrics()
        return None

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{host!s}:{port}"

    def __enter__(self) -> LiveExporter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


# -- scrape configs ---------------------------------------------------------------------------------

# kube-prometheus-stack's default kubelet.serviceMonitor.cAdvisorMetricRelabelings, as its values.yaml has them
KPS_CADVISOR_METRIC_RELABELINGS: tuple[Mapping[str, object], ...] = (
    {
        "source_labels": ["__name__"],
        "action": "drop",
        "regex": "container_cpu_(cfs_throttled_seconds_total|load_average_10s|system_seconds_total|user_seconds_total)",
    },
    {
        "source_labels": ["__name__"],
        "action": "drop",
        "regex": "container_fs_(io_current|io_time_seconds_total|io_time_weighted_seconds_total|reads_merged_total"
        "|sector_reads_total|sector_writes_total|writes_merged_total)",
    },
    {"source_labels": ["__name__"], "action": "drop", "regex": "container_memory_(mapped_file|swap)"},
    {"source_labels": ["__name__"], "action": "drop", "regex": "container_(file_descriptors|tasks_state|threads_max)"},
    {"source_labels": ["__name__"], "action": "drop", "regex": "container_spec.*"},
    {"source_labels": ["id", "pod"], "action": "drop", "regex": ".+;"},  # drop cgroup metrics with no pod
)


def _kubelet_job(
    cluster: LiveCluster, address: str, metric_relabel: tuple[Mapping[str, object], ...], endpoint: str = "cadvisor"
) -> dict:
    """A kubelet endpoint (``/metrics/cadvisor`` or ``/metrics/resource``) of every node: a target per node,
    ``node`` added as the Prometheus Operator adds it to a kubelet Endpoints target (kind Node), ``instance``
    the kubelet's ip:port, ``job`` the kubelet Service's (every endpoint of the ServiceMonitor shares it) and
    ``metrics_path`` the path on the kubelet (this server's has the node in front of it)."""
    return {
        "job_name": "kubelet" if endpoint == "cadvisor" else f"kubelet-{endpoint}",
        "honor_labels": True,
        "static_configs": [
            {
                "targets": [address],
                "labels": {"node": n.name, "__metrics_path__": f"/kubelet/{n.name}/metrics/{endpoint}"},
            }
            for n in cluster.nodes
        ],
        "relabel_configs": [
            {"source_labels": ["node"], "target_label": "instance", "regex": "(.*)", "replacement": "$1:10250"},
            {"target_label": "job", "replacement": "kubelet"},
            {"source_labels": ["__metrics_path__"], "target_label": "metrics_path", "regex": "/kubelet/[^/]+(/.+)"},
        ],
        "metric_relabel_configs": list(metric_relabel),
    }


def _ksm_job(address: str) -> dict:
    return {
        "job_name": "kube-state-metrics",
        "honor_labels": True,
        "metrics_path": "/kube-state-metrics/metrics",
        "static_configs": [{"targets": [address]}],
    }


def kube_prometheus_stack(cluster: LiveCluster, address: str, *, resource: bool = False) -> list[dict]:
    node_exporters = [
        {
            "targets": [address],
            "labels": {
                "__metrics_path__": f"/node-exporter/{n.name}/metrics",
                "__address_ip": f"{n.ip}:9100",
                "namespace": "monitoring",
                "pod": node_exporter_pod(n.name),
                "container": "node-exporter",
                "endpoint": "http-metrics",
                "service": "kube-prometheus-stack-prometheus-node-exporter",
            },
        }
        for n in cluster.nodes
        if n.node_exporter
    ]
    return [
        _kubelet_job(cluster, address, KPS_CADVISOR_METRIC_RELABELINGS),
        {
            "job_name": "node-exporter",
            "static_configs": node_exporters,
            # the pod's ip:port, as the target's address is (node-exporter runs on the host network)
            "relabel_configs": [{"source_labels": ["__address_ip"], "target_label": "instance"}],
        },
        _ksm_job(address),
        *([_kubelet_job(cluster, address, (), endpoint="resource")] if resource else []),
    ]


def plain_cadvisor(cluster: LiveCluster, address: str) -> list[dict]:
    return [_kubelet_job(cluster, address, ()), _ksm_job(address)]
