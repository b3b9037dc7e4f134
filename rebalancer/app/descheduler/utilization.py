"""LowNodeUtilization and HighNodeUtilization arguments as rebalancer strategies (pure).

The descheduler reads utilization as requests (unless ``metricsUtilization`` says otherwise): the imported
strategy classifies by ``requests`` and does not predict placement, so that it first behaves as the
descheduler did. CPU, memory and pods thresholds carry over, as the descheduler reads them: a node is hot
when any is over its target (LowNodeUtilization), cold or underutilized when all are under their thresholds.
HighNodeUtilization has no targetThresholds: its destinations may fill every resource to 100%.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rebalancer.app.descheduler.evictor import flag, namespaces
from rebalancer.app.descheduler.notes import Note, Notes
from rebalancer.app.descheduler.source import SourceProblem, mapping

KINDS = ("LowNodeUtilization", "HighNodeUtilization")
METRIC_RESOURCE = "MetricResource"  # the descheduler's threshold key when utilization comes from a Prometheus query


def strategy_of(kind: str, args: Mapping[str, Any], path: str, notes: Notes) -> tuple[dict[str, Any], dict[str, Any]]:
    """The strategy for ``kind``'s ``args``, and the protections it implies (evictableNamespaces); the
    strategy is {} when nothing of its classification carries over."""
    by_metrics = _metrics_source(args.get("metricsUtilization"), f"{path}.metricsUtilization", notes)
    resource = METRIC_RESOURCE if by_metrics == "prometheus" else "cpu"
    low, others = _cpu(args.get("thresholds"), f"{path}.thresholds", resource)
    high, more = _cpu(args.get("targetThresholds"), f"{path}.targetThresholds", resource)
    carried = _carried(kind, args, path, by_metrics, notes) if low is not None else ({}, {})
    others += [r for r in more if r not in others]
    others = [r for r in others if r not in carried[0]]
    if others:
        notes.add(Note.unsupported(f"{path}.thresholds", f"{', '.join(others)}: {_why_not(others, by_metrics)}, "
                                   "where the descheduler made a node cold only below every threshold and hot above "
                                   "any target"))  # fmt: skip
    strategy: dict[str, Any] = {"kind": kind, "classifyBy": "current" if by_metrics else "requests"}
    strategy["predictPlacement"] = False
    if low is None:
        notes.add(Note.unsupported(f"{path}.thresholds", "no cpu threshold: rebalancer classifies nodes by CPU "
                                   f"only, so this {kind} is not imported"))  # fmt: skip
        return {}, {}
    strategy["thresholds"] = {"cpu": low, **carried[0]}
    if kind == "LowNodeUtilization":
        if high is None:
            raise SourceProblem(f"{path}.targetThresholds", "needs the same resources as thresholds (cpu)")
        strategy["targetThresholds"] = {"cpu": high, **carried[1]}
        notes.add(Note.differs(path, "predictPlacement: false, as the descheduler: where the scheduler puts a "
                               "replacement is not predicted, so a pod whose replacement lands back on its node may "
                               "be evicted; predictPlacement: true (rebalancer's default) passes those over"))  # fmt: skip
    else:
        strategy["targetThresholds"] = {"cpu": 100, **carried[1]}
        notes.add(Note.differs(f"{path}", "HighNodeUtilization: destinations may fill up to 100% (targetThresholds "
                               "100 on every resource), as the descheduler's; a node is emptied all at once or not "
                               "at all, and predictPlacement is false because the descheduler expects a "
                               "MostAllocated scheduler"))  # fmt: skip
    protections: dict[str, Any] = {}
    for key, value in args.items():
        at = f"{path}.{key}"
        if key in ("thresholds", "targetThresholds", "metricsUtilization"):
            continue
        if key == "useDeviationThresholds" and kind == "LowNodeUtilization":
            strategy["useDeviationThresholds"] = flag(value, at)
        elif key == "numberOfNodes":
            strategy["numberOfNodes"] = value
            notes.add(Note.differs(at, "counted per resource pool (one pool unless pools: says otherwise)"))
        elif key == "evictableNamespaces":
            protections["evictableNamespaces"] = namespaces(value, at)
            notes.add(Note.differs(at, "protections.evictableNamespaces holds for every strategy of the policy"))
        elif key == "evictionLimits":
            strategy.update(_eviction_limits(mapping(value, at), at, notes))
        elif key == "evictionModes":
            notes.add(Note.differs(at, "a requests-based strategy never moves a pod without a CPU request: "
                                   "OnlyThresholdingResources holds for cpu in any case"))  # fmt: skip
        else:
            notes.add(Note.unsupported(at, f"no {kind} argument of rebalancer matches: not imported"))
    return strategy, protections


def _carried(
    kind: str, args: Mapping[str, Any], path: str, by_metrics: str | None, notes: Notes
) -> tuple[dict[str, float], dict[str, float]]:
    """The memory and pods percentages read from requests or the metrics server: LowNodeUtilization's named on
    both sides (thresholds, targetThresholds); HighNodeUtilization's thresholds, with targets of 100."""
    if by_metrics == "prometheus":
        return {}, {}
    low, high = mapping(args.get("thresholds"), path), mapping(args.get("targetThresholds"), path)
    if kind == "HighNodeUtilization":
        high = dict.fromkeys(("memory", "pods"), 100)
    names = [r for r in ("memory", "pods") if r in low and r in high]
    for name in names:
        for side, found in (("thresholds", low), ("targetThresholds", high)):
            _percentage(found[name], f"{path}.{side}.{name}")
    if "memory" in names and by_metrics:
        unknown = "a pod of unknown memory is never moved" if kind == "LowNodeUtilization" else (
            "a node holding a pod of unknown memory is never emptied")  # fmt: skip
        notes.add(Note.differs(f"{path}.thresholds.memory", "memory is the working set read from Prometheus "
                               "(prometheus.queries nodeMemory and podMemory), as the metrics server reports it; "
                               f"{unknown}"))  # fmt: skip
    return {n: low[n] for n in names}, {n: high[n] for n in names}


def _why_not(resources: list[str], by_metrics: str | None) -> str:
    if not set(resources) <= {"memory", "pods"}:
        return "rebalancer has no thresholds on extended resources"
    if by_metrics == "prometheus":
        return "a Prometheus query's MetricResource stands for one resource, read as CPU"
    return "named on one side only (thresholds or targetThresholds): the descheduler needs both"


def _percentage(amount: object, path: str) -> float:
    if isinstance(amount, bool) or not isinstance(amount, int | float) or not 0 <= amount <= 100:
        raise SourceProblem(path, f"expected a percentage from 0 to 100, not {amount!r}")
    return float(amount)


def _metrics_source(value: object, path: str, notes: Notes) -> str | None:
    """None: requests; "metrics" (metrics server) or "prometheus" (a query): real usage."""
    found = mapping(value, path)
    if not found:
        return None
    source = found.get("source")
    if source == "Prometheus" or "prometheus" in found:
        query = mapping(found.get("prometheus"), f"{path}.prometheus").get("query")
        notes.add(Note.differs(f"{path}.prometheus.query", f"rebalancer reads CPU per node and per pod with its own "
                               f"queries (prometheus.queries), not this utilization fraction ({query!r}); the "
                               "thresholds on MetricResource are read as CPU thresholds: check that the query "
                               "measured CPU"))  # fmt: skip
        return "prometheus"
    if source == "KubernetesMetrics" or found.get("metricsServer") is True:
        notes.add(Note.differs(path, "real usage comes from Prometheus (cAdvisor), not the metrics server: "
                               "classifyBy current, with prometheus.url pointing at a Prometheus"))  # fmt: skip
        return "metrics"
    raise SourceProblem(path, f"unknown source {source!r}: expected KubernetesMetrics or Prometheus")


def _cpu(value: object, path: str, resource: str) -> tuple[float | None, list[str]]:
    """The CPU percentage (None: not set) and the other resources named."""
    found = mapping(value, path)
    others = [str(key) for key in found if key != resource]
    amount = found.get(resource)
    if amount is None:
        return None, others
    _percentage(amount, f"{path}.{resource}")
    return amount, others


def _eviction_limits(limits: Mapping[str, Any], path: str, notes: Notes) -> dict[str, Any]:
    out = {}
    for key, value in limits.items():
        if key == "node" and isinstance(value, int) and value >= 1:
            out["maxNoOfPodsToEvictPerNode"] = value
            notes.add(Note.differs(f"{path}.node", "this strategy's maxNoOfPodsToEvictPerNode, applied first, while "
                                   "planning; limits.node.maxPerCycle applies afterwards, in the evictor"))  # fmt: skip
        else:
            notes.add(Note.unsupported(f"{path}.{key}", "no per-strategy limit of this kind: not imported"))
    return out
