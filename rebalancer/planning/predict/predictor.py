"""Pods' daily peaks -> predicted next-peak usage of each node (pure: no I/O, no clock).

Each pod's prediction records where it came from:

- ``history``: at least ``minHistoryDays`` days of its own history, aggregated as the policy says;
- ``workload``: too little history, so it borrows its workload's profile: the ``siblingQuantile`` of the
  predictions of the workload's other pods that have history (siblings sit at different levels);
- ``request``: no sibling with history either, so its CPU request (as declared, no margin);
- ``partial``: no request (BestEffort) but some days of its own history, aggregated as they are;
- ``unknown``: nothing at all. A node with an unknown pod is itself unknown: never hot, never cold.

Pods in the history that are gone from the cluster are dropped. A node's predicted utilization is its
predicted CPU / allocatable CPU, where its predicted CPU is, with ``nodePeak: coincident`` and the pods'
daily profiles at hand, its coincident peak (:mod:`rebalancer.planning.predict.node_peak`: the highest time-of-day
bucket of its pods' summed profiles, plus its system usage), and otherwise the sum of its pods'
predictions plus its system usage. When pods move, the nodes whose
pod set changed are re-predicted from their current pods (:func:`repredict`); the others keep theirs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from enum import StrEnum

import msgspec
import numpy as np

from rebalancer.domain.model import TERMINAL_PHASES, ClusterFacts, Node, Pod, PodKey
from rebalancer.domain.settings.predictor import PredictorSettings
from rebalancer.planning.predict.aggregate import aggregate_with
from rebalancer.planning.predict.history import DailyPeaks
from rebalancer.planning.predict.node_peak import NodePeak, PeakBook, build_book
from rebalancer.planning.predict.profile import DailyProfiles


class Source(StrEnum):
    HISTORY = "history"
    WORKLOAD = "workload"
    REQUEST = "request"
    PARTIAL = "partial"
    UNKNOWN = "unknown"
    DEFAULT = "default"  # system usage: the policy's systemCpuM


class PodPrediction(msgspec.Struct, frozen=True, gc=False):
    namespace: str
    name: str
    node: str
    workload: str | None
    cpu_m: float | None  # None: unknown
    source: Source
    history_days: int  # days of its own history in the window
    detail: str

    @property
    def key(self) -> PodKey:
        return (self.namespace, self.name)


class NodePrediction(msgspec.Struct, frozen=True, gc=False):
    node: str
    allocatable_cpu_m: int
    pods_cpu_m: float | None  # None when any pod is unknown
    system_cpu_m: float
    system_source: Source
    cpu_m: float | None
    utilization_pct: float | None
    hot: bool | None  # None: unknown
    pods: tuple[PodKey, ...]  # the pod set the prediction was made from, sorted
    sources: dict[str, int]  # how many of its pods came from each source
    unknown_pods: tuple[PodKey, ...] = ()
    basis: str = "sum"  # what cpu_m is: "coincident" (the peak below) or "sum" (pods_cpu_m + system_cpu_m)
    peak: NodePeak | None = None  # the coincident peak, when the pods' profiles were read and none is unknown


class Prediction(msgspec.Struct, frozen=True, gc=False):
    aggregation: str
    safety_margin: float
    hot_threshold: float
    days: int
    pods: tuple[PodPrediction, ...]
    nodes: tuple[NodePrediction, ...]
    dropped_history: int  # pods in the history that are gone from the cluster
    repredicted: tuple[str, ...] = ()  # nodes re-predicted by repredict()

    def hot_nodes(self) -> tuple[str, ...]:
        return tuple(n.node for n in self.nodes if n.hot)


def scheduled_pods(facts: ClusterFacts) -> dict[str, list[Pod]]:
    """Pods that will still run on their node at the next peak: bound, not finished, not terminating."""
    by_node: dict[str, list[Pod]] = defaultdict(list)
    for pod in facts.pods:
        if pod.node_name and pod.phase not in TERMINAL_PHASES and not pod.terminating:
            by_node[pod.node_name].append(pod)
    return by_node


def predict_pods(
    pods: Iterable[Pod], history: DailyPeaks[PodKey], settings: PredictorSettings
) -> dict[PodKey, PodPrediction]:
    """Predictions for ``pods``, with the churn fallbacks. Siblings are the given pods of the same workload."""
    pods = list(pods)
    if history.days != settings.days:
        raise ValueError(f"history holds {history.days} days, the predictor reads {settings.days}")
    aggregated = aggregate_with(history.values, history.pooled, settings)
    present = history.present_days()
    own: dict[PodKey, tuple[float, int]] = {}
    for pod in pods:
        i = history.index(pod.key)
        if i is not None:
            own[pod.key] = (float(aggregated[i]), int(present[i]))
    enough = {k for k, (value, days) in own.items() if days >= settings.min_history_days and not np.isnan(value)}
    by_workload: dict[str, list[float]] = defaultdict(list)
    for pod in pods:
        if pod.key in enough and pod.workload is not None:
            by_workload[str(pod.workload)].append(own[pod.key][0])
    out: dict[PodKey, PodPrediction] = {}
    for pod in pods:
        value, days = own.get(pod.key, (np.nan, 0))
        workload = str(pod.workload) if pod.workload is not None else None
        siblings = by_workload.get(workload, []) if workload is not None else []
        if pod.key in enough:
            cpu, source, detail = value, Source.HISTORY, f"{settings.aggregation} of {days} day(s)"
        elif siblings:
            cpu = float(np.quantile(siblings, settings.sibling_quantile))
            source = Source.WORKLOAD
            detail = (
                f"{days} day(s) of history; quantile {settings.sibling_quantile:g} of {len(siblings)} sibling(s) "
                f"({min(siblings):.0f}-{max(siblings):.0f} m)"
            )
        elif pod.cpu_request_m > 0:
            cpu, source, detail = float(pod.cpu_request_m), Source.REQUEST, f"{days} day(s) of history, no sibling"
        elif days > 0 and not np.isnan(value):
            cpu, source, detail = value, Source.PARTIAL, f"{settings.aggregation} of only {days} day(s), no request"
        else:
            cpu, source, detail = None, Source.UNKNOWN, "no history, no sibling with history, no request"
        out[pod.key] = PodPrediction(pod.namespace, pod.name, pod.node_name or "", workload, cpu, source, days, detail)
    return out


def _system(
    node: str, system: DailyPeaks[str] | None, aggregated: np.ndarray | None, settings: PredictorSettings
) -> tuple[float, Source]:
    if system is not None and aggregated is not None:
        i = system.index(node)
        if i is not None and not np.isnan(aggregated[i]):
            return float(aggregated[i]), Source.HISTORY
    return float(settings.system_cpu_m), Source.DEFAULT


def predict_node(
    node: Node,
    pods: Iterable[PodPrediction],
    system_cpu_m: float,
    system_source: Source,
    hot_threshold: float,
    peak: NodePeak | None = None,
) -> NodePrediction:
    pods = sorted(pods, key=lambda p: p.key)
    sources: dict[str, int] = defaultdict(int)
    for p in pods:
        sources[p.source.value] += 1
    unknown = tuple(p.key for p in pods if p.cpu_m is None)
    pods_cpu = None if unknown else float(sum(p.cpu_m or 0.0 for p in pods))
    total = None if pods_cpu is None else pods_cpu + system_cpu_m
    if peak is not None and total is not None:
        total = peak.cpu_m
    pct = None if total is None or node.allocatable_cpu_m <= 0 else 100.0 * total / node.allocatable_cpu_m
    return NodePrediction(
        node=node.name,
        allocatable_cpu_m=node.allocatable_cpu_m,
        pods_cpu_m=pods_cpu,
        system_cpu_m=system_cpu_m,
        system_source=system_source,
        cpu_m=total,
        utilization_pct=pct,
        hot=None if pct is None else pct > hot_threshold,
        pods=tuple(p.key for p in pods),
        sources=dict(sorted(sources.items())),
        unknown_pods=unknown,
        basis="coincident" if peak is not None and total is not None else "sum",
        peak=peak if total is not None else None,
    )


def predict(
    facts: ClusterFacts,
    history: DailyPeaks[PodKey],
    settings: PredictorSettings,
    system: DailyPeaks[str] | None = None,
    profiles: DailyProfiles[PodKey] | None = None,
) -> Prediction:
    """Predicted next-peak usage of every node from its current pods (the coincident peak when
    ``settings.node_peak`` says so and ``profiles`` are given)."""
    return _assemble(facts, history, settings, system, previous=None, profiles=profiles)[0]


def predict_with_book(
    facts: ClusterFacts,
    history: DailyPeaks[PodKey],
    settings: PredictorSettings,
    system: DailyPeaks[str] | None = None,
    profiles: DailyProfiles[PodKey] | None = None,
) -> tuple[Prediction, PeakBook | None]:
    """:func:`predict`, and the peak book its coincident node peaks were read from (None without
    profiles or with ``nodePeak: sum``): what a planner moves pods in, built once per prediction."""
    return _assemble(facts, history, settings, system, previous=None, profiles=profiles)


def stale_nodes(prediction: Prediction, facts: ClusterFacts) -> frozenset[str]:
    """Nodes whose pod set differs from the one their prediction was made from (new nodes included)."""
    current = scheduled_pods(facts)
    made_from = {n.node: n.pods for n in prediction.nodes}
    return frozenset(
        node.name
        for node in facts.nodes
        if made_from.get(node.name) != tuple(sorted(p.key for p in current.get(node.name, ())))
    )


def repredict(
    prediction: Prediction,
    facts: ClusterFacts,
    history: DailyPeaks[PodKey],
    settings: PredictorSettings,
    system: DailyPeaks[str] | None = None,
    profiles: DailyProfiles[PodKey] | None = None,
) -> Prediction:
    """Re-predict the nodes whose pod set changed since ``prediction``; the others keep theirs. Nodes gone
    from ``facts`` are dropped. Pods keep their earlier prediction wherever they now run."""
    return _assemble(facts, history, settings, system, previous=prediction, profiles=profiles)[0]


def _assemble(
    facts: ClusterFacts,
    history: DailyPeaks[PodKey],
    settings: PredictorSettings,
    system: DailyPeaks[str] | None,
    previous: Prediction | None,
    profiles: DailyProfiles[PodKey] | None = None,
) -> tuple[Prediction, PeakBook | None]:
    current = scheduled_pods(facts)
    all_pods = [p for pods in current.values() for p in pods]
    stale = stale_nodes(previous, facts) if previous is not None else frozenset(n.name for n in facts.nodes)
    kept_pods: Mapping[PodKey, PodPrediction] = {p.key: p for p in previous.pods} if previous is not None else {}
    fresh = predict_pods(all_pods, history, settings)
    pod_predictions: dict[PodKey, PodPrediction] = {}
    for pod in all_pods:
        earlier = kept_pods.get(pod.key)
        if earlier is not None:
            pod_predictions[pod.key] = msgspec.structs.replace(earlier, node=pod.node_name or "")
        else:
            pod_predictions[pod.key] = fresh[pod.key]
    system_agg = aggregate_with(system.values, system.pooled, settings) if system is not None else None
    old_nodes = {n.node: n for n in previous.nodes} if previous is not None else {}
    node_system: dict[str, tuple[float, Source]] = {}
    for node in facts.nodes:
        if node.name in old_nodes:
            node_system[node.name] = (old_nodes[node.name].system_cpu_m, old_nodes[node.name].system_source)
        else:
            node_system[node.name] = _system(node.name, system, system_agg, settings)
    book = _book((pod_predictions[k] for k in sorted(pod_predictions)), profiles, settings, node_system)
    nodes: list[NodePrediction] = []
    for node in sorted(facts.nodes, key=lambda n: n.name):
        if node.name not in stale and node.name in old_nodes:
            nodes.append(old_nodes[node.name])
            continue
        sys_cpu, sys_source = node_system[node.name]
        on_node = (pod_predictions[p.key] for p in current.get(node.name, ()))
        peak = book.node_peak(node.name) if book is not None else None
        nodes.append(predict_node(node, on_node, sys_cpu, sys_source, settings.hot_threshold, peak))
    current_keys = {p.key for p in all_pods}
    prediction = Prediction(
        aggregation=settings.aggregation,
        safety_margin=settings.safety_margin,
        hot_threshold=settings.hot_threshold,
        days=settings.days,
        pods=tuple(pod_predictions[k] for k in sorted(pod_predictions)),
        nodes=tuple(nodes),
        dropped_history=sum(1 for k in history.keys if k not in current_keys),
        repredicted=tuple(sorted(stale & {n.name for n in facts.nodes})) if previous is not None else (),
    )
    return prediction, book


def _book(
    predictions: Iterable[PodPrediction],
    profiles: DailyProfiles[PodKey] | None,
    settings: PredictorSettings,
    node_system: Mapping[str, tuple[float, Source]],
) -> PeakBook | None:
    if profiles is None or settings.node_peak != "coincident":
        return None
    # the book adds the system usage to each day's peak and aggregates the days times 1 + safetyMargin: a system
    # prediction from history, which holds that margin already, goes in without it (not twice)
    margin = 1.0 + settings.safety_margin
    system = {node: cpu / margin if source is Source.HISTORY else cpu for node, (cpu, source) in node_system.items()}
    return build_book(predictions, profiles, settings, system)
