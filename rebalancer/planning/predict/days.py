"""Calendar days in a time zone: the windows whose CPU peaks a prediction reads (pure).

A day is [local midnight, next local midnight): 23 or 25 hours long on daylight-saving changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo


@dataclass(frozen=True, slots=True)
class DayWindow:
    day: date
    start: float  # epoch seconds of the local midnight that opens the day
    end: float  # epoch seconds of the next local midnight

    @property
    def seconds(self) -> int:
        return round(self.end - self.start)

    @property
    def weekday(self) -> int:
        return self.day.weekday()


def _midnight(day: date, zone: ZoneInfo) -> float:
    return datetime.combine(day, time(0), zone).timestamp()


def last_days(at: float, days: int, time_zone: str) -> tuple[DayWindow, ...]:
    """The ``days`` complete calendar days before ``at`` (today, still running, excluded), oldest first."""
    if days < 1:
        raise ValueError(f"days must be at least 1, got {days}")
    zone = ZoneInfo(time_zone)
    today = datetime.fromtimestamp(at, zone).date()
    out = []
    for back in range(days, 0, -1):
        day = today - timedelta(days=back)
        out.append(DayWindow(day, _midnight(day, zone), _midnight(day + timedelta(days=1), zone)))
    return tuple(out)
