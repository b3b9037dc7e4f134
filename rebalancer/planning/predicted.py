"""Predicted next-peak load in the snapshot, and the usage view a predictive strategy plans on (pure).

LowNodeUtilization's ``classifyBy`` chooses what "usage" means for its classification, pod choice and
room search: ``current`` (the window statistic read now), ``predicted`` (the predictor's next peak), or
``max`` (the higher of the two, per node and per pod). Unknown stays unknown: a node (or pod) whose
prediction is unknown is unknown in ``predicted`` and ``max`` mode, never hot, cold or movable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal

from rebalancer.domain.model import PodKey

if TYPE_CHECKING:
    from rebalancer.planning.predict.predictor import Prediction
    from rebalancer.planning.snapshot import ClusterSnapshot

ClassifyBy = Literal["current", "predicted", "max"]
PREDICTIVE: frozenset[str] = frozenset({"predicted", "max"})
"""The classifyBy values that need the predictor's next peak."""


@dataclass(frozen=True, slots=True)
class PredictedLoad:
    """Per node and per pod, the predicted next-peak CPU in millicores (absent: unknown)."""

    node_cpu_m: Mapping[str, int] = field(default_factory=dict)
    node_unknown: Mapping[str, str] = field(default_factory=dict)  # node -> why its prediction is unknown
    pod_cpu_m: Mapping[PodKey, int] = field(default_factory=dict)
    failure: str | None = None  # the prediction could not be made: predictive strategies evict nothing
    description: str = ""

    @classmethod
    def failed(cls, reason: str) -> PredictedLoad:
        return cls(failure=reason)

    @classmethod
    def from_prediction(cls, prediction: Prediction, description: str) -> PredictedLoad:
        nodes: dict[str, int] = {}
        unknown: dict[str, str] = {}
        for n in prediction.nodes:
            if n.cpu_m is not None and n.allocatable_cpu_m > 0:
                nodes[n.node] = round(n.cpu_m)
            elif n.unknown_pods:
                shown = ", ".join(f"{ns}/{name}" for ns, name in n.unknown_pods[:3])
                more = f" and {len(n.unknown_pods) - 3} more" if len(n.unknown_pods) > 3 else ""
                unknown[n.node] = f"prediction unknown: no history, sibling or request for {shown}{more}"
            else:
                unknown[n.node] = "prediction unknown: the node reports no allocatable CPU"
        pods = {p.key: round(p.cpu_m) for p in prediction.pods if p.cpu_m is not None}
        return cls(MappingProxyType(nodes), MappingProxyType(unknown), MappingProxyType(pods), None, description)

    def moved(self, pod: PodKey, source: str, destination: str | None) -> PredictedLoad:
        """After a planned eviction: the pod's predicted load leaves ``source`` and lands on ``destination``."""
        usage = self.pod_cpu_m.get(pod)
        if usage is None:
            return self
        nodes = dict(self.node_cpu_m)
        if source in nodes:
            nodes[source] -= usage
        if destination is not None and destination in nodes:
            nodes[destination] += usage
        return replace(self, node_cpu_m=MappingProxyType(nodes))


def usage_view(snapshot: ClusterSnapshot, classify_by: ClassifyBy) -> ClusterSnapshot:
    """The snapshot with node and pod usage as ``classify_by`` reads them."""
    if classify_by == "current":
        return snapshot
    predicted = snapshot.predicted
    if predicted is None or predicted.failure is not None:
        why = predicted.failure if predicted is not None else "no prediction was made for this cycle"
        return replace(snapshot, usage_failure=f"classifyBy {classify_by}: {why}")
    load = {}
    for name, current in snapshot.load.items():
        value = predicted.node_cpu_m.get(name)
        reason = predicted.node_unknown.get(name, "no prediction for this node")
        if classify_by == "max":
            if current.usage_m is None:
                value, reason = None, current.unknown_reason or "usage unknown"
            elif value is not None:
                value = max(value, current.usage_m)
        load[name] = replace(current, usage_m=value, unknown_reason=None if value is not None else reason)
    if classify_by == "predicted":
        pods: Mapping[PodKey, int] = predicted.pod_cpu_m
    else:
        now = snapshot.pod_usage
        pods = {k: max(v, now[k]) for k, v in predicted.pod_cpu_m.items() if k in now}
    return replace(snapshot, load=MappingProxyType(load), pod_usage=MappingProxyType(dict(pods)))
