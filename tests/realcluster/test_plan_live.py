"""`rebalancer plan` end to end: the real kubernetes client against a real API server (shop.py's cluster made
through it), the real prometheus-api-client against a real Prometheus with cAdvisor-shaped history, the
production planner; a pod list the real RBAC authorizer refuses, a token the server does not know."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rebalancer.app import root as app
from rebalancer.app.cli import main
from rebalancer.planning.plan import NodeClass
from rebalancer.policy import load_policy
from tests.adapters.prom_fixture import PrometheusServer, StartPrometheus
from tests.controlplane import ControlPlane
from tests.realcluster.access import Account, Denied
from tests.realcluster.shop import build
from tests.service.scenario import END, HISTORY, write_policy


@pytest.fixture(scope="module")
def prometheus(start_prometheus: StartPrometheus) -> PrometheusServer:
    return start_prometheus(HISTORY.series())


def test_plan_from_the_cluster_and_prometheus(
    api_cluster: ControlPlane, api_kubeconfig: Path, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    build(api_cluster)
    policy = load_policy(write_policy(tmp_path / "policy.yaml", prometheus.url))

    outcome = app.plan_live(app.connect_runtime(policy, app.ClusterConnection(str(api_kubeconfig)), clock=lambda: END))

    assert outcome.plan.blocked is None
    result = outcome.plan.results[0]
    classes = {d.node: d.node_class for d in result.node_decisions}
    assert classes == {"hot-1": NodeClass.HOT, "cold-1": NodeClass.COLD, "cold-2": NodeClass.COLD}
    usage = {d.node: d.usage_m for d in result.node_decisions}
    assert usage["hot-1"] == pytest.approx(3500 + 8, abs=15)  # system + pods + pause containers
    # 3.5 cores on 4 is 700m above the 70% target (2800m): api-1 (900m) alone covers it
    assert [(e.namespace, e.name) for e in outcome.plan.evictions] == [("shop", "api-1")]
    assert outcome.plan.evictions[0].room_on in {"cold-1", "cold-2"}
    reasons = {d.name: d.reason for d in result.pod_decisions}
    assert reasons["exporter-hot-1"] == "DaemonSet pod"


def test_prometheus_down_blocks_the_plan_and_the_cli_says_why(
    api_cluster: ControlPlane, api_kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    build(api_cluster)
    policy = write_policy(tmp_path / "policy.yaml", "http://127.0.0.1:9")  # discard port: refused

    code = main(["plan", "--policy", str(policy), "--kubeconfig", str(api_kubeconfig), "--output", "json"])

    captured = capsys.readouterr()
    assert code == 3
    record = json.loads(captured.out)
    assert record["evictions"] == []
    assert "MetricsUnavailable" in record["blocked"]
    assert {n["nodeClass"] for n in record["strategies"][0]["nodes"]} == {"unknown"}
    assert "plan blocked" in captured.err


def test_forbidden_pod_list_fails_with_the_missing_permission(
    api_cluster: ControlPlane, api_kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    build(api_cluster)
    account = Account(api_cluster, tmp_path)
    account.deny(Denied("list", "pods"), Denied("watch", "pods"))
    policy = write_policy(tmp_path / "policy.yaml", "http://127.0.0.1:9")

    code = main(["plan", "--policy", str(policy), "--kubeconfig", str(account.kubeconfig)])

    err = capsys.readouterr().err
    assert code == 3
    assert "KubeForbidden" in err
    assert 'cannot list resource "pods"' in err


def test_wrong_token_is_reported_not_retried_forever(api_cluster: ControlPlane, tmp_path: Path) -> None:
    build(api_cluster)
    config = api_cluster.kubeconfig(tmp_path / "kubeconfig", token="not-a-token-it-knows")
    policy = write_policy(tmp_path / "policy.yaml", "http://127.0.0.1:9")
    assert main(["plan", "--policy", str(policy), "--kubeconfig", str(config)]) == 3
