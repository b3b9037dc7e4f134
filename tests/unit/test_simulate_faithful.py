"""The simulated cluster is physically possible: a node's pods share its cores (throttled beyond them, the
rest counted as unmet demand), every pod fits a node, implausible clusters are flagged; the hot minutes no
placement fixes are counted; the price of the evictions is reported, in `simulate` and in `report`."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest

from rebalancer.app.cli import main
from rebalancer.domain.efficiency_records import COOLED, EvictedPod, Relief, Sighting
from rebalancer.domain.errors import ConfigError
from rebalancer.domain.model import Node, WorkloadRef
from rebalancer.offline.simulate.cluster import NAMESPACE, Cluster, Workload, build_cluster, make_pod
from rebalancer.offline.simulate.config import GI, SimConfig
from rebalancer.offline.simulate.cpu_share import share_cpu
from rebalancer.offline.simulate.engine import hot_again, reading_policy, simulate
from rebalancer.offline.simulate.readings import (
    NodeSamples,
    daily_table,
    node_usage,
    profile_table,
    refresh_day,
    usage_report,
)
from rebalancer.offline.simulate.result import VariantResult
from rebalancer.offline.simulate.shapes import SYNTHETIC_START, Shapes, bitbrains_shapes
from rebalancer.offline.simulate.variants import variant_named
from rebalancer.offline.simulate.world import Move, World
from rebalancer.records import EfficiencyState, compute_rates
from rebalancer.records.render import report_record, report_table
from tests.shared_data import TRACE_DIR
from tests.unit.test_simulate import policy

SYSTEM = SimConfig().system_cpu_m


def test_pods_beyond_a_node_share_it_by_request_and_what_one_leaves_goes_to_the_others() -> None:
    demand = np.array([500.0, 3000.0, 3000.0])
    assert share_cpu(demand, np.array([1000.0, 1000.0, 1000.0]), 8000) == pytest.approx(demand)  # all fit
    assert share_cpu(demand, np.array([1000.0, 1000.0, 1000.0]), 4000) == pytest.approx([500, 1750, 1750])
    assert share_cpu(demand, np.array([1000.0, 1000.0, 2000.0]), 4000) == pytest.approx([500, 3500 / 3, 7000 / 3])
    # a pod whose demand is under its share keeps it, even a small one with a large request
    assert share_cpu(np.array([100.0, 5000.0]), np.array([4000.0, 10.0]), 4000) == pytest.approx([100, 3900])


def _cluster(demands: tuple[float, ...], on: tuple[str, ...], nodes: int = 2) -> Cluster:
    """One-pod Deployments of constant demand (requests 1000m) on nodes of 4000m; one measured day."""
    config = SimConfig(nodes=nodes, pods_per_node=2, days=1, history_days=0, budgets=False)
    names = [f"n{i}" for i in range(nodes)]
    node_list = tuple(Node(n, {"kubernetes.io/hostname": n}, 4000, 16 * GI, 110) for n in names)
    workloads = tuple(
        Workload(WorkloadRef("Deployment", NAMESPACE, f"w{i}"), 1, 1000, GI, (i,)) for i in range(len(demands))
    )
    initial = tuple(make_pod(w, f"{w.ref.name}-0", on[i], 0.0) for i, w in enumerate(workloads))
    usage = np.repeat(np.array(demands, dtype=np.float32)[:, None], config.steps_per_day, axis=1)
    return Cluster(config, 0.0, node_list, workloads, tuple(range(len(demands))), usage, initial, "constant")


def test_a_node_asked_beyond_its_cores_is_read_at_its_cores_and_the_rest_is_unmet() -> None:
    cluster = _cluster((3000, 3000, 500), ("n0", "n0", "n1"))
    world = World(replace(cluster, served=cluster.usage))  # unthrottled until a step is served
    served = world.serve(0)
    assert served.unmet == pytest.approx([2000, 0])
    assert node_usage(world, 0) == pytest.approx([4000 + SYSTEM, 500 + SYSTEM])
    samples = NodeSamples(2, 1)
    samples.add(node_usage(world, 0))
    report = usage_report("window", world, 0, samples, 0.95)
    assert sorted(report.pod_cpu_m.values()) == [500, 2000, 2000]  # cAdvisor reads the throttled usage
    assert report.node_cpu_m == {"n0": 4000 + SYSTEM, "n1": 500 + SYSTEM}
    assert node_usage(World(cluster), 5) == pytest.approx([4000 + SYSTEM, 500 + SYSTEM])  # the start's too


def test_the_windowed_reading_is_a_rate_over_the_rate_window_as_the_default_queries_read_it() -> None:
    """Each minute's sample is the mean over the last 5 minutes (rate() over a 5-minute window), the P95 over
    the 10-minute window of those: a one-minute burst of 2 cores is read as a fifth of it in its sample."""
    cluster = _cluster((1000, 1000, 500), ("n0", "n0", "n1"))
    world = World(cluster)
    world.served[:, :10] = np.array([[1000.0], [1000.0], [500.0]])
    world.served[0, 9] = 3000.0  # the last minute: w0 bursts by 2 cores
    rated, raw = NodeSamples(2, 10, rate_steps=5), NodeSamples(2, 10)
    for step in range(10):
        rated.add(node_usage(world, step))
        raw.add(node_usage(world, step))

    read = usage_report("window", world, 9, rated, 0.95)
    # nine samples of 1000m and one of (4 x 1000 + 3000) / 5 = 1400m: P95 interpolates 55 % of the way up
    # (the report truncates to whole millicores: 1m of tolerance for the float interpolation)
    assert read.pod_cpu_m[world.pods[0].key] == pytest.approx(1220, abs=1)
    assert read.node_cpu_m["n0"] == pytest.approx(2000 + SYSTEM + 220, abs=1)
    assert read.node_cpu_m["n1"] == 500 + SYSTEM
    instantly = usage_report("window", world, 9, raw, 0.95)  # a rate over one minute: the whole burst
    assert instantly.pod_cpu_m[world.pods[0].key] == pytest.approx(2100, abs=1)
    assert usage_report("instant", world, 9, rated, 0.95).node_cpu_m["n0"] == 4000 + SYSTEM  # the last minute
    policy_read = reading_policy(policy(), "window", 60).prometheus
    assert policy_read.rate_window == timedelta(minutes=5) and policy_read.window == timedelta(minutes=10)
    assert reading_policy(policy(), "instant", 60).prometheus.rate_window == timedelta(minutes=1)


def test_unmet_demand_and_the_unavoidable_hot_minutes_are_counted_per_variant() -> None:
    # n0: one pod alone above 70% of the node (3000m + system > 2800m): hot whatever the placement
    (alone,) = simulate(_cluster((3000, 3000, 500), ("n0", "n0", "n1")), policy(), 70.0, [variant_named("none")])
    assert alone.hot_node_minutes == 24 * 60
    assert alone.unavoidable_minutes == 24 * 60 and alone.unavoidable_share == 1.0
    assert alone.unmet_core_minutes == pytest.approx(2.0 * 24 * 60)
    # n0 hot with two 1500m pods, none alone over the threshold, the pool at 45%: another placement fixes it
    (movable,) = simulate(_cluster((1500, 1500, 300), ("n0", "n0", "n1")), policy(), 70.0, [variant_named("none")])
    assert movable.hot_node_minutes == 24 * 60
    assert movable.unavoidable_minutes == 0 and movable.unmet_core_minutes == 0
    # the whole pool above 70%: every node hot, none fixable
    (pool,) = simulate(_cluster((2000, 2000, 2000, 2000), ("n0", "n0", "n1", "n1")), policy(), 70.0,
                       [variant_named("none")])  # fmt: skip
    assert pool.hot_node_minutes == 2 * 24 * 60 and pool.unavoidable_share == 1.0


def test_a_node_hot_since_before_the_measured_days_has_no_early_minutes() -> None:
    cluster = _cluster((1500, 1500, 300), ("n0", "n0", "n1"))  # n0 hot all along, by 3300m of 2800m
    config = replace(cluster.config, history_days=1)
    usage = np.concatenate([cluster.usage, cluster.usage], axis=1)  # a day before the measured one
    (none,) = simulate(replace(cluster, config=config, usage=usage), policy(), 70.0, [variant_named("none")])
    assert none.hot_node_minutes == 24 * 60
    assert none.early_minutes == 0  # its episode began a day before: the start is not its first minutes
    (fresh,) = simulate(cluster, policy(), 70.0, [variant_named("none")])  # no step before: hot from the first
    assert fresh.early_minutes == fresh.lag_minutes == 20


def test_the_predictors_tables_take_each_measured_day_as_the_run_served_it() -> None:
    cluster = _cluster((3000, 3000, 500), ("n0", "n0", "n1"))
    world = World(cluster)
    table, profiles = daily_table(cluster, 0.95), profile_table(cluster, 24)
    assert table[:, 0] == pytest.approx([2000, 2000, 500])  # throttled under the initial placement
    world.served[:, : cluster.config.steps_per_day] = 1234.0  # what this run's pods got that day
    refresh_day(table, profiles, world, 0, 0.95)
    assert table[:, 0] == pytest.approx([1234.0] * 3) and profiles[:, 0] == pytest.approx(np.full((3, 24), 1234.0))


def test_evictions_whose_node_is_hot_again_within_the_hour() -> None:
    hot = np.zeros((2, 200), dtype=bool)
    hot[0, 70] = True  # n0 hot 60 steps after the eviction at step 10: within the hour
    hot[1, 10] = True  # n1 hot only at the eviction's own step (read before it)
    hot[1, 72] = True  # ... and 62 steps after: past the hour
    moves = [Move(600.0, 0, "sim/a", "n0"), Move(600.0, 1, "sim/b", "n1")]
    assert hot_again(moves, {"n0": 0, "n1": 1}, hot, 0.0, 60) == (1, 2)


def test_an_eviction_in_the_last_hour_is_not_judged_for_hot_again() -> None:
    hot = np.zeros((1, 200), dtype=bool)
    early, late = Move(600.0, 0, "sim/a", "n0"), Move(139 * 60.0, 1, "sim/b", "n0")  # its hour ends at step 199
    assert hot_again([early, late], {"n0": 0}, hot, 0.0, 60) == (0, 2)
    last = Move(140 * 60.0, 2, "sim/c", "n0")  # its hour would end past the measured steps: unknown
    assert hot_again([early, late, last], {"n0": 0}, hot, 0.0, 60) == (0, 2)
    result = VariantResult("p", "", 0.0, 3, 0, 0, 1, 3, None, (), 60, hot_again=1, hot_again_watched=2)
    assert result.hot_again_share == pytest.approx(1 / 2)  # of the evictions watched for their whole hour


def _shapes(values: list[list[float]], provisioned: list[float], days: int) -> Shapes:
    per_day = 1440
    rows = np.array([np.repeat(np.array(v), per_day * days // len(v)) for v in values], dtype=np.float64)
    return Shapes(SYNTHETIC_START, 60, rows, np.array(provisioned), "test")


def test_a_vm_idle_in_the_history_that_bursts_later_stays_within_a_node() -> None:
    config = SimConfig(nodes=4, pods_per_node=4, days=1, history_days=2, max_replicas=1, seed=3)
    # entity 0: a 64-core VM idle over the history, then all its cores; entity 1: 2 cores at half
    shapes = _shapes([[0.001, 0.001, 1.0], [0.5, 0.5, 0.5]], [64_000, 2_000], days=3)
    cluster = build_cluster(config, shapes)
    assert float(cluster.usage.max()) <= config.node_cpu_m
    history = config.history_days * config.steps_per_day
    mean = float(cluster.usage[:, :history].sum(axis=0).mean())
    assert mean == pytest.approx(config.utilization * config.nodes * config.node_cpu_m, rel=0.01)
    assert any("unmet" in w for w in cluster.warnings)  # 16-core bursts on 16-core nodes, several a node


def test_a_target_no_pod_size_reaches_is_refused_naming_the_option() -> None:
    config = SimConfig(nodes=4, pods_per_node=4, days=1, history_days=2, utilization=0.9, seed=3)
    with pytest.raises(ConfigError) as error:
        build_cluster(config, _shapes([[0.1, 0.1, 0.1]], [4_000], days=3))
    assert error.value.problems[0][0] == "--utilization"


def test_a_calm_cluster_has_no_warning() -> None:
    config = SimConfig(nodes=4, pods_per_node=8, days=1, history_days=2, seed=3)
    cluster = build_cluster(config, _shapes([[0.5, 0.5, 0.5], [0.4, 0.4, 0.4]], [2_000, 4_000], days=3))
    assert cluster.warnings == ()


def test_bitbrains_shapes_keep_each_vms_provisioned_cores(tmp_path: Path) -> None:
    for number in (41, 42, 1):
        (tmp_path / f"{number}.csv.gz").write_bytes((TRACE_DIR / f"{number}.csv.gz").read_bytes())
    shapes = bitbrains_shapes(tmp_path, 300)
    assert sorted(shapes.provisioned_m) == [2000, 8000, 8000]  # VM 1: 2 cores, VMs 41-42: 8 cores
    assert shapes.values.min() >= 0 and shapes.values.max() == 1.0  # 41 and 42 run above 100% of it: capped


def test_report_prices_the_evictions_from_the_reliefs() -> None:
    t0 = 1_700_000_000.0
    pod = EvictedPod("default", "web-0", "Deployment/default/web", 2500)
    reliefs = (
        Relief("a", "general", "LowNodeUtilization", t0, 70.0, 90.0, (pod, pod), t0 + 900, result=COOLED),
        Relief("b", "general", "LowNodeUtilization", t0, 70.0, 90.0, (pod,), t0 + 900, result="others-grew"),
    )
    sightings = (
        Sighting("a", "general", t0 - 600, t0, 2, True),  # found hot until its relief, not after
        Sighting("b", "general", t0 - 600, t0 + 600, 3, True),  # b still found hot 10 minutes later
        Sighting("a", "general", t0 + 4000, t0 + 4000, 1, False),  # a hot again, past the hour
    )
    report = compute_rates(EfficiencyState(sightings, reliefs), None, {}, t0 - 3600, t0 + 7200)
    cluster = report.cluster
    assert cluster.saved_minutes == 15 and cluster.evictions_per_100_saved == pytest.approx(100 * 3 / 15)
    assert cluster.hot_again == 1 and cluster.hot_again_share == pytest.approx(1 / 3)
    assert "Price: 20.0 evictions per 100 hot-node-minutes saved" in report_table(report)
    assert "1 of 3 evictions (33%)" in report_table(report)
    record = report_record(report)["pools"][0]
    assert record["evictionsPer100HotMinutesSaved"] == pytest.approx(20.0) and record["hotAgain"] == 1


def test_cli_no_gain_case_says_most_hot_minutes_are_unavoidable(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--shapes", "no-gain", "--nodes", "4", "--pods-per-node", "6", "--days", "1",
            "--variant", "none", "--variant", "current-predicted"]  # fmt: skip
    assert main([*argv, "--output", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {p["name"]: p for p in data["policies"]}
    assert rows["none"]["unavoidableShare"] > 0.5
    assert any("unavoidable" in w for w in data["simulation"]["warnings"])
    assert rows["current-predicted"]["hotNodeMinutes"] > 0
    assert "evictionsPer100HotMinutesSaved" in rows["current-predicted"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "warning: " in text and "unavoidable" in text and "ev/100 saved" in text


def test_cli_refuses_synthetic_shapes_with_traces(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--shapes", "no-gain", "--traces", str(TRACE_DIR)]) == 2
    assert "--shapes" in capsys.readouterr().err
