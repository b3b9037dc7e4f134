"""The test API server's eviction subresource and disruption controller, on the wire (no client library)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.kubeapi import TestApiServer
from tests.kubeapi import builders as b
from tests.kubeapi.http import Answer, call

NS = "shop"
LABELS = {"matchLabels": {"app": "web"}}


@pytest.fixture
def server() -> Iterator[TestApiServer]:
    with TestApiServer() as s:
        s.add(b.node("node-1"), *b.deployment_chain("web", NS, replicas=3))
        yield s


def pod_names(server: TestApiServer) -> list[str]:
    return [p["metadata"]["name"] for p in server.objects("pods", NS)]


def evict(server: TestApiServer, name: str, query: str = "", **fields: Any) -> Answer:
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": NS}, **fields}
    return call(server.url, "POST", f"/api/v1/namespaces/{NS}/pods/{name}/eviction{query}", body)


def budget(server: TestApiServer, name: str = "web") -> dict[str, Any]:
    status: dict[str, Any] = server.store.get("poddisruptionbudgets", name, NS)["status"]  # type: ignore[index]
    return status


def test_success_is_201_with_a_success_status(server: TestApiServer) -> None:
    first = pod_names(server)[0]

    answer = evict(server, first)

    assert answer.code == 201
    assert answer.body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
    assert first not in pod_names(server)


def test_v1beta1_bodies_are_accepted(server: TestApiServer) -> None:
    first = pod_names(server)[0]
    body = {"apiVersion": "policy/v1beta1", "kind": "Eviction", "metadata": {"name": first}}

    assert call(server.url, "POST", f"/api/v1/namespaces/{NS}/pods/{first}/eviction", body).code == 201


def test_exhausted_budget_is_429_without_retry_after(server: TestApiServer) -> None:
    server.add(b.pdb("web", NS, selector=LABELS, min_available=3))

    answer = evict(server, pod_names(server)[0])

    assert answer.code == 429 and "retry-after" not in answer.headers
    assert answer.body == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Cannot evict pod as it would violate the pod's disruption budget.", "reason": "TooManyRequests",
        "details": {"causes": [{"reason": "DisruptionBudget",
                                "message": "The disruption budget web needs 3 healthy pods and has 3 currently"}]},
        "code": 429,
    }  # fmt: skip


def test_a_budget_behind_its_generation_asks_for_ten_seconds(server: TestApiServer) -> None:
    server.add(b.pdb("web", NS, selector=LABELS, max_unavailable=1))
    server.eviction.sync_budgets = False
    pdb = server.store.get("poddisruptionbudgets", "web", NS)
    assert pdb is not None
    pdb["metadata"]["generation"] = 2
    server.store.update(pdb)

    answer = evict(server, pod_names(server)[0])

    assert (answer.code, answer.headers["retry-after"], answer.body["details"]["retryAfterSeconds"]) == (429, "10", 10)
    assert (
        answer.body["details"]["causes"][0]["message"]
        == "The disruption budget web is still being processed by the server."
    )


def test_two_budgets_are_a_500_without_reason(server: TestApiServer) -> None:
    server.add(b.pdb("web", NS, selector=LABELS, max_unavailable=1), b.pdb("all", NS, selector={}, max_unavailable=1))

    answer = evict(server, pod_names(server)[0])

    assert answer.code == 500
    assert answer.body == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
        "code": 500,
    }  # fmt: skip


def test_a_budget_without_selector_covers_nothing(server: TestApiServer) -> None:
    server.add(b.pdb("none", NS, min_available=3), b.pdb("web", NS, selector=LABELS, max_unavailable=1))

    assert evict(server, pod_names(server)[0]).code == 201


def test_missing_pod_is_404(server: TestApiServer) -> None:
    answer = evict(server, "nope")

    assert answer.code == 404
    assert answer.body["message"] == 'pods "nope" not found' and answer.body["details"] == {
        "name": "nope",
        "kind": "pods",
    }


def test_uid_precondition_mismatch_is_409_after_the_budget_was_spent(server: TestApiServer) -> None:
    server.add(b.pdb("web", NS, selector=LABELS, max_unavailable=1))
    server.eviction.sync_budgets = False
    name = pod_names(server)[0]

    answer = evict(server, name, deleteOptions={"preconditions": {"uid": "old-uid"}})

    assert answer.code == 409 and answer.body["reason"] == "Conflict"
    assert answer.body["message"].startswith(
        f'Operation cannot be fulfilled on Pod "{name}": the UID in the precondition'
    )
    assert answer.body["details"] == {"name": name, "kind": "Pod"}
    assert name in pod_names(server)
    assert budget(server)["disruptionsAllowed"] == 0 and name in budget(server)["disruptedPods"]  # as the real server


@pytest.mark.parametrize("where", ["query", "body"])
def test_dry_run_checks_everything_and_changes_nothing(server: TestApiServer, where: str) -> None:
    server.add(b.pdb("web", NS, selector=LABELS, max_unavailable=1))
    server.disruption.sync_all()
    before = server.store.revision
    name = pod_names(server)[0]

    if where == "query":
        answer = evict(server, name, "?dryRun=All")
    else:
        answer = evict(server, name, deleteOptions={"dryRun": ["All"]})

    assert answer.code == 201 and server.store.revision == before and name in pod_names(server)
    assert server.eviction.records[-1].dry_run


def test_bad_requests_are_400(server: TestApiServer) -> None:
    name = pod_names(server)[0]
    path = f"/api/v1/namespaces/{NS}/pods/{name}/eviction"

    assert evict(server, name, "?dryRun=Some").code == 400
    assert evict(server, name, "?dryRun=All", deleteOptions={"dryRun": ["Other"]}).code == 400
    other = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "other"}}
    assert call(server.url, "POST", path, other).body["message"] == "name in URL does not match name in Eviction object"
    wrong = {"apiVersion": "v1", "kind": "Eviction", "metadata": {"name": name}}
    assert call(server.url, "POST", path, wrong).code == 400
    assert call(server.url, "GET", path).code == 405
    assert len(pod_names(server)) == 3


@pytest.mark.parametrize(("min_available", "code"), [(3, 201), (4, 429)])
def test_an_unready_pod_goes_without_budget_only_while_the_budget_is_met(
    server: TestApiServer, min_available: int, code: int
) -> None:
    # 3 ready pods: with minAvailable 3 the budget is met (none may be disrupted, yet the unready pod may go);
    # with minAvailable 4 it is not, and the budget decides.
    server.add(b.pod("web-broken", namespace=NS, labels={"app": "web"}, ready=False))
    server.add(b.pdb("web", NS, selector=LABELS, min_available=min_available))

    assert evict(server, "web-broken").code == code


def test_always_allow_evicts_unready_pods_whatever_the_budget(server: TestApiServer) -> None:
    pdb = b.pdb("web", NS, selector=LABELS, min_available=4)
    pdb["spec"]["unhealthyPodEvictionPolicy"] = "AlwaysAllow"
    server.add(b.pod("web-broken", namespace=NS, labels={"app": "web"}, ready=False), pdb)

    assert evict(server, "web-broken").code == 201
    assert evict(server, pod_names(server)[0]).code == 429


def test_pending_and_finished_pods_ignore_the_budget(server: TestApiServer) -> None:
    server.add(b.pdb("web", NS, selector=LABELS, min_available=3))
    server.add(b.pod("web-pending", namespace=NS, node=None, phase="Pending", labels={"app": "web"}))
    server.add(b.pod("web-done", namespace=NS, phase="Succeeded", ready=False, labels={"app": "web"}))

    assert evict(server, "web-pending").code == 201
    assert evict(server, "web-done").code == 201


def test_graceful_termination_mode(server: TestApiServer) -> None:
    server.add(b.pdb("web", NS, selector=LABELS, max_unavailable=1))
    server.eviction.terminate_at_once = False
    first, second = pod_names(server)[:2]

    assert evict(server, first).code == 201
    pod = server.store.get("pods", first, NS)
    assert pod is not None and pod["metadata"]["deletionGracePeriodSeconds"] == 30
    assert pod["metadata"]["deletionTimestamp"]
    [target] = [c for c in pod["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert (target["reason"], target["message"]) == ("EvictionByEvictionAPI", "Eviction API: evicting")
    assert budget(server)["currentHealthy"] == 2  # a terminating pod is not healthy
    assert evict(server, first).code == 201  # already terminating: accepted, no budget spent
    assert evict(server, second).code == 429

    server.eviction.finish_termination(NS, first)
    assert first not in pod_names(server)


def test_stored_status_is_spent_when_the_controller_lags(server: TestApiServer) -> None:
    server.add(b.pdb("web", NS, selector=LABELS, max_unavailable=1, disruptions_allowed=2))
    server.eviction.sync_budgets = False
    first, second, third = pod_names(server)

    assert evict(server, first).code == 201
    assert evict(server, second).code == 201
    assert evict(server, third).code == 429
    status = budget(server)
    assert status["disruptionsAllowed"] == 0 and set(status["disruptedPods"]) == {first, second}
    [condition] = status["conditions"]
    assert (condition["status"], condition["reason"]) == ("False", "InsufficientPods")


def test_records_keep_every_request_with_its_answer(server: TestApiServer) -> None:
    name = pod_names(server)[0]
    evict(server, name, metadata={"name": name, "annotations": {"rebalancer.io/reason": "hot"}})
    evict(server, name)

    assert [(r.name, r.code, r.outcome) for r in server.eviction.records] == [
        (name, 201, "Success"),
        (name, 404, "NotFound"),
    ]
    assert server.eviction.records[0].annotations == {"rebalancer.io/reason": "hot"}
