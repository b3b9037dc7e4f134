"""NodeMarker and GuardApplier with the real ``kubernetes`` client against the test API server's node PATCH:
the mark written beside foreign taints (kept byte for byte), resourceVersion conflicts retried on a fresh
read, validation, RBAC, a node gone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rebalancer.actions.evictor import DryRun
from rebalancer.actions.guard.applier import GuardApplier, GuardOutcome
from rebalancer.actions.guard.decide import Action, Change, GuardDecision
from rebalancer.adapters.kube import KubeSource, connect
from rebalancer.adapters.kube.node_guard import NodeMarker
from rebalancer.domain.errors import KubeForbidden, PatchError
from rebalancer.domain.guard_marks import GUARD_KEY, Mark, MarkReason, NodeEdit, read_mark
from rebalancer.domain.model import Taint
from tests.kubeapi import TestApiServer
from tests.kubeapi import builders as b

NOW = 1_790_000_000.0
NO_EXECUTE = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-11-24T10:00:00Z"}
DEDICATED = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
MARK = Mark("rebalancer/a", "PreferNoSchedule", MarkReason.HOT, NOW + 900)


def stored(server: TestApiServer, name: str = "n1") -> dict[str, Any]:
    return server.store.get("nodes", name) or {}


def test_the_mark_is_written_beside_foreign_taints_and_read_back(kube_server: TestApiServer, kubeconfig: Path) -> None:
    kube_server.add(b.node("n1", taints=[NO_EXECUTE, DEDICATED]))
    before = stored(kube_server)
    marker = NodeMarker(connect(str(kubeconfig)))
    live = marker.read("n1")
    assert live is not None and live.annotation is None and live.uid == before["metadata"]["uid"]
    assert live.taints == (Taint(NO_EXECUTE["key"], "", "NoExecute"), Taint("dedicated", "gpu", "NoSchedule"))

    after = marker.write(live, NodeEdit((*live.taints, MARK.taint()), MARK.annotation()))

    node = stored(kube_server)
    assert node["spec"]["taints"] == [
        NO_EXECUTE,
        DEDICATED,
        {"key": GUARD_KEY, "value": "hot", "effect": "PreferNoSchedule"},
    ]
    assert node["metadata"]["annotations"] == {**before["metadata"]["annotations"], GUARD_KEY: MARK.annotation()}
    assert node["status"] == before["status"] and node["metadata"]["uid"] == before["metadata"]["uid"]
    assert after is not None and after.resource_version == node["metadata"]["resourceVersion"]
    [request] = [r for r in kube_server.requests if r.method == "PATCH"]
    assert request.path == "/api/v1/nodes/n1" and request.headers["content-type"] == "application/merge-patch+json"
    assert json.loads(request.body)["metadata"]["resourceVersion"] == live.resource_version
    # the listing decodes the mark, as the cycles see it
    [listed] = KubeSource(connect(str(kubeconfig)), frozenset()).read_nodes()
    assert read_mark(listed.taints, listed.annotations.get(GUARD_KEY)) == MARK

    cleared = marker.write(after, NodeEdit(live.taints, None))
    assert cleared is not None and cleared.annotation is None
    assert stored(kube_server)["spec"]["taints"] == [NO_EXECUTE, DEDICATED]
    assert stored(kube_server)["metadata"]["annotations"] == before["metadata"]["annotations"]


def test_conflict_invalid_forbidden_and_gone(kube_server: TestApiServer, kubeconfig: Path) -> None:
    kube_server.add(b.node("n1"))
    marker = NodeMarker(connect(str(kubeconfig)))
    live = marker.read("n1")
    assert live is not None
    marker.write(live, NodeEdit((Taint("other", "", "NoSchedule"),), None))  # someone else's write in between
    with pytest.raises(PatchError) as conflict:
        marker.write(live, NodeEdit((MARK.taint(),), MARK.annotation()))
    assert conflict.value.status == 409
    fresh = marker.read("n1")
    assert fresh is not None
    twice = (MARK.taint(), Taint(GUARD_KEY, "relieved", "PreferNoSchedule"))
    with pytest.raises(PatchError, match="unique by key and effect") as invalid:
        marker.write(fresh, NodeEdit(twice, MARK.annotation()))
    assert invalid.value.status == 422
    with pytest.raises(PatchError, match="supported values") as effect:
        marker.write(fresh, NodeEdit((Taint(GUARD_KEY, "hot", "Sometimes"),), None))
    assert effect.value.status == 422
    kube_server.forbid("patch", "nodes")
    with pytest.raises(KubeForbidden, match="patch nodes"):
        marker.write(fresh, NodeEdit((MARK.taint(),), MARK.annotation()))
    kube_server.allow_all()
    kube_server.delete("nodes", "n1")
    assert marker.read("n1") is None
    assert marker.write(fresh, NodeEdit((), None)) is None


def test_the_applier_redoes_a_conflicting_change_on_the_fresh_node(
    kube_server: TestApiServer, kubeconfig: Path
) -> None:
    kube_server.add(b.node("n1", taints=[DEDICATED]))
    racing = {"done": False}

    def someone_taints_first(request: Any) -> None:  # a taint added between our read and our patch
        if request.method == "PATCH" and not racing["done"]:
            racing["done"] = True
            node = stored(kube_server)
            node["spec"]["taints"].append({"key": "late", "effect": "NoSchedule"})
            kube_server.store.update(node)

    kube_server.on_request(someone_taints_first)
    change = Change("n1", "p", Action.SET, "hot", MARK, None)
    report = GuardApplier(NodeMarker(connect(str(kubeconfig))), dry_run=DryRun.OFF).apply(GuardDecision((change,)))
    assert [r.outcome for r in report.results] == [GuardOutcome.APPLIED]
    assert [t["key"] for t in stored(kube_server)["spec"]["taints"]] == ["dedicated", "late", GUARD_KEY]
    assert len([r for r in kube_server.requests if r.method == "PATCH"]) == 2

    # a change decided on a mark the node no longer carries is not made; a dry run writes nothing
    stale = Change("n1", "p", Action.CLEAR, "cooled", None, Mark("rebalancer/b", "NoSchedule", MarkReason.HOT, NOW))
    skipped = GuardApplier(NodeMarker(connect(str(kubeconfig))), dry_run=DryRun.OFF).apply(GuardDecision((stale,)))
    assert [r.outcome for r in skipped.results] == [GuardOutcome.SKIPPED]
    clear = Change("n1", "p", Action.CLEAR, "cooled", None, MARK)
    requests = len(kube_server.requests)
    dry = GuardApplier(NodeMarker(connect(str(kubeconfig))), dry_run=DryRun.CLIENT).apply(GuardDecision((clear,)))
    assert [r.outcome for r in dry.results] == [GuardOutcome.DRY_RUN] and len(kube_server.requests) == requests
    server = GuardApplier(NodeMarker(connect(str(kubeconfig))), dry_run=DryRun.SERVER).apply(GuardDecision((clear,)))
    assert [r.outcome for r in server.results] == [GuardOutcome.SERVER_DRY_RUN]
    [checked] = [r for r in kube_server.requests[requests:] if r.method == "PATCH"]
    assert checked.query.get("dryRun") == "All"
    assert stored(kube_server)["metadata"]["annotations"][GUARD_KEY] == MARK.annotation()


def test_no_new_mark_in_a_pool_whose_clear_failed(kube_server: TestApiServer, kubeconfig: Path) -> None:
    old = Mark("rebalancer/a", "PreferNoSchedule", MarkReason.HOT, NOW + 60)
    kube_server.add(b.node("n1"), b.node("n2"))
    node = stored(kube_server)
    node["spec"]["taints"] = [{"key": GUARD_KEY, "value": "hot", "effect": "PreferNoSchedule"}]
    node["metadata"]["annotations"][GUARD_KEY] = old.annotation()
    kube_server.store.update(node)
    kube_server.on_request(lambda r: kube_server.forbid("patch", "nodes") if r.path == "/api/v1/nodes/n1" else None)
    decision = GuardDecision((Change("n1", "p", Action.CLEAR, "over-cap", None, old),
                              Change("n2", "p", Action.SET, "hot", MARK, None)))  # fmt: skip
    report = GuardApplier(NodeMarker(connect(str(kubeconfig))), dry_run=DryRun.OFF).apply(decision)
    assert [r.outcome for r in report.results] == [GuardOutcome.FAILED, GuardOutcome.SKIPPED]
    assert "patch nodes" in report.results[0].detail
    assert GUARD_KEY not in (stored(kube_server, "n2")["metadata"].get("annotations") or {})


def test_a_bulk_loaded_node_is_marked_like_a_created_one(kube_server: TestApiServer, kubeconfig: Path) -> None:
    """The benchmarks' clusters are loaded as list-item bytes (no kind/apiVersion): a GET and a PATCH of
    such a node answer as for any node (the alert benchmark's landing guard marks them)."""
    item = {k: v for k, v in b.node("n1", taints=[DEDICATED]).items() if k not in ("kind", "apiVersion")}
    item["metadata"] |= {"uid": "u-n1", "resourceVersion": "7", "creationTimestamp": "2026-11-24T10:00:00Z"}
    kube_server.store.load_encoded("nodes", [(None, "n1", json.dumps(item).encode())])
    marker = NodeMarker(connect(str(kubeconfig)))
    live = marker.read("n1")
    assert live is not None and live.taints == (Taint("dedicated", "gpu", "NoSchedule"),)

    after = marker.write(live, NodeEdit((*live.taints, MARK.taint()), MARK.annotation()))

    assert after is not None
    node = stored(kube_server)
    assert (node["kind"], node["apiVersion"]) == ("Node", "v1")
    assert node["spec"]["taints"] == [DEDICATED, {"key": GUARD_KEY, "value": "hot", "effect": "PreferNoSchedule"}]


def test_no_new_mark_in_a_pool_whose_clear_was_skipped(kube_server: TestApiServer, kubeconfig: Path) -> None:
    """A clear decided on a mark the node no longer carries as it was (here, someone added a taint of the key by
    hand since) is skipped, and the node still carries the key: a new mark in its pool would pass the cap."""
    old = Mark("rebalancer/a", "PreferNoSchedule", MarkReason.HOT, NOW + 60)
    kube_server.add(b.node("n1"), b.node("n2"))
    node = stored(kube_server)
    node["spec"]["taints"] = [{"key": GUARD_KEY, "value": "hot", "effect": "PreferNoSchedule"},
                              {"key": GUARD_KEY, "value": "keep", "effect": "NoSchedule"}]  # fmt: skip
    node["metadata"]["annotations"][GUARD_KEY] = old.annotation()
    kube_server.store.update(node)
    decision = GuardDecision((Change("n1", "p", Action.CLEAR, "over-cap", None, old),
                              Change("n2", "p", Action.SET, "hot", MARK, None)))  # fmt: skip
    report = GuardApplier(NodeMarker(connect(str(kubeconfig))), dry_run=DryRun.OFF).apply(decision)
    assert [r.outcome for r in report.results] == [GuardOutcome.SKIPPED, GuardOutcome.SKIPPED]
    assert GUARD_KEY not in (stored(kube_server, "n2")["metadata"].get("annotations") or {})
    assert not [r for r in kube_server.requests if r.method == "PATCH"]


def test_a_conflicting_change_is_not_redone_once_leadership_is_lost(
    kube_server: TestApiServer, kubeconfig: Path
) -> None:
    """A node whose status moves under every patch (409 each time): the change is read and redone, but only
    while the instance still leads; the lease lapsed after the first attempt, so no second patch is sent."""
    kube_server.add(b.node("n1"))
    leading = {"now": True}

    def status_moves(request: Any) -> None:
        if request.method == "PATCH":
            leading["now"] = False
            kube_server.store.update(stored(kube_server))  # a new resourceVersion: the patch conflicts

    kube_server.on_request(status_moves)
    change = Change("n1", "p", Action.SET, "hot", MARK, None)
    applier = GuardApplier(NodeMarker(connect(str(kubeconfig))), dry_run=DryRun.OFF, may_act=lambda: leading["now"])
    report = applier.apply(GuardDecision((change,)))
    assert [(r.outcome, r.detail) for r in report.results] == [(GuardOutcome.SKIPPED, "not the leader any more")]
    assert len([r for r in kube_server.requests if r.method == "PATCH"]) == 1
