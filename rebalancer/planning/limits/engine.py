"""The limiter engine: may this eviction happen now, and the state after reserving it (pure).

``check`` tries the limiters cheapest and most explainable first: lists and service level, then time
windows, then caps (per cycle, maxUnavailable, cooldown and minInterval, sliding windows, token buckets).
The first that blocks answers. ``reserve`` takes the tokens when the decision is made, not when the
eviction ends: a crash between the two can waste a token but never exceed a cap. ``release`` gives them
back when the API server said for certain that the eviction did not happen (a budget refused it, the pod
was gone or replaced). Everything is deterministic given ``now`` (epoch seconds).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from zoneinfo import ZoneInfo

from rebalancer.domain.settings.limits import LimitSettings, PeriodCap, TokenBucket
from rebalancer.domain.settings.shared import format_duration
from rebalancer.planning.limits.lists import check_lists, check_service_level, tier_of
from rebalancer.planning.limits.request import ALLOWED, CycleCounts, EvictionRequest, Verdict
from rebalancer.planning.limits.state import Bucket, LimiterState, Reservation
from rebalancer.planning.limits.windows import Schedule, next_open

EPSILON = 1e-9
"""Token arithmetic tolerance, so that a bucket checked at its own ``retry_at`` passes."""

Stage = Callable[[EvictionRequest, LimiterState, CycleCounts, LimitSettings, float], Verdict | None]


def check(
    request: EvictionRequest, state: LimiterState, cycle: CycleCounts, settings: LimitSettings, now: float
) -> Verdict:
    """Whether ``request`` may be evicted at ``now``, given the persisted ``state`` and what this
    ``cycle`` already reserved. Nothing changes: call :func:`reserve` for an allowed request."""
    for stage in _STAGES:
        verdict = stage(request, state, cycle, settings, now)
        if verdict is not None:
            return verdict
    return ALLOWED


def reserve(request: EvictionRequest, state: LimiterState, settings: LimitSettings, now: float) -> LimiterState:
    """The state after taking this eviction's tokens and recording it (call after an allowed check)."""
    buckets = dict(state.buckets)
    for scope, spec in _bucket_scopes(request, settings):
        level, base = _level(state.buckets.get(scope), spec, now)
        buckets[scope] = Bucket(level - 1.0, base)
    key = request.workload_key
    reservation = Reservation(now, request.pool, request.node, key, request.namespace, request.pod)
    node_last = dict(state.node_last_eviction)
    node_last[request.node] = max(now, node_last.get(request.node, now))
    workload_last = dict(state.workload_last_eviction)
    if key is not None:
        workload_last[key] = max(now, workload_last.get(key, now))
    return LimiterState(
        reservations=(*state.reservations, reservation),
        buckets=buckets,
        node_last_eviction=node_last,
        workload_last_eviction=workload_last,
        recovering_until=state.recovering_until,
    )


def release(
    request: EvictionRequest, at: float, before: LimiterState, state: LimiterState, settings: LimitSettings, now: float
) -> LimiterState:
    """``state`` after giving back the reservation of ``request`` made at ``at`` on ``before``, for an eviction
    that did not happen: its record leaves every window, its token goes back to each bucket (never above
    the burst, and less what the bucket would have lost at its burst since, had the token never been taken),
    and the node's and workload's last-eviction times return to what they were in ``before`` unless
    another eviction set them since. A reservation no longer in ``state`` (pruned, or the state replaced) is
    not given back twice: ``state`` is returned unchanged."""
    index = next(
        (i for i, r in enumerate(state.reservations)
         if r.at == at and r.namespace == request.namespace and r.pod == request.pod),
        None,
    )  # fmt: skip
    if index is None:
        return state
    buckets = dict(state.buckets)
    for scope, spec in _bucket_scopes(request, settings):
        level, base = _level(state.buckets.get(scope), spec, now)
        buckets[scope] = Bucket(
            min(float(spec.burst), level + _refund(before.buckets.get(scope), spec, at, base)), base
        )
    key = request.workload_key
    workload_last = state.workload_last_eviction
    if key is not None:
        workload_last = _restored(workload_last, key, at, before.workload_last_eviction.get(key))
    return LimiterState(
        reservations=state.reservations[:index] + state.reservations[index + 1 :],
        buckets=buckets,
        node_last_eviction=_restored(
            state.node_last_eviction, request.node, at, before.node_last_eviction.get(request.node)
        ),
        workload_last_eviction=workload_last,
        recovering_until=state.recovering_until,
    )


def _refund(before: Bucket | None, spec: TokenBucket, at: float, now: float) -> float:
    """What the token taken at ``at`` (from the bucket ``before``) still holds back at ``now``: all of it,
    less the refill a bucket without it would have lost at its burst since (at most what refilled beyond
    the burst from the level it had then). A whole token would credit that lost refill as well: a burst of 1
    could then admit two evictions at once."""
    level, base = _level(before, spec, at)
    lost = level + max(0.0, now - base) * spec.per_second - float(spec.burst)
    return min(1.0, max(0.0, 1.0 - max(0.0, lost)))


def _restored(last: Mapping[str, float], key: str, at: float, previous: float | None) -> Mapping[str, float]:
    if last.get(key) != at:
        return last  # a later eviction set it: keep that
    out = dict(last)
    if previous is None:
        del out[key]
    else:
        out[key] = previous
    return out


def admit(
    request: EvictionRequest, state: LimiterState, cycle: CycleCounts, settings: LimitSettings, now: float
) -> tuple[Verdict, LimiterState, CycleCounts]:
    """``check``, and when allowed ``reserve`` and count it in the cycle; a blocked request changes nothing."""
    verdict = check(request, state, cycle, settings, now)
    if not verdict.allowed:
        return verdict, state, cycle
    return verdict, reserve(request, state, settings, now), cycle.add(request)


# ------------------------------------------------------------------------------------------- stages


def _lists(r: EvictionRequest, _: LimiterState, __: CycleCounts, s: LimitSettings, ___: float) -> Verdict | None:
    return check_lists(r, s.lists) or check_service_level(r, s.service_level)


def schedules(request: EvictionRequest, settings: LimitSettings) -> tuple[Schedule, ...]:
    """The window schedules that apply to ``request``: its service tier's, the cluster's, its pool's."""
    w = settings.windows
    out = []
    tier = tier_of(request, settings.service_level)
    if tier is not None:
        rule = settings.service_level.tiers[tier]
        if rule.rule == "windows":
            out.append(Schedule("serviceLevel.tier", ZoneInfo(rule.time_zone or w.time_zone), rule.windows))
    if w.allowed or w.blackout:
        out.append(Schedule("window", ZoneInfo(w.time_zone), w.allowed, w.blackout))
    pool = w.pools.get(request.pool)
    if pool is not None and (pool.allowed or pool.blackout):
        zone = ZoneInfo(w.zone_of(request.pool))
        out.append(Schedule(f"pool.{request.pool}.window", zone, pool.allowed, pool.blackout))
    return tuple(out)


def _windows(r: EvictionRequest, _: LimiterState, __: CycleCounts, s: LimitSettings, now: float) -> Verdict | None:
    applicable = schedules(r, s)
    for schedule in applicable:
        closed = schedule.closed(now)
        if closed is None:
            continue
        retry = next_open(applicable, now)
        if schedule.name == "serviceLevel.tier":
            tier = tier_of(r, s.service_level)
            return Verdict("serviceLevel.tier.windows", f"service tier {tier}: {schedule.describe(closed)}", retry)
        return Verdict(f"{schedule.name}.{closed}", schedule.describe(closed), retry)
    return None


def _cycle_caps(r: EvictionRequest, _: LimiterState, c: CycleCounts, s: LimitSettings, __: float) -> Verdict | None:
    key = r.workload_key
    pool = s.cluster.pools.get(r.pool)
    checks = [
        ("global.maxPerCycle", s.cluster.max_per_cycle, c.total, "in the cluster"),
        (f"pool.{r.pool}.maxPerCycle", pool.max_per_cycle if pool else None, c.pools.get(r.pool, 0), f"in {r.pool}"),
        ("node.maxPerCycle", s.node.max_per_cycle, c.nodes.get(r.node, 0), f"from node {r.node}"),
        (
            "namespace.maxPerCycle",
            s.namespace.max_per_cycle,
            c.namespaces.get(r.namespace, 0),
            f"in namespace {r.namespace}",
        ),
    ]
    if key is not None:
        checks.append(("workload.maxPerCycle", s.workload.max_per_cycle, c.workloads.get(key, 0), f"of {key}"))
    for limiter, cap, used, where in checks:
        if cap is not None and used >= cap:
            return Verdict(limiter, f"{used} evictions {where} this cycle already (maxPerCycle {cap})")
    return None


def _unavailable(r: EvictionRequest, _: LimiterState, c: CycleCounts, s: LimitSettings, __: float) -> Verdict | None:
    key = r.workload_key
    if s.workload.max_unavailable is None or key is None:
        return None
    if r.replicas is None:
        return Verdict("workload.maxUnavailable", f"replica counts of {key} unknown: cannot tell what stays ready")
    desired, ready, unavailable = r.replicas.desired, r.replicas.ready, r.replicas.unavailable
    allowed = s.workload.unavailable_allowed(desired)
    assert allowed is not None
    already = max(desired - ready, unavailable, 0) + c.ready_evicted.get(key, 0)
    after = already + (1 if r.pod_ready else 0)
    if after > allowed:
        return Verdict(
            "workload.maxUnavailable",
            f"{key}: {already} of {desired} replicas unavailable or evicted this cycle; this eviction would make "
            f"{after} (maxUnavailable {s.workload.max_unavailable} = {allowed})",
        )
    return None


def _spacing(r: EvictionRequest, st: LimiterState, _: CycleCounts, s: LimitSettings, now: float) -> Verdict | None:
    if s.node.cooldown is not None and (last := st.node_last_eviction.get(r.node)) is not None:
        until = last + s.node.cooldown.total_seconds()
        if now < until:
            return Verdict(
                "node.cooldown",
                f"node {r.node} had an eviction {now - last:.0f} s ago (cooldown {format_duration(s.node.cooldown)})",
                until,
            )
    key = r.workload_key
    if key is not None and s.workload.min_interval is not None:
        last = st.workload_last_eviction.get(key)
        if last is not None and now < (until := last + s.workload.min_interval.total_seconds()):
            return Verdict(
                "workload.minInterval",
                f"{key} had an eviction {now - last:.0f} s ago (minInterval {format_duration(s.workload.min_interval)})",
                until,
            )
    return None


def _window_cap(limiter: str, caps: Iterable[PeriodCap], times: list[float], now: float) -> Verdict | None:
    for cap in caps:
        span, period = cap.period.total_seconds(), format_duration(cap.period)
        inside = sorted(t for t in times if t > now - span)  # later times (clock skew) count too
        if len(inside) >= cap.count:
            retry = inside[len(inside) - cap.count] + span  # when enough of the oldest have left the window
            return Verdict(
                f"{limiter}[{period}]",
                f"{len(inside)} evictions in the last {period} (maxPerPeriod {cap.count} per {period})",
                retry,
            )
    return None


def _periods(r: EvictionRequest, st: LimiterState, _: CycleCounts, s: LimitSettings, now: float) -> Verdict | None:
    res = st.reservations
    key = r.workload_key
    pool = s.cluster.pools.get(r.pool)
    scopes: list[tuple[str, tuple[PeriodCap, ...], Callable[[Reservation], bool]]] = [
        ("global.maxPerPeriod", s.cluster.max_per_period, lambda x: True),
        (f"pool.{r.pool}.maxPerPeriod", pool.max_per_period if pool else (), lambda x: x.pool == r.pool),
        ("node.maxPerPeriod", s.node.max_per_period, lambda x: x.node == r.node),
    ]
    if key is not None:
        scopes.append(("workload.maxPerPeriod", s.workload.max_per_period, lambda x: x.workload == key))
    for limiter, caps, belongs in scopes:
        if caps and (verdict := _window_cap(limiter, caps, [x.at for x in res if belongs(x)], now)):
            return verdict
    return None


def _bucket_scopes(r: EvictionRequest, s: LimitSettings) -> list[tuple[str, TokenBucket]]:
    out = []
    if s.cluster.rate is not None:
        out.append(("global", s.cluster.rate))
    pool = s.cluster.pools.get(r.pool)
    if pool is not None and pool.rate is not None:
        out.append((f"pool/{r.pool}", pool.rate))
    return out


def _level(bucket: Bucket | None, spec: TokenBucket, now: float) -> tuple[float, float]:
    """The bucket's level at ``now`` and the time it is reckoned from (never before its last update,
    so a writer whose clock ran ahead cannot make tokens appear). No bucket yet: full."""
    if bucket is None:
        return float(spec.burst), now
    elapsed = max(0.0, now - bucket.updated_at)
    return min(float(spec.burst), bucket.level + elapsed * spec.per_second), max(now, bucket.updated_at)


def _rates(r: EvictionRequest, st: LimiterState, _: CycleCounts, s: LimitSettings, now: float) -> Verdict | None:
    for scope, spec in _bucket_scopes(r, s):
        level, base = _level(st.buckets.get(scope), spec, now)
        if level < 1.0 - EPSILON:
            limiter = "global.rate" if scope == "global" else f"pool.{r.pool}.rate"
            bucket = st.buckets.get(scope)
            retry = base + (1.0 - level) / spec.per_second
            for _attempt in range(64):  # float rounding: the answer must pass when checked at that very instant
                if _level(bucket, spec, retry)[0] >= 1.0 - EPSILON:
                    break
                retry = math.nextafter(retry, math.inf)
            return Verdict(
                limiter, f"token bucket empty ({level:.2f} of {spec.burst}; {spec.per_minute:g} per minute)", retry
            )
    return None


def _recovering(
    _: EvictionRequest, st: LimiterState, __: CycleCounts, ___: LimitSettings, now: float
) -> Verdict | None:
    until = st.recovering_until
    if until is None or now >= until:
        return None
    return Verdict(
        "state.recovering",
        "the limiter state was corrupt and replaced: evictions it forgot could fill any cap, so none until "
        "every window has passed",
        until,
    )


_STAGES: tuple[Stage, ...] = (_recovering, _lists, _windows, _cycle_caps, _unavailable, _spacing, _periods, _rates)
