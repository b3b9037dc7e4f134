"""`run --once` end to end against the Python test API server, only where a test needs what a real one cannot be
made to do on demand: an eviction answer held back for a minute, to kill the process between its reservation
and its eviction, and a permission withdrawn at the very request after the check before planning passed.
The rest of `run --once` runs on a real API server: the Eviction API, budgets, dry runs, Events and
replacements in tests/realcluster/test_run_once.py, the limiter's state, caps, conflicts between two
processes, corrupt state and alert focus in tests/realcluster/test_run_once_state.py, RBAC in
tests/realcluster/test_state_access.py and test_chart_rbac.py."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rebalancer.actions.evictor import DryRun, Outcome
from rebalancer.app import root as app
from rebalancer.planning.limits import LimiterState
from rebalancer.policy import load_policy
from tests.adapters.prom_fixture import PrometheusServer, StartPrometheus
from tests.kubeapi import TestApiServer
from tests.kubeapi.server import Fault
from tests.service.scenario import END, HISTORY, build_cluster, live_pods, write_policy

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def prometheus(start_prometheus: StartPrometheus) -> PrometheusServer:
    return start_prometheus(HISTORY.series())


def run(kubeconfig: Path, policy: Path, dry_run: DryRun = DryRun.OFF) -> app.RunOutcome:
    return app.run_once(load_policy(policy), app.ClusterConnection(str(kubeconfig)), dry_run, clock=lambda: END)


def stored_state(server: TestApiServer) -> LimiterState:
    config_map = server.store.get("configmaps", "rebalancer-state", "rebalancer")
    assert config_map is not None
    return LimiterState.from_json(config_map["data"]["state.json"], END)


def test_rbac_refusal_names_the_missing_permission(
    kube_server: TestApiServer, kubeconfig: Path, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    build_cluster(kube_server)
    # withdrawn after the check before planning (a missing one stops the run there: test_state_access)
    kube_server.on_request(
        lambda r: kube_server.forbid("create", "pods/eviction") if r.method == "GET" and "/pods/" in r.path else None
    )
    policy = write_policy(tmp_path / "p.yaml", prometheus.url, target=50)
    result = run(kubeconfig, policy)
    assert result.report.aborted is not None
    assert "grant verb create on pods/eviction" in result.report.aborted
    assert {r.outcome for r in result.report.results} == {Outcome.SKIPPED}
    assert live_pods(kube_server) == {"api-0", "api-1", "web-0", "web-1", "web-2"}


RUNNER = textwrap.dedent(
    """
    import sys
    from rebalancer.app import root as app
    from rebalancer.policy import load_policy
    result = app.run_once(load_policy(sys.argv[1]), app.ClusterConnection(sys.argv[2]), clock=lambda: {end})
    print(sum(1 for r in result.report.results if r.outcome.value == "evicted"))
    """
)


def start_run(policy: Path, kubeconfig: Path) -> subprocess.Popen[str]:
    script = RUNNER.format(end=END)
    return subprocess.Popen(
        [sys.executable, "-c", script, str(policy), str(kubeconfig)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip


def test_a_process_killed_between_reserve_and_evict_never_lets_the_cap_be_exceeded(
    kube_server: TestApiServer, kubeconfig: Path, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    build_cluster(kube_server)
    cap = "limits: {global: {maxPerPeriod: [{count: 1, period: 1h}]}}\n"
    policy = write_policy(tmp_path / "p.yaml", prometheus.url, target=50, extra=cap)
    kube_server.set_fault(TestApiServer.eviction_path("shop", "api-0"), Fault(delay=60, times=1))
    victim = start_run(policy, kubeconfig)
    deadline = time.monotonic() + 30
    while not kube_server.requests_to(TestApiServer.eviction_path("shop", "api-0")):
        assert time.monotonic() < deadline, "the first run never reached the eviction"
        time.sleep(0.05)
    victim.kill()  # after its reservation was persisted, before its eviction was answered
    victim.communicate(timeout=30)
    kube_server.clear_faults()

    second = start_run(policy, kubeconfig)
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    assert int(out.strip().splitlines()[-1]) == 0  # the token the killed run took is still taken
    assert len(stored_state(kube_server).reservations) == 1
    assert [r for r in kube_server.eviction.records if r.code == 201] == []
