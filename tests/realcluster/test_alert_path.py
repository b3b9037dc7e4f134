"""The alert path end to end, with real parts only: a live cAdvisor-shaped exporter on 127.0.0.1 -> a real
Prometheus scraping it and evaluating a hot-node alert rule -> a real Alertmanager (clustering off) ->
`rebalancer serve` (its own process, leader by a Lease) -> evictions on a real control plane, the replacement
placed by the real ReplicaSet controller and scheduler. What serve asked of the API server is read from its
audit log."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from rebalancer.adapters.kube import LeaseClient, connect
from rebalancer.service.leader import LeaseRecord
from tests.adapters.prom_fixture import ServerProcess, free_port, require_binary, run_promtool
from tests.controlplane import USER, ControlPlane
from tests.realcluster import exporter as cadvisor
from tests.realcluster.scenario import CORES, NAMESPACE, SYSTEM_CORES, Placed, build, running

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "alert-token-1234"
LEASE = "/apis/coordination.k8s.io/v1/namespaces/rebalancer/leases/rebalancer"
RULES = """\
groups:
- name: rebalancer
  rules:
  - alert: NodeCPUHigh
    expr: sum by (node) (rate(container_cpu_usage_seconds_total{id="/"}[5s])) > 0.8
    for: 8s  # the nodes need rateWindow + step (6 s) of data before their usage is read
    labels: {severity: warning}
"""


@pytest.fixture
def placed(cluster: ControlPlane) -> Placed:
    cluster.namespace("rebalancer")
    return build(cluster)


@pytest.fixture
def exporter(placed: Placed) -> Iterator[int]:
    pods = {(NAMESPACE, name): (node, CORES[workload]) for name, (workload, node) in placed.pods.items()}
    with cadvisor.serving(pods, dict.fromkeys(("hot-1", "cold-1", "cold-2"), SYSTEM_CORES)) as port:
        yield port


@pytest.fixture
def kubeconfig(cluster: ControlPlane, tmp_path: Path) -> Path:
    return cluster.user_kubeconfig(tmp_path / "kubeconfig")


def evictions(plane: ControlPlane) -> list[tuple[str, str]]:
    """(pod, requested-by) of each eviction serve made that the API server granted."""
    return [
        (
            e.name or "",
            ((e.body or {}).get("metadata") or {}).get("annotations", {}).get("rebalancer.io/requested-by", ""),
        )
        for e in plane.audit(USER)
        if e.resource == "pods/eviction" and e.code == 201
    ]


def holder(plane: ControlPlane) -> str:
    if not plane.admin.exists(LEASE):
        return ""
    return str(plane.admin.get(LEASE)["spec"].get("holderIdentity") or "")


def start_alertmanager(workdir: Path, webhook_ports: list[int], token_file: Path, repeat: str = "1h") -> ServerProcess:
    binary = require_binary("prometheus-alertmanager")
    config = workdir / "alertmanager.yml"
    hooks = "".join(
        f"  - url: http://127.0.0.1:{port}/webhook/alertmanager\n"
        "    send_resolved: true\n"
        f"    http_config: {{authorization: {{credentials_file: {token_file}}}}}\n"
        for port in webhook_ports
    )
    config.write_text(
        "route: {receiver: rebalancer, group_by: [node], group_wait: 1s, group_interval: 1s, "
        f"repeat_interval: {repeat}}}\n"
        "receivers:\n- name: rebalancer\n  webhook_configs:\n" + hooks
    )
    (workdir / "am-data").mkdir()

    def argv(port: int) -> list[str]:
        return [binary, f"--config.file={config}", f"--storage.path={workdir / 'am-data'}",
                f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=", "--log.level=warn"]  # fmt: skip

    process = ServerProcess("alertmanager", workdir, argv, "/-/ready")
    process.start()
    return process


def start_prometheus(workdir: Path, exporter_port: int, alertmanager_port: int) -> ServerProcess:
    """Scraping the exporter every second and evaluating :data:`RULES`."""
    binary = require_binary("prometheus")
    (workdir / "rules.yml").write_text(RULES)
    config = workdir / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: [{workdir / 'rules.yml'}]\n"
        f"alerting: {{alertmanagers: [{{static_configs: [{{targets: ['127.0.0.1:{alertmanager_port}']}}]}}]}}\n"
        f"scrape_configs: [{{job_name: cadvisor, static_configs: [{{targets: ['127.0.0.1:{exporter_port}']}}]}}]\n"
    )
    (workdir / "prom-data").mkdir()

    def argv(port: int) -> list[str]:
        return [binary, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'prom-data'}",
                f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"]  # fmt: skip

    process = ServerProcess("prometheus", workdir, argv, "/-/ready")
    process.start()
    return process


def test_promtool_accepts_the_alert_rule(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yml"
    rules.write_text(RULES)
    out = run_promtool("check", "rules", str(rules))
    assert out.returncode == 0, out.stdout + out.stderr


def test_hot_node_alert_leads_to_evictions_through_serve(
    cluster: ControlPlane, placed: Placed, kubeconfig: Path, exporter: int, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    serve_port, metrics_port = free_port(), free_port()
    alertmanager = start_alertmanager(tmp_path, [serve_port], token_file)
    prometheus = start_prometheus(tmp_path, exporter, alertmanager.port)
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        f"prometheus: {{url: '{prometheus.url}', window: 10s, step: 1s, rateWindow: 5s, maxDataAge: 1m}}\n"
        "protections: {evictableNamespaces: {exclude: [kube-system, monitoring]}}\n"
        "strategies:\n- {kind: LowNodeUtilization, thresholds: {cpu: 30}, targetThresholds: {cpu: 50}, "
        "schedule: {interval: 1h}}\n"
        "state: {namespace: rebalancer}\n"
        f"service: {{host: 127.0.0.1, port: {serve_port}, metricsPort: {metrics_port}, runOnStart: false, "
        f"webhook: {{tokenFile: '{token_file}'}},"
        " leaderElection: {leaseDuration: 3s, renewDeadline: 2s, retryPeriod: 1s}}\n"
    )
    log = (tmp_path / "serve.log").open("w")
    serve = subprocess.Popen(
        [sys.executable, "-m", "rebalancer", "--log-level", "INFO", "serve", "--policy", str(policy),
         "--kubeconfig", str(kubeconfig)],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while not evictions(cluster):
            assert serve.poll() is None, (tmp_path / "serve.log").read_text()
            assert time.monotonic() < deadline, "no eviction within 90 s:\n" + (tmp_path / "serve.log").read_text()
            time.sleep(0.5)
        metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        finished = 'rebalancer_cycle_duration_seconds_count{trigger="alert"}'  # observed as the cycle ends
        wait_for(lambda: finished in scrape(metrics_url), 60, "no alert cycle finished", [tmp_path / "serve.log"])
        evicted = {name for name, _ in evictions(cluster)}
        assert evicted <= placed.on("hot-1")  # only from the alerted node
        assert not evicted & set(running(cluster))
        metrics = scrape(metrics_url)
        assert 'rebalancer_alerts_total{action="queued",status="firing"}' in metrics
        assert "rebalancer_leader 1.0" in metrics
        assert holder(cluster)
        pod_reads = [e for e in cluster.audit(USER) if e.resource == "pods" and e.verb in ("list", "watch")]
        full_reads = [e for e in pod_reads if "sendInitialEvents=true" in e.uri or e.verb == "list"]
        assert len(full_reads) == 1  # listed once at start (a watch-list); the alert cycle read the watch cache
    finally:
        serve.send_signal(signal.SIGTERM)
        code = serve.wait(timeout=30)
        alertmanager.stop()
        prometheus.stop()
        log.close()
    assert code == 0, (tmp_path / "serve.log").read_text()
    assert holder(cluster) == ""  # released on SIGTERM: another replica takes over at once


def start_serve(
    workdir: Path, index: int, ports: tuple[int, int], prometheus_url: str, kubeconfig: Path, token_file: Path
) -> tuple[subprocess.Popen[bytes], Path]:
    """A replica with its webhook on ``ports[0]``, /metrics and the probes on ``ports[1]``."""
    policy = workdir / f"policy-{index}.yaml"
    policy.write_text(
        f"prometheus: {{url: '{prometheus_url}', window: 10s, step: 1s, rateWindow: 5s, maxDataAge: 1m}}\n"
        "protections: {evictableNamespaces: {exclude: [kube-system, monitoring]}}\n"
        "strategies:\n- {kind: LowNodeUtilization, thresholds: {cpu: 30}, targetThresholds: {cpu: 50}, "
        "schedule: {interval: 1h}}\n"
        "limits: {node: {maxPerCycle: 1, cooldown: 15s}}\n"
        "state: {namespace: rebalancer}\n"
        f"service: {{host: 127.0.0.1, port: {ports[0]}, metricsPort: {ports[1]}, runOnStart: false, "
        f"webhook: {{tokenFile: '{token_file}', "
        "alertNodeCooldown: 1s}, leaderElection: {leaseDuration: 3s, renewDeadline: 2s, "
        "retryPeriod: 1s}}\n"
    )
    log_path = workdir / f"serve-{index}.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "rebalancer", "--log-level", "INFO", "serve", "--policy", str(policy),
             "--kubeconfig", str(kubeconfig)],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    return process, log_path


def ready(port: int) -> bool:
    """Whether the status port's /readyz answers 200 (503 while the watch cache is still listing)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
            return bool(answer.status == 200)
    except OSError:  # HTTPError (503) and connection errors
        return False


def wait_for(condition: object, seconds: float, what: str, logs: list[Path]) -> None:
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {seconds} s; logs:\n" + "\n".join(p.read_text() for p in logs))
        time.sleep(0.25)


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as answer:
        text: str = answer.read().decode()
        return text


def requesters(plane: ControlPlane) -> list[str]:
    return [by for _, by in evictions(plane)]


def test_two_replicas_only_the_leader_evicts_and_a_killed_leader_hands_over(
    cluster: ControlPlane, placed: Placed, kubeconfig: Path, exporter: int, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    ports = [free_port(), free_port()]
    status_ports = [free_port(), free_port()]
    alertmanager = start_alertmanager(tmp_path, ports, token_file, repeat="2s")
    prometheus = start_prometheus(tmp_path, exporter, alertmanager.port)
    replicas = [
        start_serve(tmp_path, i, (port, status_ports[i]), prometheus.url, kubeconfig, token_file)
        for i, port in enumerate(ports)
    ]
    logs = [log for _, log in replicas]
    try:
        wait_for(lambda: requesters(cluster), 90, "no eviction", logs)
        first = holder(cluster)
        assert set(requesters(cluster)) == {f"rebalancer/{first}"}  # only the leader evicted
        for port in status_ports:  # the follower is ready too (its watch cache is listed): a rollout does not stall
            wait_for(partial(ready, port), 30, f"no ready replica on {port}", logs)
        leader = next(p for p, log in replicas if f"{first} is now the leader" in log.read_text())
        survivor_port = status_ports[[p for p, _ in replicas].index(leader) - 1]
        leader.kill()  # no release: the survivor must wait for the lease to expire
        leader.wait(timeout=10)
        wait_for(lambda: holder(cluster) not in ("", first), 15, "no takeover", logs)
        second = holder(cluster)
        wait_for(lambda: f"rebalancer/{second}" in requesters(cluster), 60, "no eviction by the new leader", logs)
        assert set(requesters(cluster)) == {f"rebalancer/{first}", f"rebalancer/{second}"}
        url = f"http://127.0.0.1:{survivor_port}/metrics"
        metrics = urllib.request.urlopen(url, timeout=5).read().decode()
        assert 'rebalancer_webhook_requests_total{code="503"}' in metrics  # it refused alerts while following
    finally:
        for process, _ in replicas:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=30)
        alertmanager.stop()
        prometheus.stop()


def samples_of(prometheus_url: str, query: str) -> int:
    """How many samples the first series of a range ``query`` has (0 when it has none yet)."""
    url = f"{prometheus_url}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    result = json.loads(urllib.request.urlopen(url, timeout=5).read())["data"]["result"]
    return len(result[0]["values"]) if result else 0


def test_serve_runs_on_start_once_it_leads_and_logs_each_cycle_at_the_default_level(
    cluster: ControlPlane, placed: Placed, kubeconfig: Path, exporter: int, tmp_path: Path
) -> None:
    """No --log-level: serve's default still shows a line per cycle. A Lease another replica still holds
    makes the run-on-start cycle wait for it; it runs as soon as this replica leads."""
    now = time.time()
    LeaseClient(connect(kubeconfig=str(kubeconfig)), "rebalancer", "rebalancer").create(
        LeaseRecord("departed-replica", 3, now, now, 0)
    )
    prometheus = start_prometheus(tmp_path, exporter, free_port())  # no Alertmanager: the schedule only
    port = free_port()
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        f"prometheus: {{url: '{prometheus.url}', window: 10s, step: 1s, rateWindow: 5s, maxDataAge: 1m}}\n"
        "protections: {evictableNamespaces: {exclude: [kube-system, monitoring]}}\n"
        "strategies:\n- {kind: LowNodeUtilization, thresholds: {cpu: 30}, targetThresholds: {cpu: 50}, "
        "schedule: {interval: 1h}}\n"
        "state: {namespace: rebalancer}\n"
        f"service: {{host: 127.0.0.1, port: {port}, metricsPort: {free_port()}, "
        "webhook: {allowUnauthenticated: true}, leaderElection: {leaseDuration: 3s, "
        "renewDeadline: 2s, retryPeriod: 1s}}\n"
    )
    deadline = time.monotonic() + 60  # a usage window's worth of samples before the first cycle
    while samples_of(prometheus.url, 'container_cpu_usage_seconds_total{id="/",node="hot-1"}[1m]') < 12:
        assert time.monotonic() < deadline, "Prometheus scraped too little"
        time.sleep(0.5)
    log_path = tmp_path / "serve.log"
    with log_path.open("w") as log:
        serve = subprocess.Popen(
            [sys.executable, "-m", "rebalancer", "serve", "--policy", str(policy), "--kubeconfig", str(kubeconfig)],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_for(lambda: "schedule cycle:" in log_path.read_text(), 60, "no cycle logged", [log_path])
        time.sleep(1)
    finally:
        serve.send_signal(signal.SIGTERM)
        code = serve.wait(timeout=30)
        prometheus.stop()
    text = log_path.read_text()
    assert code == 0, text
    assert text.index("not the leader yet") < text.index("is now the leader") < text.index("schedule cycle:"), text
    [line] = [line for line in text.splitlines() if "schedule cycle:" in line]  # once: the next is an hour away
    assert " INFO rebalancer.service.runner: schedule cycle: 1 hot node(s), " in line, line
    evicted = len(evictions(cluster))
    assert evicted and f"{evicted} evicted" in line, line
    assert "apscheduler" not in text  # no line per job run (the policy file is checked every 10 s)
