"""KubeActions (eviction, the re-read before it, Events) with the real ``kubernetes`` client against tests/kubeapi."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes.client
import pytest

from rebalancer.adapters.kube import KubeActions, connect
from rebalancer.domain.errors import (
    EvictionConflict,
    EvictionError,
    EvictionRejected,
    KubeForbidden,
    KubeUnavailable,
    PodGone,
    RebalancerError,
)
from rebalancer.domain.model import Pod, WorkloadRef
from tests.kubeapi import Fault, TestApiServer, status
from tests.kubeapi import builders as b

NS = "shop"
REASON = {"rebalancer.io/reason": "node node-1 is hot (92% > 80%)", "rebalancer.io/requester": "rebalancer"}


def web(server: TestApiServer, replicas: int = 3, **pdb: Any) -> list[dict[str, Any]]:
    """A Deployment "web" of ``replicas`` ready pods in "shop"; with ``pdb`` arguments, a budget over them."""
    server.add(b.node("node-1"), *b.deployment_chain("web", NS, replicas=replicas))
    if pdb:
        server.add(b.pdb("web", NS, selector={"matchLabels": {"app": "web"}}, **pdb))
    return server.objects("pods", NS)


def actions(kubeconfig: Path, timeout: float = 5.0) -> KubeActions:
    return KubeActions(connect(kubeconfig=str(kubeconfig)), timeout, clock=lambda: 1_714_560_000.25)


def evict(kubeconfig: Path, pod: dict[str, Any], *, dry_run: bool = False, timeout: float = 5.0) -> None:
    meta = pod["metadata"]
    actions(kubeconfig, timeout).evict(
        meta["namespace"], meta["name"], meta["uid"], dry_run=dry_run, annotations=REASON
    )


def names(server: TestApiServer) -> list[str]:
    return [p["metadata"]["name"] for p in server.objects("pods", NS)]


# --- success and dry run -------------------------------------------------------------------------


def test_eviction_removes_the_pod_and_carries_annotations_and_the_uid(
    kube_server: TestApiServer, kubeconfig: Path
) -> None:
    pods = web(kube_server, max_unavailable=1)

    evict(kubeconfig, pods[0])

    assert pods[0]["metadata"]["name"] not in names(kube_server)
    [record] = kube_server.eviction.records
    assert (record.code, record.outcome, record.dry_run) == (201, "Success", False)
    assert record.annotations == REASON
    assert record.preconditions == {"uid": pods[0]["metadata"]["uid"]}
    assert record.body["apiVersion"] == "policy/v1" and record.body["kind"] == "Eviction"
    budget = kube_server.objects("poddisruptionbudgets", NS)[0]["status"]
    assert (budget["currentHealthy"], budget["disruptionsAllowed"]) == (2, 0)


def test_server_dry_run_checks_and_changes_nothing(kube_server: TestApiServer, kubeconfig: Path) -> None:
    pods = web(kube_server, min_available=2)
    kube_server.disruption.sync_all()
    before = kube_server.objects("poddisruptionbudgets", NS)

    evict(kubeconfig, pods[0], dry_run=True)

    assert len(names(kube_server)) == 3
    assert kube_server.objects("poddisruptionbudgets", NS) == before
    [request] = kube_server.requests_to(kube_server.eviction_path(NS, pods[0]["metadata"]["name"]))
    assert request.query == {"dryRun": "All"}
    assert kube_server.eviction.records[0].dry_run


def test_server_dry_run_still_refuses_what_the_budget_forbids(kube_server: TestApiServer, kubeconfig: Path) -> None:
    pods = web(kube_server, min_available=3)

    with pytest.raises(EvictionRejected):
        evict(kubeconfig, pods[0], dry_run=True)


# --- the budget ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "budget",
    [{"min_available": 3}, {"min_available": "100%"}, {"max_unavailable": 0}, {"max_unavailable": "0%"},
     {"min_available": "67%"}],  # ceil(0.67 x 3) = 3
    ids=["minAvailable=3", "minAvailable=100%", "maxUnavailable=0", "maxUnavailable=0%", "minAvailable=67%"],
)  # fmt: skip
def test_no_disruption_allowed_is_rejected_and_the_pod_stays(
    kube_server: TestApiServer, kubeconfig: Path, budget: dict[str, Any]
) -> None:
    pods = web(kube_server, **budget)

    with pytest.raises(EvictionRejected) as caught:
        evict(kubeconfig, pods[0])

    assert caught.value.budget and caught.value.status == 429
    assert caught.value.retry_after is None  # the real server gives no advice for an exhausted budget
    assert "Cannot evict pod as it would violate the pod's disruption budget" in str(caught.value)
    assert "The disruption budget web needs 3 healthy pods and has 3 currently" in str(caught.value)
    assert len(names(kube_server)) == 3


@pytest.mark.parametrize(
    "budget", [{"min_available": 2}, {"min_available": "50%"}, {"max_unavailable": 1}, {"max_unavailable": "33%"}]
)
def test_the_budget_allows_one_then_refuses_the_next(
    kube_server: TestApiServer, kubeconfig: Path, budget: dict[str, Any]
) -> None:
    pods = web(kube_server, **budget)

    evict(kubeconfig, pods[0])
    with pytest.raises(EvictionRejected):
        evict(kubeconfig, pods[1])

    assert names(kube_server) == [p["metadata"]["name"] for p in pods[1:]]


def test_retry_after_is_read_from_the_header(kube_server: TestApiServer, kubeconfig: Path) -> None:
    pods = web(kube_server, min_available=3)
    kube_server.eviction.budget_retry_after = 7

    with pytest.raises(EvictionRejected) as caught:
        evict(kubeconfig, pods[0])

    assert caught.value.retry_after == 7.0


def test_a_budget_still_being_processed_asks_for_10_seconds(kube_server: TestApiServer, kubeconfig: Path) -> None:
    pods = web(kube_server, max_unavailable=1)
    kube_server.eviction.sync_budgets = False  # the disruption controller lags behind a spec change
    pdb = kube_server.objects("poddisruptionbudgets", NS)[0]
    pdb["metadata"]["generation"] = 2
    kube_server.store.update(pdb)

    with pytest.raises(EvictionRejected) as caught:
        evict(kubeconfig, pods[0])

    assert caught.value.retry_after == 10.0 and caught.value.budget
    assert "still being processed" in str(caught.value)


def test_api_throttling_is_a_rejection_without_a_budget(kube_server: TestApiServer, kubeconfig: Path) -> None:
    pods = web(kube_server)
    path = kube_server.eviction_path(NS, pods[0]["metadata"]["name"])
    kube_server.set_fault(path, Fault(code=429, retry_after=3))

    with pytest.raises(EvictionRejected) as caught:
        evict(kubeconfig, pods[0])

    assert (caught.value.retry_after, caught.value.budget) == (3.0, False)


def test_two_budgets_are_an_eviction_error(kube_server: TestApiServer, kubeconfig: Path) -> None:
    pods = web(kube_server, max_unavailable=1)
    kube_server.add(b.pdb("everything", NS, selector={}, max_unavailable=1))

    with pytest.raises(EvictionError) as caught:
        evict(kubeconfig, pods[0])

    assert type(caught.value) is EvictionError
    assert (caught.value.status, caught.value.reason) == (500, "MultipleBudgets")
    assert "This pod has more than one PodDisruptionBudget" in str(caught.value)


def test_a_budget_in_a_bad_state_is_an_eviction_error_not_rbac(kube_server: TestApiServer, kubeconfig: Path) -> None:
    pods = web(kube_server, max_unavailable=1, disruptions_allowed=-1)
    kube_server.eviction.sync_budgets = False

    with pytest.raises(EvictionError) as caught:
        evict(kubeconfig, pods[0])

    assert caught.value.status == 403 and "pdb disruptions allowed is negative" in str(caught.value)


def test_an_unready_pod_goes_without_spending_the_budget(kube_server: TestApiServer, kubeconfig: Path) -> None:
    kube_server.add(b.node("node-1"), *b.deployment_chain("web", NS, replicas=3))
    unready = b.pod("web-broken", namespace=NS, labels={"app": "web"}, ready=False, owners=[b.owner("ReplicaSet", "x")])
    kube_server.add(unready, b.pdb("web", NS, selector={"matchLabels": {"app": "web"}}, min_available=3))

    evict(kubeconfig, unready)

    assert "web-broken" not in names(kube_server)


def test_a_pending_pod_goes_whatever_the_budget(kube_server: TestApiServer, kubeconfig: Path) -> None:
    web(kube_server, min_available=3)
    pending = b.pod("web-pending", namespace=NS, node=None, phase="Pending", labels={"app": "web"})
    kube_server.add(pending)

    evict(kubeconfig, pending)

    assert "web-pending" not in names(kube_server)


# --- gone, replaced, forbidden -----------------------------------------------------------------------


def test_a_missing_pod_is_gone(kube_server: TestApiServer, kubeconfig: Path) -> None:
    with pytest.raises(PodGone) as caught:
        actions(kubeconfig).evict(NS, "nope", "uid-1", dry_run=False, annotations={})

    assert caught.value.status == 404 and 'pods "nope" not found' in str(caught.value)


def test_a_replaced_pod_is_a_conflict_and_stays(kube_server: TestApiServer, kubeconfig: Path) -> None:
    pods = web(kube_server)
    meta = pods[0]["metadata"]

    with pytest.raises(EvictionConflict) as caught:
        actions(kubeconfig).evict(NS, meta["name"], "uid-of-the-pod-planned", dry_run=False, annotations={})

    assert caught.value.status == 409 and "does not match the UID in record" in str(caught.value)
    assert meta["name"] in names(kube_server)


def test_rbac_refusal_names_the_verb_and_resource_to_grant(kube_server: TestApiServer, kubeconfig: Path) -> None:
    pods = web(kube_server)
    kube_server.forbid("create", "pods/eviction", namespace=NS)

    with pytest.raises(KubeForbidden) as caught:
        evict(kubeconfig, pods[0])

    error = caught.value
    assert str(error).startswith(
        "RBAC: the service account may not create pods/eviction in namespace shop (grant verb create on pods/eviction)"
    )
    assert 'cannot create resource "pods/eviction"' in str(error)  # the server's own words follow
    assert (error.verb, error.resource, error.namespace, error.status) == ("create", "pods/eviction", NS, 403)


def test_a_webhook_refusal_is_an_eviction_error(kube_server: TestApiServer, kubeconfig: Path) -> None:
    pods = web(kube_server)
    denied = status.ApiError(status.status(403, 'admission webhook "guard.example.com" denied the request: no'))
    kube_server.set_fault(kube_server.eviction_path(NS, pods[0]["metadata"]["name"]), Fault(error=denied))

    with pytest.raises(EvictionError) as caught:
        evict(kubeconfig, pods[0])

    assert not isinstance(caught.value, KubeForbidden) and "denied the request" in str(caught.value)


# --- transport and server failures: only the project's errors ----------------------------------------


def test_no_answer_in_time_is_kube_unavailable(kube_server: TestApiServer, kubeconfig: Path) -> None:
    pods = web(kube_server)
    kube_server.set_fault(kube_server.eviction_path(NS, pods[0]["metadata"]["name"]), Fault(delay=3))

    with pytest.raises(KubeUnavailable) as caught:
        evict(kubeconfig, pods[0], timeout=0.5)

    assert caught.value.reason == "Timeout" and "within 0.5s" in str(caught.value)


FAULTS = {
    "500": Fault(code=500),
    "503": Fault(code=503),
    "dropped": Fault(drop=True),
    "proxy page": Fault(code=502, body=b"<html>bad gateway</html>"),
    "401": Fault(code=401),
}


@pytest.mark.parametrize("fault", FAULTS.values(), ids=FAULTS.keys())
def test_failures_are_the_projects_errors(kube_server: TestApiServer, kubeconfig: Path, fault: Fault) -> None:
    pods = web(kube_server)
    name = pods[0]["metadata"]["name"]
    for path in (kube_server.eviction_path(NS, name), f"/api/v1/namespaces/{NS}/pods/{name}"):
        kube_server.set_fault(path, fault)
    act = actions(kubeconfig)

    with pytest.raises(KubeUnavailable):
        evict(kubeconfig, pods[0])
    with pytest.raises(KubeUnavailable):
        act.get_pod(NS, name, frozenset())


def test_a_stopped_server_is_kube_unavailable(kube_server: TestApiServer, kubeconfig: Path) -> None:
    act = actions(kubeconfig, timeout=2)
    kube_server.stop()

    with pytest.raises(KubeUnavailable, match="cannot reach"):
        act.evict(NS, "p", "u", dry_run=False, annotations={})
    with pytest.raises(RebalancerError):
        act.get_pod(NS, "p", frozenset())


# --- the re-read before evicting -----------------------------------------------------------------


def test_get_pod_decodes_as_the_snapshot_does(kube_server: TestApiServer, kubeconfig: Path) -> None:
    pods = web(kube_server)
    meta = pods[0]["metadata"]

    pod = actions(kubeconfig).get_pod(NS, meta["name"], frozenset({"rebalancer.io/evict"}))

    assert pod is not None and pod.uid == meta["uid"] and pod.node_name == "node-1"
    assert pod.workload == WorkloadRef(kind="Deployment", namespace=NS, name="web")
    assert (pod.owner_kind, pod.ready, pod.terminating, pod.cpu_request_m) == ("ReplicaSet", True, False, 100)


def test_get_pod_is_none_once_gone_and_sees_terminating(kube_server: TestApiServer, kubeconfig: Path) -> None:
    pods = web(kube_server)
    kube_server.eviction.terminate_at_once = False
    name = pods[0]["metadata"]["name"]
    act = actions(kubeconfig)

    evict(kubeconfig, pods[0])
    pod = act.get_pod(NS, name, frozenset())
    kube_server.eviction.finish_termination(NS, name)

    assert pod is not None and pod.terminating
    assert act.get_pod(NS, name, frozenset()) is None


def test_get_pod_forbidden_names_get_pods(kube_server: TestApiServer, kubeconfig: Path) -> None:
    pods = web(kube_server)
    kube_server.forbid("get", "replicasets", group="apps")

    with pytest.raises(KubeForbidden, match=r"may not get replicasets\.apps in namespace shop"):
        actions(kubeconfig).get_pod(NS, pods[0]["metadata"]["name"], frozenset())


# --- events --------------------------------------------------------------------------------------


def planned(server_pod: dict[str, Any]) -> Pod:
    meta = server_pod["metadata"]
    return Pod(namespace=meta["namespace"], name=meta["name"], uid=meta["uid"], node_name="node-1", phase="Running",
               ready=True, workload=None, owner_kind=None, priority=0, priority_class="", qos="Burstable",
               cpu_request_m=100, memory_request=0, created=0.0, restarts=0)  # fmt: skip


def test_an_event_is_recorded_on_the_pod(kube_server: TestApiServer, kubeconfig: Path) -> None:
    pods = web(kube_server)
    act = actions(kubeconfig)

    ok = act.record_event(
        planned(pods[0]), reason="LowNodeUtilization", message="evicted from hot node node-1", action="Evicting",
        resource_version="42",
    )  # fmt: skip

    assert ok and act.last_event_error is None
    [event] = kube_server.objects("events", NS)
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "namespace": NS,
                                       "name": pods[0]["metadata"]["name"], "uid": pods[0]["metadata"]["uid"],
                                       "resourceVersion": "42"}  # fmt: skip
    assert (event["reason"], event["action"], event["type"], event["count"]) == (
        "LowNodeUtilization", "Evicting", "Normal", 1,
    )  # fmt: skip
    assert event["reportingComponent"] == "rebalancer" and event["source"] == {"component": "rebalancer"}
    assert event["reportingInstance"]
    assert event["eventTime"].startswith("2024-05-01T10:40:00.25")
    assert event["firstTimestamp"] == event["lastTimestamp"]
    assert event["firstTimestamp"] in ("2024-05-01T10:40:00Z", "2024-05-01T10:40:00+00:00")
    assert event["metadata"]["name"].startswith(pods[0]["metadata"]["name"] + ".")


def test_events_are_listable_by_the_pod_they_are_about(kube_server: TestApiServer, kubeconfig: Path) -> None:
    pods = web(kube_server)
    act = actions(kubeconfig)
    for pod in pods[:2]:
        assert act.record_event(planned(pod), reason="R", message="m", action="Evicting")
    assert act.record_event(planned(pods[0]), reason="R2", message="again", action="Evicting", type_="Warning")

    core = kubernetes.client.CoreV1Api(connect(kubeconfig=str(kubeconfig)))  # any reader of Events
    listed = core.list_namespaced_event(NS, field_selector=f"involvedObject.name={pods[0]['metadata']['name']}")

    assert sorted(str(e.reason) for e in listed.items) == ["R", "R2"]


def test_a_failed_event_never_raises(kube_server: TestApiServer, kubeconfig: Path) -> None:
    pods = web(kube_server)
    kube_server.forbid("create", "events", namespace=NS)
    act = actions(kubeconfig)

    assert not act.record_event(planned(pods[0]), reason="R", message="m", action="Evicting")
    assert act.last_event_error is not None and "may not create events in namespace shop" in act.last_event_error
    kube_server.stop()
    assert not act.record_event(planned(pods[0]), reason="R", message="m", action="Evicting")
    assert "cannot reach" in (act.last_event_error or "")


def test_long_event_fields_are_cut_to_the_api_limits(kube_server: TestApiServer, kubeconfig: Path) -> None:
    pods = web(kube_server)
    act = actions(kubeconfig)

    assert act.record_event(planned(pods[0]), reason="R" * 300, message="é" * 2000, action="A" * 300)
    [event] = kube_server.objects("events", NS)
    assert len(event["reason"]) == 128 and len(event["message"].encode()) <= 1024
