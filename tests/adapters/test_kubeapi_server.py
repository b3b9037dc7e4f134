"""The test API server itself: its answers must match the real server's wire format and semantics."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest

from rebalancer.adapters.kube import connect
from tests.kubeapi import Fault, TestApiServer
from tests.kubeapi import builders as b


@pytest.fixture
def server() -> Iterator[TestApiServer]:
    with TestApiServer() as s:
        s.add(b.node("node-1"), b.node("node-2", unschedulable=True))
        for i in range(10):
            s.add(b.pod(f"p{i}", namespace="a" if i < 6 else "b", node=f"node-{1 + i % 2}", labels={"i": str(i)}))
        s.add(b.pod("pending", namespace="b", node=None, phase="Pending"))
        yield s


def get(server: TestApiServer, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(server.url + path, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        content_type, code, body = error.headers["Content-Type"], error.code, json.loads(error.read())
    assert content_type == "application/json"
    return code, body


def names(body: dict[str, Any]) -> list[str]:
    return [item["metadata"]["name"] for item in body["items"]]


def test_list_shape_and_chunks(server: TestApiServer) -> None:
    code, first = get(server, "/api/v1/pods?limit=4")

    assert code == 200
    assert (first["kind"], first["apiVersion"]) == ("PodList", "v1")
    assert names(first) == ["p0", "p1", "p2", "p3"]  # ordered by namespace/name, as etcd keys are
    assert all("kind" not in item and "apiVersion" not in item for item in first["items"])
    assert first["metadata"]["remainingItemCount"] == 7
    assert first["metadata"]["resourceVersion"] == str(server.store.revision)
    seen = names(first)
    body = first
    while body["metadata"].get("continue"):
        _, body = get(server, f"/api/v1/pods?limit=4&continue={body['metadata']['continue']}")
        assert body["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
        seen += names(body)
    assert "remainingItemCount" not in body["metadata"]
    assert seen == ["p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9", "pending"]


def test_chunks_are_a_consistent_snapshot(server: TestApiServer) -> None:
    _, first = get(server, "/api/v1/pods?limit=5")
    server.add(b.pod("p99", namespace="b"))
    server.delete("pods", "p8", "b")

    _, rest = get(server, f"/api/v1/pods?continue={first['metadata']['continue']}")

    assert "p8" in names(rest) and "p99" not in names(rest)
    _, fresh = get(server, "/api/v1/pods")
    assert "p8" not in names(fresh) and "p99" in names(fresh)


def test_expired_continue_is_410_with_an_inconsistent_token(server: TestApiServer) -> None:
    _, first = get(server, "/api/v1/pods?limit=5")
    server.store.expire_continue_tokens()

    code, body = get(server, f"/api/v1/pods?limit=5&continue={first['metadata']['continue']}")

    assert code == 410
    assert {k: body[k] for k in ("kind", "apiVersion", "status", "reason", "code")} == {
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired", "code": 410,
    }  # fmt: skip
    assert body["message"].startswith("The provided continue parameter is too old")
    _, rest = get(server, f"/api/v1/pods?continue={body['metadata']['continue']}")
    assert names(rest) == ["p5", "p6", "p7", "p8", "p9", "pending"]


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("spec.nodeName=node-1", ["p0", "p2", "p4", "p6", "p8"]),
        ("spec.nodeName==node-2,metadata.namespace=b", ["p7", "p9"]),
        ("spec.nodeName=", ["pending"]),
        ("status.phase!=Running", ["pending"]),
        ("metadata.name=p3", ["p3"]),
    ],
)
def test_pod_field_selectors(server: TestApiServer, selector: str, expected: list[str]) -> None:
    _, body = get(server, f"/api/v1/pods?fieldSelector={selector}")
    assert names(body) == expected


def test_field_selector_with_limit_fills_pages_and_omits_remaining_count(server: TestApiServer) -> None:
    _, body = get(server, "/api/v1/pods?fieldSelector=spec.nodeName=node-1&limit=2")
    assert names(body) == ["p0", "p2"]
    assert body["metadata"]["continue"]
    assert "remainingItemCount" not in body["metadata"]


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/api/v1/pods?fieldSelector=spec.containers=x", "field label not supported: spec.containers"),
        ("/api/v1/nodes?fieldSelector=spec.nodeName=x", "field label not supported: spec.nodeName"),
        ("/api/v1/pods?fieldSelector=nonsense", "invalid selector: 'nonsense'; can't understand 'nonsense'"),
        ("/api/v1/pods?continue=garbage", "invalid continue token"),
        ("/api/v1/pods?continue=x&resourceVersion=5", "specifying resource version is not allowed when using continue"),
    ],
)
def test_bad_requests(server: TestApiServer, path: str, message: str) -> None:
    code, body = get(server, path)
    assert (code, body["reason"], body["code"]) == (400, "BadRequest", 400)
    assert body["message"].startswith(message)


@pytest.mark.parametrize(
    ("selector", "expected"),
    [("i=3", ["p3"]), ("i!=3", None), ("i in (1,2)", ["p1", "p2"]), ("i notin (0,1)", None), ("!i", ["pending"])],
)
def test_label_selectors(server: TestApiServer, selector: str, expected: list[str] | None) -> None:
    _, body = get(server, f"/api/v1/pods?labelSelector={urllib.parse.quote(selector)}")
    everything = ["p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9", "pending"]
    if expected is None:  # the negations also match pods without the label
        excluded = {"i!=3": ["p3"], "i notin (0,1)": ["p0", "p1"]}[selector]
        expected = [n for n in everything if n not in excluded]
    assert names(body) == expected


def test_namespaced_lists_and_gets(server: TestApiServer) -> None:
    server.add(b.pdb("budget", "b", selector={}), *b.deployment_chain("web", "b", replicas=1))

    assert names(get(server, "/api/v1/namespaces/a/pods")[1]) == ["p0", "p1", "p2", "p3", "p4", "p5"]
    assert names(get(server, "/apis/policy/v1/namespaces/b/poddisruptionbudgets")[1]) == ["budget"]
    assert names(get(server, "/apis/policy/v1/namespaces/a/poddisruptionbudgets")[1]) == []
    assert len(get(server, "/apis/apps/v1/namespaces/b/replicasets")[1]["items"]) == 1
    code, pod = get(server, "/api/v1/namespaces/a/pods/p1")
    assert (code, pod["kind"], pod["apiVersion"], pod["metadata"]["name"]) == (200, "Pod", "v1", "p1")
    code, node = get(server, "/api/v1/nodes/node-2")
    assert (code, node["kind"], node["spec"]["unschedulable"]) == (200, "Node", True)


def test_not_found_and_unknown_paths(server: TestApiServer) -> None:
    code, body = get(server, "/api/v1/namespaces/a/pods/nope")
    assert (code, body["reason"], body["message"]) == (404, "NotFound", 'pods "nope" not found')
    assert body["details"] == {"name": "nope", "kind": "pods"}
    code, body = get(server, "/apis/apps/v1/namespaces/a/replicasets/nope")
    assert body["message"] == 'replicasets.apps "nope" not found'
    assert body["details"] == {"name": "nope", "group": "apps", "kind": "replicasets"}
    code, body = get(server, "/api/v1/widgets")
    assert (code, body["message"]) == (404, "the server could not find the requested resource")


def test_resource_version_parameters(server: TestApiServer) -> None:
    current = server.store.revision
    code, body = get(server, f"/api/v1/pods?resourceVersion={current + 10}")
    assert (code, body["reason"]) == (504, "Timeout")
    assert body["message"] == f"Too large resource version: {current + 10}, current: {current}"
    server.store.expire_continue_tokens()
    code, body = get(server, f"/api/v1/pods?resourceVersion={current - 3}&resourceVersionMatch=Exact")
    assert (code, body["reason"]) == (410, "Expired")
    assert get(server, "/api/v1/pods?resourceVersion=0")[0] == 200


def test_bearer_token_is_required_when_configured() -> None:
    with TestApiServer(token="secret") as server:
        code, body = get(server, "/api/v1/nodes")
        assert (code, body["reason"], body["message"]) == (401, "Unauthorized", "Unauthorized")
        assert get(server, "/api/v1/nodes", {"Authorization": "Bearer secret"})[0] == 200


def test_faults_by_count_and_continue(server: TestApiServer) -> None:
    server.set_fault("/api/v1/pods", Fault(code=503, times=1, with_continue=True))
    _, first = get(server, "/api/v1/pods?limit=2")
    token = first["metadata"]["continue"]
    code, body = get(server, f"/api/v1/pods?limit=2&continue={token}")
    assert (code, body["reason"]) == (503, "ServiceUnavailable")
    assert get(server, f"/api/v1/pods?limit=2&continue={token}")[0] == 200


def test_the_official_generated_models_accept_the_answers(server: TestApiServer, tmp_path: Path) -> None:
    """The client's own deserializer validates required fields and types: a strict format check."""
    server.add(*b.deployment_chain("web", "a", replicas=2), b.pdb("web", "a", selector={}, max_unavailable="10%"))
    client = connect(kubeconfig=str(b.write_kubeconfig(tmp_path / "config", server.url, token=None)))
    core: Any
    apps: Any
    policy: Any
    core, apps, policy = (
        kubernetes.client.CoreV1Api(client),
        kubernetes.client.AppsV1Api(client),
        kubernetes.client.PolicyV1Api(client),
    )

    pods = core.list_pod_for_all_namespaces(limit=3)
    assert [p.metadata.name for p in pods.items] == ["p0", "p1", "p2"]
    assert pods.metadata.remaining_item_count == 10
    assert core.read_namespaced_pod("p1", "a").status.qos_class == "Burstable"
    assert core.list_node().items[1].spec.unschedulable is True
    assert apps.list_replica_set_for_all_namespaces().items[0].metadata.owner_references[0].kind == "Deployment"
    assert policy.list_pod_disruption_budget_for_all_namespaces().items[0].spec.max_unavailable == "10%"
    with pytest.raises(kubernetes.client.ApiException) as caught:
        core.read_namespaced_pod("nope", "a")
    assert caught.value.status == 404
    assert json.loads(caught.value.body or "{}")["reason"] == "NotFound"
