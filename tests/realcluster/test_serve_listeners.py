"""`rebalancer serve`'s two listeners and its webhook authentication, as its own process against a real API server
holding shop.py's cluster: without a token it refuses to start unless told it may run unauthenticated; then it warns
and says so on /metrics, which is served, with the probes, on a port apart from the webhook's."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from rebalancer.domain.errors import ConfigError
from rebalancer.policy import parse_policy
from tests.adapters.prom_fixture import free_port
from tests.controlplane import ControlPlane
from tests.realcluster import shop
from tests.shared_data import WEBHOOK_SAMPLE

ROOT = Path(__file__).resolve().parents[2]
STRATEGY = "strategies:\n- {kind: LowNodeUtilization, thresholds: {cpu: 20}, targetThresholds: {cpu: 70}}\n"


def write_policy(path: Path, service: str) -> Path:
    path.write_text(
        "prometheus: {url: 'http://127.0.0.1:9'}\n" + STRATEGY + "state: {namespace: rebalancer}\n"
        f"service: {{runOnStart: false, leaderElection: {{enabled: false}}, {service}}}\n"
    )
    return path


def start_serve(policy: Path, api_kubeconfig: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "rebalancer", "serve", "--policy", str(policy), "--kubeconfig", str(api_kubeconfig)],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_serve_refuses_to_start_without_a_token(
    api_cluster: ControlPlane, api_kubeconfig: Path, tmp_path: Path
) -> None:
    policy = write_policy(tmp_path / "policy.yaml", f"host: 127.0.0.1, port: {free_port()}, metricsPort: {free_port()}")
    log = tmp_path / "serve.log"
    process = start_serve(policy, api_kubeconfig, log)
    assert process.wait(timeout=60) == 2, log.read_text()  # the exit code of an invalid configuration
    text = log.read_text()
    assert f"{policy}: service.webhook.tokenFile: not set: the webhook would take alerts from anyone" in text
    assert "allowUnauthenticated: true" in text
    assert "Traceback" not in text


def test_serve_runs_unauthenticated_only_when_told_and_says_so(
    api_cluster: ControlPlane, api_kubeconfig: Path, tmp_path: Path
) -> None:
    shop.build(api_cluster)
    port, metrics_port = free_port(), free_port()
    policy = write_policy(
        tmp_path / "policy.yaml",
        f"host: 127.0.0.1, port: {port}, metricsPort: {metrics_port}, webhook: {{allowUnauthenticated: true}}, "
        "reloadInterval: 1s",
    )
    log = tmp_path / "serve.log"
    process = start_serve(policy, api_kubeconfig, log)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "serve did not answer /healthz within 60 s:\n" + log.read_text()
            try:
                if get(f"http://127.0.0.1:{metrics_port}/healthz")[0] == 200:
                    break
            except OSError:
                time.sleep(0.2)
        code, metrics = get(f"http://127.0.0.1:{metrics_port}/metrics")
        assert code == 200
        assert "rebalancer_webhook_unauthenticated 1.0" in metrics
        try:  # the probes answer once the webhook listens
            webhook = get(f"http://127.0.0.1:{port}/metrics")
        except OSError as exc:
            raise AssertionError(f"the webhook's port: {exc}\n" + log.read_text()) from exc
        assert webhook[0] == 404  # the webhook's port serves the webhook only
        sample = WEBHOOK_SAMPLE.read_bytes()
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/webhook/alertmanager", sample, {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=5) as answer:
            assert answer.status == 202  # no token asked for
        time.sleep(3.5)  # three reload checks of an unchanged file: not a line
        assert "reload" not in log.read_text().lower()
        policy.write_text(policy.read_text() + "# changed\n")
        applied = 'rebalancer_policy_reload_total{result="applied"} 1.0'  # counted after the reload's last line
        while applied not in get(f"http://127.0.0.1:{metrics_port}/metrics")[1]:
            assert time.monotonic() < deadline + 30, log.read_text()
            time.sleep(0.1)
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=30)
    text = log.read_text()
    assert code == 0, text
    assert len([line for line in text.splitlines() if "reload" in line.lower()]) == 1  # the change only
    assert "apscheduler" not in text
    at_start, at_reload = [line for line in text.splitlines() if "WITHOUT a token" in line]  # said again on reload
    warning = f"{policy}: service.webhook.allowUnauthenticated: the webhook accepts requests WITHOUT a token"
    assert f" WARNING rebalancer.app.serve: {warning}" in at_start
    assert f" WARNING rebalancer.service.runner: {warning}" in at_reload
    assert f"127.0.0.1:{port}" in at_start
    assert (
        f"serving the webhook on 127.0.0.1:{port}; /metrics, /healthz and /readyz on 127.0.0.1:{metrics_port}" in text
    )


def test_the_webhook_and_status_ports_must_differ() -> None:
    with pytest.raises(ConfigError, match=re.escape("service.metricsPort: must differ from port (8080)")):
        parse_policy(STRATEGY + "service: {port: 8080, metricsPort: 8080}\n")
    settings = parse_policy(STRATEGY).service
    assert (settings.host, settings.port, settings.metrics_host, settings.metrics_port) == ("0.0.0.0", 8080, None, 9102)
