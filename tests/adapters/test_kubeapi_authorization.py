"""The test API server's SelfSubjectAccessReviews and namespaces (NamespaceLifecycle), on the wire."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.kubeapi import TestApiServer
from tests.kubeapi.http import call

REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


@pytest.fixture
def server() -> Iterator[TestApiServer]:
    with TestApiServer() as s:
        yield s


def review(**attributes: str) -> dict[str, Any]:
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attributes},
    }


def configmap(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}}


def test_a_review_reports_what_the_authorizer_would_refuse(server: TestApiServer) -> None:
    server.forbid("update", "configmaps", namespace="rebalancer")
    server.forbid("patch", "nodes")

    def allowed(**attributes: str) -> bool:
        answer = call(server.url, "POST", REVIEWS, review(**attributes))
        assert answer.code == 201, answer.body
        assert answer.body["kind"] == "SelfSubjectAccessReview"
        assert answer.body["spec"]["resourceAttributes"] == attributes
        return bool(answer.body["status"]["allowed"])

    assert not allowed(verb="update", resource="configmaps", namespace="rebalancer", name="rebalancer-state")
    assert allowed(verb="update", resource="configmaps", namespace="elsewhere")
    assert allowed(verb="get", resource="configmaps", namespace="rebalancer")
    assert not allowed(verb="patch", resource="nodes")
    assert allowed(verb="patch", resource="nodes", group="apps")  # another group's resource of that name
    # the review matches what the request itself gets
    refused = call(server.url, "PUT", "/api/v1/namespaces/rebalancer/configmaps/x", configmap("x"))
    assert refused.code == 403


def test_a_review_needs_exactly_one_kind_of_attributes(server: TestApiServer) -> None:
    empty = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": {}}
    both = {**empty, "spec": {"resourceAttributes": {"verb": "get"}, "nonResourceAttributes": {"path": "/"}}}
    for body in (empty, both):
        answer = call(server.url, "POST", REVIEWS, body)
        assert answer.code == 422
        assert answer.body["reason"] == "Invalid"
        assert answer.body["details"]["causes"][0]["field"] == "spec.resourceAttributes"
        assert "exactly one of nonResourceAttributes or resourceAttributes" in answer.body["message"]


def test_creating_a_review_can_itself_be_refused(server: TestApiServer) -> None:
    server.forbid("create", "selfsubjectaccessreviews", group="authorization.k8s.io")
    answer = call(server.url, "POST", REVIEWS, review(verb="get", resource="pods"))
    assert answer.code == 403
    assert (
        'cannot create resource "selfsubjectaccessreviews" in API group "authorization.k8s.io"'
        in (answer.body["message"])
    )


def test_without_kept_namespaces_every_namespace_exists(server: TestApiServer) -> None:
    assert call(server.url, "POST", "/api/v1/namespaces/anywhere/configmaps", configmap("a")).code == 201


def test_a_create_in_a_missing_namespace_is_404_naming_the_namespace(server: TestApiServer) -> None:
    server.keep_namespaces("rebalancer")
    for query in ("", "?dryRun=All"):  # admission runs for dry runs too
        answer = call(server.url, "POST", f"/api/v1/namespaces/gone/configmaps{query}", configmap("a"))
        assert answer.code == 404
        assert answer.body["message"] == 'namespaces "gone" not found'
        assert answer.body["details"] == {"name": "gone", "kind": "namespaces"}
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "lock"},
        "spec": {"holderIdentity": "a"},
    }
    created_by_put = call(server.url, "PUT", "/apis/coordination.k8s.io/v1/namespaces/gone/leases/lock", lease)
    assert created_by_put.code == 404
    assert created_by_put.body["details"]["kind"] == "namespaces"
    assert server.objects("configmaps") == [] and server.objects("leases") == []

    assert call(server.url, "POST", "/api/v1/namespaces/rebalancer/configmaps", configmap("a")).code == 201
    assert call(server.url, "POST", "/api/v1/namespaces/kube-system/configmaps", configmap("a")).code == 201


def test_namespaces_are_objects_to_read(server: TestApiServer) -> None:
    server.keep_namespaces("rebalancer")
    found = call(server.url, "GET", "/api/v1/namespaces/rebalancer")
    assert found.code == 200
    assert found.body["kind"] == "Namespace"
    assert found.body["status"]["phase"] == "Active"
    missing = call(server.url, "GET", "/api/v1/namespaces/gone")
    assert (missing.code, missing.body["message"]) == (404, 'namespaces "gone" not found')
    names = {n["metadata"]["name"] for n in call(server.url, "GET", "/api/v1/namespaces").body["items"]}
    assert names == {"default", "kube-system", "kube-public", "kube-node-lease", "rebalancer"}
