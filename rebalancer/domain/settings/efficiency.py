"""The policy's ``efficiency:`` section: how evictions are followed up and how the rates are computed."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from pydantic import Field, model_validator

from rebalancer.domain.settings.node_sources import NODE_OF_POD
from rebalancer.domain.settings.shared import Duration, FieldProblems, Model, format_duration

# A node's 5-minute average CPU in cores from the first of the node sources that has it (prometheus.nodeSources'
# defaults: cAdvisor's root cgroup, node_exporter named by kube_pod_info, the sum of the node's pods), so that
# the reference reads clusters whose Prometheus drops the root cgroup (kube-prometheus-stack) too.
_NODE_CPU_CORES = (
    '(sum by ({pod_node_label}) (rate(container_cpu_usage_seconds_total{{id="/"}}[5m])))'
    ' or (sum by (node) (max by (node, cpu, mode) (rate(node_cpu_seconds_total{{mode!~"idle|iowait|steal"}}[5m])'
    f" * on (namespace, pod) group_left (node) {NODE_OF_POD})))"
    ' or (sum by ({pod_node_label}) (rate(container_cpu_usage_seconds_total{{container!="", container!="POD"}}[5m])))'
)
_NODE_MEMORY_BYTES = (
    '(sum by ({pod_node_label}) (container_memory_working_set_bytes{{id="/"}}))'
    " or (max by (node) ((node_memory_MemTotal_bytes - node_memory_MemAvailable_bytes)"
    f" * on (namespace, pod) group_left (node) {NODE_OF_POD}))"
    ' or (sum by ({pod_node_label}) (container_memory_working_set_bytes{{container!="", container!="POD"}}))'
)
DEFAULT_REFERENCE_QUERY = (
    f"({_NODE_CPU_CORES})"
    ' / on ({pod_node_label}) sum by ({pod_node_label}) (kube_node_status_allocatable{{resource="cpu"}}) > 0.8'
)
DEFAULT_REFERENCE_DATA_QUERY = (
    'count by ({pod_node_label}) (kube_node_status_allocatable{{resource="cpu"}})'
    f" and on ({{pod_node_label}}) ({_NODE_CPU_CORES})"
)
"""Hot by the reference: the node's 5-minute average CPU (cAdvisor's root cgroup, else node_exporter, else the
sum of its pods) above 80% of its allocatable CPU (kube-state-metrics). A comparison filter: a node has a
sample only while hot."""
DEFAULT_MEMORY_REFERENCE_QUERY = (
    f"({_NODE_MEMORY_BYTES})"
    ' / on ({pod_node_label}) sum by ({pod_node_label}) (kube_node_status_allocatable{{resource="memory"}}) > 0.8'
)
DEFAULT_MEMORY_REFERENCE_DATA_QUERY = (
    'count by ({pod_node_label}) (kube_node_status_allocatable{{resource="memory"}})'
    f" and on ({{pod_node_label}}) ({_NODE_MEMORY_BYTES})"
)
"""Hot on memory by the reference: the node's working set (cAdvisor's root cgroup, else node_exporter's
MemTotal - MemAvailable, else its pods' working set) above 80% of its allocatable memory (kube-state-metrics)."""


@dataclass(frozen=True, slots=True)
class ReferenceDefinition:
    """The reference in use, rendered: one PromQL filter of hot nodes, the queries that must each answer
    for its inputs to exist, and what it is in words (check-config and report say it)."""

    query: str
    data_queries: tuple[str, ...]
    description: str


class ReferenceSettings(Model):
    """The independent definition of a hot node the discovery rate is measured against."""

    query: str | None = Field(
        default=DEFAULT_REFERENCE_QUERY,
        description="PromQL with one series per node, named by the label prometheus.podNodeLabel (placeholder "
        "{pod_node_label}; the label cAdvisor and kube-state-metrics series carry; {node_label} is "
        "prometheus.nodeLabel), at each instant the node is hot, none otherwise (end it with a comparison such "
        "as > 0.8). The default: CPU above 80% of allocatable. null: no reference, the discovery rate is not "
        "computed.",
    )
    step: Duration = Field(
        default=timedelta(minutes=1), description="Resolution at which the reference is evaluated over the period."
    )
    data_query: str = Field(
        default=DEFAULT_REFERENCE_DATA_QUERY,
        description="PromQL that answers at least one series when the reference's inputs exist (placeholders "
        "{pod_node_label}, {node_label}). An empty reference then means no hot node; without data the "
        "reference is unknown, never zero hot nodes.",
    )
    memory_query: str | None = Field(
        default=DEFAULT_MEMORY_REFERENCE_QUERY,
        description="Nodes hot on memory, in the form of query (the default: working set above 80% of "
        "allocatable memory). Used only when some strategy has memory thresholds on real usage: a node then "
        "counts as hot by the reference when it is hot by query or by memoryQuery (PromQL `or`), so that "
        "memory-hot nodes are in the discovery rate too. null: query alone, whatever the thresholds. "
        "check-config and report say which definition is in use.",
    )
    memory_data_query: str = Field(
        default=DEFAULT_MEMORY_REFERENCE_DATA_QUERY,
        description="As dataQuery, for memoryQuery's inputs: when memoryQuery is in use both must answer, "
        "or the reference is unknown (a memory-hot node is never missed for want of data).",
    )
    refresh_interval: Duration = Field(
        default=timedelta(minutes=10),
        description="Serve mode re-reads the reference over the period at most this often.",
    )

    def render(self, node_label: str, pod_node_label: str) -> str | None:
        return None if self.query is None else self.query.format(node_label=node_label, pod_node_label=pod_node_label)

    def render_data(self, node_label: str, pod_node_label: str) -> str:
        return self.data_query.format(node_label=node_label, pod_node_label=pod_node_label)

    def definition(self, node_label: str, pod_node_label: str, *, memory: bool) -> ReferenceDefinition | None:
        """The reference in use (None: query is null). ``memory``: some strategy classifies by memory on real
        usage; with memoryQuery set, the reference is then the union of both filters."""
        query = self.render(node_label, pod_node_label)
        if query is None:
            return None
        data = self.render_data(node_label, pod_node_label)
        if memory and self.memory_query is not None:
            labels = {"node_label": node_label, "pod_node_label": pod_node_label}
            return ReferenceDefinition(
                f"({query}) or ({self.memory_query.format(**labels)})",
                (data, self.memory_data_query.format(**labels)),
                "efficiency.reference.query or memoryQuery: hot by either (memory thresholds are configured)",
            )
        why = ""
        if memory:
            why = " (memoryQuery is null: memory-hot nodes count only as query sees them)"
        elif self.memory_query is not None:
            why = " (memoryQuery unused: no strategy has memory thresholds on real usage)"
        return ReferenceDefinition(query, (data,), f"efficiency.reference.query alone{why}")

    def describe(self, *, memory: bool) -> str:
        """Which definition of a hot node the discovery rate is measured against, in words."""
        found = self.definition("node", "node", memory=memory)
        return "none: efficiency.reference.query is null" if found is None else found.description

    @model_validator(mode="after")
    def _renders(self) -> ReferenceSettings:
        if self.query is not None:
            try:
                self.render("node", "node")
                self.render_data("node", "node")
            except (KeyError, IndexError, ValueError) as exc:
                raise FieldProblems([("query", f"cannot fill the template: {exc!r}")]) from exc
        if self.memory_query is not None:
            try:
                self.memory_query.format(node_label="node", pod_node_label="node")
                self.memory_data_query.format(node_label="node", pod_node_label="node")
            except (KeyError, IndexError, ValueError) as exc:
                raise FieldProblems([("memoryQuery", f"cannot fill the template: {exc!r}")]) from exc
        return self


class EfficiencySettings(Model):
    """Follow-up of every eviction, bounce-back memory, and the discovery / eviction / effective rates."""

    enabled: bool = Field(
        default=True,
        description="Record hot nodes, evictions and their follow-up in the cluster (state.efficiencyConfigMap). "
        "The records also let a cycle count the reliefs its usage reading does not show yet; off, no such "
        "correction is made and the plan says so.",
    )
    period: Duration = Field(
        default=timedelta(hours=24), description="The rates cover this period; records are kept as long."
    )
    follow_up_window: Duration = Field(
        default=timedelta(minutes=15),
        description="An evicted-from node counts as cooled when its usage falls below the strategy's target within "
        "this long after the eviction. Give it at least prometheus.window plus prometheus.rateWindow (15m by default): "
        "only then does the usage statistic read nothing from before the eviction.",
    )
    bounce_back_memory: Duration = Field(
        default=timedelta(hours=6), description="How long a workload's eviction is remembered (bounce-backs, guard)."
    )
    bounce_back_guard: bool = Field(
        default=True,
        description="Do not evict a pod of a workload created after that workload had a pod evicted within "
        "bounceBackMemory (it is most likely the replacement, just moved): no ping-pong.",
    )
    episode_gap: Duration = Field(
        default=timedelta(minutes=15),
        description="A node found hot again within this gap continues the same hot episode.",
    )
    reference: ReferenceSettings = Field(
        default_factory=ReferenceSettings, description="Hot nodes by an independent definition (discovery rate)."
    )
    max_records: int = Field(
        default=2000,
        ge=10,
        le=20_000,
        description="Most records of each kind kept (oldest dropped first), so the ConfigMap stays under 1 MiB.",
    )

    @property
    def horizon(self) -> timedelta:
        """How long records are kept: the longest of the period, the memory and the follow-up."""
        return max(self.period, self.bounce_back_memory, self.follow_up_window)

    @model_validator(mode="after")
    def _ordered(self) -> EfficiencySettings:
        if self.follow_up_window > self.period:
            period = format_duration(self.period)
            raise FieldProblems([("followUpWindow", f"longer than period {period}: nothing could be judged")])
        return self
