"""AccessReview (SelfSubjectAccessReview) with the real ``kubernetes`` client against tests/kubeapi."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rebalancer.adapters.kube import connect
from rebalancer.adapters.kube.access import AccessReview, Permission
from rebalancer.domain.errors import KubeForbidden
from tests.kubeapi import TestApiServer

REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


def test_allowed_asks_the_authorizer_with_the_permissions_attributes(
    kube_server: TestApiServer, kubeconfig: Path
) -> None:
    kube_server.forbid("update", "leases", group="coordination.k8s.io", namespace="rebalancer")
    kube_server.forbid("create", "pods/eviction")
    review = AccessReview(connect(str(kubeconfig)))

    assert not review.allowed(Permission("update", "leases", "rebalancer", "coordination.k8s.io", "rebalancer"))
    assert review.allowed(Permission("get", "leases", "rebalancer", "coordination.k8s.io", "rebalancer"))
    assert not review.allowed(Permission("create", "pods/eviction", "shop"))
    assert review.allowed(Permission("patch", "nodes"))

    sent = [json.loads(r.body)["spec"]["resourceAttributes"] for r in kube_server.requests_to(REVIEWS)]
    assert sent[0] == {
        "verb": "update", "group": "coordination.k8s.io", "resource": "leases", "namespace": "rebalancer",
        "name": "rebalancer",
    }  # fmt: skip
    assert sent[2] == {
        "verb": "create",
        "group": "",
        "resource": "pods",
        "subresource": "eviction",
        "namespace": "shop",
    }
    assert sent[3] == {"verb": "patch", "group": "", "resource": "nodes"}


def test_a_refused_review_names_the_permission_it_needs(kube_server: TestApiServer, kubeconfig: Path) -> None:
    kube_server.forbid("create", "selfsubjectaccessreviews", group="authorization.k8s.io")
    with pytest.raises(
        KubeForbidden, match='grant verb create on selfsubjectaccessreviews in API group "authorization'
    ):
        AccessReview(connect(str(kubeconfig))).allowed(Permission("get", "configmaps", "rebalancer"))


def test_a_permission_reads_as_a_sentence() -> None:
    assert str(Permission("update", "configmaps", "ns", name="state")) == 'update configmaps "state" in namespace ns'
    assert str(Permission("create", "leases", "ns", "coordination.k8s.io")) == (
        "create leases.coordination.k8s.io in namespace ns"
    )
    assert str(Permission("patch", "nodes")) == "patch nodes"
