"""The chart's own RBAC on a real API server: the rendered ServiceAccount, Roles and bindings applied as
`helm install` would, `run --once` (the CronJob) and `rebalancer serve` (the Deployment, leader election through
a Lease) running as that service account with a token the API server issued. The real RBAC authorizer decides;
its audit log shows every request: none refused, and every permission granted was used."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import pytest

from rebalancer.actions.evictor import DryRun
from rebalancer.adapters.kube import connect
from rebalancer.adapters.kube.lease import micro_time
from rebalancer.app import root as app
from rebalancer.app.runtime import Runtime
from rebalancer.domain.errors import KubeForbidden
from rebalancer.policy import parse_policy
from tests.adapters.prom_fixture import PrometheusServer, StartPrometheus, free_port
from tests.controlplane import ControlPlane
from tests.controlplane.cluster import AuditEvent
from tests.kubeapi.rbac import Attributes
from tests.packaging.chart import NAMESPACE, ROOT, Rendered, render
from tests.packaging.rbac import Grant, allows, grants
from tests.packaging.test_rbac import ready, rendered_policy
from tests.realcluster.scenario import Placed, build

LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


@pytest.fixture
def placed(cluster: ControlPlane) -> Placed:
    cluster.namespace(NAMESPACE)
    return build(cluster)


@pytest.fixture
def prometheus(placed: Placed, start_prometheus: StartPrometheus) -> PrometheusServer:
    return start_prometheus(placed.history().series())


def install_rbac(plane: ControlPlane, rendered: Rendered, tmp_path: Path) -> tuple[str, Path]:
    """The rendered RBAC objects created in the cluster; the service account's user name and a kubeconfig
    with a token of it."""
    for kind in RBAC_KINDS:
        for doc in rendered.of_kind(kind):
            plane.admin.create(doc)
    account = rendered.pod_spec["serviceAccountName"]
    token = plane.admin.service_account_token(NAMESPACE, account)
    return f"system:serviceaccount:{NAMESPACE}:{account}", plane.kubeconfig(tmp_path / "sa.kubeconfig", token)


def as_attributes(event: AuditEvent) -> Attributes:
    resource, _, subresource = event.resource.partition("/")
    return Attributes(event.verb, event.group, resource, subresource, event.namespace, event.name or "")


def unused(granted: list[Grant], made: list[Attributes]) -> set[tuple[str, str, str]]:
    return {g.permission for g in granted if not any(allows(g, a) for a in made)}


def judge(plane: ControlPlane, user: str, granted: list[Grant]) -> list[Attributes]:
    events = plane.audit(user)
    assert events, f"no request by {user} in the audit log"
    refused = [e for e in events if e.code == 403]
    assert refused == [], "the API server refused the chart's service account"
    made = [as_attributes(e) for e in events]
    assert unused(granted, made) == set(), "granted but never used"
    return made


def run_cycles(rendered: Rendered, kubeconfig: Path, prometheus_url: str) -> None:
    """What the CronJob's pod does (`run --once`; serve's cycles call the same run_cycle), twice: the first
    reads by watch-list (authorized as watch), the second page by page as the fallback does (list), and finds
    the state ConfigMaps and updates them."""
    text = rendered_policy(rendered, prometheus_url)
    policies = [parse_policy(text), parse_policy(text + "kubernetes: {listMode: paged}\n")]
    with mock.patch.dict(os.environ, {"POD_NAMESPACE": NAMESPACE}):  # the rendered env (fieldRef)
        for policy in policies:
            outcome = app.run_cycle(Runtime(policy, connect(str(kubeconfig)), time.time, DryRun.OFF))
            assert not outcome.report.aborted, outcome.report


def test_cronjob_runs_with_exactly_the_chart_grants(
    cluster: ControlPlane, placed: Placed, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    rendered = render({"kind": "CronJob"})
    user, kubeconfig = install_rbac(cluster, rendered, tmp_path)
    run_cycles(rendered, kubeconfig, prometheus.url)
    made = judge(cluster, user, grants(rendered))
    assert any(a.resource == "pods" and a.subresource == "eviction" for a in made)


def test_a_missing_grant_is_found_before_the_run_plans(
    cluster: ControlPlane, placed: Placed, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    """Without the eviction grant, the run's access review (answered by the real RBAC authorizer) stops it
    before it lists a pod, naming the verb; it never reaches the Eviction API."""
    rendered = render({"kind": "CronJob"})
    for role in rendered.of_kind("ClusterRole"):
        role["rules"] = [r for r in role["rules"] if "pods/eviction" not in r["resources"]]
    user, kubeconfig = install_rbac(cluster, rendered, tmp_path)
    policy = parse_policy(rendered_policy(rendered, prometheus.url))
    with mock.patch.dict(os.environ, {"POD_NAMESPACE": NAMESPACE}), pytest.raises(KubeForbidden) as refused:
        app.run_cycle(Runtime(policy, connect(str(kubeconfig)), time.time, DryRun.OFF))
    assert "may not create pods/eviction" in str(refused.value)
    made = cluster.audit(user)
    assert not [e for e in made if e.resource in ("pods", "pods/eviction")], "it read pods or evicted"
    assert set(placed.pods) <= {p["metadata"]["name"] for p in cluster.admin.items("v1", "Pod", "shop")}


def test_serve_runs_with_exactly_the_chart_grants_and_leads_through_a_lease(
    cluster: ControlPlane, placed: Placed, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    rendered = render({})
    user, kubeconfig = install_rbac(cluster, rendered, tmp_path)
    run_cycles(rendered, kubeconfig, prometheus.url)
    port = free_port()
    token = tmp_path / "token"
    token.write_text("t0ken")
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        rendered_policy(
            rendered, prometheus.url, host="127.0.0.1", port=free_port(), metricsPort=port,
            webhook={"tokenFile": str(token)},
        )
    )  # fmt: skip
    args = [str(policy) if a.endswith("/policy.yaml") else a for a in rendered.container["args"]]
    log = tmp_path / "serve.log"
    env = {**os.environ, "POD_NAMESPACE": NAMESPACE, "KUBECONFIG": str(kubeconfig)}
    # a live release of the same policy leads on the policy's Lease (held for an hour): the dry run beside it
    # must lead on its own, never wait for or take this one
    if cluster.admin.exists(f"{LEASES}/rebalancer"):  # released by a serve of another test
        cluster.admin.delete(f"{LEASES}/rebalancer")
    live = cluster.admin.create(
        {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "rebalancer", "namespace": NAMESPACE},
         "spec": {"holderIdentity": "live-0", "leaseDurationSeconds": 3600, "renewTime": micro_time(time.time())}}
    )  # fmt: skip
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "rebalancer", *args], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 90
        while not (ready(port) and any(e.resource == "leases" and e.verb == "update" for e in cluster.audit(user))):
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "serve did not lead and serve within 90 s:\n" + log.read_text()
            time.sleep(0.3)
        held = cluster.admin.get(f"{LEASES}/rebalancer-dry-run")  # the chart's default is a dry run
        assert held["spec"]["holderIdentity"]
    finally:
        process.send_signal(signal.SIGTERM)  # releases the Lease (an update)
        code = process.wait(timeout=30)
        unchanged = cluster.admin.get(f"{LEASES}/rebalancer")
        cluster.admin.delete(f"{LEASES}/rebalancer")  # held for an hour: other tests' serves lead on it
    assert code == 0, log.read_text()
    released = cluster.admin.get(f"{LEASES}/rebalancer-dry-run")
    assert not released["spec"].get("holderIdentity")
    assert unchanged == live  # the live release's, held all along: never touched
    made = judge(cluster, user, grants(rendered))
    assert {a.resource for a in made if a.verb == "watch"} == {"nodes", "pods", "replicasets", "poddisruptionbudgets"}
