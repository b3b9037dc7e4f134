"""Hot nodes by the efficiency reference (an independent PromQL definition), over a period.

One instant query at the period's end counts, per node, the reference's samples over the period:
``count_over_time((<reference>)[<span>s:<step>])``; times the step, that is the node's hot minutes. A
second query checks that the reference's inputs exist at all, so that an empty answer means "no node was
hot" only when there is data, and "unknown" otherwise.
"""

from __future__ import annotations

from rebalancer.adapters.prom.client import PromClient, by_node, iso
from rebalancer.domain.errors import MetricsStale
from rebalancer.domain.settings.efficiency import ReferenceSettings
from rebalancer.domain.settings.shared import PrometheusSettings, format_duration

NAME = "efficiency_reference"


class ReferenceSource:
    def __init__(self, prometheus: PrometheusSettings, reference: ReferenceSettings) -> None:
        self._prometheus = prometheus
        self._reference = reference
        self._client = PromClient(prometheus)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> ReferenceSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def hot_minutes(self, start: float, end: float) -> dict[str, float]:
        """Node -> minutes hot by the reference in (start, end]; raises a ``SourceError`` when unknown."""
        prometheus = self._prometheus
        label = prometheus.pod_node_label  # the reference's series are cAdvisor's and kube-state-metrics'
        query = self._reference.render(prometheus.node_label, label)
        if query is None:
            raise MetricsStale("efficiency.reference.query is null: no reference definition")
        self._client.authorize()
        data = self._reference.render_data(prometheus.node_label, label)
        if not self._client.vector(f"{NAME}_data", data, end):
            raise MetricsStale(
                f"the reference's inputs have no data at {iso(end)} (efficiency.reference.dataQuery answered no "
                f"series): hot nodes by the reference are unknown, not zero; query: {data}"
            )
        span = max(1, round(end - start))
        promql = f"count_over_time(({query})[{span}s:{format_duration(self._reference.step)}])"
        counts = by_node(NAME, self._client.vector(NAME, promql, end), label)
        minutes = self._reference.step.total_seconds() / 60.0
        return {node: count * minutes for node, count in counts.items()}
