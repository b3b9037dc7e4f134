"""Real CPU usage from Prometheus: instant queries at the caller's time, strictly validated.

This is the only module that talks to Prometheus (``prometheus_api_client`` over ``requests``).
Every answer is checked before it becomes a :class:`~rebalancer.model.UsageReport`; anything
doubtful raises a :class:`~rebalancer.errors.SourceError`, so the cycle makes no eviction:

* ``MetricsUnavailable``: Prometheus unreachable, timed out, an HTTP error (with Prometheus'
  ``errorType``/``error``), or ``status: error``.
* ``MetricsMalformed``: the answer is not an instant vector, a series lacks its key labels, two
  series share a key, a value is NaN, infinite, negative or unparsable.
* ``MetricsStale``: a query answered with no series at all (Prometheus has no data: an empty answer
  is never read as zero usage), or the newest freshness sample of *every* node is older than
  ``maxDataAgeSeconds`` (scraping is broken as a whole).

A single node whose newest sample is too old (or that has no freshness sample while a freshness
query is configured) goes into ``node_problems`` and is left out of ``node_cpu_m``: unknown, not 0.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

import requests
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3.util.retry import Retry

from rebalancer.errors import MetricsMalformed, MetricsStale, MetricsUnavailable
from rebalancer.model import PodKey, UsageReport
from rebalancer.settings import (
    DEFAULT_NODE_CPU_QUERY,
    DEFAULT_NODE_FRESHNESS_QUERY,
    DEFAULT_POD_CPU_QUERY,
    PrometheusSettings,
)

_log = logging.getLogger(__name__)

Labels = Mapping[str, str]
_MAX_SHOWN = 300  # characters of a body or series shown in an error message


class PrometheusUsageSource:
    """Reads per-pod and per-node CPU usage (window quantiles) from Prometheus.

    ``read(at)`` evaluates every query at ``at`` (epoch seconds, from the caller's clock), so one
    cycle sees one consistent instant and tests can evaluate history far in the past.
    """

    def __init__(self, settings: PrometheusSettings) -> None:
        self._settings = settings
        self._url = settings.url.rstrip("/")
        self._last = threading.local()  # the raw HTTP answer of this thread's last query
        # Our own session: custom_query() returns only data.result and folds HTTP errors into a
        # string, so a response hook keeps the raw answer for Prometheus' own error message.
        self._session = requests.Session()
        self._session.verify = settings.verify_tls  # PrometheusConnect leaves a given session's verify alone
        self._session.hooks["response"].append(self._keep_response)
        self._client: Any = PrometheusConnect(
            url=self._url,
            disable_ssl=not settings.verify_tls,
            # No retries inside a cycle: the library default (3 retries with backoff on 5xx and on
            # read timeouts) would multiply the timeout; the next cycle is the retry.
            retry=Retry(total=0, read=False),
            session=self._session,
            timeout=settings.timeout_seconds,
        )

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> PrometheusUsageSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read(self, at: float, nodes: frozenset[str] | None = None) -> UsageReport:
        """Usage as seen at ``at``; raises a ``SourceError`` when the answer cannot be trusted.

        ``nodes``: only those nodes' pods are needed (an alert-driven cycle); honoured when the node usage
        comes from its own query (pod-sum mode needs every pod) and the pod template has ``{pod_filter}``."""
        settings = self._settings
        queries = settings.queries
        self._authorize()
        problems: dict[str, str] = {}
        fresh: dict[str, float] | None = None
        if queries.node_freshness is not None:
            fresh = self._by_node("node_freshness", settings.render(queries.node_freshness), at)
            problems.update(self._stale_nodes(fresh, at))
        node_cpu_m: dict[str, int] = {}
        if queries.node_cpu is not None:
            for node, cores in self._by_node("node_cpu", settings.render(queries.node_cpu), at).items():
                if fresh is not None and node not in fresh:
                    problems[node] = (
                        "no freshness sample within Prometheus' lookback delta (default 5m) "
                        "before the evaluation time: data too old or missing"
                    )
                if node not in problems:
                    node_cpu_m[node] = _millicores(cores)
        pod_cpu_m = {
            key: _millicores(cores)
            for key, cores in self._by_pod(
                settings.render(queries.pod_cpu, nodes if queries.node_cpu is not None else None), at
            ).items()
        }
        return UsageReport(
            node_cpu_m=MappingProxyType(node_cpu_m),
            pod_cpu_m=MappingProxyType(pod_cpu_m),
            node_problems=MappingProxyType(problems),
            failure=None,
            node_from_pods=queries.node_cpu is None,
            fresh_nodes=None if fresh is None else frozenset(fresh),
            description=self._describe(at),
        )

    # -- staleness ---------------------------------------------------------------------------

    def _stale_nodes(self, fresh: Mapping[str, float], at: float) -> dict[str, str]:
        limit = self._settings.max_data_age_seconds
        newest = max(fresh.values())
        if at - newest > limit:
            raise MetricsStale(
                f"Prometheus' newest sample over all {len(fresh)} node(s) is {at - newest:.0f}s old at "
                f"{_iso(at)} > maxDataAgeSeconds {limit:g}: the whole source is stale"
            )
        return {
            node: f"newest sample {at - stamp:.0f}s old > maxDataAgeSeconds {limit:g}"
            for node, stamp in sorted(fresh.items())
            if at - stamp > limit
        }

    # -- keyed vectors -----------------------------------------------------------------------

    def _by_node(self, name: str, promql: str, at: float) -> dict[str, float]:
        label = self._settings.node_label
        out: dict[str, float] = {}
        for labels, value in self._vector(name, promql, at):
            node = labels.get(label)
            if not node:
                raise MetricsMalformed(f"query {name}: a series has no {label!r} label: {_show(labels)}")
            if node in out:
                raise MetricsMalformed(f"query {name}: more than one series for node {node!r}: {_show(labels)}")
            out[node] = value
        return out

    def _by_pod(self, promql: str, at: float) -> dict[PodKey, float]:
        out: dict[PodKey, float] = {}
        for labels, value in self._vector("pod_cpu", promql, at):
            namespace, pod = labels.get("namespace"), labels.get("pod")
            if not namespace or not pod:
                missing = "namespace" if not namespace else "pod"
                raise MetricsMalformed(f"query pod_cpu: a series has no {missing!r} label: {_show(labels)}")
            if (namespace, pod) in out:
                raise MetricsMalformed(
                    f"query pod_cpu: more than one series for pod {namespace}/{pod}: {_show(labels)}"
                )
            out[namespace, pod] = value
        return out

    def _vector(self, name: str, promql: str, at: float) -> list[tuple[Labels, float]]:
        result = self._query(name, promql, at)
        series = _parse_vector(name, result)
        if not series:
            raise MetricsStale(
                f"query {name} answered no series at {_iso(at)}: Prometheus has no data for it, "
                f"so usage is unknown (never read as zero); query: {promql}"
            )
        return series

    # -- transport ---------------------------------------------------------------------------

    def _query(self, name: str, promql: str, at: float) -> object:
        params = {"time": f"{at:.3f}", "timeout": f"{self._settings.timeout_seconds:g}s"}
        started = time.monotonic()
        self._last.response = None
        try:
            result = self._call(name, promql, params)
        finally:
            self._last.response = None  # do not keep a large answer alive between cycles
        _log.debug("query %s at %s took %.3fs", name, _iso(at), time.monotonic() - started)
        return result

    def _call(self, name: str, promql: str, params: Mapping[str, str]) -> object:
        try:
            result: object = self._client.custom_query(promql, params=dict(params))
        except requests.Timeout as exc:
            raise MetricsUnavailable(
                f"query {name}: Prometheus at {self._url} did not answer within {self._settings.timeout_seconds:g}s"
            ) from exc
        except requests.ConnectionError as exc:
            raise MetricsUnavailable(f"query {name}: cannot reach Prometheus at {self._url}: {exc}") from exc
        except requests.JSONDecodeError as exc:
            raise MetricsMalformed(f"query {name}: HTTP 200 but the body is not JSON: {self._body()}") from exc
        except PrometheusApiClientException as exc:
            raise MetricsUnavailable(f"query {name}: {self._http_error()}; query: {promql}") from exc
        except requests.RequestException as exc:
            raise MetricsUnavailable(f"query {name}: request to Prometheus at {self._url} failed: {exc}") from exc
        except (KeyError, TypeError, ValueError) as exc:  # HTTP 200, but no data.result in the body
            answer = self._json()
            if isinstance(answer, dict) and answer.get("status") == "error":
                raise MetricsUnavailable(f"query {name}: {self._http_error()}; query: {promql}") from exc
            raise MetricsMalformed(f"query {name}: the answer has no data.result: {self._body()}") from exc
        return result

    def _keep_response(self, response: requests.Response, *args: object, **kwargs: object) -> None:
        self._last.response = response

    def _http_error(self) -> str:
        response: requests.Response | None = self._last.response
        if response is None:
            return "Prometheus answered with an error"
        answer = self._json()
        if isinstance(answer, dict) and "error" in answer:
            return (
                f"Prometheus answered HTTP {response.status_code} ({answer.get('errorType', '?')}): {answer['error']}"
            )
        return f"Prometheus answered HTTP {response.status_code}: {self._body()}"

    def _json(self) -> object:
        response: requests.Response | None = self._last.response
        if response is None:
            return None
        try:
            return response.json()
        except ValueError:  # requests.JSONDecodeError is a ValueError
            return None

    def _body(self) -> str:
        response: requests.Response | None = self._last.response
        return "" if response is None else _clip(response.text)

    def _authorize(self) -> None:
        """Reads the bearer token on every cycle: projected service-account tokens rotate."""
        path = self._settings.bearer_token_file
        if path is None:
            return
        try:
            token = Path(path).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise MetricsUnavailable(f"cannot read the Prometheus bearer token file {path}: {exc}") from exc
        if not token:
            raise MetricsUnavailable(f"the Prometheus bearer token file {path} is empty")
        self._session.headers["Authorization"] = f"Bearer {token}"

    def _describe(self, at: float) -> str:
        s = self._settings
        q = s.queries

        def custom(template: str | None, default: str) -> str:
            return "" if template == default else " (custom query)"

        pods = (
            f"pods: {s.quantile:g} quantile over {s.window} (step {s.step}) of rate[{s.rate_window}]"
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
                f"node freshness: newest sample within {s.max_data_age_seconds:g}s"
                f"{custom(q.node_freshness, DEFAULT_NODE_FRESHNESS_QUERY)}"
            )
        return f"Prometheus {self._url} at {_iso(at)}; {pods}; {nodes}; {freshness}"


def _parse_vector(name: str, result: object) -> list[tuple[Labels, float]]:
    """Checks the shape of ``data.result`` (the Prometheus HTTP API) and returns (labels, value) pairs.

    ``custom_query`` hands back only ``data.result``; the shapes still tell the result types apart:
    a vector is a list of ``{"metric", "value"}``, a matrix a list of ``{"metric", "values"}``, a
    scalar or string a bare ``[time, "text"]`` pair.
    """
    if not isinstance(result, list):
        raise MetricsMalformed(f"query {name}: expected an instant vector, got {_clip(repr(result))}")
    if len(result) == 2 and isinstance(result[0], int | float) and isinstance(result[1], str):
        raise MetricsMalformed(
            f"query {name}: expected an instant vector, got a scalar or string ({result[1]!r}); "
            "the query must return one series per key"
        )
    series: list[tuple[Labels, float]] = []
    for item in result:
        if not isinstance(item, dict):
            raise MetricsMalformed(f"query {name}: expected an instant vector, got an element {_clip(repr(item))}")
        labels = item.get("metric")
        if "values" in item or "histograms" in item:
            raise MetricsMalformed(f"query {name}: expected an instant vector, got a range vector (matrix)")
        if "histogram" in item:
            raise MetricsMalformed(f"query {name}: native histogram sample, expected a float: {_show(labels)}")
        if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
            raise MetricsMalformed(f"query {name}: a series has no label set: {_clip(repr(item))}")
        series.append((labels, _value(name, labels, item.get("value"))))
    return series


def _value(name: str, labels: Labels, pair: object) -> float:
    if not isinstance(pair, list) or len(pair) != 2 or not isinstance(pair[1], str):
        raise MetricsMalformed(f"query {name}: series {_show(labels)} has no [time, value] pair: {_clip(repr(pair))}")
    try:
        value = float(pair[1])
    except ValueError as exc:
        raise MetricsMalformed(f"query {name}: series {_show(labels)} has an unparsable value {pair[1]!r}") from exc
    if not math.isfinite(value):
        raise MetricsMalformed(f"query {name}: series {_show(labels)} has the value {pair[1]}")
    if value < 0:
        raise MetricsMalformed(f"query {name}: series {_show(labels)} has a negative value {pair[1]}")
    return value


def _millicores(cores: float) -> int:
    return round(cores * 1000)


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _show(labels: object) -> str:
    if not isinstance(labels, dict):
        return _clip(repr(labels))
    return _clip("{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}")


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN] + "..."
