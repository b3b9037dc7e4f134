"""Limiter policies for the evictor's property tests, and the test's own account of the caps.

The account judges the evictions a cluster double carried out (with the time each happened) and those
recorded earlier by another run, from the policy's ``limits:`` alone: it shares no code with the limiter
engine, so an engine or evictor that let an eviction through too early or too often is caught.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from rebalancer.domain.settings.limits import LimitSettings, PeriodCap, TokenBucket
from rebalancer.policy import Policy
from tests.builders import policy

EPSILON = 1e-6


@dataclass(frozen=True, slots=True)
class Done:
    """An eviction that happened: when, and the scopes it counts in."""

    at: float
    node: str
    pool: str
    namespace: str
    workload: str | None  # Kind/namespace/name, as the limiter state keys it


def _periods(counts: tuple[int, int], period: str) -> st.SearchStrategy[list[dict[str, Any]]]:
    return st.builds(lambda n: [{"count": n, "period": period}], st.integers(*counts))


RATES = st.builds(lambda m, b: {"perMinute": m, "burst": b}, st.sampled_from([0.5, 1, 2, 6]), st.integers(1, 3))
LIMITERS: list[tuple[tuple[str, ...], st.SearchStrategy[Any]]] = [
    (("global", "maxPerCycle"), st.integers(1, 4)),
    (("global", "maxPerPeriod"), _periods((1, 6), "1h")),
    (("global", "rate"), RATES),
    *(
        limiter
        for pool in ("a", "b")
        for limiter in (
            (("global", "pools", pool, "maxPerCycle"), st.integers(1, 3)),
            (("global", "pools", pool, "maxPerPeriod"), _periods((1, 4), "30m")),
            (("global", "pools", pool, "rate"), RATES),
        )
    ),
    (("node", "maxPerCycle"), st.integers(1, 2)),
    (("node", "maxPerPeriod"), _periods((1, 3), "30m")),
    (("node", "cooldown"), st.sampled_from(["1m", "5m", "10m"])),
    (("namespace", "maxPerCycle"), st.integers(1, 3)),
    (("workload", "maxUnavailable"), st.sampled_from([1, 2, "25%", "50%"])),
    (("workload", "maxPerCycle"), st.integers(1, 2)),
    (("workload", "maxPerPeriod"), _periods((1, 3), "1h")),
    (("workload", "minInterval"), st.sampled_from(["2m", "10m"])),
    (("lists", "pools", "black"), st.just(["b"])),
]
"""Each limiter the policies may set (its path under ``limits:``) and the values it takes."""


@st.composite
def limited_policies(draw: st.DrawFn) -> Policy:
    """A LowNodeUtilization or HighNodeUtilization policy with a mix of the limiters that count or space
    evictions: per cycle, sliding windows and token buckets (cluster-wide and per pool), node caps and
    cooldown, namespace caps, workload caps, maxUnavailable and minInterval; and a pool black list. One
    of them, drawn, is always set, the others only now and then: few limiters at a time let evictions
    through, so that each limiter is judged in many examples."""
    low = draw(st.integers(5, 40))
    high = draw(st.integers(low, 80))
    kind = draw(st.sampled_from(["LowNodeUtilization", "LowNodeUtilization", "HighNodeUtilization"]))
    focus = draw(st.integers(0, len(LIMITERS) - 1))
    limits: dict[str, Any] = {}
    for index, (path, values) in enumerate(LIMITERS):
        if index == focus or draw(st.integers(0, 5)) == 0:
            scope = limits
            for name in path[:-1]:
                scope = scope.setdefault(name, {})
            scope[path[-1]] = draw(values)
    strategy = f"kind: {kind}\nthresholds: {{cpu: {low}}}\ntargetThresholds: {{cpu: {high}}}\n"
    return policy(strategy, f"limits: {json.dumps(limits)}\n")


def assert_caps_hold(limits: LimitSettings, earlier: Iterable[Done], cycle: list[Done]) -> None:
    """No cap of ``limits`` was exceeded by this ``cycle``'s evictions, counting ``earlier`` ones too."""
    everything = [*earlier, *cycle]
    scopes: list[tuple[str, Callable[[Done], object], int | None, tuple[PeriodCap, ...], TokenBucket | None]] = [
        ("global", lambda d: "", limits.cluster.max_per_cycle, limits.cluster.max_per_period, limits.cluster.rate),
        ("node", lambda d: d.node, limits.node.max_per_cycle, limits.node.max_per_period, None),
        ("namespace", lambda d: d.namespace, limits.namespace.max_per_cycle, (), None),
        ("workload", lambda d: d.workload, limits.workload.max_per_cycle, limits.workload.max_per_period, None),
    ]
    for name, caps in limits.cluster.pools.items():
        scopes.append((f"pool {name}", _in_pool(name), caps.max_per_cycle, caps.max_per_period, caps.rate))
    for what, key, per_cycle, periods, rate in scopes:
        counts = Counter(key(d) for d in cycle if key(d) is not None)
        if per_cycle is not None:
            assert max(counts.values(), default=0) <= per_cycle, f"{what} maxPerCycle {per_cycle}: {counts}"
        for done in cycle:
            if key(done) is None:
                continue
            alike = [d for d in everything if key(d) == key(done)]
            for cap in periods:
                span = cap.period.total_seconds()
                inside = [d for d in alike if done.at - span < d.at <= done.at]
                assert len(inside) <= cap.count, f"{what} {len(inside)} evictions within {span} s of {done}: {cap}"
            if rate is not None:
                _assert_bucket(what, rate, alike, done)
    _assert_spaced("node cooldown", limits.node.cooldown, lambda d: d.node, everything, cycle)
    _assert_spaced("workload minInterval", limits.workload.min_interval, lambda d: d.workload, everything, cycle)


def _in_pool(name: str) -> Callable[[Done], object]:
    return lambda d: d.pool if d.pool == name else None


def _assert_bucket(what: str, rate: TokenBucket, alike: list[Done], last: Done) -> None:
    """A token bucket lets at most ``burst`` + what it refilled since through in any stretch of time: for
    every earlier eviction ``first``, those from ``first`` up to ``last`` number no more than
    burst + perMinute x minutes between them."""
    for first in alike:
        if first.at > last.at:
            continue
        count = sum(1 for d in alike if first.at <= d.at <= last.at)
        refilled = rate.per_minute / 60 * (last.at - first.at)
        assert count <= rate.burst + refilled + EPSILON, f"{what} rate {rate}: {count} evictions from {first} to {last}"


def _assert_spaced(
    what: str, span: Any, key: Callable[[Done], object], everything: list[Done], cycle: list[Done]
) -> None:
    """Two evictions of one scope, one of them in this cycle, lie at least ``span`` apart."""
    if span is None:
        return
    seconds = span.total_seconds()
    for done in cycle:
        if key(done) is None:
            continue
        for other in everything:
            if other is not done and key(other) == key(done):
                assert abs(done.at - other.at) >= seconds, f"{what} {seconds} s: {other} then {done}"
