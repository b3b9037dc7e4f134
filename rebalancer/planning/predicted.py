"""Predicted next-peak load in the snapshot, and what a predictive strategy may classify by (pure).

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
