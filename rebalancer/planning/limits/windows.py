"""Time windows in local wall-clock time (pure: the instant comes in as epoch seconds).

A window is judged on the wall clock of its zone, as zoneinfo converts the instant: on the day clocks
spring forward, a window inside the skipped hour (02:00-03:00 in Europe/Amsterdam) does not open, and one
spanning it is an hour shorter; on the day they fall back, a window inside the repeated hour is open
during both passes (two real hours). ``next_open`` finds the first instant every schedule allows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

from rebalancer.domain.settings.limits import TimeWindow

DAY = 86400.0
SEARCH_DAYS = 8
"""How far ``next_open`` looks ahead: a weekly schedule that opens at all opens within this."""

Closed = Literal["blackout", "allowed"]


@dataclass(frozen=True, slots=True)
class Schedule:
    """Allowed and blackout windows in one zone; ``name`` prefixes the limiter that blocks."""

    name: str
    zone: ZoneInfo
    allowed: tuple[TimeWindow, ...] = ()
    blackout: tuple[TimeWindow, ...] = ()

    def closed(self, at: float) -> Closed | None:
        """Why the schedule is closed at ``at``: inside a blackout, or outside every allowed window."""
        local = datetime.fromtimestamp(at, self.zone)
        if any(inside(w, local) for w in self.blackout):
            return "blackout"
        if self.allowed and not any(inside(w, local) for w in self.allowed):
            return "allowed"
        return None

    def describe(self, closed: Closed) -> str:
        if closed == "blackout":
            spans = "; ".join(_text(w) for w in self.blackout)
            return f"inside a blackout window ({spans}, {self.zone.key})"
        spans = "; ".join(_text(w) for w in self.allowed)
        return f"outside the allowed windows ({spans}, {self.zone.key})"


def _text(window: TimeWindow) -> str:
    return f"{','.join(window.days)} {window.start}-{window.end}"


def inside(window: TimeWindow, local: datetime) -> bool:
    """Whether the local wall-clock time ``local`` falls in ``window`` (start inclusive, end exclusive)."""
    minute = local.hour * 60 + local.minute
    day = local.weekday()
    days = window.weekdays
    start, end = window.start_minute, window.end_minute
    if start < end:
        return day in days and start <= minute < end
    # across midnight: opened on a listed day, closes at ``end`` the next day
    return (day in days and minute >= start) or ((day - 1) % 7 in days and minute < end)


def _wall_instants(zone: ZoneInfo, day: date, minute: int) -> set[float]:
    """The instants at which the wall clock reads ``minute`` on ``day`` (both folds; a skipped time gives
    instants next to the transition, which is a candidate of its own)."""
    day, minute = day + timedelta(days=minute // 1440), minute % 1440
    local = datetime.combine(day, time(minute // 60, minute % 60), tzinfo=zone)
    return {local.replace(fold=0).timestamp(), local.replace(fold=1).timestamp()}


def _transitions(zone: ZoneInfo, start: float, end: float) -> list[float]:
    """Instants in (start, end] where the zone's UTC offset changes (found by bisection)."""

    def offset(at: float) -> timedelta | None:
        return datetime.fromtimestamp(at, zone).utcoffset()

    out = []
    step = 6 * 3600.0
    at = float(math.floor(start))  # transitions fall on whole seconds: bisect over whole seconds
    while at < end:
        nxt = min(at + step, end)
        if offset(at) != offset(nxt):
            low, high = at, nxt  # offset(low) is the old one, offset(high) the new one
            while high - low > 1:
                mid = (low + high) // 2
                if offset(mid) == offset(low):
                    low = mid
                else:
                    high = mid
            out.append(high)
        at = nxt
    return out


def _candidates(schedule: Schedule, now: float, end: float) -> set[float]:
    zone = schedule.zone
    out = set(_transitions(zone, now, end))
    first = datetime.fromtimestamp(now, zone).date() - timedelta(days=1)
    for offset in range(SEARCH_DAYS + 2):
        day = first + timedelta(days=offset)
        for window in (*schedule.allowed, *schedule.blackout):
            out |= _wall_instants(zone, day, window.start_minute)
            out |= _wall_instants(zone, day, window.end_minute)
    return out


def next_open(schedules: tuple[Schedule, ...], now: float) -> float | None:
    """The first instant after ``now`` at which no schedule is closed; None if none in ``SEARCH_DAYS``.

    Every schedule is piecewise constant between wall-clock window boundaries and offset transitions, and
    open or closed from each such instant onwards, so testing those instants in order is exact.
    """
    end = now + SEARCH_DAYS * DAY
    candidates: set[float] = set()
    for schedule in schedules:
        candidates |= _candidates(schedule, now, end)
    for at in sorted(c for c in candidates if now < c <= end):
        if all(s.closed(at) is None for s in schedules):
            return at
    return None
