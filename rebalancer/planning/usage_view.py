"""The usage view a predictive strategy plans on (pure): the snapshot's node and pod usage as its
``classifyBy`` reads them (see :mod:`rebalancer.planning.predicted`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType

from rebalancer.domain.model import PodKey
from rebalancer.planning.predicted import ClassifyBy
from rebalancer.planning.snapshot import ClusterSnapshot


def usage_view(snapshot: ClusterSnapshot, classify_by: ClassifyBy) -> ClusterSnapshot:
    """The snapshot with node and pod usage as ``classify_by`` reads them (a node that is not Ready stays
    unknown, whatever its prediction)."""
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
        if not snapshot.nodes[name].ready:  # as the reading: its kubelet does not answer, an eviction cannot complete
            value, reason = None, current.unknown_reason or "node is not Ready"
        elif classify_by == "max":
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
