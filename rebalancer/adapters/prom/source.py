"""Real CPU usage from Prometheus: instant queries at the caller's time, strictly validated.

The transport (``client.py``, prometheus-api-client over ``requests``) checks each answer's shape;
every answer is checked before it becomes a :class:`~rebalancer.domain.model.UsageReport`; anything
doubtful raises a :class:`~rebalancer.domain.errors.SourceError`, so the cycle makes no eviction:

* ``MetricsUnavailable``: Prometheus unreachable, timed out, an HTTP error (with Prometheus'
  ``errorType``/``error``), or ``status: error``.
* ``MetricsMalformed``: the answer is not an instant vector, a series lacks its key labels, two
  series share a key, a value is NaN, infinite, negative or unparsable.
* ``MetricsStale``: a query answered with no series at all (Prometheus has no data: an empty answer
  is never read as zero usage; with several node sources, when none of them knows any node), or the
  newest freshness sample of *every* node is older than ``maxDataAge`` (scraping is broken as a whole).

Node usage comes from the node sources (``prometheus.nodeSources``, :mod:`rebalancer.adapters.prom.nodes`),
tried in order for each node. A node whose newest sample in a source is too old (or that has no freshness
sample there), or whose data there began less than rateWindow + step ago (rate() would spread its short
history over the whole window and read it cold), is looked up in the next source; a node no source knows
goes into ``node_problems``, left out of ``node_cpu_m``: unknown, not 0. Pods whose data is that young
(``youngPods``) are left out of ``pod_cpu_m``. Each check is one instant query that answers only the
young series.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from types import MappingProxyType
from typing import TypeVar

from rebalancer.adapters.prom import nodes as nodes_module
from rebalancer.adapters.prom.client import PromClient, Vector, iso
from rebalancer.domain.errors import MetricsStale
from rebalancer.domain.model import PodKey, UsageReport
from rebalancer.domain.settings.node_sources import NodeSource
from rebalancer.domain.settings.shared import (
    DEFAULT_NODE_CPU_QUERY,
    DEFAULT_NODE_FRESHNESS_QUERY,
    DEFAULT_NODE_MEMORY_QUERY,
    DEFAULT_POD_CPU_QUERY,
    DEFAULT_POD_MEMORY_QUERY,
    PrometheusSettings,
    format_duration,
)


class PrometheusUsageSource:
    """Reads per-pod and per-node CPU usage (window quantiles) from Prometheus.

    ``read(at)`` evaluates every query at ``at`` (epoch seconds, from the caller's clock), so one
    cycle sees one consistent instant and tests can evaluate history far in the past.
    """

    def __init__(self, settings: PrometheusSettings) -> None:
        self._settings = settings
        self._client = PromClient(settings)
        self._url = self._client.shown_url

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> PrometheusUsageSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read(
        self, at: float, nodes: frozenset[str] | None = None, *, memory: bool = False, pod_memory: bool = True
    ) -> UsageReport:
        """Usage as seen at ``at``; raises a ``SourceError`` when the answer cannot be trusted.

        ``nodes``: only those nodes' pods are needed (an alert-driven cycle); honoured when the node usage
        comes from its own query (pod-sum mode needs every pod) and the pod template has ``{pod_filter}``.
        ``memory``: read the memory working set too (nodeMemory and podMemory), for memory thresholds;
        ``pod_memory`` False leaves the pods' to :meth:`pod_memory` (a cycle needs those of the nodes it
        relieves only: at 150,000 pods their answer is as large as the CPU one)."""
        settings = self._settings
        queries = settings.queries
        self._client.authorize()
        node_queries = any(not source.from_pods for source in settings.resolved_node_sources())
        pod_nodes = nodes if node_queries else None
        render = settings.render
        with ThreadPoolExecutor(max_workers=16, thread_name_prefix="usage-query") as pool:
            # The queries are independent: sent at once, each waits on Prometheus, not on the others. Their
            # answers are taken in this order, so the failure raised is the first failing query's.
            young = pod_memory_read = None
            node_answers = nodes_module.submit(pool, self._client, settings, at, memory=memory)
            pod_cpu = pool.submit(self._by_pod, render(queries.pod_cpu, pod_nodes), at)
            if queries.young_pods is not None:
                young = pool.submit(self._client.pod_values, "young_pods", render(queries.young_pods, pod_nodes), at)
            if memory and pod_memory:
                pod_memory_read = pool.submit(self._pod_memory, at, pod_nodes)
            readings = nodes_module.combine(node_answers, settings, at, memory=memory)
            pods = pod_cpu.result()
            pod_cpu_m = {key: round(cores * 1000) for key, cores in pods.items()}  # _millicores, inlined: 150,000
            del pods
            young_pods = 0
            for key in young.result() if young is not None else ():
                young_pods += pod_cpu_m.pop(key, None) is not None
            pods_memory = pod_memory_read.result() if pod_memory_read is not None else {}
        return UsageReport(
            node_memory=None if readings.memory is None else MappingProxyType(readings.memory),
            pod_memory=MappingProxyType(pods_memory),
            node_cpu_m=MappingProxyType(readings.cpu_m),
            pod_cpu_m=MappingProxyType(pod_cpu_m),
            node_problems=MappingProxyType(readings.problems),
            failure=None,
            node_source=MappingProxyType(readings.source),
            node_from_pods=readings.from_pods,
            fresh_nodes=readings.fresh_pods,
            pod_sum_problems=MappingProxyType(readings.pod_sum_problems),
            sources=readings.names,
            description=self._describe(at, young_pods, memory),
        )

    def pod_memory(self, at: float, nodes: frozenset[str]) -> Mapping[PodKey, int]:
        """The memory working set in bytes of the pods on ``nodes`` (through ``{pod_filter}``), as
        :meth:`read` would read it. A pod without a series is left out (unknown, never zero); an empty
        answer is not an error here (those few nodes' pods may all be new), a failed one is."""
        if not nodes:
            return MappingProxyType({})
        self._client.authorize()
        promql = self._settings.render(self._settings.queries.pod_memory, nodes)
        found = self._client.pod_values("pod_memory", promql, at)
        return MappingProxyType({key: round(value) for key, value in found.items()})

    def _pod_memory(self, at: float, nodes: frozenset[str] | None) -> dict[PodKey, int]:
        promql = self._settings.render(self._settings.queries.pod_memory, nodes)
        pods = _some("pod_memory", promql, at, self._client.pod_values("pod_memory", promql, at))
        return {key: round(value) for key, value in pods.items()}

    # -- keyed vectors -----------------------------------------------------------------------

    def _by_pod(self, promql: str, at: float) -> dict[PodKey, float]:
        return _some("pod_cpu", promql, at, self._client.pod_values("pod_cpu", promql, at))

    def _describe(self, at: float, young_pods: int, with_memory: bool) -> str:
        s = self._settings
        q = s.queries

        def custom(template: str | None, default: str) -> str:
            return "" if template == default else " (custom query)"

        pods = (
            f"pods: {s.quantile:g} quantile over {format_duration(s.window)} (step {format_duration(s.step)}) "
            f"of rate[{format_duration(s.rate_window)}]"
            f"{custom(q.pod_cpu, DEFAULT_POD_CPU_QUERY)}"
        )
        sources = s.resolved_node_sources()
        if len(sources) > 1:
            order = " -> ".join(source.name for source in sources)
            nodes = f"nodes: same statistic, from the first node source that knows the node ({order})"
            freshness = f"node freshness: newest sample within {format_duration(s.max_data_age)} in that source"
        else:
            nodes, freshness = self._one_source(sources[0], custom)
        if q.young_pods is None:
            young = "pods' data span: not checked"
        else:
            young = f"{young_pods} pod(s) with less than {s.data_span_seconds}s of data: usage unknown"
        memory = (
            "; memory: working set, same statistic"
            f"{custom(q.pod_memory, DEFAULT_POD_MEMORY_QUERY)}{custom(q.node_memory, DEFAULT_NODE_MEMORY_QUERY)}"
            if with_memory
            else ""
        )
        return f"Prometheus {self._url} at {iso(at)}; {pods}; {nodes}; {freshness}; {young}{memory}"

    def _one_source(self, source: NodeSource, custom: Callable[[str | None, str], str]) -> tuple[str, str]:
        """What the node usage and freshness are, for a policy with one node source."""
        s = self._settings
        if source.from_pods:
            nodes = "nodes: sum of their pods"
        else:
            nodes = f"nodes: same statistic per {source.label!r} label{custom(source.cpu, DEFAULT_NODE_CPU_QUERY)}"
        if source.freshness is None:
            return nodes, "node freshness: not checked"
        default = DEFAULT_NODE_FRESHNESS_QUERY if source.from_queries else source.freshness
        within = format_duration(s.max_data_age)
        return nodes, f"node freshness: newest sample within {within}{custom(source.freshness, default)}"


_Found = TypeVar("_Found", Vector, dict[PodKey, float])


def _some(name: str, promql: str, at: float, found: _Found) -> _Found:
    """An answer with no series is stale, never zero usage."""
    if not found:
        raise MetricsStale(
            f"query {name} answered no series at {iso(at)}: Prometheus has no data for it, "
            f"so usage is unknown (never read as zero); query: {promql}"
        )
    return found


def _millicores(cores: float) -> int:
    return round(cores * 1000)
