"""The shipped default policy in a closed loop on a pool with no cold node: two hot nodes beside warm ones
with room under the receive threshold. The real parts and the judge are the closed loop's
(:mod:`tests.realcluster.closed_loop`, :mod:`tests.realcluster.test_closed_loop`).

Five hollow nodes of 1 CPU. hot-1 and hot-2 each run the five pods of one Deployment (``busy-1``, ``busy-2``:
155m of real CPU each, 83.5 % of the node with its system daemons and pause containers; one eviction brings it
to 67.8 %, under the 70 % target, two to 52.1 %, under the 60 % receive threshold it is relieved down to, but
the five pods are one Deployment with a budget of one disruption, and in the next runs the node is no longer
hot);
warm-1..3 each run the two pods of their own Deployment (``steady-1``..3: 110m each, 27.4 %: over the 20 % cold
threshold, under the receive threshold with room for two busy pods). The busy pods request 150m, the steady
ones 100m, so the scheduler puts a replacement on a warm node, and the landing guard's taint keeps it off the
hot node. Without a receive threshold the pool has no cold node and nothing moves; with it, ``run --once``
runs three times :data:`RUNS_APART` seconds apart and is judged on the truth as the closed loop is: at most
the fewest evictions that bring a hot node under the receive threshold plus one, nothing back on the node
its pod left, every budget held, the hot nodes under target and the warm ones under the receive threshold
at the end.
"""

from __future__ import annotations

import time
from pathlib import Path

from rebalancer.actions.evictor import DryRun, Outcome
from rebalancer.app import root as app
from rebalancer.policy import load_policy
from strategies.low_node_utilization import LowNodeUtilizationSettings
from tests.controlplane import ControlPlane
from tests.realcluster.closed_loop import NAMESPACE, Judge, Workload, build, lowest_available, start_prometheus
from tests.realcluster.live_usage import LiveUsage
from tests.realcluster.test_closed_loop import HISTORY, read, shipped_policy

HOT = ("hot-1", "hot-2")
WARM = ("warm-1", "warm-2", "warm-3")
NODES = (*HOT, *WARM)
WORKLOADS: tuple[Workload, ...] = (
    ("busy-1", HOT[:1], 5, 155, "150m"),
    ("busy-2", HOT[1:], 5, 155, "150m"),
    *((f"steady-{i}", (warm,), 2, 110, "100m") for i, warm in enumerate(WARM, 1)),
)
RUNS = 3
RUNS_APART = 45.0


def test_the_shipped_default_relieves_hot_nodes_onto_warm_ones(cluster: ControlPlane, tmp_path: Path) -> None:
    started = time.monotonic()
    assert cluster.pki is not None
    cluster.namespace("rebalancer")
    build(cluster, NODES, WORKLOADS)
    kubeconfig = cluster.kubeconfig(tmp_path / "kubeconfig", cluster.pki.admin_token)
    began = float(int(time.time()))
    runs: list[str] = []
    with LiveUsage(cluster.admin, NAMESPACE, NODES, history_start=began - HISTORY, now=began) as usage:
        prometheus = start_prometheus(tmp_path, usage)
        try:
            policy = load_policy(shipped_policy(tmp_path / "policy.yaml", prometheus.url))
            strategy = policy.strategies[0]
            assert isinstance(strategy, LowNodeUtilizationSettings) and strategy.receive_thresholds is not None
            receive = strategy.receive_thresholds.cpu
            judge = Judge(usage, strategy.thresholds.cpu, strategy.target_thresholds.cpu, receive)
            assert judge.hot == set(HOT) and {judge.needed(n) for n in HOT} == {2}
            assert all(judge.cold < usage.percent(n, began) < receive for n in WARM), "no cold node, room under receive"
            for index in range(RUNS):
                time.sleep(max(0.0, began + index * RUNS_APART - time.time()))
                outcome = app.run_once(policy, app.ClusterConnection(str(kubeconfig)), DryRun.OFF, clock=time.time)
                assert outcome.report.aborted is None, outcome.report.aborted
                evicted = [r.eviction for r in outcome.report.results if r.outcome is Outcome.EVICTED]
                runs.append(
                    f"run --once {index + 1}: read {read(outcome)}; evicted "
                    + (", ".join(f"{e.name} ({e.node} -> {e.landing})" for e in evicted) or "-")
                )
            time.sleep(5)  # the last run's replacements start
        finally:
            prometheus.stop()
        now = time.time()
        assert not usage.errors, usage.errors
    events = [e for e in cluster.audit("test-admin") if e.resource == "pods/eviction"]
    moves = judge.moves(events)
    report = "\n".join([*runs, judge.summary(moves, now), f"took {time.monotonic() - started:.0f} s"])
    print(report)

    assert moves, "nothing was evicted\n" + report
    problems = judge.problems(moves, now)
    assert {e.code for e in events} <= {201, 429}, report
    for workload, _, replicas, _, _ in WORKLOADS:
        if (lowest := lowest_available(usage, workload)) < replicas - 1:
            problems.append(f"{workload}: only {lowest} of {replicas} running at once (budget maxUnavailable 1)")
    for node in WARM:
        if (percent := usage.percent(node, now)) >= receive:
            problems.append(f"{node} at {percent:.0f} % real CPU at the end, not under the receive threshold")
    assert not problems, "\n".join(["", *problems, "", report])
