"""`rebalancer serve` as its own process: a webhook token file that cannot authenticate anything is said at
start, not at the first alert; a reload that start would refuse is refused, logged and counted, and a change
that needs a restart is logged and exported, while the process keeps serving on what it started with."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.adapters.prom_fixture import free_port
from tests.controlplane import ControlPlane
from tests.realcluster import shop

ROOT = Path(__file__).resolve().parents[2]
STRATEGY = "strategies:\n- {kind: LowNodeUtilization, thresholds: {cpu: 20}, targetThresholds: {cpu: 70}}\n"


def policy_text(service: str) -> str:
    return (
        "prometheus: {url: 'http://127.0.0.1:9'}\n" + STRATEGY + "state: {namespace: rebalancer}\n"
        f"service: {{runOnStart: false, leaderElection: {{enabled: false}}, reloadInterval: 1s, {service}}}\n"
    )


def wait_for(log: Path, text: str, process: subprocess.Popen[bytes], count: int = 1) -> None:
    deadline = time.monotonic() + 60
    while log.read_text().count(text) < count:
        assert process.poll() is None and time.monotonic() < deadline, f"no {text!r} in:\n{log.read_text()}"
        time.sleep(0.1)


def metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        return str(answer.read().decode())


def wait_exported(port: int, samples: list[str], process: subprocess.Popen[bytes]) -> None:
    """Until /metrics shows every one of ``samples``: a reload is counted, then its gauges set, after its log
    lines."""
    deadline = time.monotonic() + 60
    while missing := [sample for sample in samples if sample not in (exported := metrics(port))]:
        assert process.poll() is None and time.monotonic() < deadline, f"no {missing} in:\n{exported}"
        time.sleep(0.1)


def test_serve_says_at_start_and_refuses_on_reload(
    api_cluster: ControlPlane, api_kubeconfig: Path, tmp_path: Path
) -> None:
    shop.build(api_cluster)
    port, metrics_port, token = free_port(), free_port(), tmp_path / "missing-token"
    listen = f"host: 127.0.0.1, port: {port}, metricsPort: {metrics_port}"
    policy = tmp_path / "policy.yaml"
    policy.write_text(policy_text(f"{listen}, webhook: {{tokenFile: '{token}'}}"))
    log = tmp_path / "serve.log"
    command = [
        sys.executable,
        "-m",
        "rebalancer",
        "serve",
        "--policy",
        str(policy),
        "--kubeconfig",
        str(api_kubeconfig),
    ]
    with log.open("w") as out:
        process = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(log, "serving the webhook on", process)
        start = log.read_text()
        assert (
            f"WARNING rebalancer.app.serve: {policy}: service.webhook.tokenFile: cannot read the webhook token "
            f"file {token}: No such file or directory: every webhook request is refused until it holds the token"
        ) in start
        assert start.index("cannot read the webhook token file") < start.index("serving the webhook on")
        policy.write_text(policy_text(listen))  # no token at all: the next start would exit 2
        wait_for(log, "policy reload refused", process)
        assert f"{policy}: service.webhook.tokenFile: not set: the webhook would take alerts" in log.read_text()
        wait_exported(
            metrics_port,
            ['rebalancer_policy_reload_total{result="refused"} 1.0', "rebalancer_policy_valid 0.0"],
            process,
        )
        moved = policy_text(f"host: 127.0.0.1, port: {free_port()}, metricsPort: {metrics_port}, "
                            "webhook: {allowUnauthenticated: true}")  # fmt: skip
        policy.write_text(moved)
        wait_for(log, "need a restart", process)
        applied = 'rebalancer_policy_reload_total{result="applied"} 1.0'
        restart = ["rebalancer_policy_restart_required 1.0", "rebalancer_policy_valid 1.0"]
        wait_exported(metrics_port, [applied, *restart], process)  # still served where it started
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=30)
    text = log.read_text()
    assert code == 0, text
    [line] = [line for line in text.splitlines() if "need a restart" in line]
    assert f"service.port ({port} -> " in line
    assert "service.webhook.tokenFile" in line and "service.webhook.allowUnauthenticated (False -> True)" in line
