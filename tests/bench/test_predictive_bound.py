"""bench.predictive_bound: the foresight variant's predictor reads the coming day's actual usage (its daily
P95 and its means per time-of-day bucket, computed here directly from the usage), replacements included,
so that the node peaks it plans with are that day's; the simulation feeds it to exactly that variant."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from bench.predictive_bound import BOUNDED, Foresight, foresight_variant
from rebalancer.domain.model import PodKey
from rebalancer.offline.simulate.cluster import Cluster, build_cluster
from rebalancer.offline.simulate.config import SimConfig
from rebalancer.offline.simulate.engine import simulate
from rebalancer.offline.simulate.shapes import synthetic_shapes
from rebalancer.offline.simulate.variants import variant_named, variant_policy
from rebalancer.offline.simulate.world import World
from rebalancer.planning.predict.history import DailyPeaks
from rebalancer.planning.predict.predictor import predict_with_book
from rebalancer.planning.predict.profile import DailyProfiles
from rebalancer.policy import Policy, parse_policy

ROOT = Path(__file__).resolve().parents[2]
POLICY = """
strategies:
  - kind: LowNodeUtilization
    thresholds: {cpu: 45}
    targetThresholds: {cpu: 70}
limits:
  global: {maxPerCycle: 4}
predictor: {days: 2, minHistoryDays: 1, aggregation: max_daily, systemCpuM: 300}
"""


def tiny() -> Cluster:
    config = SimConfig(nodes=3, pods_per_node=4, days=2, history_days=2, step_seconds=300, seed=3)
    return build_cluster(config, synthetic_shapes(20, 6, config.step_seconds, 3))


def policy() -> Policy:
    return parse_policy(POLICY, "test")


def day_means(cluster: Cluster, slot: int, day: int, buckets: int) -> list[float]:
    per_day = cluster.config.steps_per_day
    width = per_day // buckets
    begin = day * per_day
    return [float(np.mean(cluster.usage[slot, begin + b * width : begin + (b + 1) * width])) for b in range(buckets)]


@pytest.mark.parametrize("buckets", [24, 96])
def test_foresight_is_the_coming_days_actual_usage_on_every_day_it_aggregates(buckets: int) -> None:
    cluster, settings = tiny(), policy().predictor
    world = World(cluster)
    foresight = Foresight(cluster, buckets, settings)
    per_day = cluster.config.steps_per_day
    for day in (2, 3):  # the measured days
        peaks, profiles = foresight(world, day * per_day + per_day // 2)  # at noon: the whole day, not the past
        assert profiles.days == peaks.days == settings.days and profiles.buckets == buckets
        for slot, pod in enumerate(world.pods):
            row = profiles.index(pod.key)
            assert row is not None
            expected = day_means(cluster, slot, day, buckets)
            for d in range(settings.days):
                assert profiles.values[row, d] == pytest.approx(expected, rel=1e-5)
            day_usage = cluster.usage[slot, day * per_day : (day + 1) * per_day]
            assert peaks.values[row] == pytest.approx([np.quantile(day_usage, settings.quantile)] * settings.days)
        yesterday = np.array([day_means(cluster, s, day - 1, buckets) for s in range(len(world.pods))])
        assert not np.allclose(profiles.values[:, 0], yesterday, rtol=1e-3)  # not what the past days say


def test_a_replacement_knows_its_slots_day_and_the_evicted_pod_is_gone() -> None:
    cluster, settings = tiny(), policy().predictor
    world = World(cluster)
    per_day = cluster.config.steps_per_day
    evicted = world.pods[5]
    step = 2 * per_day + 100
    world.evict(evicted, cluster.time_of(step))
    world.bind_due(cluster.time_of(step))
    peaks, profiles = Foresight(cluster, 24, settings)(world, step)
    replacement = world.pods[5]
    assert replacement.key != evicted.key and profiles.index(evicted.key) is None and peaks.index(evicted.key) is None
    row = profiles.index(replacement.key)
    assert row is not None
    assert profiles.values[row, -1] == pytest.approx(day_means(cluster, 5, 2, 24), rel=1e-5)


def test_the_node_peaks_planned_with_are_the_coming_days_real_ones() -> None:
    cluster, settings = tiny(), policy().predictor
    world = World(cluster)
    per_day = cluster.config.steps_per_day
    peaks, profiles = Foresight(cluster, 24, settings)(world, 3 * per_day)
    prediction, book = predict_with_book(world.facts(), peaks, settings, profiles=profiles)
    assert book is not None
    for node in prediction.nodes:
        slots = [s for s, pod in enumerate(world.pods) if pod.node_name == node.node]
        summed = np.sum([day_means(cluster, s, 3, 24) for s in slots], axis=0)
        assert node.basis == "coincident" and node.peak is not None
        assert node.cpu_m == pytest.approx(float(summed.max()) + settings.system_cpu_m, rel=1e-5)
        assert node.peak.bucket == int(np.argmax(summed))


def test_the_foresight_variant_is_the_bounded_policy_at_its_bucket_width() -> None:
    base = policy()
    variant = foresight_variant(96)
    bounded = variant_policy(base, variant_named(BOUNDED), ["default"])
    bound = variant_policy(base, variant, ["default"])
    assert variant.name == "foresight-15m" and variant.description.startswith("upper bound")
    assert bound.predictor.profile_buckets == 96 and bound.landing_guard.enabled
    assert bound.strategies == bounded.strategies and bound.limits == bounded.limits
    assert foresight_variant(24).name == "foresight-1h" and foresight_variant(288).name == "foresight-5m"


def test_simulate_feeds_the_reader_to_its_variant_only() -> None:
    cluster, base = tiny(), policy()
    foresight = Foresight(cluster, 24, base.predictor)
    read_at: list[int] = []

    def reader(world: World, step: int) -> tuple[DailyPeaks[PodKey], DailyProfiles[PodKey]]:
        read_at.append(step)
        return foresight(world, step)

    variant = foresight_variant(24)
    bounded = variant_named(BOUNDED)
    one_day = replace(cluster, config=replace(cluster.config, days=1), usage=cluster.usage[:, : 3 * 288])
    results = simulate(one_day, base, 70.0, [bounded, variant], histories={variant.name: reader})
    cycles = one_day.config.steps_per_day * one_day.config.step_seconds // one_day.config.interval_seconds
    assert len(read_at) == cycles == results[1].cycles  # every cycle of the foresight variant, once


def test_the_bench_prints_the_bound_beside_the_policies_it_bounds() -> None:
    argv = ["--nodes", "4", "--days", "1", "--step", "5m", "--buckets", "24", "--buckets", "96"]
    done = subprocess.run(
        [sys.executable, "-m", "bench.predictive_bound", *argv],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    names = [line.split()[0] for line in done.stdout.splitlines() if line.startswith(("none", "pred", "fore", "curr"))]
    assert names == ["none", BOUNDED, "foresight-1h", "foresight-15m", "current-predicted-guard", "current-ideal"]
