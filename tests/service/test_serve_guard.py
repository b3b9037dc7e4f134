"""serve's landing-guard housekeeping with the real client against the Python test API server: the marks
released at a graceful shutdown only while this instance still leads, and the sweep between cycles that
clears the marks of a guard the policy no longer has, even when no cycle runs."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rebalancer.actions.evictor import DryRun
from rebalancer.actions.guard.applier import GuardOutcome
from rebalancer.adapters.kube import KubeSource, connect
from rebalancer.app.guard import release_marks
from rebalancer.app.runtime import Runtime
from rebalancer.app.serve import _ClusterCache, _KnownNodes, _sweep_marks
from rebalancer.domain.guard_marks import GUARD_KEY, Mark, MarkReason
from rebalancer.policy import Policy, parse_policy
from rebalancer.service.metrics import Metrics
from tests.kubeapi import TestApiServer
from tests.kubeapi import builders as b

NOW = 1_790_000_000.0
OWNER = "rebalancer/a"
STRATEGY = "strategies:\n- {kind: LowNodeUtilization, thresholds: {cpu: 20}, targetThresholds: {cpu: 50}}\n"
UNCACHED = "service: {watchCache: {enabled: false}}\n"


def marked_cluster(server: TestApiServer, mark: Mark, names: tuple[str, ...] = ("n1", "n2", "n3")) -> None:
    server.add(*(b.node(name) for name in names))
    node = server.store.get("nodes", names[0])
    assert node is not None
    node["spec"]["taints"] = [{"key": GUARD_KEY, "value": mark.reason.value, "effect": mark.effect}]
    node["metadata"]["annotations"][GUARD_KEY] = mark.annotation()
    server.store.update(node)


def taints(server: TestApiServer, name: str = "n1") -> list[dict[str, Any]]:
    return list((server.store.get("nodes", name) or {})["spec"].get("taints") or [])


def test_a_stopping_instance_that_lost_its_lease_releases_no_mark(kube_server: TestApiServer, kubeconfig: Path) -> None:
    """The lease lapsed after serve decided to release (a slow API server, many nodes): no write after that."""
    mark = Mark(OWNER, "PreferNoSchedule", MarkReason.RELIEVED, NOW + 600)
    marked_cluster(kube_server, mark)
    policy = parse_policy(STRATEGY + "landingGuard: {pools: [{pool: default}]}\n")
    runtime = Runtime(policy, connect(str(kubeconfig)), lambda: NOW, DryRun.OFF, requester=OWNER, may_act=lambda: False)

    report = release_marks(runtime)

    assert [(r.change.node, r.outcome) for r in report.results] == [("n1", GuardOutcome.SKIPPED)]
    assert not [r for r in kube_server.requests if r.method == "PATCH"]
    assert taints(kube_server) == [{"key": GUARD_KEY, "value": "relieved", "effect": "PreferNoSchedule"}]


def sweep_once(kubeconfig: Path, policy: Policy, metrics: Metrics) -> None:
    api = connect(str(kubeconfig))
    cache = _ClusterCache(api)
    assert cache.ensure(policy) is None
    known = _KnownNodes(KubeSource(api, frozenset()), cache, time.monotonic)
    _sweep_marks(Runtime(policy, api, lambda: NOW, DryRun.OFF, requester="rebalancer/b"), known, metrics, policy)


def test_the_sweep_clears_the_marks_of_a_guard_removed_from_the_policy(
    kube_server: TestApiServer, kubeconfig: Path
) -> None:
    """A policy whose strategies run once a day: the guard's removal must not leave its taints until then,
    expired or not (here a NoSchedule one, expired an hour ago)."""
    mark = Mark(OWNER, "NoSchedule", MarkReason.HOT, NOW - 3600)
    marked_cluster(kube_server, mark)
    metrics = Metrics()

    sweep_once(kubeconfig, parse_policy(STRATEGY + UNCACHED + "landingGuard: {pools: []}\n"), metrics)

    assert taints(kube_server) == []
    assert GUARD_KEY not in (kube_server.store.get("nodes", "n1") or {})["metadata"].get("annotations", {})
    assert 'reason="guard-off",result="applied"' in metrics.exposition()[0].decode()


def test_the_sweep_clears_a_mark_when_a_cordon_leaves_every_open_node_marked(
    kube_server: TestApiServer, kubeconfig: Path
) -> None:
    """Two nodes carry live NoSchedule marks and the third is cordoned since the last cycle: with no cycle to
    come soon, the sweep clears one mark so that replacements still have a node to land on."""
    mark = Mark(OWNER, "NoSchedule", MarkReason.HOT, NOW + 600)
    kube_server.add(b.node("n1"), b.node("n2"), b.node("n3", unschedulable=True))
    for name in ("n1", "n2"):
        node = kube_server.store.get("nodes", name)
        assert node is not None
        node["spec"]["taints"] = [{"key": GUARD_KEY, "value": "hot", "effect": "NoSchedule"}]
        node["metadata"]["annotations"][GUARD_KEY] = mark.annotation()
        kube_server.store.update(node)
    metrics = Metrics()
    guard = "landingGuard: {pools: [{pool: default, effect: NoSchedule, maxMarkedFraction: 1}]}\n"

    sweep_once(kubeconfig, parse_policy(STRATEGY + UNCACHED + guard), metrics)

    assert [name for name in ("n1", "n2", "n3") if taints(kube_server, name)] == ["n1"]
    assert 'reason="over-cap",result="applied"' in metrics.exposition()[0].decode()
