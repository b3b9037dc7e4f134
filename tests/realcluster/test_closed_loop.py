"""The shipped default policy in a closed loop on real parts: kube-apiserver, the controller manager (its
ReplicaSet and disruption controllers), kube-scheduler, six kubemark hollow nodes, a real Prometheus
scraping the test's own cAdvisor-shaped exporter, whose usage follows each pod to its replacement's node
(:mod:`tests.realcluster.live_usage`; the cluster: :mod:`tests.realcluster.closed_loop`).

The policy is config/low-node-utilization.yaml as a user runs it, the commented default policy the docs call
the shipped default; only ``prometheus.url`` and ``state.namespace`` are set. ``run --once`` runs three times
(the app function the CLI calls, on the real clock) :data:`RUNS_APART` seconds apart, then ``rebalancer
serve`` (its own process, as the CLI starts it) for :data:`SERVE_CYCLES` cycles. For serve the policy also
gets its listener addresses and a webhook token file (serve refuses to start without one), and the
strategy's ``schedule`` is every minute instead of the default 5 minutes: five cycles on the default would
take 25 minutes. They run while the receivers' readings still catch up with the last landings (a
replacement's own usage reads unknown for its first 6 minutes). The Prometheus history of the half hour
before the start is backfilled at the initial placement, so the 10-minute usage window is full from the
first cycle.

Judged on the truth (what runs where, at the workloads' loads): at most the fewest evictions that bring a
hot node under the level it is relieved to (the receive threshold) plus one; no eviction from a node at or under target that received load in the last
10 minutes or was never hot; no replacement back on the node its pod left; every budget held
(the API server granted or refused with 429, never more than one pod of a Deployment down at once); and
the hot nodes end under target, the cold nodes having room under the cold threshold.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from rebalancer.actions.evictor import DryRun, Outcome
from rebalancer.app import root as app
from rebalancer.policy import load_policy
from strategies.low_node_utilization import LowNodeUtilizationSettings
from tests.adapters.prom_fixture import free_port
from tests.controlplane import ControlPlane
from tests.realcluster.closed_loop import (
    HOT,
    NAMESPACE,
    NODES,
    REPLICAS,
    Judge,
    build,
    lowest_available,
    start_prometheus,
)
from tests.realcluster.live_usage import LiveUsage

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "config" / "low-node-utilization.yaml"
HISTORY = 1800.0
RUNS_APART = 60.0
SERVE_INTERVAL = "1m"
SERVE_CYCLES = 5
CYCLE_LINE = re.compile(r"schedule cycle: .*")


def shipped_policy(path: Path, prometheus_url: str, **extra: Any) -> Path:
    policy: dict[str, Any] = yaml.safe_load(SHIPPED.read_text())
    policy["prometheus"]["url"] = prometheus_url
    policy["state"] = {"namespace": "rebalancer"}
    policy.update(extra)
    path.write_text(yaml.safe_dump(policy, sort_keys=False))
    return path


def serve_policy(workdir: Path, prometheus_url: str) -> Path:
    """The same policy for serve: its listeners on free ports of 127.0.0.1, a webhook token, a 1-minute schedule."""
    path = shipped_policy(workdir / "serve.yaml", prometheus_url)
    policy: dict[str, Any] = yaml.safe_load(path.read_text())
    (workdir / "token").write_text("closed-loop-token")
    policy["strategies"][0]["schedule"] = {"interval": SERVE_INTERVAL}
    policy["service"] = {"host": "127.0.0.1", "port": free_port(), "metricsPort": free_port(),
                         "webhook": {"tokenFile": str(workdir / "token")}}  # fmt: skip
    path.write_text(yaml.safe_dump(policy, sort_keys=False))
    return path


def serve(policy: Path, kubeconfig: Path, log_path: Path) -> list[str]:
    """``rebalancer serve`` until it logged SERVE_CYCLES cycles; its cycle lines."""
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "rebalancer", "serve", "--policy", str(policy), "--kubeconfig", str(kubeconfig)],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60 * SERVE_CYCLES + 60
        while len(lines := CYCLE_LINE.findall(log_path.read_text())) < SERVE_CYCLES:
            assert process.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, "serve ran too few cycles:\n" + log_path.read_text()
            time.sleep(0.5)
        time.sleep(2)  # the last cycle's replacements start
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=30)
    assert code == 0, log_path.read_text()
    return lines


def read(outcome: app.RunOutcome) -> str:
    """What the cycle read: each node's usage and class (`hot-1 91% hot`)."""
    decisions = outcome.planned.plan.results[0].node_decisions
    usage = {d.node: "?" if d.usage_pct is None else f"{d.usage_pct:.0f}%" for d in decisions}
    return ", ".join(f"{d.node} {usage[d.node]} {d.node_class.value}" for d in decisions)


def test_the_shipped_default_relieves_hot_nodes_without_overshoot_or_bounce(
    cluster: ControlPlane, tmp_path: Path
) -> None:
    started = time.monotonic()
    assert cluster.pki is not None
    cluster.namespace("rebalancer")
    build(cluster)
    kubeconfig = cluster.kubeconfig(tmp_path / "kubeconfig", cluster.pki.admin_token)
    began = float(int(time.time()))
    runs: list[str] = []
    with LiveUsage(cluster.admin, NAMESPACE, NODES, history_start=began - HISTORY, now=began) as usage:
        prometheus = start_prometheus(tmp_path, usage)
        try:
            policy = load_policy(shipped_policy(tmp_path / "policy.yaml", prometheus.url))
            strategy = policy.strategies[0]
            assert isinstance(strategy, LowNodeUtilizationSettings)
            assert strategy.thresholds.cpu is not None and strategy.target_thresholds.cpu is not None
            receive = strategy.receive_thresholds.cpu if strategy.receive_thresholds is not None else None
            judge = Judge(usage, strategy.thresholds.cpu, strategy.target_thresholds.cpu, receive)
            assert judge.hot == set(HOT) and {judge.needed(n) for n in HOT} == {2}
            assert all(usage.percent(n, began) < judge.cold for n in set(NODES) - set(HOT))

            for index in range(3):
                time.sleep(max(0.0, began + index * RUNS_APART - time.time()))
                outcome = app.run_once(policy, app.ClusterConnection(str(kubeconfig)), DryRun.OFF, clock=time.time)
                assert outcome.report.aborted is None, outcome.report.aborted
                evicted = [r.eviction for r in outcome.report.results if r.outcome is Outcome.EVICTED]
                runs.append(
                    f"run --once {index + 1}: read {read(outcome)}; evicted "
                    + (", ".join(f"{e.name} ({e.node})" for e in evicted) or "-")
                )
            cycles = serve(serve_policy(tmp_path, prometheus.url), kubeconfig, tmp_path / "serve.log")
        finally:
            prometheus.stop()
        now = time.time()
        assert not usage.errors, usage.errors
    events = [e for e in cluster.audit("test-admin") if e.resource == "pods/eviction"]
    moves = judge.moves(events)
    took = time.monotonic() - started
    report = "\n".join([*runs, *(f"serve: {c}" for c in cycles), judge.summary(moves, now), f"took {took:.0f} s"])
    print(report)

    assert moves, "nothing was evicted: the scenario does not exercise the loop\n" + report
    problems = judge.problems(moves, now)
    assert {e.code for e in events} <= {201, 429}, report
    for workload, replicas in REPLICAS.items():
        if (lowest := lowest_available(usage, workload)) < replicas - 1:
            problems.append(f"{workload}: only {lowest} of {replicas} running at once (budget maxUnavailable 1)")
    assert not problems, "\n".join(["", *problems, "", report])
