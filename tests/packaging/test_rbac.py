"""The chart's RBAC grants exactly what the code uses, in both directions.

- From the code: every method of a generated Kubernetes API class that the adapter (rebalancer/adapters/kube)
  names is read from its source with the request it makes; each must be granted, so a new call (a
  future ``patch pods``, say) fails here until the chart grants it.
- From the running code: `run --once` (the CronJob's pod) and `rebalancer serve` (the Deployment's pod,
  started with the rendered arguments) run against the test API server, every request is recorded, and
  the rendered ClusterRole / Role, evaluated as the RBAC authorizer does (namespaces, resourceNames),
  must allow each one; and every permission granted must have been used by some request.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
import yaml

from rebalancer.actions.evictor import DryRun
from rebalancer.adapters.kube import connect
from rebalancer.app import root as app
from rebalancer.app.runtime import Runtime
from rebalancer.policy import parse_policy
from tests.adapters.prom_fixture import PrometheusServer, StartPrometheus, free_port
from tests.kubeapi import TestApiServer
from tests.kubeapi.rbac import Attributes, attributes
from tests.packaging.chart import NAMESPACE, ROOT, Doc, Rendered, render
from tests.packaging.rbac import Grant, adapter_calls, allows, grants, permission
from tests.service.scenario import END, HISTORY, build_cluster

LNU = {"kind": "LowNodeUtilization", "thresholds": {"cpu": 20}, "targetThresholds": {"cpu": 70}}
STEERING = {"policy": {"strategies": [LNU, {"kind": "DeletionCostSteering", "poolCosts": {"default": 100}}]}}
GUARD = {"policy": {"strategies": [LNU], "landingGuard": {"pools": [{"pool": "default"}]}}}
SERVE_VARIANTS = {
    "default": {},
    "no-watch-cache": {"policy": {"service": {"watchCache": {"enabled": False}}}},
    "no-leader-election": {"policy": {"service": {"leaderElection": {"enabled": False}}}},
    "deletion-cost-steering": STEERING,  # patch pods granted, and used by the cycles
    "landing-guard": GUARD,  # get and patch nodes: the start-up sweep clears the cycles' marks (expired by now)
}
PATCH_PODS = ("", "pods", "patch")
WATCHED = {"nodes", "pods", "replicasets", "poddisruptionbudgets"}
NODE_WRITES = {("", "nodes", "get"), ("", "nodes", "patch")}


@pytest.fixture(scope="module")
def prometheus(start_prometheus: StartPrometheus) -> PrometheusServer:
    return start_prometheus(HISTORY.series())


def requests_made(server: TestApiServer) -> list[Attributes]:
    found = [attributes(r.method, r.path, r.query) for r in server.requests]
    return [a for a in found if a is not None]


def refused(grants_: list[Grant], requests: list[Attributes]) -> list[Attributes]:
    return [a for a in requests if not any(allows(g, a) for g in grants_)]


def unused(grants_: list[Grant], requests: list[Attributes]) -> set[tuple[str, str, str]]:
    """Permissions granted that no request needed (names: each named object must have been asked for)."""
    left = set()
    for g in grants_:
        if not any(allows(g, a) for a in requests):
            left.add(g.permission)
        for name in g.names:
            named = Grant(g.group, g.resource, g.verb, g.namespace, frozenset([name]))
            if not any(allows(named, a) for a in requests) and g.verb == "get":
                left.add((g.group, f"{g.resource} {name}", g.verb))
    return left


def rendered_policy(rendered: Rendered, prometheus_url: str, **service: object) -> str:
    """The rendered policy file, reading the test Prometheus, without the chart's default caps: those only
    decide how many evictions a run makes (the node limit would hold the second run back), never
    which calls it makes."""
    policy: Doc = yaml.safe_load(rendered.policy_text)
    policy["prometheus"]["url"] = prometheus_url
    policy.pop("limits", None)
    policy.setdefault("service", {}).update(service)
    return yaml.safe_dump(policy)


def run_rendered_cycle(rendered: Rendered, server: TestApiServer, kubeconfig: Path, prometheus_url: str) -> None:
    """What the CronJob's pod does (`run --once`; serve's cycles call the same run_cycle), against the
    test cluster at the time of the Prometheus history, in the namespace the pod's env names. The first run
    reads the cluster by watch-list, the second on a server refusing it (page by page, the fallback)."""
    build_cluster(server)
    policy = parse_policy(rendered_policy(rendered, prometheus_url))
    with mock.patch.dict(os.environ, {"POD_NAMESPACE": NAMESPACE}):  # the rendered env (fieldRef)
        for watch_list in (True, False):  # the second run finds the state ConfigMaps and updates them
            server.watch_list = watch_list
            outcome = app.run_cycle(Runtime(policy, connect(str(kubeconfig)), lambda: END, DryRun.OFF))
            assert not outcome.report.aborted, outcome.report
    server.watch_list = True
    assert [r for r in server.eviction.records if r.code == 201], "the scenario evicted nothing"
    assert server.store.get("configmaps", "rebalancer-state", NAMESPACE) is not None


def test_every_api_call_in_the_adapter_source_is_granted() -> None:
    calls = adapter_calls()
    assert {c.method_name.split(".")[1] for c in calls} >= {
        "create_namespaced_pod_eviction",
        "list_node",
        "patch_namespaced_pod",
        "patch_node",
        "read_node",
    }
    most = {"policy": {**STEERING["policy"], "landingGuard": GUARD["policy"]["landingGuard"]}}
    granted = grants(render(most))  # the Deployment with steering and the guard grants the most
    missing = [f"{c.where}: {c.method_name} needs {permission(c.request)}" for c in calls
               if not any(g.permission == permission(c.request) for g in granted)]  # fmt: skip
    assert missing == [], "add these to charts/rebalancer/templates/rbac.yaml"


def test_the_chart_grants_nothing_the_adapter_source_cannot_ask_for() -> None:
    from_source = {permission(c.request)[:2] for c in adapter_calls()}
    for values in ({}, {"kind": "CronJob"}, STEERING, GUARD):
        granted = {g.permission[:2] for g in grants(render(values))}
        assert granted <= from_source


def test_patch_pods_is_granted_only_with_an_enabled_steering_strategy() -> None:
    disabled = {"policy": {"strategies": [LNU, {"kind": "DeletionCostSteering", "enabled": False}]}}
    for values, expected in (({}, False), ({"kind": "CronJob"}, False), (disabled, False), (STEERING, True),
                             ({**STEERING, "kind": "CronJob"}, True)):  # fmt: skip
        assert any(g.permission == PATCH_PODS for g in grants(render(values))) == expected, values


def test_get_and_patch_nodes_are_granted_only_with_a_landing_guard() -> None:
    no_pools = {"policy": {"strategies": [LNU], "landingGuard": {"pools": []}}}  # the default values guard a pool
    for values, expected in (({}, True), (STEERING, True), (no_pools, False), ({**no_pools, "kind": "CronJob"}, False),
                             (GUARD, True), ({**GUARD, "kind": "CronJob"}, True)):  # fmt: skip
        node_grants = {g.permission for g in grants(render(values)) if g.resource == "nodes"}
        assert (node_grants >= NODE_WRITES) == expected and (node_grants & NODE_WRITES in (set(), NODE_WRITES)), values


@pytest.mark.parametrize(
    ("values", "used"),
    [(STEERING, {PATCH_PODS}), (GUARD, NODE_WRITES)],
    ids=["deletion-cost-steering", "landing-guard"],
)
def test_cronjob_with_a_patching_feature_grants_exactly_what_run_once_uses(
    values: Doc,
    used: set[tuple[str, str, str]],
    kube_server: TestApiServer,
    kubeconfig: Path,
    prometheus: PrometheusServer,
) -> None:
    rendered = render({**values, "kind": "CronJob"})
    granted = grants(rendered)
    run_rendered_cycle(rendered, kube_server, kubeconfig, prometheus.url)
    made = requests_made(kube_server)
    assert {permission(a) for a in made} >= used, "the feature patched nothing"
    assert refused(granted, made) == []
    assert unused(granted, made) == set()


def test_cronjob_grants_exactly_what_run_once_uses(
    kube_server: TestApiServer, kubeconfig: Path, prometheus: PrometheusServer
) -> None:
    rendered = render({"kind": "CronJob"})
    granted = grants(rendered)
    run_rendered_cycle(rendered, kube_server, kubeconfig, prometheus.url)
    made = requests_made(kube_server)
    assert refused(granted, made) == []
    assert unused(granted, made) == set()
    assert not any(g.resource == "leases" for g in granted)
    assert not any(g.verb == "watch" for g in granted)  # pages from the watch cache: no watch-list


@pytest.mark.parametrize(("mode", "watched"), [("paged", set()), ("cached", set()), ("auto", WATCHED),
                                               ("watchList", WATCHED)])  # fmt: skip
def test_cronjob_watches_only_to_read_by_watch_list(mode: str, watched: set[str]) -> None:
    granted = grants(render({"kind": "CronJob", "policy": {"strategies": [LNU], "kubernetes": {"listMode": mode}}}))
    assert {g.resource for g in granted if g.verb == "watch"} == watched


@pytest.fixture
def serve_process(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


@pytest.mark.parametrize("variant", list(SERVE_VARIANTS), ids=list(SERVE_VARIANTS))
def test_deployment_grants_exactly_what_serve_and_its_cycles_use(
    variant: str,
    kube_server: TestApiServer,
    kubeconfig: Path,
    prometheus: PrometheusServer,
    tmp_path: Path,
    serve_process: list[subprocess.Popen[bytes]],
) -> None:
    rendered = render(SERVE_VARIANTS[variant])
    granted = grants(rendered)
    run_rendered_cycle(rendered, kube_server, kubeconfig, prometheus.url)
    service = parse_policy(rendered.policy_text).service
    leader_election, watch_cache = service.leader_election.enabled, service.watch_cache.enabled

    # `rebalancer serve` as the Deployment's container runs it: the rendered arguments, POD_NAMESPACE
    port = free_port()  # /metrics and the probes
    token = tmp_path / "token"
    token.write_text("t0ken")
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        rendered_policy(
            rendered,
            prometheus.url,
            host="127.0.0.1",
            port=free_port(),
            metricsPort=port,
            webhook={"tokenFile": str(token)},
        )
    )
    args = [str(policy) if a.endswith("/policy.yaml") else a for a in rendered.container["args"]]
    log = tmp_path / "serve.log"
    env = {**os.environ, "POD_NAMESPACE": NAMESPACE, "KUBECONFIG": str(kubeconfig)}
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "rebalancer", *args], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    serve_process.append(process)

    def started() -> bool:
        """Serving: ready, or (without the watch cache) its first cycle listed the cluster; and renewing."""
        made = requests_made(kube_server)
        listed = any(a.resource == "pods" and a.verb == "list" for a in made)
        renewed = any(a.resource == "leases" and a.verb == "update" for a in made)
        # Without the watch cache /readyz waits for an unblocked plan or a webhook's node listing (the
        # cycle's own listing does not count), and the test Prometheus has no data for now: not ready.
        serving = ready(port) if watch_cache else listed
        return serving and (renewed or not leader_election)

    deadline = time.monotonic() + 60
    while not started():
        assert process.poll() is None, log.read_text()
        assert time.monotonic() < deadline, "serve did not start within 60 s:\n" + log.read_text()
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)  # releases the Lease (an update)
    assert process.wait(timeout=30) == 0, log.read_text()

    made = requests_made(kube_server)
    assert refused(granted, made) == []
    assert unused(granted, made) == set()
    assert {a.resource for a in made if a.verb == "watch"} == (WATCHED if watch_cache else set())  # the watch cache
    assert any(a.resource == "leases" for a in made) == leader_election


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def test_a_missing_grant_is_found(kube_server: TestApiServer, kubeconfig: Path, prometheus: PrometheusServer) -> None:
    """The comparison can fail: without the events rule, the recorded Event creations are refused."""
    rendered = render({"kind": "CronJob"})
    granted = [g for g in grants(rendered) if g.resource != "events"]
    run_rendered_cycle(rendered, kube_server, kubeconfig, prometheus.url)
    assert {permission(a) for a in refused(granted, requests_made(kube_server))} == {("", "events", "create")}
