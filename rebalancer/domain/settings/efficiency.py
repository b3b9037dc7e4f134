"""The policy's ``efficiency:`` section: how evictions are followed up and how the rates are computed."""

from __future__ import annotations

from datetime import timedelta

from pydantic import Field, model_validator

from rebalancer.domain.settings.shared import Duration, FieldProblems, Model, format_duration

DEFAULT_REFERENCE_QUERY = (
    'sum by ({pod_node_label}) (rate(container_cpu_usage_seconds_total{{id="/"}}[5m]))'
    ' / on ({pod_node_label}) sum by ({pod_node_label}) (kube_node_status_allocatable{{resource="cpu"}}) > 0.8'
)
DEFAULT_REFERENCE_DATA_QUERY = (
    'count by ({pod_node_label}) (kube_node_status_allocatable{{resource="cpu"}})'
    ' and on ({pod_node_label}) count by ({pod_node_label}) (container_cpu_usage_seconds_total{{id="/"}})'
)
"""Hot by the reference: the node's 5-minute average CPU (cAdvisor's root cgroup) above 80% of its
allocatable CPU (kube-state-metrics). A comparison filter: a node has a sample only while hot."""


class ReferenceSettings(Model):
    """The independent definition of a hot node the discovery rate is measured against."""

    query: str | None = Field(
        default=DEFAULT_REFERENCE_QUERY,
        description="PromQL with one series per node, named by the label prometheus.podNodeLabel (placeholder "
        "{pod_node_label}; the label cAdvisor and kube-state-metrics series carry; {node_label} is "
        "prometheus.nodeLabel), at each instant the node is hot, none otherwise (end it with a comparison such "
        "as > 0.8). null: no reference, the discovery rate is not computed.",
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
    refresh_interval: Duration = Field(
        default=timedelta(minutes=10),
        description="Serve mode re-reads the reference over the period at most this often.",
    )

    def render(self, node_label: str, pod_node_label: str) -> str | None:
        return None if self.query is None else self.query.format(node_label=node_label, pod_node_label=pod_node_label)

    def render_data(self, node_label: str, pod_node_label: str) -> str:
        return self.data_query.format(node_label=node_label, pod_node_label=pod_node_label)

    @model_validator(mode="after")
    def _renders(self) -> ReferenceSettings:
        if self.query is not None:
            try:
                self.render("node", "node")
                self.render_data("node", "node")
            except (KeyError, IndexError, ValueError) as exc:
                raise FieldProblems([("query", f"cannot fill the template: {exc!r}")]) from exc
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
        "this long after the eviction. Give it at least prometheus.window: the usage statistic needs that to drop.",
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
