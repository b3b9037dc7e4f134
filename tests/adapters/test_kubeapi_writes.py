"""The test API server's writes (ConfigMaps, Leases, Events) and RBAC refusals, on the wire."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.kubeapi import TestApiServer
from tests.kubeapi import builders as b
from tests.kubeapi.http import call

NS = "rebalancer"
CMS = f"/api/v1/namespaces/{NS}/configmaps"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
EVENTS = f"/api/v1/namespaces/{NS}/events"
MODIFIED = "the object has been modified; please apply your changes to the latest version and try again"


@pytest.fixture
def server() -> Iterator[TestApiServer]:
    with TestApiServer() as s:
        yield s


def configmap(name: str = "state", rv: str | None = None, **data: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if rv is not None:
        meta["resourceVersion"] = rv
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def lease(name: str = "lock", rv: str | None = None, holder: str = "a") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, **({"resourceVersion": rv} if rv else {})}
    spec = {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": "2024-05-01T10:40:00.000000Z"}
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}


# --- ConfigMaps ----------------------------------------------------------------------------------


def test_configmap_create_get_update(server: TestApiServer) -> None:
    created = call(server.url, "POST", CMS, configmap(a="1"))
    assert created.code == 201
    meta = created.body["metadata"]
    assert (meta["namespace"], created.body["kind"]) == (NS, "ConfigMap") and meta["uid"] and meta["creationTimestamp"]

    updated = call(server.url, "PUT", f"{CMS}/state", configmap(rv=meta["resourceVersion"], a="2"))
    assert updated.code == 200 and int(updated.body["metadata"]["resourceVersion"]) > int(meta["resourceVersion"])
    assert updated.body["metadata"]["uid"] == meta["uid"]
    got = call(server.url, "GET", f"{CMS}/state")
    assert got.body["data"] == {"a": "2"}
    listed = call(server.url, "GET", CMS)
    assert [i["metadata"]["name"] for i in listed.body["items"]] == ["state"]


def test_configmap_stale_update_is_409_conflict(server: TestApiServer) -> None:
    rv = call(server.url, "POST", CMS, configmap(a="1")).body["metadata"]["resourceVersion"]
    call(server.url, "PUT", f"{CMS}/state", configmap(rv=rv, a="2"))

    answer = call(server.url, "PUT", f"{CMS}/state", configmap(rv=rv, a="3"))

    assert answer.code == 409
    assert answer.body["reason"] == "Conflict"
    assert answer.body["message"] == f'Operation cannot be fulfilled on configmaps "state": {MODIFIED}'
    assert answer.body["details"] == {"name": "state", "kind": "configmaps"}


def test_configmap_create_of_an_existing_name_is_409_already_exists(server: TestApiServer) -> None:
    call(server.url, "POST", CMS, configmap())

    answer = call(server.url, "POST", CMS, configmap())

    assert (answer.code, answer.body["reason"], answer.body["message"]) == (
        409, "AlreadyExists", 'configmaps "state" already exists',
    )  # fmt: skip


def test_configmap_put_semantics(server: TestApiServer) -> None:
    assert call(server.url, "PUT", f"{CMS}/state", configmap(a="1")).code == 404  # no create on update
    call(server.url, "POST", CMS, configmap(a="1"))
    assert call(server.url, "PUT", f"{CMS}/state", configmap(a="2")).code == 200  # unconditional update allowed
    assert call(server.url, "PUT", f"{CMS}/state", configmap("other", a="2")).code == 400  # name differs from URL


def test_configmap_bad_requests(server: TestApiServer) -> None:
    answer = call(server.url, "POST", CMS, configmap(rv="5"))
    assert (answer.code, answer.body["message"]) == (400, "resourceVersion should not be set on objects to be created")
    elsewhere = configmap()
    elsewhere["metadata"]["namespace"] = "other"
    assert call(server.url, "POST", CMS, elsewhere).code == 400
    invalid = call(server.url, "POST", CMS, configmap(**{"bad key": "x"}))
    assert invalid.code == 422 and invalid.body["reason"] == "Invalid"
    assert invalid.body["details"]["causes"][0]["field"] == "data[bad key]"
    big = call(server.url, "POST", CMS, configmap(a="x" * (1024 * 1024)))
    assert big.code == 422 and "must have at most 1048576 bytes" in big.body["message"]
    assert call(server.url, "GET", CMS).body["items"] == []


def test_configmap_dry_run_and_delete(server: TestApiServer) -> None:
    assert call(server.url, "POST", f"{CMS}?dryRun=All", configmap()).code == 201
    assert call(server.url, "GET", f"{CMS}/state").code == 404
    call(server.url, "POST", CMS, configmap())

    deleted = call(server.url, "DELETE", f"{CMS}/state")

    assert deleted.code == 200 and deleted.body["status"] == "Success"
    assert deleted.body["details"]["name"] == "state"
    assert call(server.url, "GET", f"{CMS}/state").code == 404


# --- Leases --------------------------------------------------------------------------------------


def test_lease_update_needs_a_resource_version(server: TestApiServer) -> None:
    created = call(server.url, "PUT", f"{LEASES}/lock", lease())  # create on update
    assert created.code == 201

    answer = call(server.url, "PUT", f"{LEASES}/lock", lease(holder="b"))

    assert answer.code == 422
    assert answer.body["message"] == (
        'leases.coordination.k8s.io "lock" is invalid: metadata.resourceVersion: Invalid value: 0: '
        "must be specified for an update"
    )
    rv = created.body["metadata"]["resourceVersion"]
    assert call(server.url, "PUT", f"{LEASES}/lock", lease(rv=rv, holder="b")).code == 200
    stale = call(server.url, "PUT", f"{LEASES}/lock", lease(rv=rv, holder="c"))
    assert stale.code == 409
    assert stale.body["message"] == f'Operation cannot be fulfilled on leases.coordination.k8s.io "lock": {MODIFIED}'
    assert call(server.url, "POST", LEASES, lease()).code == 409


def test_lease_validation(server: TestApiServer) -> None:
    bad = lease()
    bad["spec"]["leaseDurationSeconds"] = 0

    assert call(server.url, "POST", LEASES, bad).code == 422
    for renew in ("2024-05-01T10:40:00Z", "2024-05-01T10:40:00.250Z", "2024-05-01T10:40:00.250000"):
        whole = lease()
        whole["spec"]["renewTime"] = renew  # a MicroTime needs exactly six fractional digits and a zone
        answer = call(server.url, "POST", LEASES, whole)
        assert answer.code == 400
        assert f'renewTime: parsing time "{renew}" as "2006-01-02T15:04:05.000000Z07:00"' in answer.body["message"]
    good = lease()
    good["spec"]["renewTime"] = "2024-05-01T12:40:00.250000+02:00"
    assert call(server.url, "POST", LEASES, good).code == 201


# --- Events --------------------------------------------------------------------------------------


def event(name: str, pod: str, **fields: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": name},
        "involvedObject": {"kind": "Pod", "namespace": NS, "name": pod, "uid": "u-1"},
        "reason": "LowNodeUtilization", "message": "evicted", "type": "Normal", "action": "Evicting",
        "reportingComponent": "rebalancer", "reportingInstance": "rebalancer-0", "count": 1,
        "eventTime": "2024-05-01T10:40:00.250000Z", "firstTimestamp": "2024-05-01T10:40:00Z", **fields,
    }  # fmt: skip


def test_events_are_stored_and_listed_by_field(server: TestApiServer) -> None:
    for i, pod in enumerate(["a", "b", "a"]):
        assert call(server.url, "POST", EVENTS, event(f"{pod}.{i}", pod)).code == 201

    listed = call(server.url, "GET", f"{EVENTS}?fieldSelector=involvedObject.name%3Da,reason%3DLowNodeUtilization")

    assert [i["metadata"]["name"] for i in listed.body["items"]] == ["a.0", "a.2"]
    assert len(server.objects("events", NS)) == 3


def test_events_are_validated_as_the_api_does(server: TestApiServer) -> None:
    missing = event("x.1", "x", reportingInstance="", action="")
    answer = call(server.url, "POST", EVENTS, missing)
    assert answer.code == 422
    assert (
        answer.body["message"] == 'Event "x.1" is invalid: [reportingInstance: Required value, action: Required value]'
    )
    assert call(server.url, "POST", EVENTS, event("x.2", "x", message="m" * 1025)).code == 422
    assert call(server.url, "POST", EVENTS, event("x.3", "x", eventTime="yesterday")).code == 400
    other_ns = event("x.4", "x")
    other_ns["involvedObject"]["namespace"] = "elsewhere"
    del other_ns["eventTime"]
    assert call(server.url, "POST", EVENTS, other_ns).code == 422  # a legacy event about another namespace
    assert server.objects("events") == []


# --- RBAC ----------------------------------------------------------------------------------------


def test_rbac_refusal_of_the_eviction_subresource(server: TestApiServer) -> None:
    server.add(b.pod("p", namespace="shop"))
    server.forbid("create", "pods/eviction", namespace="shop")

    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p"}}
    answer = call(server.url, "POST", "/api/v1/namespaces/shop/pods/p/eviction", body)

    assert answer.code == 403 and answer.body["reason"] == "Forbidden"
    assert answer.body["message"] == (
        'pods "p" is forbidden: User "system:serviceaccount:kube-system:rebalancer" cannot create resource '
        '"pods/eviction" in API group "" in the namespace "shop"'
    )
    assert answer.body["details"] == {"name": "p", "kind": "pods"}
    assert call(server.url, "GET", "/api/v1/namespaces/shop/pods/p").code == 200  # other verbs and resources pass
    assert server.store.get("pods", "p", "shop") is not None


def test_rbac_rules_match_group_and_namespace(server: TestApiServer) -> None:
    server.forbid("*", "leases", group="coordination.k8s.io", namespace=NS)

    refused = call(server.url, "PUT", f"{LEASES}/lock", lease())
    assert refused.code == 403
    assert refused.body["message"].startswith('leases.coordination.k8s.io "lock" is forbidden: User')
    assert call(server.url, "GET", "/apis/coordination.k8s.io/v1/namespaces/other/leases").code == 200
    assert call(server.url, "GET", LEASES).code == 403  # list
    server.allow_all()
    assert call(server.url, "GET", LEASES).code == 200
