"""One planning cycle: facts and usage -> snapshot -> strategies -> plan (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from rebalancer.model import ClusterFacts, PodKey, UsageReport
from rebalancer.plan import EvictionPlan
from rebalancer.policy import Policy
from rebalancer.predicted import PredictedLoad
from rebalancer.protections import Protections
from rebalancer.snapshot import ClusterSnapshot, after_evictions, build_snapshot
from rebalancer.timeline import Timeline
from strategies import build
from strategies.base import Offload


def plan_cycle(
    facts: ClusterFacts,
    usage: UsageReport,
    policy: Policy,
    taken_at: float,
    focus: frozenset[str] | None = None,
    predicted: PredictedLoad | None = None,
    timeline: Timeline | None = None,
    moved: Mapping[PodKey, str] | None = None,
    offload: Offload | None = None,
) -> tuple[ClusterSnapshot, EvictionPlan]:
    """``focus``: the nodes an alert named; only they are relieved (None: every hot node).
    ``predicted``: the next-peak load, for strategies that classify by prediction. ``moved``: pods the
    bounce-back guard keeps in place (``efficiency.recently_moved``), with the reason. ``offload``: runs
    parts of a strategy's plan on another CPU (the plan is the same without it)."""
    timeline = timeline or Timeline()
    with timeline.step("snapshot"):
        snapshot = build_snapshot(facts, usage, policy.pools, taken_at, focus)
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
            result = build(settings).plan(seen, protections, offload)
            results.append(result)
            seen = after_evictions(seen, result.evictions)  # the next strategy plans on what this one moved
    blocked = f"usage source failed, no evictions this cycle: {usage.failure}" if usage.failure else None
    return snapshot, EvictionPlan(taken_at, tuple(results), blocked)
