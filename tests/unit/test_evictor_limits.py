"""The evictor and the limiters together, on scenes the property tests draw too rarely: a pod that
changes between the cycle's snapshot and its eviction."""

from __future__ import annotations

from typing import Any

import msgspec

from rebalancer.actions.backoff import EVICTION_BACKOFF, BackoffState
from rebalancer.actions.evictor import DryRun, Evictor, Outcome
from rebalancer.planning.limits import LimiterState
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


def _group_scene(limits_yaml: str = "", backoff: BackoffState | None = None) -> tuple[Evictor, EvictionPlan, Any]:
    """Two pods HighNodeUtilization empties from n1 together (all or none)."""
    pol = policy(LNU, limits_yaml)
    pods = [pod(f"web-{i}", "n1", workload=f"web-{i}") for i in range(2)]
    snap = snapshot([node("n1"), node("n2")], pods, usage({"n1": 500, "n2": 5_000}), taken_at=NOW)
    evictions = tuple(
        PlannedEviction("HighNodeUtilization", "default", p.name, p.uid, "n1", "", p.workload, 100, "empty", "n2")
        for p in pods
    )
    plan = EvictionPlan(NOW, (StrategyResult("HighNodeUtilization", evictions, (), ()),))
    clock = TickingClock(NOW)
    stored = None if backoff is None else EVICTION_BACKOFF.encode(backoff)
    evictor = Evictor(
        MemoryCluster(tuple(pods), (), clock), MemoryStore(), MemoryStore(stored), pol.limits,
        Protections.from_settings(pol.protections), DryRun.OFF, clock=clock,
    )  # fmt: skip
    return evictor, plan, snap


def test_a_group_held_by_a_pod_backing_off_is_reported_as_backoff() -> None:
    """Not as blocked by a limiter (none blocked it): the metrics and the efficiency records count it with
    the budget refusals, and it says when the backoff ends."""
    backoff = BackoffState().after_rejection("default/web-1", NOW - 10, None)
    evictor, plan, snap = _group_scene(backoff=backoff)

    report = evictor.apply(plan, snap)

    assert [r.outcome for r in report.results] == [Outcome.BACKOFF, Outcome.BACKOFF]
    assert all(r.limiter is None and r.retry_at == NOW + 50 for r in report.results)


def test_a_group_blocked_by_a_limiter_says_when_it_could_pass() -> None:
    evictor, plan, snap = _group_scene("limits:\n  global: {rate: {perMinute: 1, burst: 1}}\n")

    report = evictor.apply(plan, snap)

    assert [r.outcome for r in report.results] == [Outcome.BLOCKED, Outcome.BLOCKED]
    assert all(r.limiter == "global.rate" and r.retry_at == NOW + 60 for r in report.results)


def test_an_eviction_from_a_node_with_an_empty_pool_label_leaves_the_state_readable() -> None:
    """A label value may be empty: such a node's pool is "" and so is its reservation's. The next run must
    read that state back, not take it for corrupt (which stops every eviction for the longest window)."""
    pol = policy(LNU, "limits:\n  global: {maxPerPeriod: [{count: 5, period: 1h}]}\n")
    pods = [pod(f"web-{i}", "n1", workload=f"web-{i}") for i in range(2)]
    snap = snapshot([node("n1", labels={"pool": ""})], pods, usage({"n1": 9_000}), taken_at=NOW)
    assert snap.pool_of["n1"] == ""
    clock = TickingClock(NOW, (1.0,))
    cluster, store = MemoryCluster(tuple(pods), (), clock), MemoryStore()
    evictor = Evictor(
        cluster, store, MemoryStore(), pol.limits, Protections.from_settings(pol.protections), DryRun.OFF,
        clock=clock,
    )  # fmt: skip

    for p in pods:  # one run each
        planned = PlannedEviction("LowNodeUtilization", "default", p.name, p.uid, "n1", "", p.workload, 100, "hot", "")
        report = evictor.apply(EvictionPlan(NOW, (StrategyResult("LowNodeUtilization", (planned,), (), ()),)), snap)
        assert report.aborted is None and report.problems == ()
        assert [r.outcome for r in report.results] == [Outcome.EVICTED]
    assert len(LimiterState.from_json(store.text or "", clock.now).reservations) == 2


def test_an_api_server_throttling_evictions_stops_the_run_after_one_refusal() -> None:
    """A 429 that names no budget is the API server's flow control, not the pod's: the rest of the plan is
    not sent into it (each eviction would cost a re-read and two state writes, and be refused alike). The
    refused eviction's reservation is given back; the pods not attempted are reported so."""
    pol = policy(LNU)
    pods = [pod(f"web-{i}", "n1", workload=f"web-{i}") for i in range(3)]
    snap = snapshot([node("n1")], pods, usage({"n1": 9_000}), taken_at=NOW)
    evictions = tuple(
        PlannedEviction("LowNodeUtilization", "default", p.name, p.uid, "n1", "", p.workload, 100, "hot", "")
        for p in pods
    )
    plan = EvictionPlan(NOW, (StrategyResult("LowNodeUtilization", evictions, (), ()),))
    clock = TickingClock(NOW, (1.0,))
    cluster = MemoryCluster(tuple(pods), (), clock)
    cluster.throttled = 5.0
    store = MemoryStore()
    evictor = Evictor(
        cluster, store, MemoryStore(), pol.limits, Protections.from_settings(pol.protections), DryRun.OFF,
        clock=clock,
    )  # fmt: skip

    report = evictor.apply(plan, snap)

    assert [r.outcome for r in report.results] == [Outcome.REJECTED, Outcome.SKIPPED, Outcome.SKIPPED]
    assert [r.name for r in cluster.requests] == ["web-0"]
    assert [name for _, name in cluster.read_as] == ["web-0"]
    assert report.aborted is not None and "throttl" in report.aborted and "retry after 5 s" in report.aborted
    assert all(r.detail.startswith("not attempted: ") for r in report.results[1:])
    assert LimiterState.from_json(store.text or "", clock.now).reservations == ()
