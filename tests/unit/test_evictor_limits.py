"""The evictor and the limiters together, on scenes the property tests draw too rarely: a pod that
changes between the cycle's snapshot and its eviction."""

from __future__ import annotations

import msgspec

from rebalancer.actions.evictor import DryRun, Evictor, Outcome
from rebalancer.planning.plan import EvictionPlan, PlannedEviction, StrategyResult
from rebalancer.planning.protections import Protections
from tests.builders import node, pod, policy, snapshot, usage
from tests.unit.eviction_doubles import MemoryCluster, MemoryStore, TickingClock

NOW = 1_700_000_000.0
LNU = "kind: LowNodeUtilization\nthresholds: {cpu: 20}\ntargetThresholds: {cpu: 50}\n"


def test_a_pod_turned_unready_since_the_snapshot_still_counts_against_max_unavailable() -> None:
    """Four ready replicas, maxUnavailable 1. The first pod planned turns unready before its re-read:
    evicting it makes nothing more unavailable than it is, but once evicted it is unavailable, so the
    second may not go (two of four unavailable)."""
    pol = policy(LNU, "limits:\n  workload: {maxUnavailable: 1}\n")
    pods = [pod(f"web-{i}", "n1") for i in range(4)]
    snap = snapshot([node("n1")], pods, usage({"n1": 9_000}), taken_at=NOW)
    evictions = tuple(
        PlannedEviction("LowNodeUtilization", "default", p.name, p.uid, "n1", "", p.workload, 100, "hot", "")
        for p in pods[:2]
    )
    plan = EvictionPlan(NOW, (StrategyResult("LowNodeUtilization", evictions, (), ()),))
    clock = TickingClock(NOW, (1.0,))
    cluster = MemoryCluster(tuple(pods), (), clock)
    cluster.change(pods[0].key, msgspec.structs.replace(pods[0], ready=False))
    evictor = Evictor(
        cluster, MemoryStore(), MemoryStore(), pol.limits, Protections.from_settings(pol.protections),
        DryRun.OFF, clock=clock,
    )  # fmt: skip

    report = evictor.apply(plan, snap)

    assert [r.outcome for r in report.results] == [Outcome.EVICTED, Outcome.BLOCKED]
    assert report.results[1].limiter == "workload.maxUnavailable"
    assert [p.name for p in cluster.evicted] == ["web-0"]
