"""`run --once` and its state on a real API server (the ``api_server`` fixture, the cluster of shop.py made
through the API): the limiter's caps and reservations in a real ConfigMap (two processes started together
meet the server's 409 conflicts on it), corrupt state replaced, a client dry run that writes nothing, an alert
cycle that lists only the alerted node (a field selector the real server applies), a second run that counts
what the first moved, and efficiency off. Every request is read from the audit log. Serve's clock is fixed (the
history's end) so that the state's windows are exact; no controller replaces an evicted pod."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from rebalancer.actions.evictor import DryRun, Outcome
from rebalancer.app import root as app
from rebalancer.app.runtime import Focus, Runtime
from rebalancer.planning.limits import LimiterState
from rebalancer.policy import load_policy
from tests.adapters.prom_fixture import PrometheusServer, StartPrometheus
from tests.controlplane import USER, ControlPlane
from tests.controlplane.cluster import AuditEvent
from tests.realcluster import shop
from tests.service.scenario import END, HISTORY, write_policy

ROOT = Path(__file__).resolve().parents[2]
# At a 50% target hot-1 (3.5 cores of 4) must shed 1.5 cores: api-0 (1.2) then web-0 (0.6 covers the rest).
PLANNED = {"api-0", "web-0"}
ALL = {"api-0", "api-1", "web-0", "web-1", "web-2"}
STATE = "/api/v1/namespaces/rebalancer/configmaps/rebalancer-state"


@pytest.fixture(scope="module")
def prometheus(start_prometheus: StartPrometheus) -> PrometheusServer:
    return start_prometheus(HISTORY.series())


@pytest.fixture
def plane(api_server: ControlPlane) -> Iterator[ControlPlane]:
    shop.build(api_server)
    api_server.audit_from = api_server.audit_log.stat().st_size
    yield api_server
    shop.clear(api_server)


@pytest.fixture
def kubeconfig(plane: ControlPlane, tmp_path: Path) -> Path:
    return plane.user_kubeconfig(tmp_path / "kubeconfig")


def run(kubeconfig: Path, policy: Path, dry_run: DryRun = DryRun.OFF) -> app.RunOutcome:
    return app.run_once(load_policy(policy), app.ClusterConnection(str(kubeconfig)), dry_run, clock=lambda: END)


def outcomes(result: app.RunOutcome) -> dict[str, Outcome]:
    return {r.eviction.name: r.outcome for r in result.report.results}


def evictions(plane: ControlPlane) -> list[AuditEvent]:
    return [e for e in plane.audit(USER) if e.resource == "pods/eviction"]


def stored_state(plane: ControlPlane) -> LimiterState:
    return LimiterState.from_json(plane.admin.get(STATE)["data"]["state.json"], END)


def test_global_cap_per_cycle_holds_and_names_the_limiter(
    plane: ControlPlane, kubeconfig: Path, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    policy = write_policy(tmp_path / "p.yaml", prometheus.url, target=50, extra="limits: {global: {maxPerCycle: 1}}\n")
    result = run(kubeconfig, policy)

    assert sorted(outcomes(result).values()) == [Outcome.BLOCKED, Outcome.EVICTED]
    blocked = next(r for r in result.report.results if r.outcome is Outcome.BLOCKED)
    assert blocked.limiter is not None
    assert "maxPerCycle" in blocked.limiter
    assert [e.code for e in evictions(plane)] == [201]


def test_client_dry_run_changes_nothing(
    plane: ControlPlane, kubeconfig: Path, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    result = run(kubeconfig, write_policy(tmp_path / "p.yaml", prometheus.url, target=50), DryRun.CLIENT)

    assert outcomes(result) == dict.fromkeys(PLANNED, Outcome.DRY_RUN)
    assert evictions(plane) == []
    assert [c["metadata"]["name"] for c in plane.admin.items("v1", "ConfigMap", "rebalancer")] == [
        "openshift-service-ca.crt"  # the namespace's own, made with it
    ]
    assert plane.admin.items("v1", "Event", "shop") == []
    assert shop.live_pods(plane) == ALL


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
    return subprocess.Popen(
        [sys.executable, "-c", RUNNER.format(end=END), str(policy), str(kubeconfig)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip


def test_two_processes_started_together_share_the_cap(
    plane: ControlPlane, kubeconfig: Path, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    cap = "limits: {global: {maxPerPeriod: [{count: 1, period: 1h}]}}\n"
    policy = write_policy(tmp_path / "p.yaml", prometheus.url, target=50, extra=cap)
    runs = [start_run(policy, kubeconfig), start_run(policy, kubeconfig)]
    counts = []
    for process in runs:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        counts.append(int(out.strip().splitlines()[-1]))
    successes = [e for e in evictions(plane) if e.code == 201]
    assert sum(counts) == len(successes) == 1
    assert len(stored_state(plane).reservations) == 1


def test_corrupt_state_is_reported_replaced_and_never_trusted(
    plane: ControlPlane, kubeconfig: Path, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    plane.admin.create(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "rebalancer-state", "namespace": "rebalancer"},
         "data": {"state.json": '{"schema": "someone-else", "version": 7}'}}
    )  # fmt: skip
    cap = "limits: {global: {maxPerPeriod: [{count: 10, period: 1h}]}}\n"
    policy = write_policy(tmp_path / "p.yaml", prometheus.url, target=50, extra=cap)

    first = run(kubeconfig, policy)
    assert first.report.aborted is not None
    assert "foreign schema" in first.report.aborted
    assert "(in configmap rebalancer/rebalancer-state, key state.json)" in first.report.aborted
    assert any("replaced" in p for p in first.report.problems)
    assert evictions(plane) == []
    assert stored_state(plane).recovering_until == END + 3600

    second = run(kubeconfig, policy)
    assert {r.limiter for r in second.report.results} == {"state.recovering"}
    assert evictions(plane) == []


NEWER_RECORDS = '{"schema": "rebalancer.io/efficiency-records", "version": 2, "cycles": []}'
NEWER = {
    "limiter state": ("rebalancer-state", '{"schema": "rebalancer.io/limiter-state", "version": 2, "ledger": []}'),
    "eviction backoff state": ("rebalancer-backoff", '{"schema": "rebalancer.io/eviction-backoff", "version": 2}'),
}


@pytest.mark.parametrize("what", sorted(NEWER))
def test_a_newer_builds_state_is_left_as_it_is_and_nothing_is_evicted(
    plane: ControlPlane, kubeconfig: Path, prometheus: PrometheusServer, tmp_path: Path, what: str
) -> None:
    """A rollback meets the state and records of the newer build it replaced: it must neither trust nor
    replace them (the newer build, rolled forward again, finds them as it left them)."""
    name, text = NEWER[what]
    stored = {name: {"state.json": text}, "rebalancer-efficiency": {"records.json": NEWER_RECORDS}}
    for config_map, data in stored.items():
        plane.admin.create({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": config_map, "namespace": "rebalancer"}, "data": data})  # fmt: skip
    policy = write_policy(tmp_path / "p.yaml", prometheus.url, target=50)

    for _ in range(2):
        result = run(kubeconfig, policy)
        assert result.report.aborted is not None
        assert result.report.aborted.startswith(f"{what} written by a newer rebalancer: schema version 2")
        assert any("left as it is, and nothing is evicted" in p for p in result.report.problems)
        assert result.efficiency.problem is not None and "written by a newer rebalancer" in result.efficiency.problem
    assert evictions(plane) == []
    for config_map, data in stored.items():
        assert plane.admin.get(f"/api/v1/namespaces/rebalancer/configmaps/{config_map}")["data"] == data


def test_an_alert_cycle_lists_only_the_alerted_node_when_recent_facts_are_at_hand(
    plane: ControlPlane, kubeconfig: Path, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    policy = load_policy(write_policy(tmp_path / "p.yaml", prometheus.url, target=50))
    runtime = Runtime(policy, app.connect(str(kubeconfig)), lambda: END)
    full = app.plan_live(runtime)
    assert full.facts is not None
    plane.audit_from = plane.audit_log.stat().st_size

    result = app.run_cycle(runtime, focus=Focus(frozenset({"hot-1"}), full.facts))

    pod_reads = [e for e in plane.audit(USER) if e.resource == "pods" and e.namespace is None]
    assert pod_reads
    assert all("fieldSelector=spec.nodeName%3Dhot-1" in e.uri for e in pod_reads), [e.uri for e in pod_reads]
    assert {r.eviction.node for r in result.report.results} == {"hot-1"}
    assert Outcome.EVICTED in {r.outcome for r in result.report.results}


def test_a_second_run_right_after_counts_what_the_first_moved_and_evicts_nothing_more(
    plane: ControlPlane, kubeconfig: Path, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    policy = load_policy(write_policy(tmp_path / "p.yaml", prometheus.url, target=50))
    connection = app.ClusterConnection(str(kubeconfig))
    first = app.run_once(policy, connection, clock=lambda: END)
    assert outcomes(first) == dict.fromkeys(PLANNED, Outcome.EVICTED)

    # 86 s later Prometheus still reads hot-1 at 87%: its window holds the minutes before the evictions
    second = app.run_once(policy, connection, clock=lambda: END + 86)
    assert second.report.results == ()
    (correction,) = second.planned.plan.in_flight
    assert correction.node == "hot-1" and correction.measured_m > 3000 and correction.corrected_m < 2000
    assert correction.note.startswith("relieved 86 s ago: 1.8 cores moved")
    hot = next(d for d in second.planned.plan.results[0].node_decisions if d.node == "hot-1")
    assert hot.node_class.value != "hot"
    assert second.efficiency.state is not None and len(second.efficiency.state.reliefs) == 1
    assert shop.live_pods(plane) == {"api-1", "web-1", "web-2"}

    # `rebalancer plan` reads the same records and says why hot-1 is left alone
    planned = app.plan_now(policy, connection, clock=lambda: END + 90)
    assert [c.node for c in planned.plan.in_flight] == ["hot-1"] and planned.plan.in_flight_off is None


def test_with_efficiency_off_the_records_are_never_read_written_or_warned_about(
    plane: ControlPlane,
    kubeconfig: Path,
    prometheus: PrometheusServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    policy = write_policy(tmp_path / "p.yaml", prometheus.url, target=50, extra="efficiency: {enabled: false}\n")
    for dry_run in (DryRun.OFF, DryRun.SERVER, DryRun.CLIENT):
        result = run(kubeconfig, policy, dry_run)
        assert result.efficiency.state is None and result.efficiency.problem is None

    assert [e for e in evictions(plane) if e.code == 201 and not e.dry_run], "the first run evicted"
    records = "rebalancer-efficiency"
    assert not [e for e in plane.audit(USER) if e.name == records or records in e.uri]
    assert not plane.admin.exists(f"/api/v1/namespaces/rebalancer/configmaps/{records}")
    assert not [m for m in caplog.messages if "efficiency" in m]
