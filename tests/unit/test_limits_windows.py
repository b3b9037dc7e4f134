"""Time windows with a fake clock: across midnight, time zones, DST change days, blackouts, pools, tiers."""

from __future__ import annotations

from typing import Any

import pytest

from rebalancer.planning.limits import CycleCounts, LimiterState, LimitSettings, Verdict, check
from tests.unit.limits_builders import at, limits, request


def verdict(settings: LimitSettings, now: float, **kwargs: Any) -> Verdict:
    return check(request(**kwargs), LimiterState(), CycleCounts(), settings, now)


def allowed(settings: LimitSettings, now: float, **kwargs: Any) -> bool:
    return verdict(settings, now, **kwargs).allowed


def test_no_windows_is_always_allowed_and_a_blackout_wins() -> None:
    assert allowed(limits(), at("2024-01-06 03:00"))
    both = limits('windows: {allowed: [{start: "09:00", end: "17:00"}], blackout: [{start: "12:00", end: "13:00"}]}')
    assert allowed(both, at("2024-01-03 11:59"))
    v = verdict(both, at("2024-01-03 12:00"))
    assert (v.limiter, v.retry_at) == ("window.blackout", at("2024-01-03 13:00"))
    assert "inside a blackout window" in v.reason and "12:00-13:00" in v.reason
    only_blackout = limits('windows: {blackout: [{days: [Sun], start: "00:00", end: "24:00"}]}')
    assert allowed(only_blackout, at("2024-01-06 23:59"))  # Saturday
    v = verdict(only_blackout, at("2024-01-07 10:00"))  # Sunday
    assert (v.limiter, v.retry_at) == ("window.blackout", at("2024-01-08 00:00"))


def test_outside_allowed_windows_with_retry_at_the_next_opening() -> None:
    office = limits('windows: {allowed: [{days: [Mon, Tue, Wed, Thu, Fri], start: "09:00", end: "17:00"}]}')
    assert allowed(office, at("2024-01-05 09:00"))  # Friday, start inclusive
    assert allowed(office, at("2024-01-05 16:59:59"))
    v = verdict(office, at("2024-01-05 17:00"))  # end exclusive
    assert (v.limiter, v.retry_at) == ("window.allowed", at("2024-01-08 09:00"))  # Monday
    assert "outside the allowed windows (Mon,Tue,Wed,Thu,Fri 09:00-17:00, UTC)" in v.reason


@pytest.mark.parametrize(
    ("local", "inside"),
    [
        ("2024-01-06 21:59", False),  # Saturday before the start
        ("2024-01-06 22:00", True),
        ("2024-01-06 23:59", True),
        ("2024-01-07 00:00", True),  # Sunday: the window opened on Saturday runs on
        ("2024-01-07 05:59", True),
        ("2024-01-07 06:00", False),
        ("2024-01-07 22:30", False),  # Sunday is not a listed day
        ("2024-01-05 23:00", False),  # nor Friday
        ("2024-01-06 03:00", False),  # Saturday early morning: Friday did not open a window
    ],
)
def test_window_across_midnight(local: str, inside: bool) -> None:
    night = limits('windows: {allowed: [{days: [Sat], start: "22:00", end: "06:00"}]}')
    assert allowed(night, at(local)) is inside


def test_window_across_midnight_retry_at() -> None:
    night = limits('windows: {allowed: [{days: [Sat], start: "22:00", end: "06:00"}]}')
    assert verdict(night, at("2024-01-07 06:00")).retry_at == at("2024-01-13 22:00")


def test_a_tokyo_window_on_a_utc_clock() -> None:
    tokyo = limits(
        'windows: {timeZone: Asia/Tokyo, allowed: [{days: [Mon], start: "09:00", end: "17:00"}]}'
    )  # Monday 09:00-17:00 JST is Monday 00:00-08:00 UTC
    assert not allowed(tokyo, at("2024-01-07 23:59"))  # Sunday UTC, Monday 08:59 JST
    assert allowed(tokyo, at("2024-01-08 00:00"))
    assert allowed(tokyo, at("2024-01-08 07:59"))
    v = verdict(tokyo, at("2024-01-08 12:00"))  # Monday noon UTC reads 21:00 in Tokyo
    assert (v.limiter, v.retry_at) == ("window.allowed", at("2024-01-15 09:00", "Asia/Tokyo"))
    assert v.retry_at == at("2024-01-15 00:00")
    assert "Asia/Tokyo" in v.reason


# Europe/Amsterdam: 2024-03-31 02:00 CET -> 03:00 CEST (01:00 UTC); 2024-10-27 03:00 CEST -> 02:00 CET (01:00 UTC)
AMS = "Europe/Amsterdam"


def test_spring_forward_a_window_inside_the_skipped_hour_does_not_open() -> None:
    gap = limits('windows: {timeZone: Europe/Amsterdam, allowed: [{start: "02:00", end: "02:30"}]}')
    assert allowed(gap, at("2024-03-30 02:10", AMS))  # the day before: as usual
    for minute in range(0, 24 * 60, 5):  # no instant of the change day opens it
        assert not allowed(gap, at("2024-03-30 22:00") + minute * 60)
    assert verdict(gap, at("2024-03-31 00:00")).retry_at == at("2024-04-01 02:00", AMS)


def test_spring_forward_a_window_across_the_gap_is_an_hour_shorter() -> None:
    early = limits('windows: {timeZone: Europe/Amsterdam, allowed: [{start: "01:00", end: "04:00"}]}')
    assert not allowed(early, at("2024-03-30 23:59"))
    assert allowed(early, at("2024-03-31 00:00"))  # 01:00 CET
    assert allowed(early, at("2024-03-31 01:59"))  # 03:59 CEST
    assert not allowed(early, at("2024-03-31 02:00"))  # 04:00 CEST: two real hours in all


def test_spring_forward_a_window_opening_in_the_gap_opens_at_the_transition() -> None:
    late = limits('windows: {timeZone: Europe/Amsterdam, allowed: [{start: "02:30", end: "04:00"}]}')
    v = verdict(late, at("2024-03-31 00:30"))  # 01:30 CET
    assert v.retry_at == at("2024-03-31 01:00")  # the clock jumps to 03:00 CEST, inside the window
    assert allowed(late, at("2024-03-31 01:00"))
    assert not allowed(late, at("2024-03-31 00:59:59"))


def test_fall_back_a_window_in_the_repeated_hour_is_open_during_both_passes() -> None:
    repeated = limits('windows: {timeZone: Europe/Amsterdam, allowed: [{start: "02:00", end: "03:00"}]}')
    assert not allowed(repeated, at("2024-10-26 23:59"))  # 01:59 CEST
    assert allowed(repeated, at("2024-10-27 02:00", AMS, fold=0))  # first pass, CEST = 00:00 UTC
    assert allowed(repeated, at("2024-10-27 00:59"))
    assert allowed(repeated, at("2024-10-27 01:00"))  # 02:00 CET, second pass
    assert allowed(repeated, at("2024-10-27 02:00", AMS, fold=1) + 59 * 60)
    assert not allowed(repeated, at("2024-10-27 02:00"))  # 03:00 CET
    assert verdict(repeated, at("2024-10-27 02:00")).retry_at == at("2024-10-28 02:00", AMS)


def test_fall_back_a_blackout_in_the_repeated_hour_blocks_for_two_hours() -> None:
    freeze = limits('windows: {timeZone: Europe/Amsterdam, blackout: [{start: "02:00", end: "03:00"}]}')
    v = verdict(freeze, at("2024-10-27 00:10"))
    assert (v.limiter, v.retry_at) == ("window.blackout", at("2024-10-27 02:00"))  # 03:00 CET
    v = verdict(freeze, at("2024-10-27 01:10"))  # second pass through 02:10
    assert v.retry_at == at("2024-10-27 02:00")


def test_pool_windows_narrow_the_cluster_windows_in_their_own_zone() -> None:
    settings = limits(
        """
        windows:
          timeZone: Europe/Amsterdam
          allowed: [{start: "08:00", end: "20:00"}]
          pools:
            gpu: {timeZone: Asia/Tokyo, allowed: [{start: "15:00", end: "17:00"}]}
            batch: {blackout: [{start: "12:00", end: "13:00"}]}
        """
    )
    # 15:00-17:00 JST is 07:00-09:00 CET: together with 08:00-20:00 CET only 08:00-09:00 CET is open
    assert allowed(settings, at("2024-01-10 10:00", AMS), pool="general")
    assert allowed(settings, at("2024-01-10 08:30", AMS), pool="gpu")
    v = verdict(settings, at("2024-01-10 07:30", AMS), pool="gpu")
    assert (v.limiter, v.retry_at) == ("window.allowed", at("2024-01-10 08:00", AMS))
    v = verdict(settings, at("2024-01-10 10:00", AMS), pool="gpu")
    assert (v.limiter, v.retry_at) == ("pool.gpu.window.allowed", at("2024-01-11 08:00", AMS))
    v = verdict(settings, at("2024-01-10 12:30", AMS), pool="batch")  # inherits Europe/Amsterdam
    assert (v.limiter, v.retry_at) == ("pool.batch.window.blackout", at("2024-01-10 13:00", AMS))
    assert allowed(settings, at("2024-01-10 12:30", AMS), pool="general")


def test_retry_at_is_none_when_nothing_opens_within_a_week() -> None:
    never = limits(
        'windows: {allowed: [{days: [Mon], start: "09:00", end: "10:00"}], '
        'blackout: [{days: [Mon], start: "08:00", end: "11:00"}]}'
    )
    v = verdict(never, at("2024-01-08 09:30"))
    assert (v.limiter, v.retry_at) == ("window.blackout", None)


def test_service_tier_windows_and_never() -> None:
    settings = limits(
        """
        windows: {timeZone: Europe/Amsterdam}
        serviceLevel:
          protectedPriorityClasses: [business-critical]
          tierLabel: service-tier
          tiers:
            gold: {rule: never}
            silver: {rule: windows, windows: [{days: [Sat, Sun], start: "02:00", end: "05:00"}]}
        """
    )
    weekday = at("2024-01-10 03:00", AMS)
    assert allowed(settings, weekday, labels={"service-tier": "bronze"})  # no rule for that tier
    assert allowed(settings, weekday)  # no tier label
    v = verdict(settings, weekday, labels={"service-tier": "gold"})
    assert (v.limiter, v.retry_at) == ("serviceLevel.tier", None)
    v = verdict(settings, weekday, labels={"service-tier": "silver"})
    assert (v.limiter, v.retry_at) == ("serviceLevel.tier.windows", at("2024-01-13 02:00", AMS))
    assert allowed(settings, at("2024-01-13 04:59", AMS), labels={"service-tier": "silver"})
    v = verdict(settings, weekday, priority_class="business-critical")
    assert v.limiter == "serviceLevel.priorityClass"


def test_tier_windows_and_cluster_blackout_give_one_retry_at() -> None:
    settings = limits(
        """
        windows: {blackout: [{days: [Sat], start: "00:00", end: "03:00"}]}
        serviceLevel:
          tierLabel: tier
          tiers: {silver: {rule: windows, windows: [{days: [Sat], start: "02:00", end: "05:00"}]}}
        """
    )
    v = verdict(settings, at("2024-01-12 12:00"), labels={"tier": "silver"})  # Friday
    assert (v.limiter, v.retry_at) == ("serviceLevel.tier.windows", at("2024-01-13 03:00"))
