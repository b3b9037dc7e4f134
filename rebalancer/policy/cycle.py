"""One planning cycle: facts and usage -> snapshot -> strategies -> plan (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType

from rebalancer.domain.efficiency_records import EfficiencyState
from rebalancer.domain.model import ClusterFacts, PodKey, UsageReport
from rebalancer.domain.timeline import Timeline
from rebalancer.planning.inflight import Correction, EarlierReliefs, Lag, corrected, describe, in_flight, reading_lag
from rebalancer.planning.plan import EvictionPlan
from rebalancer.planning.predicted import PredictedLoad
from rebalancer.planning.protections import Protections
from rebalancer.planning.snapshot import ClusterSnapshot, after_evictions, build_snapshot
from rebalancer.policy import Policy
from rebalancer.records.landings import observe_landings
from strategies import build


def plan_cycle(
    facts: ClusterFacts,
    usage: UsageReport,
    policy: Policy,
    taken_at: float,
    focus: frozenset[str] | None = None,
    predicted: PredictedLoad | None = None,
    timeline: Timeline | None = None,
    moved: Mapping[PodKey, str] | None = None,
    reliefs: EarlierReliefs | None = None,
) -> tuple[ClusterSnapshot, EvictionPlan]:
    """``focus``: the nodes an alert named; only they are relieved (None: every hot node).
    ``predicted``: the next-peak load, for strategies that classify by prediction. ``moved``: pods the
    bounce-back guard keeps in place (``rebalancer.records.recently_moved``), with the reason. ``reliefs``: the earlier
    reliefs from the efficiency records; a node's usage is corrected by those its reading still covers
    (:mod:`rebalancer.planning.inflight`), so every strategy and the landing guard plan on the same corrected usage
    (None: no records, no correction)."""
    timeline = timeline or Timeline()
    with timeline.step("snapshot"):
        snapshot = build_snapshot(facts, usage, policy.pools, taken_at, focus)
        if reliefs is not None:
            reliefs = with_landings(reliefs, facts, taken_at, policy.efficiency.follow_up_window.total_seconds())
            snapshot = with_in_flight(snapshot, reliefs, usage_lag(policy), usage.node_from_pods)
        if predicted is not None:
            snapshot = replace(snapshot, predicted=predicted)
        if moved:
            snapshot = replace(snapshot, moved=moved)
        if policy.landing_guard.enabled:
            guarded = {p.pool: p.effect for p in policy.landing_guard.pools if p.max_marked_fraction > 0}
            snapshot = replace(snapshot, guarded_pools=guarded)
    protections = Protections.from_settings(policy.protections)
    results = []
    seen = snapshot
    with timeline.step("plan"):
        for settings in policy.strategies:
            if not settings.enabled:
                continue
            result = build(settings).plan(seen, protections)
            results.append(result)
            seen = after_evictions(seen, result.evictions)  # the next strategy plans on what this one moved
            if result.peak_caps and seen.predicted is not None:  # a node relieved before its peak stays so
                seen = replace(seen, predicted=seen.predicted.with_caps(result.peak_caps))
    blocked = f"usage source failed, no evictions this cycle: {usage.failure}" if usage.failure else None
    corrections = tuple(snapshot.in_flight.values())
    return snapshot, EvictionPlan(taken_at, tuple(results), blocked, corrections, snapshot.in_flight_off)


def usage_lag(policy: Policy) -> Lag:
    """How long a usage reading takes to show a change of a node's load (:func:`rebalancer.planning.inflight.reading_lag`)."""
    p = policy.prometheus
    window, rate_window, step = (d.total_seconds() for d in (p.window, p.rate_window, p.step))
    return reading_lag(window, p.quantile, rate_window, step)


def with_landings(reliefs: EarlierReliefs, facts: ClusterFacts, now: float, window_seconds: float) -> EarlierReliefs:
    """The earlier reliefs with the replacements these facts show bound (the records learn them only after
    the cycle): a pod whose replacement is back on its node has not left it."""
    if not reliefs.known:
        return reliefs
    seen = observe_landings(EfficiencyState(reliefs=reliefs.known), facts, now, window_seconds)
    return replace(reliefs, known=seen.reliefs)


def with_in_flight(
    snapshot: ClusterSnapshot, reliefs: EarlierReliefs, lag: Lag, node_from_pods: bool
) -> ClusterSnapshot:
    """The snapshot with each node's usage corrected by the earlier reliefs its reading still covers. A
    node's usage summed from its pods' (``node_from_pods``) already leaves out an evicted pod and counts
    its replacement where it runs: nothing to correct."""
    if reliefs.missing is not None:
        return replace(snapshot, in_flight_off=reliefs.missing)
    if node_from_pods or not reliefs.known:
        return snapshot
    now = snapshot.taken_at
    flights = in_flight(reliefs.known, now, lag, snapshot.pod_usage)
    load = dict(snapshot.load)
    corrections: dict[str, Correction] = {}
    for name, flight in flights.items():
        node, current = snapshot.nodes.get(name), load.get(name)
        if node is None or current is None or current.usage_m is None:
            continue  # gone, or unknown: unknown stays unknown
        value = corrected(current.usage_m, flight)
        assert value is not None
        if value == current.usage_m:
            continue
        note = describe(flight, current.usage_m, value, node.allocatable_cpu_m, now)
        corrections[name] = Correction(name, current.usage_m, value, flight, note)
        load[name] = replace(current, usage_m=value)
    if not corrections:
        return snapshot
    return replace(snapshot, load=MappingProxyType(load), in_flight=MappingProxyType(corrections))
