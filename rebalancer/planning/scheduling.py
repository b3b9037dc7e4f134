"""Scheduler predicates (pure): could this pod's replacement run on that node at all?

Mirrors the default scheduler's filters that matter for moving an existing pod: node readiness and
cordon, taints (NoSchedule and NoExecute must be tolerated), nodeSelector and required node affinity.
Resource fit is checked by the caller, which tracks what earlier moves already consumed.
"""

from __future__ import annotations

from rebalancer.domain.model import Node, Pod

HARD_TAINT_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


def placement_blocker(pod: Pod, node: Node) -> str | None:
    """Why ``pod`` could not be scheduled on ``node``, or None when its constraints allow it."""
    if node.unschedulable:
        return "cordoned"
    if not node.ready:
        return "not Ready"
    for taint in node.taints:
        if taint.effect in HARD_TAINT_EFFECTS and not any(t.tolerates(taint) for t in pod.tolerations):
            return f"taint {taint.key}={taint.value}:{taint.effect} not tolerated"
    for key, value in pod.node_selector.items():
        if node.labels.get(key) != value:
            return f"nodeSelector {key}={value} does not match"
    if pod.required_affinity and not any(t.matches(node.name, node.labels) for t in pod.required_affinity):
        return "required node affinity does not match"
    return None
