"""Hot nodes by the efficiency reference (an independent PromQL definition), over a period.

One instant query at the period's end counts, per node, the reference's samples over the period:
``count_over_time((<reference>)[<span>s:<step>])``; times the step, that is the node's hot minutes. The
reference is ``efficiency.reference.query``, or its union with ``memoryQuery`` when some strategy has memory
thresholds on real usage (``memory``). Its data queries check first that its inputs exist at all, so that an
empty answer means "no node was hot" only when there is data, and "unknown" otherwise.
"""

from __future__ import annotations

from rebalancer.adapters.prom.client import PromClient, by_node, iso
from rebalancer.domain.errors import MetricsStale
from rebalancer.domain.settings.efficiency import ReferenceSettings
from rebalancer.domain.settings.shared import PrometheusSettings, format_duration

NAME = "efficiency_reference"


class ReferenceSource:
    def __init__(self, prometheus: PrometheusSettings, reference: ReferenceSettings, *, memory: bool = False) -> None:
        self._prometheus = prometheus
        self._reference = reference
        self._definition = reference.definition(prometheus.node_label, prometheus.pod_node_label, memory=memory)
        self._client = PromClient(prometheus)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> ReferenceSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def hot_minutes(self, start: float, end: float) -> dict[str, float]:
        """Node -> minutes hot by the reference in (start, end]; raises a ``SourceError`` when unknown."""
        label = self._prometheus.pod_node_label  # the reference's series are cAdvisor's and kube-state-metrics'
        definition = self._definition
        if definition is None:
            raise MetricsStale("efficiency.reference.query is null: no reference definition")
        self._client.authorize()
        for data in definition.data_queries:
            if not self._client.vector(f"{NAME}_data", data, end):
                raise MetricsStale(
                    f"the reference's inputs have no data at {iso(end)} (its data query answered no series): "
                    f"hot nodes by the reference are unknown, not zero; reference: {definition.description}; "
                    f"query: {data}"
                )
        span = max(1, round(end - start))
        promql = f"count_over_time(({definition.query})[{span}s:{format_duration(self._reference.step)}])"
        counts = by_node(NAME, self._client.vector(NAME, promql, end), label)
        minutes = self._reference.step.total_seconds() / 60.0
        return {node: count * minutes for node, count in counts.items()}
