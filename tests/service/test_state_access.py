"""Every run checks, before it plans, that its state can be written and that its actuators may make their
calls: a missing namespace or verb fails the run (dry or not, `run --once` and `serve`) with one line,
before any eviction, dry-run eviction or mark. A client dry run calls no actuator: it needs none of theirs."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from rebalancer.actions.evictor import DryRun, Outcome
from rebalancer.adapters.kube import connect
from rebalancer.adapters.kube.access import Permission
from rebalancer.app import root as app
from rebalancer.app.cli import main
from rebalancer.app.serve import serve
from rebalancer.app.state_access import StateAccess, action_permissions, state_permissions
from rebalancer.domain.errors import KubeForbidden, KubeUnavailable
from rebalancer.policy import load_policy, parse_policy
from tests.adapters.prom_fixture import PrometheusServer, StartPrometheus
from tests.kubeapi import TestApiServer
from tests.service.scenario import END, HISTORY, build_cluster, live_pods, write_policy

ROOT = Path(__file__).resolve().parents[2]
LNU = "strategies: [{kind: LowNodeUtilization, thresholds: {cpu: 20}, targetThresholds: {cpu: 70}}]\n"
GUARD = "landingGuard: {pools: [{pool: default}]}\n"
REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
STEERING = "- {kind: DeletionCostSteering}\n"


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
    reviews = state_permissions(policy, "rebalancer", lease=False) + action_permissions(policy, DryRun.OFF)
    assert asked == 1 + len(reviews)  # the dry-run create + reviews

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
    assert Permission("update", "leases", "ns", "coordination.k8s.io", "rebalancer") in with_lease


def test_what_the_actuators_need_follows_the_policy_and_the_dry_run() -> None:
    evictor = {Permission("get", "pods"), Permission("get", "replicasets", group="apps"),
               Permission("create", "pods/eviction")}  # fmt: skip
    plain = parse_policy(LNU)
    assert set(action_permissions(plain, DryRun.OFF)) == evictor | {Permission("create", "events")}
    assert set(action_permissions(plain, DryRun.SERVER)) == evictor  # dryRun=All writes, no Event
    assert action_permissions(plain, DryRun.CLIENT) == ()  # calls nothing

    guarded = parse_policy(LNU.replace("}]", "}, {kind: DeletionCostSteering}]") + GUARD)
    acting = set(action_permissions(guarded, DryRun.OFF))
    assert {Permission("patch", "pods"), Permission("get", "nodes"), Permission("patch", "nodes"),
            Permission("create", "events", "default")} <= acting  # fmt: skip
    assert action_permissions(guarded, DryRun.CLIENT) == ()

    scoped = parse_policy(LNU + "protections: {evictableNamespaces: {include: [shop, web]}}\n")
    assert {p.namespace for p in action_permissions(scoped, DryRun.OFF)} == {"shop", "web"}


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


@pytest.mark.parametrize(
    ("verb", "resource", "dry_run"),
    [
        ("create", "pods/eviction", DryRun.OFF),
        ("create", "pods/eviction", DryRun.SERVER),
        ("get", "pods", DryRun.SERVER),  # the re-read before each eviction
        ("create", "events", DryRun.OFF),
    ],
)
def test_a_missing_actuator_verb_fails_the_run_before_it_plans(
    verb: str,
    resource: str,
    dry_run: DryRun,
    kube_server: TestApiServer,
    kubeconfig: Path,
    prometheus: PrometheusServer,
    tmp_path: Path,
) -> None:
    build_cluster(kube_server)
    kube_server.forbid(verb, resource)
    policy = write_policy(tmp_path / "p.yaml", prometheus.url, target=50)

    with pytest.raises(KubeForbidden) as caught:
        run(kubeconfig, policy, dry_run)

    assert str(caught.value).startswith(f"RBAC: the service account may not {verb} {resource} ")
    assert (caught.value.verb, caught.value.resource) == (verb, resource)
    nothing_happened(kube_server)


def test_a_steering_policy_needs_the_pod_patch_before_it_plans(
    kube_server: TestApiServer, kubeconfig: Path, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    build_cluster(kube_server)
    kube_server.forbid("patch", "pods")
    policy = write_policy(tmp_path / "p.yaml", prometheus.url, target=50)
    policy.write_text(policy.read_text().replace("state:", STEERING + "state:"))

    with pytest.raises(KubeForbidden, match="may not patch pods "):
        run(kubeconfig, policy, DryRun.SERVER)
    nothing_happened(kube_server)


def test_the_cli_exits_3_naming_the_eviction_verb_a_client_dry_run_needs_not(
    kube_server: TestApiServer,
    kubeconfig: Path,
    prometheus: PrometheusServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    build_cluster(kube_server)
    kube_server.forbid("create", "pods/eviction")
    kube_server.forbid("create", "events")
    kube_server.forbid("patch", "pods")
    policy = write_policy(tmp_path / "p.yaml", prometheus.url, target=50)
    args = ["run", "--once", "--policy", str(policy), "--kubeconfig", str(kubeconfig)]

    assert main([*args, "--dry-run=off"]) == 3
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("rebalancer: KubeForbidden: RBAC: the service account may not create pods/eviction; ")
    assert "create events" in line
    nothing_happened(kube_server)

    client = run(kubeconfig, policy, DryRun.CLIENT)  # reads only: it plans and says what it would evict
    assert [r.outcome for r in client.report.results] and {r.outcome for r in client.report.results} == {
        Outcome.DRY_RUN
    }
    assert kube_server.eviction.records == []


def test_an_include_list_asks_for_the_verbs_in_those_namespaces_only(
    kube_server: TestApiServer, kubeconfig: Path, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    build_cluster(kube_server)
    kube_server.forbid("create", "pods/eviction", namespace="monitoring")  # never evicted from here
    policy = write_policy(tmp_path / "p.yaml", prometheus.url, target=50)
    policy.write_text(policy.read_text().replace("{exclude: [kube-system, monitoring]}", "{include: [shop]}"))
    result = run(kubeconfig, policy, DryRun.OFF)
    assert result.report.aborted is None
    assert [r for r in kube_server.eviction.records if r.code == 201]

    kube_server.forbid("create", "pods/eviction", namespace="shop")
    with pytest.raises(KubeForbidden, match="may not create pods/eviction in namespace shop"):
        run(kubeconfig, policy, DryRun.OFF)


def test_serve_does_not_start_without_the_eviction_verb(
    kube_server: TestApiServer, kubeconfig: Path, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    build_cluster(kube_server)
    policy = write_policy(
        tmp_path / "p.yaml",
        prometheus.url,
        target=50,
        extra="service: {host: 127.0.0.1, port: 1, webhook: {allowUnauthenticated: true}}\n",
    )
    kube_server.forbid("create", "pods/eviction")
    stop = threading.Event()
    stop.set()
    with pytest.raises(KubeForbidden, match="may not create pods/eviction "):
        serve(policy, app.ClusterConnection(str(kubeconfig)), DryRun.SERVER, stop=stop)
    assert not [r for r in kube_server.requests if "leases" in r.path], "it tried to lead"
    nothing_happened(kube_server)
