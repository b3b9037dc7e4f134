"""Node usage from the policy's node sources (``prometheus.nodeSources``), tried in order for each node.

Every source's queries are sent at once (:func:`submit`); :func:`combine` then gives each node the reading
of the first source that knows it: a series for the node, a fresh one (``maxDataAge``), old enough
(``youngNodes``: rate() over a short history reads low). A node a source cannot read is looked up in the
next; the reasons are kept for a node no source knows (unknown, never zero). ``podSum`` (the sum of the
node's pods, only ever last) is decided by the snapshot, which knows the node's pods: this module gives it
the nodes whose pods are fresh and those it cannot read.

With one source alone every query must answer, as before the sources had an order: an empty answer is
stale data (``MetricsStale``). With several, a source that answers nothing knows no node; if none knows
any node and no pod sum follows, the answer is stale. If the newest sample of every source that has data
is older than ``maxDataAge``, scraping is broken as a whole: stale.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal

from rebalancer.adapters.prom.client import PromClient, Vector, by_node, iso
from rebalancer.domain.errors import MetricsStale
from rebalancer.domain.settings.node_sources import NodeSource
from rebalancer.domain.settings.shared import PrometheusSettings, format_duration

Query = Literal["cpu", "freshness", "young", "memory"]


@dataclass
class _Pending:
    source: NodeSource
    answers: dict[Query, Future[Vector]]


@dataclass
class NodeReadings:
    """What the node sources say, node by node."""

    cpu_m: dict[str, int] = field(default_factory=dict)
    source: dict[str, str] = field(default_factory=dict)
    memory: dict[str, int] | None = None
    problems: dict[str, str] = field(default_factory=dict)  # nodes no source before podSum knows: why
    from_pods: bool = False
    fresh_pods: frozenset[str] | None = None
    pod_sum_problems: dict[str, str] = field(default_factory=dict)
    names: tuple[str, ...] = ()


def submit(
    pool: ThreadPoolExecutor, client: PromClient, settings: PrometheusSettings, at: float, *, memory: bool
) -> list[_Pending]:
    """Send every query of every node source (memory ones only with ``memory``)."""
    pending = []
    for source in settings.resolved_node_sources():
        answers: dict[Query, Future[Vector]] = {}
        templates: dict[Query, str | None] = {  # the order their answers are taken in
            "young": source.young,
            "freshness": source.freshness,
            "cpu": source.cpu,
            "memory": source.memory if memory else None,
        }
        for what, template in templates.items():
            if template is not None:
                answers[what] = pool.submit(client.large_vector, source.query_name(what), settings.render(template), at)
        pending.append(_Pending(source, answers))
    return pending


def combine(pending: list[_Pending], settings: PrometheusSettings, at: float, *, memory: bool) -> NodeReadings:
    """Each node's reading from the first source that can read it (the answers are taken in order, so the
    failure raised is the first failing query's)."""
    strict = len(pending) == 1
    out = NodeReadings(memory={} if memory else None, names=tuple(p.source.name for p in pending))
    reasons: dict[str, list[str]] = {}
    stale_sources: list[str] = []
    live = False
    for one in pending:
        source = one.source
        found = {what: _keyed(one, what, settings, at, strict) for what in one.answers}
        problems: dict[str, str] = {}
        if "young" in found:
            problems.update(dict.fromkeys(found["young"], _too_young(settings)))
        fresh = found.get("freshness")
        if fresh:
            stale = _stale_nodes(fresh, at, settings)
            if len(stale) == len(fresh):
                stale_sources.append(_all_stale(fresh, at, settings, source.name))
            else:
                live = True
            problems.update(stale)
        if source.from_pods:
            out.from_pods = True
            out.fresh_pods = None if fresh is None else frozenset(fresh)
            out.pod_sum_problems = problems
            if fresh is None:
                live = True
            if out.memory is not None:  # of the nodes it may read: its pods' series are fresh
                readable = (n for n in found.get("memory", {}) if n not in out.cpu_m and n not in problems)
                out.memory.update((n, round(found["memory"][n])) for n in readable if fresh is None or n in fresh)
            continue
        cpu = found["cpu"]
        if fresh is None and cpu:
            live = True
        for node, why in problems.items():
            if node not in out.cpu_m:
                reasons.setdefault(node, []).append(f"{source.name}: {why}")
        for node, cores in cpu.items():
            if node in out.cpu_m or node in problems:
                continue
            if fresh is not None and node not in fresh:
                reasons.setdefault(node, []).append(f"{source.name}: {_NO_FRESHNESS}")
                continue
            out.cpu_m[node] = round(cores * 1000)
            out.source[node] = source.name
            value = found.get("memory", {}).get(node)
            if out.memory is not None and value is not None:
                out.memory[node] = round(value)
    if stale_sources and not live:
        raise MetricsStale("; ".join(stale_sources))
    if not strict and not out.cpu_m and not out.from_pods:
        raise MetricsStale(
            f"no node source knows any node at {iso(at)} ({', '.join(out.names)}): Prometheus has no data for "
            "them, so usage is unknown (never read as zero)"
        )
    out.problems = {node: "; ".join(why) for node, why in sorted(reasons.items()) if node not in out.cpu_m}
    return out


_NO_FRESHNESS = (
    "no freshness sample within Prometheus' lookback delta (default 5m) before the evaluation time: "
    "data too old or missing"
)


def _keyed(one: _Pending, what: Query, settings: PrometheusSettings, at: float, strict: bool) -> dict[str, float]:
    """The answer of one of a source's queries, by node; with ``strict`` (a source alone) an empty one is
    stale, except the young-node check's (no young node)."""
    name = one.source.query_name(what)
    series = one.answers[what].result()
    if strict and not series and what != "young":
        template = getattr(one.source, what)
        raise MetricsStale(
            f"query {name} answered no series at {iso(at)}: Prometheus has no data for it, "
            f"so usage is unknown (never read as zero); query: {settings.render(template)}"
        )
    return by_node(name, series, one.source.label)


def _too_young(settings: PrometheusSettings) -> str:
    span = f"rateWindow {format_duration(settings.rate_window)} + step {format_duration(settings.step)}"
    return (
        f"less than {settings.data_span_seconds}s of data ({span}): rate() would "
        "spread the short history over the whole window and read it low, so usage is unknown"
    )


def _stale_nodes(fresh: dict[str, float], at: float, settings: PrometheusSettings) -> dict[str, str]:
    written = format_duration(settings.max_data_age)
    limit = settings.max_data_age.total_seconds()
    return {
        node: f"newest sample {at - stamp:.0f}s old > maxDataAge {written}"
        for node, stamp in sorted(fresh.items())
        if at - stamp > limit
    }


def _all_stale(fresh: dict[str, float], at: float, settings: PrometheusSettings, name: str) -> str:
    newest = max(fresh.values())
    return (
        f"Prometheus' newest sample over all {len(fresh)} node(s) is {at - newest:.0f}s old at "
        f"{iso(at)} > maxDataAge {format_duration(settings.max_data_age)}: the whole source is stale ({name})"
    )
