"""Real CPU usage from Prometheus: instant queries at the caller's time, strictly validated.

The transport (``client.py``, prometheus-api-client over ``requests``) checks each answer's shape;
every answer is checked before it becomes a :class:`~rebalancer.domain.model.UsageReport`; anything
doubtful raises a :class:`~rebalancer.domain.errors.SourceError`, so the cycle makes no eviction:

* ``MetricsUnavailable``: Prometheus unreachable, timed out, an HTTP error (with Prometheus'
  ``errorType``/``error``), or ``status: error``.
* ``MetricsMalformed``: the answer is not an instant vector, a series lacks its key labels, two
  series share a key, a value is NaN, infinite, negative or unparsable.
* ``MetricsStale``: a query answered with no series at all (Prometheus has no data: an empty answer
  is never read as zero usage), or the newest freshness sample of *every* node is older than
  ``maxDataAge`` (scraping is broken as a whole).

A single node whose newest sample is too old (or that has no freshness sample while a freshness
query is configured) goes into ``node_problems`` and is left out of ``node_cpu_m``: unknown, not 0.
So does a node whose data began less than rateWindow + step ago (``youngNodes``): rate() would spread
its short history over the whole window and read it cold. Such pods (``youngPods``) are left out of
``pod_cpu_m``. Both checks are one instant query each that answers only the young series.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from types import MappingProxyType
from typing import TypeVar

from rebalancer.adapters.prom.client import PromClient, Vector, by_node, iso
from rebalancer.domain.errors import MetricsStale
from rebalancer.domain.model import PodKey, UsageReport
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
        pod_nodes = nodes if queries.node_cpu is not None else None
        render = settings.render
        with ThreadPoolExecutor(max_workers=6, thread_name_prefix="usage-query") as pool:
            # The queries are independent: sent at once, each waits on Prometheus, not on the others. Their
            # answers are taken in this order, so the failure raised is the first failing query's.
            young_nodes = young = node_cpu = node_memory_read = pod_memory_read = None
            if queries.young_nodes is not None:
                young_nodes = pool.submit(self._client.large_vector, "young_nodes", render(queries.young_nodes), at)
            freshness = None
            if queries.node_freshness is not None:
                freshness = pool.submit(self._by_node, "node_freshness", render(queries.node_freshness), at)
            if queries.node_cpu is not None:
                node_cpu = pool.submit(self._by_node, "node_cpu", render(queries.node_cpu), at)
            pod_cpu = pool.submit(self._by_pod, render(queries.pod_cpu, pod_nodes), at)
            if queries.young_pods is not None:
                young = pool.submit(self._client.pod_values, "young_pods", render(queries.young_pods, pod_nodes), at)
            if memory:
                node_memory_read = pool.submit(self._by_node, "node_memory", render(queries.node_memory), at)
                if pod_memory:
                    pod_memory_read = pool.submit(self._pod_memory, at, pod_nodes)
            problems: dict[str, str] = {}
            if young_nodes is not None:
                young_names = by_node("young_nodes", young_nodes.result(), settings.node_label)
                problems.update(dict.fromkeys(young_names, self._too_young()))
            fresh: dict[str, float] | None = None
            if freshness is not None:
                fresh = freshness.result()
                problems.update(self._stale_nodes(fresh, at))
            node_cpu_m: dict[str, int] = {}
            for node, cores in (node_cpu.result() if node_cpu is not None else {}).items():
                if fresh is not None and node not in fresh:
                    problems[node] = (
                        "no freshness sample within Prometheus' lookback delta (default 5m) "
                        "before the evaluation time: data too old or missing"
                    )
                if node not in problems:
                    node_cpu_m[node] = _millicores(cores)
            pods = pod_cpu.result()
            pod_cpu_m = {key: round(cores * 1000) for key, cores in pods.items()}  # _millicores, inlined: 150,000
            del pods
            young_pods = 0
            for key in young.result() if young is not None else ():
                young_pods += pod_cpu_m.pop(key, None) is not None
            node_memory = None
            if node_memory_read is not None:
                found = node_memory_read.result()  # a node with a problem (stale, young) is unknown, as its CPU
                node_memory = MappingProxyType({node: round(v) for node, v in found.items() if node not in problems})
            pods_memory = pod_memory_read.result() if pod_memory_read is not None else {}
        return UsageReport(
            node_memory=node_memory,
            pod_memory=MappingProxyType(pods_memory),
            node_cpu_m=MappingProxyType(node_cpu_m),
            pod_cpu_m=MappingProxyType(pod_cpu_m),
            node_problems=MappingProxyType(problems),
            failure=None,
            node_from_pods=queries.node_cpu is None,
            fresh_nodes=None if fresh is None else frozenset(fresh),
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

    # -- staleness ---------------------------------------------------------------------------

    def _too_young(self) -> str:
        s = self._settings
        span = f"rateWindow {format_duration(s.rate_window)} + step {format_duration(s.step)}"
        return (
            f"less than {s.data_span_seconds}s of data ({span}): rate() would "
            "spread the short history over the whole window and read it low, so usage is unknown"
        )

    def _stale_nodes(self, fresh: Mapping[str, float], at: float) -> dict[str, str]:
        written = format_duration(self._settings.max_data_age)
        limit = self._settings.max_data_age.total_seconds()
        newest = max(fresh.values())
        if at - newest > limit:
            raise MetricsStale(
                f"Prometheus' newest sample over all {len(fresh)} node(s) is {at - newest:.0f}s old at "
                f"{iso(at)} > maxDataAge {written}: the whole source is stale"
            )
        return {
            node: f"newest sample {at - stamp:.0f}s old > maxDataAge {written}"
            for node, stamp in sorted(fresh.items())
            if at - stamp > limit
        }

    # -- keyed vectors -----------------------------------------------------------------------

    def _by_node(self, name: str, promql: str, at: float) -> dict[str, float]:
        return by_node(name, self._vector(name, promql, at), self._settings.node_label)

    def _by_pod(self, promql: str, at: float) -> dict[PodKey, float]:
        return _some("pod_cpu", promql, at, self._client.pod_values("pod_cpu", promql, at))

    def _vector(self, name: str, promql: str, at: float) -> Vector:
        return _some(name, promql, at, self._client.large_vector(name, promql, at))  # 5,000 nodes: msgspec

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
        if q.node_cpu is None:
            nodes = "nodes: sum of their pods"
        else:
            nodes = f"nodes: same statistic per {s.node_label!r} label{custom(q.node_cpu, DEFAULT_NODE_CPU_QUERY)}"
        if q.node_freshness is None:
            freshness = "node freshness: not checked"
        else:
            freshness = (
                f"node freshness: newest sample within {format_duration(s.max_data_age)}"
                f"{custom(q.node_freshness, DEFAULT_NODE_FRESHNESS_QUERY)}"
            )
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
