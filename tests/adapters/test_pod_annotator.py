"""PodAnnotator and the steerer with the real ``kubernetes`` client against the test API server's merge patch."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from rebalancer.actions.evictor import DryRun
from rebalancer.actions.steerer import Steerer, SteerOutcome, steering_rules
from rebalancer.adapters.kube import KubeActions, KubeSource, PodAnnotator, connect
from rebalancer.domain.errors import KubeForbidden, PatchError
from rebalancer.domain.model import DELETION_COST_ANNOTATION
from rebalancer.planning.plan import EvictionPlan
from rebalancer.planning.protections import DELETION_COST_OWNER_ANNOTATION, STEERING_OPT_OUT_ANNOTATION, Protections
from rebalancer.planning.snapshot import build_snapshot
from strategies import build
from tests import builders
from tests.conftest import KUBE_TOKEN
from tests.kubeapi import Fault, TestApiServer
from tests.kubeapi import builders as b

NS = "shop"
COSTS = {DELETION_COST_ANNOTATION: "250", DELETION_COST_OWNER_ANNOTATION: "250"}


def one_pod(server: TestApiServer, **args: Any) -> dict[str, Any]:
    args.setdefault("annotations", {"team": "shop"})
    server.add(b.pod("web-1", namespace=NS, labels={"app": "web"}, **args))
    return server.store.get("pods", "web-1", NS) or {}


def patches(server: TestApiServer) -> list[Any]:
    return [r for r in server.requests if r.method == "PATCH"]


def test_a_merge_patch_sets_the_annotations_only(kube_server: TestApiServer, kubeconfig: Path) -> None:
    before = one_pod(kube_server)
    annotator = PodAnnotator(connect(str(kubeconfig)))
    live = annotator.read(NS, "web-1")
    assert live is not None and live.uid == before["metadata"]["uid"] and live.annotations == {"team": "shop"}

    stored = annotator.set_annotations(NS, "web-1", COSTS, resource_version=live.resource_version)

    after = kube_server.store.get("pods", "web-1", NS) or {}
    assert after["metadata"]["annotations"] == {"team": "shop", **COSTS}
    assert int(after["metadata"]["resourceVersion"]) > int(before["metadata"]["resourceVersion"])
    assert stored.resource_version == after["metadata"]["resourceVersion"]
    for part in ("spec", "status"):
        assert after[part] == before[part]
    assert {k: v for k, v in after["metadata"].items() if k not in ("annotations", "resourceVersion")} == {
        k: v for k, v in before["metadata"].items() if k not in ("annotations", "resourceVersion")
    }
    [request] = patches(kube_server)
    assert request.path == f"/api/v1/namespaces/{NS}/pods/web-1"
    assert request.headers["content-type"] == "application/merge-patch+json"
    assert json.loads(request.body) == {"metadata": {"resourceVersion": live.resource_version, "annotations": COSTS}}


def test_a_stale_resource_version_is_a_conflict(kube_server: TestApiServer, kubeconfig: Path) -> None:
    one_pod(kube_server)
    annotator = PodAnnotator(connect(str(kubeconfig)))
    live = annotator.read(NS, "web-1")
    assert live is not None
    annotator.set_annotations(NS, "web-1", {"other": "x"}, resource_version=live.resource_version)
    with pytest.raises(PatchError) as caught:
        annotator.set_annotations(NS, "web-1", COSTS, resource_version=live.resource_version)
    assert caught.value.status == 409 and caught.value.reason == "Conflict"
    assert "the object has been modified" in str(caught.value)


def test_gone_invalid_and_forbidden(kube_server: TestApiServer, kubeconfig: Path) -> None:
    annotator = PodAnnotator(connect(str(kubeconfig)))
    assert annotator.read(NS, "web-1") is None
    with pytest.raises(PatchError) as gone:
        annotator.set_annotations(NS, "web-1", COSTS, resource_version="1")
    assert gone.value.status == 404 and 'pods "web-1" not found' in str(gone.value)

    live = one_pod(kube_server)["metadata"]
    with pytest.raises(PatchError) as invalid:
        annotator.set_annotations(
            NS, "web-1", {DELETION_COST_ANNOTATION: "+5"}, resource_version=live["resourceVersion"]
        )
    assert invalid.value.status == 422 and invalid.value.reason == "Invalid"
    assert f'metadata.annotations[{DELETION_COST_ANNOTATION}]: Invalid value: "+5": must be a 32bit integer' in str(
        invalid.value
    )
    with pytest.raises(PatchError) as bad_key:
        annotator.set_annotations(NS, "web-1", {"-bad-": "x"}, resource_version=live["resourceVersion"])
    assert bad_key.value.status == 422

    kube_server.forbid("patch", "pods")
    with pytest.raises(KubeForbidden) as refused:
        annotator.set_annotations(NS, "web-1", COSTS, resource_version=live["resourceVersion"])
    assert "patch" in str(refused.value) and "pods" in str(refused.value)


def test_server_dry_run_changes_nothing(kube_server: TestApiServer, kubeconfig: Path) -> None:
    live = one_pod(kube_server)["metadata"]
    annotator = PodAnnotator(connect(str(kubeconfig)))
    answer = annotator.set_annotations(NS, "web-1", COSTS, resource_version=live["resourceVersion"], dry_run=True)
    assert answer.annotations[DELETION_COST_ANNOTATION] == "250"
    stored = kube_server.store.get("pods", "web-1", NS) or {}
    assert stored["metadata"]["resourceVersion"] == live["resourceVersion"]
    assert DELETION_COST_ANNOTATION not in stored["metadata"]["annotations"]
    assert patches(kube_server)[0].query == {"dryRun": "All"}


def raw_patch(server: TestApiServer, content_type: str, body: Any) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        f"{server.url}/api/v1/namespaces/{NS}/pods/web-1", data=json.dumps(body).encode(), method="PATCH"
    )
    request.add_header("Content-Type", content_type)
    request.add_header("Authorization", f"Bearer {KUBE_TOKEN}")
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_the_server_speaks_merge_patch_faithfully(kube_server: TestApiServer) -> None:
    one_pod(kube_server, annotations={"team": "shop", "drop": "me"})
    code, body = raw_patch(kube_server, "application/json", {"metadata": {"annotations": {"a": "b"}}})
    assert (code, body["reason"]) == (415, "UnsupportedMediaType")
    assert "application/merge-patch+json" in body["message"]
    code, body = raw_patch(kube_server, "application/merge-patch+json", {"metadata": {"annotations": {"drop": None}}})
    assert code == 200 and body["metadata"]["annotations"] == {"team": "shop"} and body["kind"] == "Pod"
    code, body = raw_patch(kube_server, "application/merge-patch+json", {"spec": {"nodeName": "elsewhere"}})
    assert code == 422 and body["details"]["causes"][0]["field"] == "spec"
    code, body = raw_patch(kube_server, "application/merge-patch+json", {"status": {"phase": "Failed"}})
    assert code == 200 and body["status"]["phase"] == "Running"  # status is not written through the pod itself


# -- the steerer through the real client ------------------------------------------------------------------


def steering_cluster(server: TestApiServer) -> None:
    server.add(b.node("hot", cpu="4", labels={"pool": "payg"}), b.node("cool", cpu="4", labels={"pool": "payg"}))
    server.add(*b.deployment_chain("web", NS, replicas=4, nodes=("hot", "cool")))
    opted = b.deployment_chain(
        "batch", NS, replicas=2, nodes=("hot",), annotations={STEERING_OPT_OUT_ANNOTATION: "false"}
    )
    server.add(*opted)


def steer_once(kubeconfig: Path, yaml: str, slept: list[float], dry_run: DryRun = DryRun.OFF) -> Any:
    policy = builders.policy(yaml)
    api = connect(str(kubeconfig))
    protections = Protections.from_settings(policy.protections)
    facts = KubeSource(api, protections.annotations_read()).read_facts()
    snapshot = build_snapshot(facts, builders.usage({"hot": 3_600, "cool": 400}), policy.pools, 1_700_000_000.0)
    plan = EvictionPlan(snapshot.taken_at, (build(policy.strategies[0]).plan(snapshot, protections),))
    clock = [0.0]

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock[0] += seconds

    steerer = Steerer(PodAnnotator(api), KubeActions(api), steering_rules(policy.strategies), protections, dry_run,
                      lambda: clock[0], sleep)  # fmt: skip
    return plan, steerer.apply(plan, snapshot)


STEER = "kind: DeletionCostSteering\npoolCosts: {payg: 1000}\nrate: {perSecond: 10, burst: 1}"


def test_steering_patches_once_paced_and_never_opted_out_workloads(
    kube_server: TestApiServer, kubeconfig: Path
) -> None:
    steering_cluster(kube_server)
    slept: list[float] = []
    _, report = steer_once(kubeconfig, STEER, slept)
    assert report.count(SteerOutcome.PATCHED) == 4 and report.aborted is None
    costs = {p["metadata"]["name"].split("-")[0] + "@" + p["spec"]["nodeName"]:
             (p["metadata"].get("annotations") or {}).get(DELETION_COST_ANNOTATION) for p in kube_server.objects("pods", NS)}  # fmt: skip
    assert costs == {"web@hot": "1100", "web@cool": "1900", "batch@hot": None}
    assert slept == [0.1, 0.1, 0.1]  # burst 1, then 10 a second
    assert len(patches(kube_server)) == 4
    events = [e for e in kube_server.objects("events", NS) if e["reason"] == "DeletionCostSet"]
    assert len(events) == 4 and "unset -> 1100" in events[0]["message"] + events[-1]["message"]

    plan, again = steer_once(kubeconfig, STEER, slept)
    assert plan.cost_patches == () and again.results == ()  # idempotent: nothing to change, no request
    assert len(patches(kube_server)) == 4


def test_steering_caps_patches_per_cycle_and_dry_runs(kube_server: TestApiServer, kubeconfig: Path) -> None:
    steering_cluster(kube_server)
    _, dry = steer_once(kubeconfig, STEER, [], DryRun.CLIENT)
    assert dry.count(SteerOutcome.DRY_RUN) == 4 and patches(kube_server) == []
    _, server_dry = steer_once(kubeconfig, STEER, [], DryRun.SERVER)
    assert server_dry.count(SteerOutcome.SERVER_DRY_RUN) == 4
    assert all(
        p["metadata"].get("annotations", {}).get(DELETION_COST_ANNOTATION) is None
        for p in kube_server.objects("pods", NS)
    )
    kube_server.requests.clear()
    _, capped = steer_once(kubeconfig, STEER + "\nmaxPatchesPerCycle: 3", [])
    assert capped.count(SteerOutcome.PATCHED) == 3 and len(patches(kube_server)) == 3


def test_a_patch_sent_without_an_answer_says_so_and_stops_the_cycle(
    kube_server: TestApiServer, kubeconfig: Path
) -> None:
    """The first cost patch's connection drops without an answer, so the steerer cannot tell whether the
    cost was set: that patch is reported unanswered, the cycle stops, the rest is reported not attempted."""
    steering_cluster(kube_server)
    dropped: list[str] = []

    def applied_then_dropped(request: Any) -> None:
        if request.method == "PATCH" and not dropped:
            dropped.append(request.path)
            kube_server.set_fault(request.path, Fault(drop=True, method="PATCH", times=1))

    kube_server.on_request(applied_then_dropped)
    _, report = steer_once(kubeconfig, STEER, [])

    outcomes = [r.outcome for r in report.results]
    assert outcomes == [SteerOutcome.UNANSWERED] + [SteerOutcome.SKIPPED] * 3
    assert "sent without a clear answer" in report.results[0].detail
    assert all(r.detail.startswith("not attempted: ") for r in report.results[1:])
    assert report.aborted is not None and "no clear answer" in report.aborted
    assert len(patches(kube_server)) == 1
