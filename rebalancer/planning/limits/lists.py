"""Black and white lists, and service levels: the first and most explainable limiters (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rebalancer.domain.settings.limits import ListSettings, ServiceLevelSettings
from rebalancer.domain.settings.shared import LabelSelectorSpec
from rebalancer.planning.limits.request import EvictionRequest, Verdict


def _any_match(selectors: Iterable[LabelSelectorSpec], labels: Mapping[str, str]) -> bool:
    return any(s.to_selector().matches(labels) for s in selectors)


def check_lists(request: EvictionRequest, lists: ListSettings) -> Verdict | None:
    """Every black list first (black wins), then every white list that is non-empty."""
    r = request
    key = r.workload_key
    ns, pools, nodes, workloads = lists.namespaces, lists.pools, lists.nodes, lists.workloads
    workload_keys = {w.key for w in workloads.black}
    if r.namespace in ns.black:
        return Verdict("list.namespace.black", f"namespace {r.namespace} is black-listed")
    if r.pool in pools.black:
        return Verdict("list.pool.black", f"pool {r.pool} is black-listed")
    if r.node in nodes.black:
        return Verdict("list.node.black", f"node {r.node} is black-listed")
    if _any_match(nodes.black_selectors, r.node_labels):
        return Verdict("list.node.black", f"node {r.node} matches a black-listed node selector")
    if key is not None and key in workload_keys:
        return Verdict("list.workload.black", f"workload {key} is black-listed")
    if _any_match(workloads.black_selectors, r.pod_labels):
        return Verdict("list.workload.black", f"pod {r.namespace}/{r.pod} matches a black-listed pod selector")

    if ns.white and r.namespace not in ns.white:
        return Verdict("list.namespace.white", f"namespace {r.namespace} is not on the white list")
    if pools.white and r.pool not in pools.white:
        return Verdict("list.pool.white", f"pool {r.pool} is not on the white list")
    if (nodes.white or nodes.white_selectors) and not (
        r.node in nodes.white or _any_match(nodes.white_selectors, r.node_labels)
    ):
        return Verdict("list.node.white", f"node {r.node} is neither white-listed by name nor by selector")
    if (workloads.white or workloads.white_selectors) and not (
        (key is not None and key in {w.key for w in workloads.white})
        or _any_match(workloads.white_selectors, r.pod_labels)
    ):
        what = f"workload {key}" if key is not None else f"pod {r.namespace}/{r.pod} (no workload)"
        return Verdict("list.workload.white", f"{what} is neither white-listed by name nor by selector")
    return None


def check_service_level(request: EvictionRequest, service: ServiceLevelSettings) -> Verdict | None:
    """Protected priority classes and tiers whose rule is ``never`` (tier windows are judged with the
    other windows, so that one ``retry_at`` covers them all)."""
    if request.priority_class and request.priority_class in service.protected_priority_classes:
        return Verdict(
            "serviceLevel.priorityClass",
            f"priority class {request.priority_class} is protected by serviceLevel.protectedPriorityClasses",
        )
    tier = tier_of(request, service)
    if tier is not None and service.tiers[tier].rule == "never":
        return Verdict("serviceLevel.tier", f"service tier {tier} ({service.tier_label}) is never evicted")
    return None


def tier_of(request: EvictionRequest, service: ServiceLevelSettings) -> str | None:
    """The pod's configured tier, or None when it has none or one without a rule."""
    if service.tier_label is None:
        return None
    value = request.pod_labels.get(service.tier_label)
    return value if value is not None and value in service.tiers else None
