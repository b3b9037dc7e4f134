"""Every run checks, before it plans, that its state can be written and that its actuators may make their
calls: a missing namespace or verb fails the run (dry or not, `run --once` and `serve`) with one line,
before any eviction, dry-run eviction or mark. A client dry run calls no actuator: it needs none of theirs.

On a real API server: the namespace check is the real NamespaceLifecycle admission refusing a dry-run
create, the verbs are the real RBAC authorizer's answers to SelfSubjectAccessReviews for a service account
with every permission but those a test takes away, and "nothing happened" is read from the audit log. One
cluster (shop.py's, made through the API server alone) serves the module; the test that evicts comes last."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from rebalancer.actions.evictor import DryRun, Outcome
from rebalancer.adapters.kube import connect
from rebalancer.adapters.kube.access import Permission
from rebalancer.app import root as app
from rebalancer.app.cli import main
from rebalancer.app.serve import check_state_at_start, elected_lease, serve
from rebalancer.app.state_access import StateAccess, action_permissions, lease_permissions, state_permissions
from rebalancer.domain.errors import KubeForbidden, KubeUnavailable
from rebalancer.policy import load_policy, parse_policy
from tests.adapters.prom_fixture import PrometheusServer, StartPrometheus, closed_port
from tests.controlplane import ControlPlane
from tests.kubeapi.builders import write_kubeconfig
from tests.realcluster import shop
from tests.realcluster.access import Account, Denied
from tests.service.scenario import END, HISTORY, LOADS, write_policy

ROOT = Path(__file__).resolve().parents[2]
LNU = "strategies: [{kind: LowNodeUtilization, thresholds: {cpu: 20}, targetThresholds: {cpu: 70}}]\n"
GUARD = "landingGuard: {pools: [{pool: default}]}\n"
STEERING = "- {kind: DeletionCostSteering}\n"
SERVICE = "service: {host: 127.0.0.1, port: 1, webhook: {allowUnauthenticated: true}}\n"
GONE = "gone"  # a state namespace that does not exist
NAMESPACE = "shop"
PODS = sum(1 for namespace, _ in LOADS if namespace == NAMESPACE)


@pytest.fixture(scope="module")
def built(api_server: ControlPlane) -> Iterator[ControlPlane]:
    shop.build(api_server)
    yield api_server
    shop.clear(api_server)


@pytest.fixture(scope="module")
def prometheus(start_prometheus: StartPrometheus) -> PrometheusServer:
    return start_prometheus(HISTORY.series())


@pytest.fixture(scope="module")
def account(built: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Account:
    return Account(built, tmp_path_factory.mktemp("account"))


@pytest.fixture
def plane(built: ControlPlane, account: Account) -> ControlPlane:
    """The module's cluster with every permission granted to the account, the audit log read from here on."""
    account.deny()
    built.audit_from = built.audit_log.stat().st_size
    return built


def policy(tmp_path: Path, prometheus: PrometheusServer, *, state: str = "rebalancer", extra: str = "") -> Path:
    path = write_policy(tmp_path / "p.yaml", prometheus.url, target=50, extra=extra)
    path.write_text(path.read_text().replace("state: {namespace: rebalancer}", f"state: {{namespace: {state}}}"))
    return path


def run(account: Account, policy: Path, dry_run: DryRun) -> app.RunOutcome:
    return app.run_once(load_policy(policy), app.ClusterConnection(str(account.kubeconfig)), dry_run, clock=lambda: END)


def pods(plane: ControlPlane) -> set[str]:
    return {p["metadata"]["name"] for p in plane.admin.items("v1", "Pod", NAMESPACE)}


def nothing_happened(plane: ControlPlane, account: Account) -> None:
    made = plane.audit(account.user)
    assert not [e for e in made if e.resource == "pods/eviction"]  # not even a dry-run eviction
    listed = [e for e in made if e.resource == "pods" and e.verb in ("list", "watch") and e.namespace is None]
    assert not listed, "the cluster was listed: it planned"
    assert not [e for e in made if e.verb == "patch"]
    assert not [c for c in plane.admin.items("v1", "ConfigMap") if c["metadata"]["name"].startswith("rebalancer-")]
    assert len(pods(plane)) == PODS  # no pod evicted


def evicted(plane: ControlPlane, account: Account) -> list[str | None]:
    return [e.name for e in plane.audit(account.user) if e.resource == "pods/eviction" and e.code == 201]


@pytest.mark.parametrize("dry_run", list(DryRun), ids=[d.value for d in DryRun])
def test_a_missing_state_namespace_fails_the_run_before_it_plans(
    dry_run: DryRun, plane: ControlPlane, account: Account, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    with pytest.raises(KubeUnavailable) as caught:
        run(account, policy(tmp_path, prometheus, state=GONE, extra=GUARD), dry_run)

    assert str(caught.value).startswith(f"the state namespace {GONE} does not exist")
    assert f'namespaces "{GONE}" not found' in str(caught.value)
    nothing_happened(plane, account)


def test_missing_verbs_are_named_together_before_the_run_plans(
    plane: ControlPlane, account: Account, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    account.deny(Denied("update", "configmaps", namespace="rebalancer"), Denied("patch", "nodes"))

    with pytest.raises(KubeForbidden) as caught:
        run(account, policy(tmp_path, prometheus, extra=GUARD), DryRun.SERVER)

    message = str(caught.value)
    for name in ("rebalancer-state", "rebalancer-backoff", "rebalancer-efficiency"):
        assert f'update configmaps "{name}" in namespace rebalancer' in message
    assert "; patch nodes " in message and "get nodes" not in message
    assert message.startswith("RBAC: the service account may not ") and "\n" not in message
    assert (caught.value.verb, caught.value.resource, caught.value.namespace) == ("update", "configmaps", "rebalancer")
    nothing_happened(plane, account)


def test_the_cli_says_it_in_one_line_and_exits_3(
    plane: ControlPlane, account: Account, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rebalancer", "run", "--once", "--policy", str(policy(tmp_path, prometheus, state=GONE)),
         "--kubeconfig", str(account.kubeconfig), "--dry-run=server"],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(f"rebalancer: KubeUnavailable: the state namespace {GONE} does not exist")
    assert "efficiency" not in done.stderr
    assert done.stdout == ""
    nothing_happened(plane, account)


def test_a_passed_check_is_asked_again_only_when_what_it_covers_changes(plane: ControlPlane, account: Account) -> None:
    checked = parse_policy(LNU + "state: {namespace: rebalancer}\n")
    access = StateAccess(connect(str(account.kubeconfig)))
    access.check(checked, "rebalancer")
    asked = len(plane.audit(account.user))
    reviews = state_permissions(checked, "rebalancer") + action_permissions(checked, DryRun.OFF)
    assert asked == 1 + len(reviews)  # the dry-run create + reviews
    assert [e.dry_run for e in plane.audit(account.user) if e.resource == "configmaps"] == [True]

    access.check(checked, "rebalancer")
    assert len(plane.audit(account.user)) == asked
    access.check(checked.model_copy(update={"efficiency": checked.efficiency.model_copy(update={"enabled": False})}),
                 "rebalancer")  # fmt: skip
    assert len(plane.audit(account.user)) > asked
    plane.namespace("elsewhere")
    account.deny(Denied("get", "configmaps"))
    with pytest.raises(KubeForbidden):
        access.check(checked, "elsewhere")


def test_what_the_state_needs_follows_the_policy() -> None:
    base = parse_policy(LNU)
    needed = set(state_permissions(base, "ns"))
    assert Permission("create", "configmaps", "ns") in needed
    assert Permission("update", "configmaps", "ns", name="rebalancer-efficiency") in needed  # efficiency is on
    assert not {p for p in needed if p.resource in ("leases", "nodes")}

    off = parse_policy(LNU + "efficiency: {enabled: false}\n")
    assert not {p for p in state_permissions(off, "ns") if p.name == "rebalancer-efficiency"}

    assert Permission("update", "leases", "ns", "coordination.k8s.io", "rebalancer") in lease_permissions(
        "ns", "rebalancer"
    )


@pytest.mark.parametrize("dry_run", [DryRun.OFF, DryRun.CLIENT])
def test_the_lease_checked_is_the_one_serve_elects_on_through_a_reload(dry_run: DryRun, tmp_path: Path) -> None:
    """serve's elector keeps the Lease of the policy it started with (a reload naming another, or another
    state namespace, needs a restart): every later check asks for that Lease, a dry run's own in a dry run,
    not the reloaded policy's."""
    started = parse_policy(LNU + "state: {namespace: rebalancer}\n")
    with closed_port() as port:  # the API server not answering yet: the first cycle checks (logged)
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{port}")
        access = StateAccess(connect(str(kubeconfig)), dry_run=dry_run)
        check_state_at_start(access, started)
    name = "rebalancer" if dry_run is DryRun.OFF else "rebalancer-dry-run"
    reloaded = parse_policy(LNU + "state: {namespace: elsewhere}\nservice: {leaderElection: {leaseName: other}}\n")
    leases = {p for p in access.needed(reloaded, "elsewhere") if p.resource == "leases"}
    assert leases == set(lease_permissions("rebalancer", name))
    assert elected_lease(started, dry_run) == ("rebalancer", name)
    assert elected_lease(parse_policy(LNU + "service: {leaderElection: {enabled: false}}\n"), dry_run) is None


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
    plane: ControlPlane, account: Account, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    account.deny(Denied("update", "leases", "coordination.k8s.io"))
    stop = threading.Event()
    stop.set()  # were it to start, it would stop at once
    with pytest.raises(
        KubeForbidden, match=re.escape('update leases.coordination.k8s.io "rebalancer-dry-run" in namespace rebalancer')
    ):
        serve(policy(tmp_path, prometheus, extra=SERVICE), app.ClusterConnection(str(account.kubeconfig)),
              DryRun.CLIENT, stop=stop)  # fmt: skip

    account.deny()
    with pytest.raises(KubeUnavailable, match=f"the state namespace {GONE} does not exist"):
        serve(policy(tmp_path, prometheus, state=GONE, extra=SERVICE), app.ClusterConnection(str(account.kubeconfig)),
              DryRun.SERVER, stop=stop)  # fmt: skip
    assert not [e for e in plane.audit(account.user) if e.resource == "leases"], "it tried to lead"
    nothing_happened(plane, account)


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
    plane: ControlPlane,
    account: Account,
    prometheus: PrometheusServer,
    tmp_path: Path,
) -> None:
    account.deny(Denied(verb, resource))

    with pytest.raises(KubeForbidden) as caught:
        run(account, policy(tmp_path, prometheus), dry_run)

    assert str(caught.value).startswith(f"RBAC: the service account may not {verb} {resource} ")
    assert (caught.value.verb, caught.value.resource) == (verb, resource)
    nothing_happened(plane, account)


def test_a_steering_policy_needs_the_pod_patch_before_it_plans(
    plane: ControlPlane, account: Account, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    account.deny(Denied("patch", "pods"))
    path = policy(tmp_path, prometheus)
    path.write_text(path.read_text().replace("state:", STEERING + "state:"))

    with pytest.raises(KubeForbidden, match="may not patch pods "):
        run(account, path, DryRun.SERVER)
    nothing_happened(plane, account)


def test_serve_does_not_start_without_the_eviction_verb(
    plane: ControlPlane, account: Account, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    account.deny(Denied("create", "pods/eviction"))
    stop = threading.Event()
    stop.set()
    with pytest.raises(KubeForbidden, match="may not create pods/eviction "):
        serve(policy(tmp_path, prometheus, extra=SERVICE), app.ClusterConnection(str(account.kubeconfig)),
              DryRun.SERVER, stop=stop)  # fmt: skip
    assert not [e for e in plane.audit(account.user) if e.resource == "leases"], "it tried to lead"
    nothing_happened(plane, account)


def test_the_cli_exits_3_naming_the_eviction_verb_a_client_dry_run_needs_not(
    plane: ControlPlane,
    account: Account,
    prometheus: PrometheusServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    account.deny(Denied("create", "pods/eviction"), Denied("create", "events"), Denied("patch", "pods"))
    path = policy(tmp_path, prometheus)
    args = ["run", "--once", "--policy", str(path), "--kubeconfig", str(account.kubeconfig)]

    assert main([*args, "--dry-run=off"]) == 3
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("rebalancer: KubeForbidden: RBAC: the service account may not create pods/eviction; ")
    assert "create events" in line
    nothing_happened(plane, account)

    client = run(account, path, DryRun.CLIENT)  # reads only: it plans and says what it would evict
    assert [r.outcome for r in client.report.results] and {r.outcome for r in client.report.results} == {
        Outcome.DRY_RUN
    }
    assert not [e for e in plane.audit(account.user) if e.resource == "pods/eviction"]


def test_an_include_list_asks_for_the_verbs_in_those_namespaces_only(
    plane: ControlPlane, account: Account, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    account.deny(Denied("create", "pods/eviction", namespace="monitoring"))  # never evicted from there
    path = policy(tmp_path, prometheus)
    path.write_text(path.read_text().replace("{exclude: [kube-system, monitoring]}", "{include: [shop]}"))
    result = run(account, path, DryRun.SERVER)  # the cluster stays as it is for the run that evicts, last
    assert result.report.aborted is None
    assert [e.code for e in plane.audit(account.user) if e.resource == "pods/eviction"] == [201] * len(
        result.report.results
    )
    assert result.report.results

    account.deny(Denied("create", "pods/eviction", namespace=NAMESPACE))
    with pytest.raises(KubeForbidden, match="may not create pods/eviction in namespace shop"):
        run(account, path, DryRun.SERVER)


# the test that evicts, last: the pods it evicts are gone


def test_a_run_in_an_existing_namespace_checks_and_goes_on(
    plane: ControlPlane, account: Account, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    result = run(account, policy(tmp_path, prometheus), DryRun.OFF)
    assert result.report.aborted is None
    assert evicted(plane, account)
    assert plane.admin.exists("/api/v1/namespaces/rebalancer/configmaps/rebalancer-state")
