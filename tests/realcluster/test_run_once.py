"""`run --once` end to end on a real control plane: the Eviction API with the real disruption controller's
budgets, Events, server-side dry run, and the real ReplicaSet controller and kube-scheduler placing the
replacement where the plan predicted; every request read back from the API server's audit log."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from rebalancer.actions.evictor import DryRun, Outcome
from rebalancer.app import root as app
from rebalancer.policy import load_policy
from tests.adapters.prom_fixture import PrometheusServer, StartPrometheus
from tests.controlplane import ControlPlane
from tests.realcluster import objects as o
from tests.realcluster.scenario import NAMESPACE, Placed, build, running, write_policy

ADMIN = "test-admin"


@pytest.fixture
def placed(cluster: ControlPlane) -> Placed:
    cluster.namespace("rebalancer")
    return build(cluster)


@pytest.fixture
def prometheus(placed: Placed, start_prometheus: StartPrometheus) -> PrometheusServer:
    return start_prometheus(placed.history().series())


def run(plane: ControlPlane, policy: Path, dry_run: DryRun = DryRun.OFF) -> app.RunOutcome:
    assert plane.pki is not None
    kubeconfig = plane.kubeconfig(policy.parent / "kubeconfig", plane.pki.admin_token)
    return app.run_once(load_policy(policy), app.ClusterConnection(str(kubeconfig)), dry_run, clock=time.time)


def evictions(plane: ControlPlane) -> list[tuple[str | None, int, bool]]:
    return [(e.name, e.code, e.dry_run) for e in plane.audit(ADMIN) if e.resource == "pods/eviction"]


def test_evicts_through_the_eviction_api_and_the_replacement_lands_where_predicted(
    cluster: ControlPlane, placed: Placed, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    result = run(cluster, write_policy(tmp_path / "p.yaml", prometheus.url))

    evicted = [r for r in result.report.results if r.outcome is Outcome.EVICTED]
    assert [r.eviction.node for r in evicted] == ["hot-1"]  # 95 % -> 65 %: one api pod is enough
    [moved] = evicted
    assert moved.eviction.name in placed.on("hot-1")
    assert evictions(cluster) == [(moved.eviction.name, 201, False)]
    # the real ReplicaSet controller replaces it; the real scheduler binds the replacement
    landed = cluster.admin.wait_for(
        "the replacement running",
        lambda: {n: p["spec"]["nodeName"] for n, p in running(cluster).items() if n not in placed.pods} or None,
    )
    assert moved.eviction.name not in running(cluster)
    [(_, node)] = landed.items()
    assert node in {"cold-1", "cold-2"}
    # a tie by requests between the two cold nodes: the model names one at 50 %, the scheduler picks either
    assert moved.eviction.landing in {"cold-1", "cold-2"}
    assert f"land on {moved.eviction.landing} (50%" in moved.eviction.reason
    events = [e for e in cluster.admin.items("v1", "Event", NAMESPACE) if e.get("reason") == "Rebalanced"]
    assert [e["involvedObject"]["name"] for e in events] == [moved.eviction.name]
    state = cluster.admin.get("/api/v1/namespaces/rebalancer/configmaps/rebalancer-state")
    assert moved.eviction.name in state["data"]["state.json"]


def test_server_dry_run_asks_the_api_server_and_changes_nothing(
    cluster: ControlPlane, placed: Placed, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    result = run(cluster, write_policy(tmp_path / "p.yaml", prometheus.url), DryRun.SERVER)

    assert {r.outcome for r in result.report.results} == {Outcome.SERVER_DRY_RUN}
    assert [(code, dry) for _, code, dry in evictions(cluster)] == [(201, True)] * len(result.report.results)
    assert set(running(cluster)) == set(placed.pods)
    assert not cluster.admin.exists("/api/v1/namespaces/rebalancer/configmaps/rebalancer-state")


def test_a_budget_the_disruption_controller_closed_is_never_asked_to_break(
    cluster: ControlPlane, placed: Placed, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    cluster.admin.create(o.pdb("api", NAMESPACE, app="api", max_unavailable=0))
    cluster.admin.wait_for(
        "the disruption controller's status",
        lambda: (
            cluster.admin.get(f"/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets/api")
            .get("status", {})
            .get("observedGeneration")
        ),
    )
    result = run(cluster, write_policy(tmp_path / "p.yaml", prometheus.url))

    assert result.planned.plan.evictions == ()
    assert evictions(cluster) == []
    assert set(running(cluster)) == set(placed.pods)


def test_a_budget_refusal_by_the_api_server_is_handled_and_backed_off(
    cluster: ControlPlane, placed: Placed, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    """A lagging disruption controller: the budget's stored status still allows a disruption, but its spec
    changed since the controller last saw it, so the API server refuses every eviction with 429 (it trusts
    no status older than the spec). The plan trusts the status; the evictor meets the refusal."""
    pdb_path = f"/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets/api"
    cluster.admin.create(o.pdb("api", NAMESPACE, app="api", max_unavailable=2))
    cluster.admin.wait_for(
        "the budget's status", lambda: cluster.admin.get(pdb_path).get("status", {}).get("disruptionsAllowed") == 2
    )
    policy = write_policy(tmp_path / "p.yaml", prometheus.url)
    with cluster.controllers_paused():
        cluster.admin.patch(pdb_path, {"spec": {"maxUnavailable": 1}})
        first = run(cluster, policy)
        assert {r.outcome for r in first.report.results} == {Outcome.REJECTED}
        assert [code for _, code, _ in evictions(cluster)] == [429]
        assert cluster.admin.exists("/api/v1/namespaces/rebalancer/configmaps/rebalancer-backoff")

        second = run(cluster, policy)
        assert {r.outcome for r in second.report.results} == {Outcome.BACKOFF}
        assert [code for _, code, _ in evictions(cluster)] == [429]  # the refused pod was not asked for again
    assert set(running(cluster)) == set(placed.pods)
