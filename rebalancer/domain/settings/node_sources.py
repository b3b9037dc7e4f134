"""Where a node's usage comes from: the node sources the policy knows, tried in order for each node.

``prometheus.nodeSources`` names them, first choice first (the default: ``cadvisor``, ``nodeExporter``,
``podSum``). A node missing from one source (no series, or data too old or too young there) is looked up
in the next; a node no source knows is unknown, never zero.

* ``cadvisor``: the policy's ``prometheus.queries`` nodeCpu, nodeFreshness, youngNodes and nodeMemory, by
  default cAdvisor's root cgroup (``id="/"``): everything on the node, system daemons included. The most
  complete reading, and the one kube-prometheus-stack drops (its kubelet ``cAdvisorMetricRelabelings``
  drop every cgroup series with an ``id`` and no ``pod``).
* ``nodeExporter``: node_exporter's busy CPU and ``MemTotal - MemAvailable``, the whole node too. Its series
  name the node-exporter pod (``namespace``, ``pod``, as the Prometheus Operator labels a ServiceMonitor's
  targets) and, in kube-prometheus-stack, ``instance`` is the pod's ip:port: the node comes from
  kube-state-metrics' ``kube_pod_info`` joined on (namespace, pod), as that stack's own recording rules do.
* ``podSum``: the sum of the node's pods' usage. Only as a last resort: it leaves out system daemons and
  everything outside a pod (reads the node lower than it is), so it is known only when every running pod
  on the node has usage, and only for a node whose pods' series are fresh.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

NodeSourceName = Literal["cadvisor", "nodeExporter", "podSum"]
DEFAULT_NODE_SOURCES: tuple[NodeSourceName, ...] = ("cadvisor", "nodeExporter", "podSum")
POD_SUM: NodeSourceName = "podSum"

# the node of each pod, from kube-state-metrics (one series per pod even with two of its replicas)
NODE_OF_POD = 'topk by (namespace, pod) (1, max by (namespace, pod, node) (kube_pod_info{{node!=""}}))'
_BUSY = 'node_cpu_seconds_total{{mode!~"idle|iowait|steal"}}'
_IDLE = 'node_cpu_seconds_total{{mode="idle"}}'
# max by (node, cpu, mode): while a node-exporter pod is replaced, the old and the new pod's series overlap
# in the window; they count the same CPU once
NODE_EXPORTER_CPU_QUERY = (
    "quantile_over_time({quantile}, (sum by (node) (max by (node, cpu, mode) ("
    f"rate({_BUSY}[{{rate_window}}]) * on (namespace, pod) group_left (node) {NODE_OF_POD}"
    ")))[{window}:{step}])"
)
NODE_EXPORTER_FRESHNESS_QUERY = (
    f"max by (node) (max_over_time(timestamp({_IDLE})[{{window}}:{{step}}])"
    f" * on (namespace, pod) group_left (node) {NODE_OF_POD})"
)
NODE_EXPORTER_YOUNG_QUERY = (
    f"group by (node) ({_IDLE} * on (namespace, pod) group_left (node) {NODE_OF_POD})"
    f" unless group by (node) ({_IDLE} offset {{data_span}} * on (namespace, pod) group_left (node) {NODE_OF_POD})"
)
NODE_EXPORTER_MEMORY_QUERY = (
    "quantile_over_time({quantile}, (max by (node) ("
    f"(node_memory_MemTotal_bytes - node_memory_MemAvailable_bytes) * on (namespace, pod) group_left (node) "
    f"{NODE_OF_POD}))[{{window}}:{{step}}])"
)
_POD_CONTAINERS = '{{container!="", container!="POD"}}'
# the newest sample of any of the node's containers (an instant selector: a node whose pods have no sample
# within Prometheus' lookback delta has none, and is unknown)
POD_SUM_FRESHNESS_QUERY = f"max by ({{pod_node_label}}) (timestamp(container_cpu_usage_seconds_total{_POD_CONTAINERS}))"
POD_SUM_MEMORY_QUERY = (
    "quantile_over_time({quantile}, (sum by ({pod_node_label}) ("
    f"container_memory_working_set_bytes{_POD_CONTAINERS}))[{{window}}:{{step}}])"
)


@dataclass(frozen=True, slots=True)
class NodeSource:
    """One node source, resolved: its PromQL templates and the label naming the node on their answers.

    ``cpu`` None: the sum of the node's pods (``podSum``, always the last source). ``freshness`` and
    ``young`` None: not checked. ``memory``: the node's working set, read with memory thresholds."""

    name: str
    cpu: str | None
    freshness: str | None
    young: str | None
    memory: str | None
    label: str
    from_queries: bool = False  # prometheus.queries' node queries (their names in messages: node_cpu, ...)

    @property
    def from_pods(self) -> bool:
        return self.cpu is None

    def query_name(self, what: Literal["cpu", "freshness", "young", "memory"]) -> str:
        """The name of one of its queries in messages and metrics (the policy's own: node_cpu, ...)."""
        if self.from_queries:
            return {"cpu": "node_cpu", "freshness": "node_freshness", "young": "young_nodes", "memory": "node_memory"}[
                what
            ]
        return f"{self.name}_{what}"


def built_in(name: NodeSourceName, pod_node_label: str) -> NodeSource:
    """The built-in ``nodeExporter`` or ``podSum`` source (``cadvisor`` is the policy's queries)."""
    if name == "nodeExporter":
        return NodeSource(
            name,
            NODE_EXPORTER_CPU_QUERY,
            NODE_EXPORTER_FRESHNESS_QUERY,
            NODE_EXPORTER_YOUNG_QUERY,
            NODE_EXPORTER_MEMORY_QUERY,
            "node",  # kube_pod_info's
        )
    if name == POD_SUM:
        # no young-node check: each pod's own (youngPods) leaves a young pod, and so its node, unknown
        return NodeSource(name, None, POD_SUM_FRESHNESS_QUERY, None, POD_SUM_MEMORY_QUERY, pod_node_label)
    raise ValueError(f"{name!r} is not a built-in node source")


def order_problems(names: tuple[str, ...]) -> list[str]:
    """What is wrong with the order of ``nodeSources`` (empty: nothing)."""
    problems = []
    if not names:
        problems.append("name at least one node source (cadvisor, nodeExporter, podSum)")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        problems.append(f"each source at most once, repeated: {', '.join(repeated)}")
    if POD_SUM in names[:-1]:
        problems.append("podSum can only be the last source (the fallback of last resort)")
    return problems
