"""Invariants of the limiter engine over random settings, request sequences and clocks (hypothesis).

Whatever the settings, the order of requests, the releases of reservations whose eviction did not happen
and clocks a few seconds apart: what was admitted never exceeds any cap in any window (sliding windows,
per cycle, token buckets, cooldown, minInterval, maxUnavailable), never falls outside its time windows,
a blocked request never changes the state, a ``retry_at`` is honest, and the state survives its JSON form
and pruning unchanged in effect. ``tests.unit.limits_oracle`` recounts from the admitted requests and the
settings alone, independently of the engine.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from rebalancer.domain.settings.limits import ListSettings, ServiceLevelSettings, TimeWindow, WindowSettings
from rebalancer.planning.limits import (
    CycleCounts,
    EvictionRequest,
    LimiterState,
    LimitSettings,
    Verdict,
    admit,
    check,
    release,
    reserve,
)
from rebalancer.planning.limits.engine import schedules
from rebalancer.planning.limits.windows import Schedule, next_open
from tests.unit.limits_builders import T0, at, request
from tests.unit.limits_oracle import (
    REPLICAS,
    TIER_LABEL,
    Admitted,
    check_caps,
    check_eligible,
    first_open,
    is_open,
    tokens,
    window_rules,
)

EXAMPLES = 300
PERIODS = ["1m", "5m", "10m", "1h"]
GAPS = [0, 0, 0, 1, 5, 29, 30, 31, 59, 60, 61, 119, 120, 299, 300, 301, 599, 600, 3599, 3600, 3601]
LAGS = [0, 0, 0, 0, 0, 1, 3, 5]
"""How far behind the true time the admitting clock is (NTP corrections, a replica with a slower clock)."""
STARTS = [T0, at("2024-03-30 23:30"), at("2024-10-26 23:30"), at("2024-06-15 12:00"), at("2024-03-10 05:30")]
ZONES = ["UTC", "Europe/Amsterdam", "Europe/Berlin", "Asia/Tokyo", "America/New_York", "Australia/Lord_Howe"]


def _is_window(limiter: str | None) -> bool:
    return limiter is not None and (
        limiter.startswith("window.") or ".window." in limiter or limiter.endswith(".windows")
    )


def _before_windows(limiter: str | None) -> bool:
    """Whether ``limiter`` is judged before the time windows (so blocking says nothing about them)."""
    return limiter is not None and (
        limiter.startswith(("state.", "list.", "serviceLevel.priorityClass")) or limiter == "serviceLevel.tier"
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


def windows(draw: st.DrawFn, allowed: int, blackout: int) -> dict[str, Any]:
    return {
        "allowed": [window(draw) for _ in range(draw(st.integers(0, allowed)))],
        "blackout": [window(draw) for _ in range(draw(st.integers(0, blackout)))],
    }


@st.composite
def limit_settings(draw: st.DrawFn) -> LimitSettings:
    cfg: dict[str, Any] = {
        "global": {**scope(draw), "pools": {p: scope(draw) for p in ("a", "b") if draw(st.booleans())}},
        "node": {"maxPerPeriod": period_caps(draw)},
        "workload": {"maxPerPeriod": period_caps(draw)},
        "namespace": {},
    }
    for key, values in (
        (("node", "maxPerCycle"), st.integers(1, 3)),
        (("node", "cooldown"), st.sampled_from(["30s", "2m", "10m"])),
        (("namespace", "maxPerCycle"), st.integers(1, 4)),
        (("workload", "maxPerCycle"), st.integers(1, 3)),
        (("workload", "minInterval"), st.sampled_from(["30s", "2m", "10m"])),
        (("workload", "maxUnavailable"), st.sampled_from([1, 2, "50%", "34%"])),
    ):
        if (value := maybe(draw, values)) is not None:
            cfg[key[0]][key[1]] = value
    if draw(st.integers(0, 2)) == 0:
        pools = {}
        for pool in ("a", "b"):
            if draw(st.integers(0, 2)) == 0:
                pools[pool] = windows(draw, 1, 1)
                if draw(st.booleans()):
                    pools[pool]["timeZone"] = draw(st.sampled_from(ZONES))
        cfg["windows"] = {"timeZone": draw(st.sampled_from(ZONES)), **windows(draw, 2, 1), "pools": pools}
    if draw(st.integers(0, 2)) == 0:
        silver: dict[str, Any] = {"rule": "windows", "windows": [window(draw) for _ in range(draw(st.integers(1, 2)))]}
        if draw(st.booleans()):
            silver["timeZone"] = draw(st.sampled_from(ZONES))
        cfg["serviceLevel"] = {
            "protectedPriorityClasses": ["critical"],
            "tierLabel": TIER_LABEL,
            "tiers": {"gold": {"rule": "never"}, "silver": silver},
        }
    if draw(st.integers(0, 3)) == 0:
        cfg["lists"] = {"namespaces": {"black": ["frozen"]}, "nodes": {"white": ["n1", "n2", "n3"]}}
    return LimitSettings.model_validate(cfg)


@dataclass(frozen=True)
class Step:
    """After ``gap`` seconds, on a clock ``lag`` seconds behind: ask for ``request``, or give back the
    reservation of the ``release``-th earlier admission not yet given back (its eviction did not happen)."""

    gap: float
    lag: float
    new_cycle: bool
    request: EvictionRequest
    release: int | None


@st.composite
def steps(draw: st.DrawFn, gaps: list[int] = GAPS, nodes: tuple[str, ...] = ("n1", "n2", "n3", "n4")) -> list[Step]:
    out = []
    for i in range(draw(st.integers(1, 60))):
        workload = draw(st.sampled_from(["web", "api", "db", None]))
        tier = draw(st.sampled_from(["gold", "silver", "bronze", None, None, None]))
        req = request(
            f"p{i}",
            node=draw(st.sampled_from(nodes)),
            pool=draw(st.sampled_from(["a", "b", "c"])),
            namespace=draw(st.sampled_from(["shop", "shop", "ops", "frozen"])),
            workload=workload,
            replicas=REPLICAS[workload] if workload is not None and draw(st.integers(0, 9)) else None,
            ready=draw(st.integers(0, 4)) > 0,
            labels={TIER_LABEL: tier} if tier is not None else None,
            priority_class=draw(st.sampled_from(["", "", "", "", "critical"])),
        )
        undo = draw(st.integers(0, 99)) if draw(st.integers(0, 5)) == 0 else None
        gap, lag = draw(st.sampled_from(gaps)), draw(st.sampled_from(LAGS))
        out.append(Step(gap, lag, draw(st.integers(0, 3)) == 0, req, undo))
    return out


def _caps_only(s: LimitSettings) -> LimitSettings:
    """``s`` without the limiters that never read the state (lists, service levels, windows): what pruning
    could change is judged on the rest, cheaply."""
    return s.model_copy(
        update={"windows": WindowSettings(), "lists": ListSettings(), "service_level": ServiceLevelSettings()}
    )


def _same_verdicts(req: EvictionRequest, pruned: LimiterState, full: LimiterState, cycle: CycleCounts,
                   s: LimitSettings, times: list[float]) -> None:  # fmt: skip
    for t in times:
        assert check(req, pruned, cycle, s, t) == check(req, full, cycle, s, t), t


@dataclass
class Run:
    """The limiter state as stored between evictions (pruned as the evictor prunes it), and beside it the
    same history never pruned, to show that pruning changes no verdict."""

    s: LimitSettings
    stored: LimiterState
    full: LimiterState
    cycle: CycleCounts
    cycle_id: int = 0
    changes: int = 0  # admissions and releases so far
    skew: float = 0.0  # the most any clock lagged so far

    def load(self, now: float) -> LimiterState:
        """What an evictor at ``now`` works on: the stored JSON, pruned with the settings' horizons."""
        s = self.s
        return LimiterState.from_json(self.stored.to_json(), now).prune(
            now, s.horizon_seconds, s.period_horizon_seconds
        )


@dataclass(frozen=True)
class Reserved:
    event: Admitted
    before: LimiterState  # the state it was reserved on
    before_full: LimiterState
    changes: int  # Run.changes right after it


PROBES = [0, 1, 31, 61, 121, 301, 601]
"""Seconds after a release at which it is judged: every span the generators use, just past."""


def _never_happened(s: LimitSettings, kept: list[Admitted]) -> LimiterState:
    """The state had only ``kept`` been admitted (in their order, at their times)."""
    state = LimiterState()
    for e in kept:
        state = reserve(e.request, state, s, e.at)
    return state


def _check_given_back(run: Run, r: Reserved, after: LimiterState, kept: list[Admitted], now: float) -> None:
    """After the release no later request passes that would not have passed had ``r`` never been admitted;
    when nothing was admitted or given back since ``r``, exactly what passed before it passes again (on
    clocks apart, at the latest as much later as the skew)."""
    req, caps, none = r.event.request, _caps_only(run.s), CycleCounts()
    never = _never_happened(run.s, kept)
    # a clock behind reserves at the bucket's last update, not at its own time: without ``r`` the later
    # reservations would be reckoned from other instants, so only clocks in step compare exactly
    for scope, spec in run.s.bucket_scopes().items() if run.skew == 0 else ():
        given, due = (tokens(x.buckets.get(scope), spec.per_minute, spec.burst, now) for x in (after, never))
        assert given <= due + 1e-9, f"{scope}: {given} tokens, had it never been taken {due}"
    for t in (now + p for p in PROBES):
        got = check(req, after, none, caps, t)
        if got.allowed:  # a clock ``skew`` behind reads t when it is t + skew
            assert check(req, never, none, caps, t + run.skew).allowed, f"gave back more than it took ({t - now} s on)"
        if run.changes != r.changes:
            continue
        if run.skew == 0:
            assert got.limiter == check(req, r.before, none, caps, t).limiter, f"not as before it ({t - now} s on)"
        elif check(req, r.before, none, caps, t).allowed:  # on a clock behind, the token is back as of its update
            assert check(req, after, none, caps, t + run.skew).allowed, f"kept what it took ({t - now} s on)"


def _release(run: Run, r: Reserved, kept: list[Admitted], now: float) -> bool:
    """Give back ``r`` at ``now`` as the evictor does; whether it was (its record may have been pruned)."""
    state = run.load(now)
    req, at_ = r.event.request, r.event.at
    after = release(req, at_, r.before, state, run.s, now)
    mine = [x for x in state.reservations if x.at == at_ and x.namespace == req.namespace and x.pod == req.pod]
    if after is state:
        assert not mine, "a reservation still recorded was not given back"
        return False
    others = list(state.reservations)
    others.remove(mine[0])
    assert list(after.reservations) == others, "a release touched other reservations"
    assert release(req, at_, r.before, after, run.s, now) is after, "given back twice"
    _check_given_back(run, r, after, kept, now)
    run.changes += 1
    run.stored, run.full = after, release(req, at_, r.before_full, run.full, run.s, now)
    if r.event.cycle == run.cycle_id:
        run.cycle = run.cycle.remove(req)
    return True


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(limit_settings(), steps(), st.sampled_from(STARTS))
def test_no_cap_is_ever_exceeded_and_blocks_change_nothing(s: LimitSettings, plan: list[Step], start: float) -> None:
    drive(s, plan, start)


@st.composite
def one_span(draw: st.DrawFn) -> LimitSettings:
    """One limiter alone: a cap whose span is the whole horizon (what pruning drops is exactly what it stops
    counting), or a token bucket (what a release gives back decides the next eviction)."""
    span = draw(st.sampled_from(["30s", "1m", "2m"]))
    cap = [{"count": draw(st.integers(1, 2)), "period": span}]
    rate = {"perMinute": draw(st.sampled_from([0.5, 1, 2])), "burst": draw(st.integers(1, 2))}
    return LimitSettings.model_validate(
        draw(
            st.sampled_from(
                [
                    {"global": {"rate": rate}},
                    {"node": {"cooldown": span}},
                    {"global": {"pools": {"a": {"rate": rate}}}},
                    {"workload": {"minInterval": span}},
                    {"global": {"maxPerPeriod": cap}},
                    {"global": {"pools": {"a": {"maxPerPeriod": cap}}}},
                    {"node": {"maxPerPeriod": cap}},
                    {"workload": {"maxPerPeriod": cap}},
                ]
            )
        )
    )


@settings(max_examples=EXAMPLES // 2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    one_span(), steps([0, 0, 0, 1, 2, 29, 30, 31, 32, 59, 60, 61, 62, 119, 120, 121, 122], ("n1", "n2")), st.just(T0)
)
def test_one_limiter_alone_holds_on_clocks_a_few_seconds_apart(
    s: LimitSettings, plan: list[Step], start: float
) -> None:
    drive(s, plan, start)


def _check_windows(
    s: LimitSettings, req: EvictionRequest, verdict: Verdict, now: float, opens: dict[tuple[Any, int], float | None]
) -> None:
    """Judged past the windows only when they are open; blocked by one only when closed, until the next open
    moment (``opens`` remembers it per half hour: it is the same from anywhere in one)."""
    rules = window_rules(s, req)
    if not _is_window(verdict.limiter):
        assert _before_windows(verdict.limiter) or is_open(rules, now), "judged past the windows while closed"
        return
    assert not is_open(rules, now), f"{verdict.limiter} blocks an open moment"
    key = (rules, int(now) // 1800)
    if key not in opens:
        opens[key] = first_open(rules, now)
    assert verdict.retry_at == opens[key], "not the next open moment"


def drive(s: LimitSettings, plan: list[Step], start: float) -> None:
    """Run ``plan`` through the engine as the evictor would, asserting every invariant on the way and at the
    end."""
    run = Run(s, LimiterState(), LimiterState(), CycleCounts())
    caps = _caps_only(s)
    events: list[Admitted] = []
    live: list[Reserved] = []
    opens: dict[tuple[Any, int], float | None] = {}
    true_time = start
    for step in plan:
        true_time += step.gap
        now = true_time - step.lag
        run.skew = max(run.skew, step.lag)
        if step.new_cycle:
            run.cycle, run.cycle_id = CycleCounts(), run.cycle_id + 1
        if step.release is not None and live:
            reserved = live.pop(step.release % len(live))
            kept = [e for e in events if not e.released and e is not reserved.event]
            if _release(run, reserved, kept, now):
                reserved.event.released = True
                event("released")
            continue
        state, cycle = run.load(now), run.cycle
        verdict, new_state, new_cycle = admit(step.request, state, cycle, s, now)
        assert verdict == check(step.request, state, cycle, s, now)  # deterministic given now
        # pruning changes no verdict now or later (the windows, lists and service levels read no state)
        _same_verdicts(step.request, state, run.full, cycle, caps, [now, now + step.gap, verdict.retry_at or now])
        event(
            verdict.limiter.split("[")[0].replace(".a.", ".<pool>.").replace(".b.", ".<pool>.")
            if verdict.limiter
            else "allowed"
        )
        _check_windows(s, step.request, verdict, now, opens)
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
        events.append(Admitted(now, run.cycle_id, step.request))
        run.changes += 1
        live.append(Reserved(events[-1], state, run.full, run.changes))
        run.stored, run.full, run.cycle = new_state, reserve(step.request, run.full, s, now), new_cycle
    check_caps(s, [e for e in events if not e.released], run.skew)
    check_eligible(s, events)


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
