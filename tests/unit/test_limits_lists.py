"""Black and white lists: black wins, a non-empty white list passes only what it names."""

from __future__ import annotations

from typing import Any

import pytest

from rebalancer.domain.model import WorkloadRef
from rebalancer.planning.limits import CycleCounts, EvictionRequest, LimiterState, ReplicaCounts, check
from tests.builders import node, pod
from tests.unit.limits_builders import T0, limits, request

LISTS = limits(
    """
    lists:
      namespaces: {black: [kube-system], white: [default, shop, kube-system]}
      pools: {black: [legacy], white: [general, gpu, legacy]}
      nodes:
        black: [n9]
        blackSelectors: [{matchLabels: {role: infra}}]
        white: [n1, n2, n9]
        whiteSelectors: [{matchExpressions: [{key: spot, operator: Exists}]}]
      workloads:
        black: [{kind: StatefulSet, namespace: default, name: db}]
        blackSelectors: [{matchLabels: {app: payments}}]
        white: [{kind: Deployment, namespace: default, name: web}, {kind: StatefulSet, namespace: default, name: db}]
        whiteSelectors: [{matchLabels: {movable: "yes"}}]
    """
)


def limiter(**kwargs: Any) -> str | None:
    return check(request(**kwargs), LimiterState(), CycleCounts(), LISTS, T0).limiter


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, None),
        ({"namespace": "kube-system"}, "list.namespace.black"),  # black wins over its own white entry
        ({"namespace": "other"}, "list.namespace.white"),
        ({"pool": "legacy"}, "list.pool.black"),
        ({"pool": "batch"}, "list.pool.white"),
        ({"node": "n9"}, "list.node.black"),
        ({"node": "n2", "node_labels": {"role": "infra"}}, "list.node.black"),  # white by name, black by selector
        ({"node": "n3"}, "list.node.white"),
        ({"node": "n3", "node_labels": {"spot": ""}}, None),  # white by selector
        ({"workload": "db", "kind": "StatefulSet"}, "list.workload.black"),
        ({"labels": {"app": "payments"}}, "list.workload.black"),
        ({"workload": "api"}, "list.workload.white"),
        ({"workload": "api", "labels": {"movable": "yes"}}, None),
        ({"workload": None}, "list.workload.white"),  # a bare pod is on no white list of workloads
        ({"workload": "web", "kind": "StatefulSet"}, "list.workload.white"),  # the kind is part of the name
        # every black list before any white list: a namespace not white-listed on a black-listed node
        ({"namespace": "other", "node": "n9"}, "list.node.black"),
    ],
)
def test_black_and_white_precedence(kwargs: dict[str, object], expected: str | None) -> None:
    assert limiter(**kwargs) == expected


def test_empty_white_lists_pass_everything() -> None:
    settings = limits("lists: {namespaces: {black: [kube-system]}}")
    for ns in ("default", "anything"):
        assert check(request(namespace=ns), LimiterState(), CycleCounts(), settings, T0).allowed
    blocked = check(request(namespace="kube-system"), LimiterState(), CycleCounts(), settings, T0)
    assert (blocked.limiter, blocked.retry_at) == ("list.namespace.black", None)
    assert blocked.reason == "namespace kube-system is black-listed"


def test_request_from_domain_objects() -> None:
    p = pod("p1", "n1", namespace="shop", workload="cart", kind="StatefulSet", labels={"app": "cart"},
            priority_class="high", ready=False)  # fmt: skip
    n = node("n1", pool="gpu")
    req = EvictionRequest.of(p, n, "gpu", ReplicaCounts(3, 2, 1))
    assert (req.namespace, req.pod, req.node, req.pool, req.priority_class, req.pod_ready) == (
        "shop", "p1", "n1", "gpu", "high", False
    )  # fmt: skip
    assert req.workload == WorkloadRef("StatefulSet", "shop", "cart")
    assert req.workload_key == "StatefulSet/shop/cart"
    assert req.pod_labels["app"] == "cart" and req.node_labels["pool"] == "gpu"
    assert req.replicas == ReplicaCounts(3, 2, 1)
