"""Every run checks, before it plans, that its state can be written: a missing namespace or verb fails the
run (dry or not, `run --once` and `serve`) with one line, before any eviction, dry-run eviction or mark."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from rebalancer.actions.evictor import DryRun
from rebalancer.adapters.kube import connect
from rebalancer.adapters.kube.access import Permission
from rebalancer.app import root as app
from rebalancer.app.serve import serve
from rebalancer.app.state_access import StateAccess, state_permissions
from rebalancer.domain.errors import KubeForbidden, KubeUnavailable
from rebalancer.policy import load_policy, parse_policy
from tests.adapters.prom_fixture import PrometheusServer, StartPrometheus
from tests.kubeapi import TestApiServer
from tests.service.scenario import END, HISTORY, build_cluster, live_pods, write_policy

ROOT = Path(__file__).resolve().parents[2]
LNU = "strategies: [{kind: LowNodeUtilization, thresholds: {cpu: 20}, targetThresholds: {cpu: 70}}]\n"
GUARD = "landingGuard: {pools: [{pool: default}]}\n"
REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


@pytest.fixture(scope="module")
def prometheus(start_prometheus: StartPrometheus) -> PrometheusServer:
    return start_prometheus(HISTORY.series())


def run(kubeconfig: Path, policy: Path, dry_run: DryRun) -> app.RunOutcome:
    return app.run_once(load_policy(policy), app.ClusterConnection(str(kubeconfig)), dry_run, clock=lambda: END)


def nothing_happened(server: TestApiServer) -> None:
    assert server.eviction.records == []  # not even a dry-run eviction
    assert not [r for r in server.requests if r.path == "/api/v1/pods"], "the cluster was listed: it planned"
    assert not [r for r in server.requests if r.method == "PATCH"]
    assert server.objects("configmaps") == []
    assert live_pods(server) == {"api-0", "api-1", "web-0", "web-1", "web-2"}


@pytest.mark.parametrize("dry_run", list(DryRun), ids=[d.value for d in DryRun])
def test_a_missing_state_namespace_fails_the_run_before_it_plans(
    dry_run: DryRun, kube_server: TestApiServer, kubeconfig: Path, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    build_cluster(kube_server)
    kube_server.keep_namespaces("shop", "monitoring")  # not rebalancer, the policy's state.namespace
    policy = write_policy(tmp_path / "p.yaml", prometheus.url, target=50, extra=GUARD)

    with pytest.raises(KubeUnavailable) as caught:
        run(kubeconfig, policy, dry_run)

    assert str(caught.value).startswith("the state namespace rebalancer does not exist")
    assert 'namespaces "rebalancer" not found' in str(caught.value)
    nothing_happened(kube_server)


def test_missing_verbs_are_named_together_before_the_run_plans(
    kube_server: TestApiServer, kubeconfig: Path, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    build_cluster(kube_server)
    kube_server.forbid("update", "configmaps", namespace="rebalancer")
    kube_server.forbid("patch", "nodes")
    policy = write_policy(tmp_path / "p.yaml", prometheus.url, target=50, extra=GUARD)

    with pytest.raises(KubeForbidden) as caught:
        run(kubeconfig, policy, DryRun.SERVER)

    message = str(caught.value)
    for name in ("rebalancer-state", "rebalancer-backoff", "rebalancer-efficiency"):
        assert f'update configmaps "{name}" in namespace rebalancer' in message
    assert "; patch nodes " in message and "get nodes" not in message
    assert message.startswith("RBAC: the service account may not ") and "\n" not in message
    assert (caught.value.verb, caught.value.resource, caught.value.namespace) == ("update", "configmaps", "rebalancer")
    nothing_happened(kube_server)


def test_the_cli_says_it_in_one_line_and_exits_3(
    kube_server: TestApiServer, kubeconfig: Path, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    build_cluster(kube_server)
    kube_server.keep_namespaces("shop", "monitoring")
    policy = write_policy(tmp_path / "p.yaml", prometheus.url, target=50)
    done = subprocess.run(
        [sys.executable, "-m", "rebalancer", "run", "--once", "--policy", str(policy),
         "--kubeconfig", str(kubeconfig), "--dry-run=server"],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("rebalancer: KubeUnavailable: the state namespace rebalancer does not exist")
    assert "efficiency" not in done.stderr
    assert done.stdout == ""
    nothing_happened(kube_server)


def test_a_run_in_an_existing_namespace_checks_and_goes_on(
    kube_server: TestApiServer, kubeconfig: Path, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    build_cluster(kube_server)
    kube_server.keep_namespaces("shop", "monitoring", "rebalancer")
    result = run(kubeconfig, write_policy(tmp_path / "p.yaml", prometheus.url, target=50), DryRun.OFF)
    assert result.report.aborted is None
    assert [r for r in kube_server.eviction.records if r.code == 201]
    assert kube_server.store.get("configmaps", "rebalancer-state", "rebalancer") is not None


def test_a_passed_check_is_asked_again_only_when_what_it_covers_changes(
    kube_server: TestApiServer, kubeconfig: Path, tmp_path: Path
) -> None:
    policy = parse_policy(LNU + "state: {namespace: rebalancer}\n")
    access = StateAccess(connect(str(kubeconfig)))
    access.check(policy, "rebalancer")
    asked = len(kube_server.requests)
    assert asked == 1 + len(state_permissions(policy, "rebalancer", lease=False))  # the dry-run create + reviews

    access.check(policy, "rebalancer")
    assert len(kube_server.requests) == asked
    access.check(policy.model_copy(update={"efficiency": policy.efficiency.model_copy(update={"enabled": False})}),
                 "rebalancer")  # fmt: skip
    assert len(kube_server.requests) > asked
    kube_server.forbid("get", "configmaps")
    with pytest.raises(KubeForbidden):
        access.check(policy, "elsewhere")


def test_what_the_state_needs_follows_the_policy() -> None:
    base = parse_policy(LNU)
    needed = set(state_permissions(base, "ns", lease=False))
    assert Permission("create", "configmaps", "ns") in needed
    assert Permission("update", "configmaps", "ns", name="rebalancer-efficiency") in needed  # efficiency is on
    assert not {p for p in needed if p.resource in ("leases", "nodes")}

    off = parse_policy(LNU + "efficiency: {enabled: false}\n")
    assert not {p for p in state_permissions(off, "ns", lease=False) if p.name == "rebalancer-efficiency"}

    guarded = parse_policy(LNU + GUARD)
    with_lease = set(state_permissions(guarded, "ns", lease=True))
    assert {Permission("get", "nodes"), Permission("patch", "nodes")} <= with_lease
    assert Permission("update", "leases", "ns", "coordination.k8s.io", "rebalancer") in with_lease


def test_serve_does_not_start_without_its_state_namespace_or_lease_verbs(
    kube_server: TestApiServer, kubeconfig: Path, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    build_cluster(kube_server)
    policy = write_policy(
        tmp_path / "p.yaml",
        prometheus.url,
        target=50,
        extra="service: {host: 127.0.0.1, port: 1, webhook: {allowUnauthenticated: true}}\n",
    )
    kube_server.forbid("update", "leases", group="coordination.k8s.io")
    stop = threading.Event()
    stop.set()  # were it to start, it would stop at once
    with pytest.raises(
        KubeForbidden, match=re.escape('update leases.coordination.k8s.io "rebalancer" in namespace rebalancer')
    ):
        serve(policy, app.ClusterConnection(str(kubeconfig)), DryRun.CLIENT, stop=stop)

    kube_server.allow_all()
    kube_server.keep_namespaces("shop", "monitoring")
    with pytest.raises(KubeUnavailable, match="the state namespace rebalancer does not exist"):
        serve(policy, app.ClusterConnection(str(kubeconfig)), DryRun.SERVER, stop=stop)
    assert not [r for r in kube_server.requests if "leases" in r.path], "it tried to lead"
    nothing_happened(kube_server)
