"""Caps with a fake clock: token buckets, sliding windows, per-cycle caps, cooldown, maxUnavailable,
minInterval, and the order in which limiters answer."""

from __future__ import annotations

from typing import Any

import pytest

from rebalancer.planning.limits import CycleCounts, LimiterState, check, release, reserve
from tests.unit.limits_builders import DAY, HOUR, T0, Limiter, limits, request

# ------------------------------------------------------------------------------------- token bucket


def test_bucket_allows_the_burst_then_one_token_per_refill() -> None:
    lim = Limiter(limits("global: {rate: {perMinute: 2, burst: 5}}"))
    assert all(v.allowed for v in lim.admit_many(5))
    blocked = lim.admit(request("p6"))
    assert blocked.limiter == "global.rate"
    assert blocked.retry_at == pytest.approx(T0 + 30)
    lim.advance(29.9)
    assert lim.admit(request("p6")).limiter == "global.rate"
    lim.advance(0.1)
    assert lim.admit(request("p6")).allowed
    assert lim.admit(request("p7")).retry_at == pytest.approx(T0 + 60)


def test_bucket_refill_is_capped_at_burst() -> None:
    lim = Limiter(limits("global: {rate: {perMinute: 2, burst: 5}}"))
    lim.admit_many(5)
    lim.advance(10 * HOUR)  # 1,200 tokens' worth of time, but the bucket holds 5
    assert [v.allowed for v in lim.admit_many(6)] == [True] * 5 + [False]


def test_bucket_checked_at_its_own_retry_at_passes() -> None:
    lim = Limiter(limits("global: {rate: {perMinute: 0.7, burst: 1}}"))
    for _ in range(20):
        assert lim.admit().allowed
        blocked = lim.admit(request("other"))
        assert blocked.retry_at is not None
        lim.now = blocked.retry_at


def test_pool_bucket_is_separate_and_named() -> None:
    lim = Limiter(limits("global: {pools: {gpu: {rate: {perMinute: 1, burst: 1}}}}"))
    assert lim.admit(request("a", pool="gpu")).allowed
    blocked = lim.admit(request("b", pool="gpu"))
    assert blocked.limiter == "pool.gpu.rate"
    assert blocked.retry_at == pytest.approx(T0 + 60)
    assert lim.admit(request("c", pool="general")).allowed
    assert set(lim.state.buckets) == {"pool/gpu"}


def test_bucket_from_a_writer_with_a_clock_ahead_gives_no_extra_tokens() -> None:
    settings = limits("global: {rate: {perMinute: 1, burst: 1}}")
    state = reserve(request(), LimiterState(), settings, T0 + 120)  # written by a clock 2 minutes ahead
    blocked = check(request("b"), state, CycleCounts(), settings, T0)
    assert blocked.limiter == "global.rate"
    assert blocked.retry_at == pytest.approx(T0 + 180)


# ---------------------------------------------------------------------------------- sliding windows

TWO_WINDOWS = "global: {maxPerPeriod: [{count: 20, period: 1h}, {count: 100, period: 1d}]}"


def test_hourly_window_at_its_edges() -> None:
    lim = Limiter(limits(TWO_WINDOWS))
    for _ in range(20):
        assert lim.admit_many(1)[0].allowed
        lim.advance(60)  # 20 evictions from T0 to T0 + 19 min
    blocked = lim.admit(request("x"))
    assert (blocked.limiter, blocked.retry_at) == ("global.maxPerPeriod[1h]", T0 + HOUR)
    assert "20 evictions in the last 1h" in blocked.reason
    lim.now = T0 + HOUR - 0.001
    assert lim.admit(request("x")).limiter == "global.maxPerPeriod[1h]"
    lim.now = T0 + HOUR  # the first eviction leaves the window exactly one hour later
    assert lim.admit(request("x")).allowed
    assert lim.admit(request("y")).retry_at == T0 + HOUR + 60


def test_daily_window_at_its_edges() -> None:
    lim = Limiter(limits(TWO_WINDOWS))
    for hour in range(5):  # 20 per hour for five hours: 100 in the day, no hourly cap broken
        lim.now = T0 + hour * HOUR
        assert all(v.allowed for v in lim.admit_many(20))
    lim.now = T0 + 5 * HOUR
    blocked = lim.admit(request("x"))
    assert (blocked.limiter, blocked.retry_at) == ("global.maxPerPeriod[1d]", T0 + DAY)
    lim.now = T0 + DAY - 1
    assert lim.admit(request("x")).limiter == "global.maxPerPeriod[1d]"
    lim.now = T0 + DAY  # the 20 evictions at T0 leave together
    assert all(v.allowed for v in lim.admit_many(20))
    assert lim.admit(request("y")).limiter == "global.maxPerPeriod[1h]"


@pytest.mark.parametrize(
    ("yaml_text", "kwargs", "other", "limiter"),
    [
        ("global: {pools: {gpu: {maxPerPeriod: [{count: 2, period: 1h}]}}}", {"pool": "gpu"}, {"pool": "cpu"},
         "pool.gpu.maxPerPeriod[1h]"),
        ("node: {maxPerPeriod: [{count: 2, period: 1h}]}", {"node": "n1"}, {"node": "n2"}, "node.maxPerPeriod[1h]"),
        ("workload: {maxPerPeriod: [{count: 2, period: 1h}]}", {"workload": "web"}, {"workload": "api"},
         "workload.maxPerPeriod[1h]"),
    ],
)  # fmt: skip
def test_scoped_windows_count_only_their_scope(
    yaml_text: str, kwargs: dict[str, Any], other: dict[str, Any], limiter: str
) -> None:
    lim = Limiter(limits(yaml_text))
    assert all(v.allowed for v in lim.admit_many(2, **kwargs))
    lim.advance(10)
    blocked = lim.admit(request("x", **kwargs))
    assert (blocked.limiter, blocked.retry_at) == (limiter, T0 + HOUR)
    assert lim.admit(request("y", **other)).allowed


# ---------------------------------------------------------------------------------- per-cycle caps


@pytest.mark.parametrize(
    ("yaml_text", "same", "other", "limiter"),
    [
        ("global: {maxPerCycle: 3}", {}, None, "global.maxPerCycle"),
        ("global: {pools: {gpu: {maxPerCycle: 3}}}", {"pool": "gpu"}, {"pool": "cpu"}, "pool.gpu.maxPerCycle"),
        ("node: {maxPerCycle: 3}", {"node": "n1"}, {"node": "n2"}, "node.maxPerCycle"),
        ("workload: {maxPerCycle: 3}", {"workload": "web"}, {"workload": "api"}, "workload.maxPerCycle"),
        ("namespace: {maxPerCycle: 3}", {"namespace": "shop"}, {"namespace": "blog"}, "namespace.maxPerCycle"),
    ],
)
def test_per_cycle_caps(yaml_text: str, same: dict[str, Any], other: dict[str, Any] | None, limiter: str) -> None:
    lim = Limiter(limits(yaml_text))
    assert all(v.allowed for v in lim.admit_many(3, **same))
    blocked = lim.admit(request("x", **same))
    assert (blocked.limiter, blocked.retry_at) == (limiter, None)
    if other is not None:
        assert lim.admit(request("y", **other)).allowed
    lim.new_cycle()  # per-cycle caps start again, whatever the clock says
    assert lim.admit(request("x", **same)).allowed


# ------------------------------------------------------------------------------ cooldown, interval


def test_node_cooldown() -> None:
    lim = Limiter(limits("node: {cooldown: 10m}"))
    assert lim.admit(request("a", node="n1")).allowed
    blocked = lim.admit(request("b", node="n1"))
    assert (blocked.limiter, blocked.retry_at) == ("node.cooldown", T0 + 600)
    assert lim.admit(request("c", node="n2")).allowed
    lim.now = T0 + 599
    assert lim.admit(request("b", node="n1")).limiter == "node.cooldown"
    lim.now = T0 + 600
    assert lim.admit(request("b", node="n1")).allowed


def test_workload_min_interval() -> None:
    lim = Limiter(limits("workload: {minInterval: 5m}"))
    assert lim.admit(request("a", workload="web")).allowed
    lim.advance(120)
    blocked = lim.admit(request("b", workload="web"))
    assert (blocked.limiter, blocked.retry_at) == ("workload.minInterval", T0 + 300)
    assert lim.admit(request("c", workload="api")).allowed
    assert lim.admit(request("d", workload=None)).allowed  # a pod without a workload has no interval
    lim.now = T0 + 300
    assert lim.admit(request("b", workload="web")).allowed


# --------------------------------------------------------------------------------- maxUnavailable


@pytest.mark.parametrize(
    ("max_unavailable", "replicas", "ready", "allowed_in_cycle"),
    [
        (1, (3, 3, 0), True, 1),
        (2, (3, 3, 0), True, 2),
        (1, (3, 2, 0), True, 0),  # one replica missing already
        (1, (3, 3, 1), True, 0),  # one pod exists but is not ready
        (2, (5, 4, 1), True, 1),  # the same pod counted once, not twice
        ("25%", (3, 3, 0), True, 0),  # 0.75 rounds down to 0: never
        ("25%", (4, 4, 0), True, 1),
        ("50%", (5, 5, 0), True, 2),  # 2.5 -> 2
        ("100%", (2, 2, 0), True, 2),
        ("34%", (3, 3, 0), True, 1),  # 1.02 -> 1
    ],
)
def test_max_unavailable(
    max_unavailable: int | str, replicas: tuple[int, int, int], ready: bool, allowed_in_cycle: int
) -> None:
    lim = Limiter(limits(f"workload: {{maxUnavailable: {max_unavailable!r}}}".replace("'", '"')))
    verdicts = lim.admit_many(9, replicas=replicas, ready=ready)
    assert sum(v.allowed for v in verdicts) == allowed_in_cycle
    assert all(v.allowed for v in verdicts[:allowed_in_cycle])
    for v in verdicts[allowed_in_cycle:]:
        assert (v.limiter, v.retry_at) == ("workload.maxUnavailable", None)


def test_evicting_a_pod_that_is_not_ready_makes_nothing_more_unavailable() -> None:
    lim = Limiter(limits("workload: {maxUnavailable: 1}"))
    assert lim.admit(request("sick", replicas=(3, 2, 1), ready=False)).allowed
    assert lim.admit(request("healthy", replicas=(3, 2, 1))).limiter == "workload.maxUnavailable"
    lim.new_cycle()
    assert lim.admit(request("sick-too", replicas=(3, 2, 1), ready=False)).allowed


def test_max_unavailable_counts_per_workload_and_blocks_unknown_counts() -> None:
    lim = Limiter(limits("workload: {maxUnavailable: 1}"))
    assert lim.admit(request("a", workload="web", replicas=(3, 3, 0))).allowed
    assert lim.admit(request("b", workload="api", replicas=(3, 3, 0))).allowed
    unknown = lim.admit(request("c", workload="db", replicas=None))
    assert unknown.limiter == "workload.maxUnavailable" and "unknown" in unknown.reason
    assert lim.admit(request("d", workload=None)).allowed  # bare pods: protections decide, not this cap


# --------------------------------------------------------------------------------------- the order


def test_limiters_answer_cheapest_and_most_explainable_first() -> None:
    settings = limits(
        """
        global: {maxPerCycle: 1, rate: {perMinute: 1, burst: 1}}
        windows: {blackout: [{start: "00:00", end: "01:00"}]}
        lists: {namespaces: {black: [frozen]}}
        """
    )
    state = reserve(request(), LimiterState(), settings, T0 - 10)
    cycle = CycleCounts().add(request())
    assert check(request("x", namespace="frozen"), state, cycle, settings, T0).limiter == "list.namespace.black"
    assert check(request("x"), state, cycle, settings, T0).limiter == "window.blackout"
    assert check(request("x"), state, cycle, settings, T0 + HOUR).limiter == "global.maxPerCycle"
    assert check(request("x"), state, CycleCounts(), settings, T0 + HOUR).limiter is None
    state = reserve(request("x"), state, settings, T0 + HOUR)
    assert check(request("y"), state, CycleCounts(), settings, T0 + HOUR + 10).limiter == "global.rate"


def test_nothing_configured_allows_everything() -> None:
    lim = Limiter(limits())
    assert all(v.allowed and v.limiter is None for v in lim.admit_many(50))
    assert lim.state.buckets == {}


# ------------------------------------------------------------------------- release (did not happen)


def test_release_gives_back_the_token_the_window_slot_and_the_cooldown() -> None:
    settings = limits(
        "global: {rate: {perMinute: 1, burst: 1}, maxPerPeriod: [{count: 1, period: 1h}]}\n"
        "node: {cooldown: 10m}\nworkload: {minInterval: 30m}"
    )
    before = LimiterState(node_last_eviction={"n1": T0 - DAY}, workload_last_eviction={})
    refused = request("p1")
    state = reserve(refused, before, settings, T0)
    assert check(request("p2"), state, CycleCounts(), settings, T0 + 1).limiter is not None

    given_back = release(refused, T0, before, state, settings, T0 + 1)
    assert given_back.reservations == ()
    assert given_back.buckets["global"].level == pytest.approx(1.0)  # back to the burst, no more
    assert given_back.node_last_eviction == {"n1": T0 - DAY}  # the cooldown runs from the earlier eviction
    assert "Deployment/default/web" not in given_back.workload_last_eviction
    assert check(request("p2"), given_back, CycleCounts(), settings, T0 + 1).allowed
    assert release(refused, T0, before, given_back, settings, T0 + 2) is given_back  # never twice


def test_release_keeps_what_a_later_eviction_set() -> None:
    settings = limits("global: {rate: {perMinute: 6, burst: 2}}\nnode: {cooldown: 10m}")
    refused, later = request("p1"), request("p2", workload="api")
    state = reserve(refused, LimiterState(), settings, T0)
    state = reserve(later, state, settings, T0 + 5)  # another instance evicted from n1 since
    given_back = release(refused, T0, LimiterState(), state, settings, T0 + 5)
    assert [r.pod for r in given_back.reservations] == ["p2"]
    assert given_back.node_last_eviction == {"n1": T0 + 5}
    # as if p1 never was: the bucket stayed full (2) through the 5 s of refill, and p2 took one
    assert given_back.buckets["global"].level == pytest.approx(1.0)
