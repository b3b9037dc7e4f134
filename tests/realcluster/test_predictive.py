"""Predictive mode end to end: the real kubernetes client against a real API server (the cluster made through
it by api_made.py), a real Prometheus with 9 days of cAdvisor-shaped history (promtool), the production
predictor, planner and evictor; the evictions read from the server's audit log.

peak-1 is calm at 08:00 (35%) but every afternoon report-0 burns 2.2 cores for three hours, taking the node to
85%: a LowNodeUtilization that classifies by prediction moves report-0 before the peak; one that classifies
by current usage does nothing.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rebalancer.actions.evictor import Outcome
from rebalancer.app import root as app
from rebalancer.app.cli import _parser, main
from rebalancer.app.prediction import HistoryCache, predict_live, read_history
from rebalancer.offline.predict.command import predict_command
from rebalancer.offline.predict.usage import Progress
from rebalancer.planning.plan import NodeClass
from rebalancer.policy import load_policy
from tests.adapters.cadvisor import CadvisorHistory, Container, NodeSpec, PodSpec, constant
from tests.adapters.prom_fixture import PrometheusServer, StartPrometheus
from tests.controlplane import ControlPlane
from tests.kubeapi import builders as b
from tests.realcluster import api_made
from tests.realcluster.shop import live_pods

pytestmark = pytest.mark.prometheus

AT = datetime(2024, 1, 10, 8, tzinfo=UTC).timestamp()
START = datetime(2024, 1, 1, tzinfo=UTC).timestamp()
RS = "shop-7c9f"


def afternoon_peak(t: float) -> float:
    return 2.2 if 13 <= (t - 1) % 86400 // 3600 < 16 else 0.2


PODS = {
    "report-0": ("peak-1", afternoon_peak),
    "api-0": ("peak-1", constant(0.5)),
    "api-1": ("peak-1", constant(0.4)),
    "web-1": ("cold-1", constant(0.1)),
    "web-2": ("cold-2", constant(0.1)),
}
NODES = ("peak-1", "cold-1", "cold-2")
HISTORY = CadvisorHistory(
    nodes=tuple(NodeSpec(n, 0.3) for n in NODES),
    pods=tuple(PodSpec("shop", name, node, (Container("app", rate),)) for name, (node, rate) in PODS.items()),
    start=START,
    end=AT + 300,
    step=150.0,
)


@pytest.fixture(scope="module")
def prometheus(start_prometheus: StartPrometheus) -> PrometheusServer:
    return start_prometheus(HISTORY.series())


def build_cluster(plane: ControlPlane) -> None:
    for name in NODES:
        api_made.add(plane, b.node(name, cpu="4", memory="16Gi"))
    api_made.add(
        plane, b.deployment("shop", "shop", replicas=5), b.replica_set(RS, "shop", deployment="shop", replicas=5)
    )
    for name, (node, _) in PODS.items():
        api_made.add(
            plane,
            b.pod(name, namespace="shop", node=node, owners=[b.owner("ReplicaSet", RS)], labels={"app": "shop"},
                  containers=[b.container(cpu="200m", memory="256Mi")])
        )  # fmt: skip


def write_policy(path: Path, prometheus_url: str, classify_by: str, extra: str = "") -> Path:
    path.write_text(
        f"prometheus: {{url: '{prometheus_url}', maxDataAge: 10m}}\n"
        "strategies:\n"
        "- {kind: LowNodeUtilization, thresholds: {cpu: 30}, targetThresholds: {cpu: 70}, "
        f"classifyBy: {classify_by}}}\n"
        "predictor: {aggregation: max_daily, systemCpuM: 300, minHistoryDays: 3, hotThreshold: 70" + extra + "}\n"
        "state: {namespace: rebalancer}\n"
    )
    return path


def test_a_predicted_strategy_moves_the_peaky_pod_before_the_peak(
    api_cluster: ControlPlane, api_kubeconfig: Path, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    build_cluster(api_cluster)
    connection = app.ClusterConnection(str(api_kubeconfig))

    calm = app.run_once(
        load_policy(write_policy(tmp_path / "now.yaml", prometheus.url, "current")), connection, clock=lambda: AT
    )
    decisions = {d.node: d for d in calm.planned.plan.results[0].node_decisions}
    assert decisions["peak-1"].node_class is NodeClass.NORMAL
    assert decisions["peak-1"].usage_pct == pytest.approx(35, abs=1)  # 0.3 + 0.2 + 0.5 + 0.4 cores (+ pause)
    assert not calm.report.results and live_pods(api_cluster) == set(PODS)

    policy = load_policy(write_policy(tmp_path / "peak.yaml", prometheus.url, "predicted"))
    ahead = app.run_once(policy, connection, clock=lambda: AT)

    plan = ahead.planned.plan
    decisions = {d.node: d for d in plan.results[0].node_decisions}
    # predicted: max_daily of 2200 + 500 + 400 pod peaks, plus systemCpuM 300 -> 3400m of 4000m
    assert decisions["peak-1"].node_class is NodeClass.HOT
    assert decisions["peak-1"].usage_m == pytest.approx(3400, abs=5)
    assert [e.name for e in plan.evictions] == ["report-0"]
    assert "predicted peak usage" in plan.evictions[0].reason
    assert {r.eviction.name: r.outcome for r in ahead.report.results} == {"report-0": Outcome.EVICTED}
    assert live_pods(api_cluster) == set(PODS) - {"report-0"}
    assert [e.name for e in api_made.evictions(api_cluster)] == ["report-0"]


def test_a_failed_history_read_evicts_nothing_and_the_plan_says_why(
    api_cluster: ControlPlane, api_kubeconfig: Path, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    build_cluster(api_cluster)
    broken = ", history: {podQuery: 'sum by (namespace, pod) (rate(nonsense[{rate_window}]'}"  # unbalanced
    policy = load_policy(write_policy(tmp_path / "broken.yaml", prometheus.url, "predicted", broken))

    outcome = app.run_once(policy, app.ClusterConnection(str(api_kubeconfig)), clock=lambda: AT)

    assert not outcome.planned.plan.evictions and not outcome.report.results
    notes = " ".join(outcome.planned.plan.results[0].notes)
    assert "classifyBy predicted: predictor history: MetricsUnavailable" in notes and "bad_data" in notes
    assert live_pods(api_cluster) == set(PODS)


def test_the_history_cache_reads_prometheus_once_a_day(
    api_cluster: ControlPlane, api_kubeconfig: Path, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    build_cluster(api_cluster)
    policy = load_policy(write_policy(tmp_path / "peak.yaml", prometheus.url, "predicted"))
    facts = app.plan_live(
        app.connect_runtime(policy, app.ClusterConnection(str(api_kubeconfig)), clock=lambda: AT)
    ).facts
    assert facts is not None
    cache = HistoryCache()
    first = read_history(policy, facts, AT, cache=cache)
    assert read_history(policy, facts, AT + 3600, cache=cache) is first  # same day: no new read
    next_day = read_history(policy, facts, AT + 86400, cache=cache)
    assert next_day is not first and next_day.days[-1].day != first.days[-1].day


def test_predict_on_the_live_cluster_prints_each_node_and_the_predicted_hot_ones(
    api_cluster: ControlPlane,
    api_kubeconfig: Path,
    prometheus: PrometheusServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    build_cluster(api_cluster)
    policy = write_policy(tmp_path / "p.yaml", prometheus.url, "current")
    seen: list[int] = []

    def live(policy: object, args: argparse.Namespace, progress: Progress | None) -> object:
        assert progress is not None  # --progress always
        return predict_live(
            policy,  # type: ignore[arg-type]
            args.kubeconfig,
            args.context,
            lambda done, total, what: (seen.append(done), progress(done, total, what)),
            clock=lambda: AT,
        )

    args = [
        "predict", "--policy", str(policy), "--kubeconfig", str(api_kubeconfig), "--output", "json",
        "--progress", "always",
    ]  # fmt: skip
    code = predict_command(_parser().parse_args(args), live)  # type: ignore[arg-type]

    captured = capsys.readouterr()
    assert code == 0, captured.err
    record = json.loads(captured.out)
    assert record["hotNodes"] == ["peak-1"]
    nodes = {n["node"]: n for n in record["nodes"]}
    assert nodes["peak-1"]["utilizationPct"] == pytest.approx(85, abs=0.2)
    assert nodes["cold-1"]["sources"] == {"history": 1}
    assert record["currentUtilizationPct"]["peak-1"] == pytest.approx(35, abs=1)
    report = next(p for p in record["pods"] if p["name"] == "report-0")
    assert report["source"] == "history" and report["cpuM"] == pytest.approx(2200, abs=2)
    assert seen == list(range(1, 17))  # 8 daily peaks and 8 daily profiles, one batch
    assert "history" in captured.err and "16/16" in captured.err
    # the peak comes when report-0 peaks, and report-0 makes most of it
    peak = nodes["peak-1"]["peak"]
    assert nodes["peak-1"]["basis"] == "coincident" and peak["at"] == "13:00-14:00"
    assert [(p["name"], round(p["cpuM"])) for p in peak["pods"]] == [("report-0", 2200), ("api-0", 500), ("api-1", 400)]
    assert nodes["cold-1"]["peak"]["pods"][0]["name"] == "web-1"

    as_table = ["table" if a == "json" else a for a in args]
    code = predict_command(_parser().parse_args(as_table), live)  # type: ignore[arg-type]
    table = capsys.readouterr().out
    assert code == 0
    row = next(line.split() for line in table.splitlines() if line.startswith("peak-1 "))
    assert row[1] == "85.0" and "13:00-14:00" in row and "HOT" in row
    assert "peak-1 13:00-14:00: shop/report-0 2.200, shop/api-0 0.500, shop/api-1 0.400" in table


def test_predict_with_prometheus_down_exits_3_naming_the_history_query(
    api_cluster: ControlPlane, api_kubeconfig: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Through the command line's own wiring (cli -> app_prediction): the cluster is listed, then the first
    history query fails and nothing is printed as a prediction."""
    build_cluster(api_cluster)
    policy = write_policy(tmp_path / "p.yaml", "http://127.0.0.1:9", "current")  # discard port: refused

    code = main(["predict", "--policy", str(policy), "--kubeconfig", str(api_kubeconfig), "--progress", "never"])

    captured = capsys.readouterr()
    assert code == 3 and captured.out == ""
    assert "MetricsUnavailable" in captured.err and "query history day" in captured.err
    assert "cannot reach Prometheus at http://127.0.0.1:9" in captured.err


def test_predict_shows_the_other_resources_now_and_keeps_cpu_when_memory_is_unknown(
    api_cluster: ControlPlane,
    api_kubeconfig: Path,
    prometheus: PrometheusServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # this Prometheus holds CPU history only: the memory working set answers no series
    build_cluster(api_cluster)
    policy = write_policy(tmp_path / "p.yaml", prometheus.url, "current")
    policy.write_text(
        policy.read_text().replace(
            "thresholds: {cpu: 30}, targetThresholds: {cpu: 70}",
            "thresholds: {cpu: 30, memory: 40, pods: 40}, targetThresholds: {cpu: 70, memory: 80, pods: 80}",
        )
    )

    def live(policy: object, args: argparse.Namespace, progress: Progress | None) -> object:
        return predict_live(policy, args.kubeconfig, args.context, progress, clock=lambda: AT)  # type: ignore[arg-type]

    args = ["predict", "--policy", str(policy), "--kubeconfig", str(api_kubeconfig), "--output", "json"]
    code = predict_command(_parser().parse_args(args), live)  # type: ignore[arg-type]

    captured = capsys.readouterr()
    assert code == 0, captured.err
    record = json.loads(captured.out)
    assert record["currentUtilizationPct"]["peak-1"] == pytest.approx(35, abs=1)
    on_peak = sum(1 for node, _ in PODS.values() if node == "peak-1")
    assert record["currentPodsUtilizationPct"]["peak-1"] == pytest.approx(100 * on_peak / 110)
    assert "currentMemoryUtilizationPct" not in record  # unknown, never shown as 0
    assert "current memory unknown: no node source answered it for any node" in captured.err

    code = predict_command(_parser().parse_args([*args[:-1], "table"]), live)  # type: ignore[arg-type]
    table = capsys.readouterr().out
    header = next(line.split() for line in table.splitlines() if line.startswith("node "))
    assert header[:6] == ["node", "pred", "%", "current", "%", "current"] and "pods" in header
    assert "the other resources' columns: their use now, not predicted" in table
