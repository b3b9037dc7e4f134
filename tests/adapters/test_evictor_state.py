"""The evictor with the real adapters (KubeActions, ConfigMapStateStore) against tests/kubeapi: what the
limiter state's ConfigMap answering badly does to a run."""

from __future__ import annotations

from pathlib import Path

from rebalancer.actions.evictor import DryRun, Evictor, Outcome
from rebalancer.adapters.kube import ConfigMapStateStore, KubeActions, connect
from rebalancer.planning.plan import EvictionPlan, PlannedEviction, StrategyResult
from rebalancer.planning.protections import Protections
from rebalancer.policy import Policy
from tests.builders import node, policy, snapshot, usage
from tests.kubeapi import Fault, TestApiServer
from tests.kubeapi import builders as b
from tests.kubeapi.server import Request

NS, STATE_NS, LIMITS = "shop", "rebalancer", "rebalancer-limits"
LIMITS_PATH = f"/api/v1/namespaces/{STATE_NS}/configmaps/{LIMITS}"
NOW = 1_700_000_000.0


def _policy() -> Policy:
    return policy("kind: LowNodeUtilization\nthresholds: {cpu: 20}\ntargetThresholds: {cpu: 50}\n")


def test_an_unanswered_reload_after_a_conflict_stops_the_run_and_keeps_its_report(
    kube_server: TestApiServer, kubeconfig: Path
) -> None:
    """The second reservation loses to another writer (409) and the state cannot be read again (503): the
    run stops there, reporting the eviction it made, instead of raising and losing that report."""
    kube_server.add(b.node("node-1"), *b.deployment_chain("web", NS, replicas=3))
    api = connect(kubeconfig=str(kubeconfig))
    actions = KubeActions(api, 5.0)
    names = [p["metadata"]["name"] for p in kube_server.objects("pods", NS)]
    pods = [actions.get_pod(NS, name, frozenset()) for name in names]
    assert all(p is not None for p in pods)
    snap = snapshot([node("node-1")], [p for p in pods if p is not None], usage({"node-1": 9_000}), taken_at=NOW)
    evictions = tuple(
        PlannedEviction("LowNodeUtilization", NS, p.name, p.uid, "node-1", "", p.workload, 100, "hot", "")
        for p in pods[:2]
        if p is not None
    )
    plan = EvictionPlan(NOW, (StrategyResult("LowNodeUtilization", evictions, (), ()),))
    saves: list[str] = []

    def second_save_conflicts(request: Request) -> None:
        if request.path == LIMITS_PATH and request.method == "PUT":
            saves.append(request.method)
            if len(saves) == 1:  # another instance wrote first, then the API server stops answering
                kube_server.set_fault(LIMITS_PATH, Fault(code=409, method="PUT", times=1))
                kube_server.set_fault(LIMITS_PATH, Fault(code=503, method="GET", times=1))

    kube_server.on_request(second_save_conflicts)
    pol = _policy()
    evictor = Evictor(
        actions,
        ConfigMapStateStore(api, STATE_NS, LIMITS),
        ConfigMapStateStore(api, STATE_NS, "rebalancer-backoff"),
        pol.limits,
        Protections.from_settings(pol.protections),
        DryRun.OFF,
        clock=lambda: NOW,
    )

    report = evictor.apply(plan, snap)

    assert [r.outcome for r in report.results] == [Outcome.EVICTED, Outcome.SKIPPED]
    assert report.aborted is not None and "limiter state" in report.aborted
    assert [p["metadata"]["name"] for p in kube_server.objects("pods", NS)] == names[1:]  # the first only
