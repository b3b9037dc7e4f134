"""What the limiters promise, recounted from the settings and a record of admitted evictions alone.

The property tests drive the engine and keep a record of what it admitted; the checks here never call
the engine or its helpers: caps are recounted from the record, windows are read from the settings on
the wall clock that ``zoneinfo`` gives. They assume what the generators produce: windows that start and
end on the hour or half hour, in zones whose offsets are whole half hours, so that whether a request may
be evicted is constant within each half hour of UTC.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from rebalancer.domain.settings.limits import PeriodCap, TimeWindow
from rebalancer.planning.limits import EvictionRequest, LimitSettings
from rebalancer.planning.limits.state import Bucket

SLOT = 1800
"""Every window boundary and offset change of the generated zones falls on a multiple of this (UTC)."""
SEARCH = 8 * 86400
"""How far ahead the engine promises to find an open window."""
TIER_LABEL = "tier"

REPLICAS = {"web": (4, 4, 0), "api": (3, 2, 1), "db": (2, 2, 0)}
"""(desired, ready, unavailable) of each generated workload."""


@dataclass
class Admitted:
    """An eviction the engine admitted at ``at`` (the admitting clock) in cycle ``cycle``."""

    at: float
    cycle: int
    request: EvictionRequest
    released: bool = False


# ------------------------------------------------------------------------------------------- windows


def _minute(text: str) -> int:
    hours, minutes = text.split(":")
    return int(hours) * 60 + int(minutes)


def _in_window(window: TimeWindow, local: datetime) -> bool:
    days = {["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"].index(d) for d in window.days}
    minute, today, yesterday = local.hour * 60 + local.minute, local.weekday(), (local.weekday() + 6) % 7
    start, end = _minute(window.start), _minute(window.end)
    if start < end:
        return today in days and start <= minute < end
    return (today in days and minute >= start) or (yesterday in days and minute < end)


Rules = tuple[tuple[str, tuple[TimeWindow, ...], tuple[TimeWindow, ...]], ...]


def window_rules(s: LimitSettings, r: EvictionRequest) -> Rules:
    """(zone, allowed, blackout) of every window that applies to ``r``: the cluster's, its pool's and its
    service tier's (read from the settings as the user guide describes them)."""
    w = s.windows
    out = [(w.time_zone, w.allowed, w.blackout)]
    if (pool := w.pools.get(r.pool)) is not None:
        out.append((pool.time_zone or w.time_zone, pool.allowed, pool.blackout))
    tier = s.service_level.tiers.get(r.pod_labels.get(TIER_LABEL, ""))
    if tier is not None and tier.rule == "windows":
        out.append((tier.time_zone or w.time_zone, tier.windows, ()))
    return tuple(out)


def is_open(rules: Rules, at: float) -> bool:
    """No blackout holds ``at`` and, where allowed windows are listed, one of them does."""
    for zone, allowed, blackout in rules:
        local = datetime.fromtimestamp(at, ZoneInfo(zone))
        if any(_in_window(w, local) for w in blackout):
            return False
        if allowed and not any(_in_window(w, local) for w in allowed):
            return False
    return True


def first_open(rules: Rules, now: float) -> float | None:
    """The first instant after ``now`` (within :data:`SEARCH`) at which ``rules`` are open: being constant
    within each half hour, they can only open at a half-hour mark."""
    mark = (int(now) // SLOT + 1) * SLOT
    while mark <= now + SEARCH:
        if is_open(rules, mark):
            return mark
        mark += SLOT
    return None


# ---------------------------------------------------------------------------------------------- caps


Key = Callable[[EvictionRequest], Any]


def _times_by(events: list[Admitted], key: Key) -> list[list[float]]:
    """The admission times per scope ``key`` names (requests it names None are out of scope), each sorted."""
    groups: dict[Any, list[float]] = defaultdict(list)
    for e in events:
        if (k := key(e.request)) is not None:
            groups[k].append(e.at)
    return [sorted(times) for times in groups.values()]


def _sliding(events: list[Admitted], caps: Iterable[PeriodCap], key: Key) -> None:
    for times in _times_by(events, key):
        for cap in caps:
            span = cap.period.total_seconds()
            for t in times:
                assert sum(t <= u < t + span for u in times) <= cap.count, (cap, times)


def _per_cycle(events: list[Admitted], cap: int | None, key: Key) -> None:
    if cap is not None:
        counts = Counter((e.cycle, key(e.request)) for e in events if key(e.request) is not None)
        assert max(counts.values(), default=0) <= cap, (cap, counts)


def _bucket(times: list[float], per_minute: float, burst: int, skew: float) -> None:
    """Never more than ``burst`` plus what refilled since, between any two admissions. The engine reckons a
    bucket from its last update, never before (a clock that runs behind cannot take tokens from the past):
    an admission spends its token at the latest admission time seen so far, so that is the time counted.
    One whose reservation was given back moved that time too: ``skew`` (how far any clock lagged) covers it."""
    spent, latest = [], float("-inf")
    for t in times:
        latest = max(latest, t)
        spent.append(latest)
    for i in range(len(spent)):
        for j in range(i, len(spent)):
            allowed = burst + per_minute / 60 * (spent[j] - spent[i] + skew) + 1e-6
            assert j - i + 1 <= allowed, (spent, per_minute, burst)


def tokens(bucket: Bucket | None, per_minute: float, burst: int, now: float) -> float:
    """A token bucket's level at ``now``: full when it has never been used."""
    if bucket is None:
        return float(burst)
    return min(float(burst), bucket.level + max(0.0, now - bucket.updated_at) * per_minute / 60)


def _spacing(events: list[Admitted], span: timedelta | None, key: Key) -> None:
    if span is None:
        return
    for times in _times_by(events, key):
        assert all(b - a >= span.total_seconds() for a, b in itertools.pairwise(times)), (span, times)


def check_caps(s: LimitSettings, events: list[Admitted], skew: float = 0.0) -> None:
    """Every cap holds over ``events`` (the admissions not released, in admission order), whatever order
    their times are in, on clocks up to ``skew`` seconds apart."""
    c = s.cluster

    def everything(_: EvictionRequest) -> str:
        return "all"

    _sliding(events, c.max_per_period, everything)
    _per_cycle(events, c.max_per_cycle, everything)
    if c.rate is not None:
        _bucket([e.at for e in events], c.rate.per_minute, c.rate.burst, skew)
    for name, pool in c.pools.items():

        def in_pool(r: EvictionRequest, name: str = name) -> str | None:
            return name if r.pool == name else None

        _sliding(events, pool.max_per_period, in_pool)
        _per_cycle(events, pool.max_per_cycle, in_pool)
        if pool.rate is not None:
            in_it = [e.at for e in events if e.request.pool == name]
            _bucket(in_it, pool.rate.per_minute, pool.rate.burst, skew)

    def node(r: EvictionRequest) -> str:
        return r.node

    def workload(r: EvictionRequest) -> str | None:
        return r.workload_key

    def namespace(r: EvictionRequest) -> str:
        return r.namespace

    _sliding(events, s.node.max_per_period, node)
    _per_cycle(events, s.node.max_per_cycle, node)
    _spacing(events, s.node.cooldown, node)
    _per_cycle(events, s.namespace.max_per_cycle, namespace)
    _sliding(events, s.workload.max_per_period, workload)
    _per_cycle(events, s.workload.max_per_cycle, workload)
    _spacing(events, s.workload.min_interval, workload)
    if s.workload.max_unavailable is not None:
        ready_evicted = Counter((e.cycle, e.request.workload_key) for e in events if e.request.pod_ready)
        for (_, key), n in ready_evicted.items():
            if key is None:
                continue
            desired, ready, unavailable = REPLICAS[key.rsplit("/", 1)[1]]
            limit = s.workload.unavailable_allowed(desired)
            assert limit is not None and max(desired - ready, unavailable, 0) + n <= limit


def check_eligible(s: LimitSettings, events: list[Admitted]) -> None:
    """Every admission (released or not) passed the lists, the service levels and its windows."""
    for e in events:
        r = e.request
        assert r.namespace not in s.lists.namespaces.black
        assert not s.lists.nodes.white or r.node in s.lists.nodes.white
        assert r.priority_class not in s.service_level.protected_priority_classes
        tier = s.service_level.tiers.get(r.pod_labels.get(TIER_LABEL, ""))
        assert tier is None or tier.rule != "never"
        assert is_open(window_rules(s, r), e.at), (e.at, r.pool, r.pod_labels)
