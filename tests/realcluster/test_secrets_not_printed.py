"""No secret of the configuration is ever printed: a distinct one is planted in every place a policy can hold or name
one (the user and password of prometheus.url, the Prometheus bearer token file, the webhook's token file), then
`check-config`, `plan`, `run --dry-run`, `report`, `predict` (against a real API server holding shop.py's cluster,
with nothing listening where Prometheus should be, so that the libraries' errors, which embed the URL, are printed)
and `serve` (its log at DEBUG, the webhook's answers and /metrics) run, and none of them shows any."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from rebalancer.app.cli import main
from tests.adapters.prom_fixture import free_port
from tests.controlplane import ControlPlane
from tests.realcluster import shop
from tests.shared_data import WEBHOOK_SAMPLE

ROOT = Path(__file__).resolve().parents[2]
URL_USER, URL_PASSWORD = "urlUserQx7", "urlPasswordKz9"
PROMETHEUS_TOKEN, WEBHOOK_TOKEN = "promBearerTokenWv3", "webhookTokenJm5"
SECRETS = (URL_USER, URL_PASSWORD, PROMETHEUS_TOKEN, WEBHOOK_TOKEN)


def write_policy(tmp_path: Path, port: int, metrics_port: int) -> Path:
    (tmp_path / "prometheus-token").write_text(PROMETHEUS_TOKEN + "\n")
    (tmp_path / "webhook-token").write_text(WEBHOOK_TOKEN + "\n")
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        f"prometheus: {{url: 'http://{URL_USER}:{URL_PASSWORD}@127.0.0.1:{free_port()}/prometheus', "
        f"bearerTokenFile: '{tmp_path / 'prometheus-token'}'}}\n"
        "strategies:\n- {kind: LowNodeUtilization, thresholds: {cpu: 20}, targetThresholds: {cpu: 70}}\n"
        "state: {namespace: rebalancer}\n"
        f"service: {{host: 127.0.0.1, port: {port}, metricsPort: {metrics_port}, leaderElection: {{enabled: false}}, "
        f"webhook: {{tokenFile: '{tmp_path / 'webhook-token'}', alertNodeCooldown: 1s}}}}\n"
    )
    return policy


def assert_no_secret(where: str, text: str) -> None:
    shown = [secret for secret in SECRETS if secret in text]
    assert not shown, f"{where} shows {shown}:\n{text}"


def test_no_command_prints_a_secret(
    api_cluster: ControlPlane,
    api_kubeconfig: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    shop.build(api_cluster)
    policy = write_policy(tmp_path, free_port(), free_port())
    caplog.set_level(logging.DEBUG)
    cluster = ("--policy", str(policy), "--kubeconfig", str(api_kubeconfig))
    runs = [
        (["check-config", str(policy)], 0),
        (["plan", *cluster], 3),
        (["plan", *cluster, "-o", "yaml"], 3),
        (["run", "--dry-run", *cluster, "-o", "json"], 3),
        (["report", *cluster], 3),
        (["predict", *cluster, "--progress", "never"], 3),
        (["check-config", "--for", "serve", "-o", "json", str(policy)], 0),
    ]
    for args, expected in runs:
        code = main(args)
        out, err = capsys.readouterr()
        assert code == expected, (args, out, err)
        assert_no_secret(f"rebalancer {' '.join(args)}", out + err)
        if args[0] != "check-config":
            assert "cannot reach Prometheus at http://***@127.0.0.1:" in err  # the error is there, redacted
    logged = "\n".join(logging.Formatter("%(message)s").format(r) for r in caplog.records)
    assert_no_secret("the log", logged)
    assert "usage source failed" in logged


def post(url: str, token: str) -> int:
    request = urllib.request.Request(
        url, WEBHOOK_SAMPLE.read_bytes(), {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_serve_logs_and_exports_no_secret(api_cluster: ControlPlane, api_kubeconfig: Path, tmp_path: Path) -> None:
    shop.build(api_cluster)
    port, metrics_port = free_port(), free_port()
    policy = write_policy(tmp_path, port, metrics_port)
    log = tmp_path / "serve.log"
    command = [sys.executable, "-m", "rebalancer", "serve", "--log-level", "DEBUG", *("--policy", str(policy)),
               "--kubeconfig", str(api_kubeconfig)]  # fmt: skip
    with log.open("w") as out:
        process = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while "usage source failed" not in log.read_text():  # the run-on-start cycle
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        webhook = f"http://127.0.0.1:{port}/webhook/alertmanager"
        assert post(webhook, "wrong") == 401
        assert post(webhook, WEBHOOK_TOKEN) == 202  # an alert cycle, which fails on Prometheus too
        while log.read_text().count("usage source failed") < 2:
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as answer:
            metrics = answer.read().decode()
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=30)
    text = log.read_text()
    assert code == 0, text
    assert_no_secret("serve's log", text)
    assert "http://***@127.0.0.1:" in text  # the errors are logged, redacted
    assert 'rebalancer_cycle_failures_total{reason="plan_blocked"}' in metrics
    assert_no_secret("/metrics", metrics)
