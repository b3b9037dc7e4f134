"""Invariants of the limiter engine over random settings, request sequences and clocks (hypothesis).

Whatever the settings and the order of requests: what was admitted never exceeds any cap in any window
(sliding windows, per cycle, token buckets, cooldown, minInterval, maxUnavailable), a blocked request never
changes the state, a ``retry_at`` is honest, and the state survives its JSON form and pruning unchanged
in effect. The checks below recount from the admitted requests alone, independently of the engine.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from rebalancer.domain.settings.limits import TimeWindow
from rebalancer.planning.limits import CycleCounts, EvictionRequest, LimiterState, LimitSettings, admit, check
from rebalancer.planning.limits.engine import schedules
from rebalancer.planning.limits.windows import Schedule, next_open
from tests.unit.limits_builders import T0, at, request

EXAMPLES = 500
PERIODS = ["1m", "5m", "10m", "1h"]
GAPS = [0, 0, 0, 1, 5, 29, 30, 31, 59, 60, 61, 119, 120, 299, 300, 301, 599, 600, 3599, 3600, 3601]
STARTS = [T0, at("2024-03-30 23:30"), at("2024-10-26 23:30"), at("2024-06-15 12:00")]
ZONES = ["UTC", "Europe/Amsterdam", "Asia/Tokyo", "America/New_York", "Australia/Lord_Howe"]


def _is_window(limiter: str | None) -> bool:
    return limiter is not None and (
        limiter.startswith("window.") or ".window." in limiter or limiter.endswith(".windows")
    )


def maybe(draw: st.DrawFn, value: st.SearchStrategy[Any]) -> Any:
    return draw(value) if draw(st.booleans()) else None


def period_caps(draw: st.DrawFn) -> list[dict[str, Any]]:
    periods = draw(st.lists(st.sampled_from(PERIODS), max_size=2, unique=True))
    return [{"count": draw(st.integers(1, 6)), "period": p} for p in periods]


def scope(draw: st.DrawFn) -> dict[str, Any]:
    out: dict[str, Any] = {"maxPerPeriod": period_caps(draw)}
    if (cap := maybe(draw, st.integers(1, 5))) is not None:
        out["maxPerCycle"] = cap
    if draw(st.booleans()):
        out["rate"] = {"perMinute": draw(st.sampled_from([0.3, 1, 2, 6])), "burst": draw(st.integers(1, 4))}
    return out


def window(draw: st.DrawFn) -> dict[str, Any]:
    start, end = draw(st.lists(st.integers(0, 47), min_size=2, max_size=2, unique=True))
    days = draw(st.lists(st.sampled_from(["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]), min_size=1, unique=True))
    clock = [f"{m // 2:02d}:{30 * (m % 2):02d}" for m in (start, end)]
    return {"days": days, "start": clock[0], "end": clock[1]}


@st.composite
def limit_settings(draw: st.DrawFn) -> LimitSettings:
    cfg: dict[str, Any] = {
        "global": {**scope(draw), "pools": {p: scope(draw) for p in ("a", "b") if draw(st.booleans())}},
        "node": {"maxPerPeriod": period_caps(draw)},
        "workload": {"maxPerPeriod": period_caps(draw)},
    }
    for key, values in (
        (("node", "maxPerCycle"), st.integers(1, 3)),
        (("node", "cooldown"), st.sampled_from(["30s", "2m", "10m"])),
        (("workload", "maxPerCycle"), st.integers(1, 3)),
        (("workload", "minInterval"), st.sampled_from(["30s", "2m", "10m"])),
        (("workload", "maxUnavailable"), st.sampled_from([1, 2, "50%", "34%"])),
    ):
        if (value := maybe(draw, values)) is not None:
            cfg[key[0]][key[1]] = value
    if draw(st.integers(0, 3)) == 0:
        cfg["windows"] = {
            "timeZone": draw(st.sampled_from(ZONES)),
            "allowed": [window(draw) for _ in range(draw(st.integers(0, 2)))],
            "blackout": [window(draw) for _ in range(draw(st.integers(0, 1)))],
        }
    if draw(st.integers(0, 3)) == 0:
        cfg["lists"] = {"namespaces": {"black": ["frozen"]}, "nodes": {"white": ["n1", "n2", "n3"]}}
    return LimitSettings.model_validate(cfg)


@dataclass(frozen=True)
class Step:
    gap: float
    new_cycle: bool
    request: EvictionRequest


REPLICAS = {"web": (4, 4, 0), "api": (3, 2, 1), "db": (2, 2, 0)}


@st.composite
def steps(draw: st.DrawFn) -> list[Step]:
    out = []
    for i in range(draw(st.integers(1, 60))):
        workload = draw(st.sampled_from(["web", "api", "db", None]))
        req = request(
            f"p{i}",
            node=draw(st.sampled_from(["n1", "n2", "n3", "n4"])),
            pool=draw(st.sampled_from(["a", "b", "c"])),
            namespace=draw(st.sampled_from(["shop", "shop", "frozen"])),
            workload=workload,
            replicas=REPLICAS[workload] if workload is not None and draw(st.integers(0, 9)) else None,
            ready=draw(st.integers(0, 4)) > 0,
        )
        out.append(Step(draw(st.sampled_from(GAPS)), draw(st.integers(0, 3)) == 0, req))
    return out


@dataclass(frozen=True)
class Admitted:
    at: float
    cycle: int
    request: EvictionRequest


def _check_sliding(events: list[Admitted], caps: Any, key: Any) -> None:
    groups: dict[Any, list[float]] = defaultdict(list)
    for e in events:
        if (k := key(e.request)) is not None:
            groups[k].append(e.at)
    for times in groups.values():
        times.sort()
        for cap in caps:
            span = cap.period.total_seconds()
            for t in times:
                assert sum(t <= u < t + span for u in times) <= cap.count, (cap, times)


def _check_per_cycle(events: list[Admitted], cap: int | None, key: Any) -> None:
    if cap is not None:
        counts = Counter((e.cycle, key(e.request)) for e in events if key(e.request) is not None)
        assert max(counts.values(), default=0) <= cap


def _check_bucket(times: list[float], per_minute: float, burst: int) -> None:
    times = sorted(times)
    for i in range(len(times)):
        for j in range(i, len(times)):
            assert j - i + 1 <= burst + per_minute / 60 * (times[j] - times[i]) + 1e-6, (times, per_minute, burst)


def _check_spacing(events: list[Admitted], span: timedelta | None, key: Any) -> None:
    if span is None:
        return
    last: dict[Any, float] = {}
    for e in events:
        k = key(e.request)
        if k is None:
            continue
        if k in last:
            assert e.at - last[k] >= span.total_seconds()
        last[k] = e.at


def _check_caps(s: LimitSettings, events: list[Admitted]) -> None:
    c = s.cluster

    def everything(_: EvictionRequest) -> str:
        return "all"

    _check_sliding(events, c.max_per_period, everything)
    _check_per_cycle(events, c.max_per_cycle, everything)
    if c.rate is not None:
        _check_bucket([e.at for e in events], c.rate.per_minute, c.rate.burst)
    for name, pool in c.pools.items():

        def in_pool(r: EvictionRequest, name: str = name) -> str | None:
            return name if r.pool == name else None

        _check_sliding(events, pool.max_per_period, in_pool)
        _check_per_cycle(events, pool.max_per_cycle, in_pool)
        if pool.rate is not None:
            _check_bucket([e.at for e in events if e.request.pool == name], pool.rate.per_minute, pool.rate.burst)

    def node(r: EvictionRequest) -> str:
        return r.node

    def workload(r: EvictionRequest) -> str | None:
        return r.workload_key

    _check_sliding(events, s.node.max_per_period, node)
    _check_per_cycle(events, s.node.max_per_cycle, node)
    _check_spacing(events, s.node.cooldown, node)
    _check_sliding(events, s.workload.max_per_period, workload)
    _check_per_cycle(events, s.workload.max_per_cycle, workload)
    _check_spacing(events, s.workload.min_interval, workload)
    if s.workload.max_unavailable is not None:
        ready_evicted = Counter((e.cycle, e.request.workload_key) for e in events if e.request.pod_ready)
        for (_, key), n in ready_evicted.items():
            if key is None:
                continue
            desired, ready, unavailable = REPLICAS[key.rsplit("/", 1)[1]]
            limit = s.workload.unavailable_allowed(desired)
            assert limit is not None and max(desired - ready, unavailable, 0) + n <= limit
    for e in events:
        assert e.request.namespace != "frozen" or not s.lists.namespaces.black
        assert not s.lists.nodes.white or e.request.node in s.lists.nodes.white


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(limit_settings(), steps(), st.sampled_from(STARTS))
def test_no_cap_is_ever_exceeded_and_blocks_change_nothing(s: LimitSettings, plan: list[Step], now: float) -> None:
    state, cycle, cycle_id = LimiterState(), CycleCounts(), 0
    events: list[Admitted] = []
    horizon = s.horizon_seconds
    for step in plan:
        now += step.gap
        if step.new_cycle:
            cycle, cycle_id = CycleCounts(), cycle_id + 1
        # what is persisted between runs is the JSON, pruned to the horizon: it must decide the same
        state = LimiterState.from_json(state.to_json(), now).prune(now, horizon)
        verdict, new_state, new_cycle = admit(step.request, state, cycle, s, now)
        assert verdict == check(step.request, state, cycle, s, now)  # deterministic given now
        event(
            verdict.limiter.split("[")[0].replace(".a.", ".<pool>.").replace(".b.", ".<pool>.")
            if verdict.limiter
            else "allowed"
        )
        if not verdict.allowed:
            assert new_state is state and new_cycle is cycle
            assert verdict.limiter and verdict.reason
            if verdict.retry_at is not None:
                assert verdict.retry_at > now
                later = check(step.request, state, cycle, s, verdict.retry_at)
                assert later.limiter != verdict.limiter
                if _is_window(verdict.limiter):
                    assert not _is_window(later.limiter)
            continue
        assert len(new_state.reservations) == len(state.reservations) + 1
        assert new_cycle.total == cycle.total + 1
        events.append(Admitted(now, cycle_id, step.request))
        state, cycle = new_state, new_cycle
    _check_caps(s, events)


# ------------------------------------------------------------------------------------ next_open


@st.composite
def schedule_sets(draw: st.DrawFn) -> tuple[tuple[Schedule, ...], float]:
    out = []
    for i in range(draw(st.integers(1, 2))):
        allowed = tuple(TimeWindow.model_validate(window(draw)) for _ in range(draw(st.integers(1, 3))))
        blackout = tuple(TimeWindow.model_validate(window(draw)) for _ in range(draw(st.integers(0, 2))))
        out.append(Schedule(f"s{i}", ZoneInfo(draw(st.sampled_from(ZONES))), allowed, blackout))
    start = draw(st.sampled_from([*STARTS, at("2024-04-06 14:00"), at("2024-11-03 05:00"), at("2024-10-05 15:00")]))
    return tuple(out), start + draw(st.integers(0, 3 * 86400))


@settings(max_examples=300, deadline=None)
@given(schedule_sets())
def test_next_open_is_the_first_open_instant(case: tuple[tuple[Schedule, ...], float]) -> None:
    sets, now = case

    def open_at(t: float) -> bool:
        return all(s.closed(t) is None for s in sets)

    assume(not open_at(now))  # next_open answers a closed schedule: when does it open
    found = next_open(sets, now)
    minute = 60 * (int(now) // 60 + 1)  # every zone here is offset by whole half hours: minutes are boundaries
    end = found if found is not None else now + 8 * 86400
    rng = random.Random(int(now))
    # every minute mark in the first day, then a sample of the rest
    marks = range(minute, int(min(end, now + 86400)), 60)
    more = [rng.uniform(now + 86400, end) for _ in range(300)] if end > now + 86400 else []
    assert not any(open_at(t) for t in [*marks, *more] if now < t < end)
    if found is not None:
        assert open_at(found) and found > now


def test_schedules_follow_the_request() -> None:
    s = LimitSettings.model_validate(
        {
            "windows": {"allowed": [{"start": "01:00", "end": "02:00"}], "pools": {"gpu": {"blackout": []}}},
            "serviceLevel": {
                "tierLabel": "t",
                "tiers": {"x": {"rule": "windows", "windows": [{"start": "03:00", "end": "04:00"}]}},
            },
        }
    )
    assert [x.name for x in schedules(request(pool="gpu"), s)] == ["window"]
    assert [x.name for x in schedules(request(labels={"t": "x"}), s)] == ["serviceLevel.tier", "window"]
