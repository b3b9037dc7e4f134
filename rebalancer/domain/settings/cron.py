"""Crontab lines read by APScheduler 3's own field parsers: the policy is checked by the same code that
later builds the trigger, so a line that passes ``check-config`` is a line the scheduler runs.

Crontab numbers the days of the week from Sunday (0 and 7 are Sunday); APScheduler counts from Monday, so
a day-of-week field is turned into the day names it selects first (``0-6``, ``*/2`` included), which both
agree on.
"""

from __future__ import annotations

from zoneinfo import ZoneInfo

from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.cron.fields import BaseField, DayOfMonthField, DayOfWeekField, MonthField

_FIELDS: tuple[tuple[str, str, type[BaseField]], ...] = (
    ("minute", "minute", BaseField),
    ("hour", "hour", BaseField),
    ("day of month", "day", DayOfMonthField),
    ("month", "month", MonthField),
    ("day of week", "day_of_week", DayOfWeekField),
)
_DOW = ("sun", "mon", "tue", "wed", "thu", "fri", "sat", "sun")


def cron_problems(expression: str) -> list[str]:
    """Every problem of a five-field crontab line, one per bad field (empty: the scheduler accepts it)."""
    fields = expression.split()
    if len(fields) != len(_FIELDS):
        return [f"expected 5 fields (minute hour day-of-month month day-of-week), got {len(fields)}"]
    problems = []
    for (label, name, parser), text in zip(_FIELDS, _apscheduler_fields(fields), strict=True):
        try:
            parser(name, text)
        except ValueError as exc:
            hint = " (crontab numbering: 0-7, 0 and 7 are Sunday)" if name == "day_of_week" else ""
            problems.append(f"{label}: {exc}{hint}")
    return problems


def cron_trigger(expression: str, zone: ZoneInfo) -> CronTrigger:
    """The APScheduler trigger of a crontab line that :func:`cron_problems` accepts."""
    minute, hour, day, month, day_of_week = _apscheduler_fields(expression.split())
    return CronTrigger(minute=minute, hour=hour, day=day, month=month, day_of_week=day_of_week, timezone=zone)


def _apscheduler_fields(fields: list[str]) -> list[str]:
    *rest, day_of_week = fields
    return [*rest, ",".join(_days(part) for part in day_of_week.split(","))]


def _days(part: str) -> str:
    """A crontab day-of-week part as APScheduler day names (``0-6/2``: ``sun,tue,thu,sat``); a part that
    is not a plain number, name, range or step is left as it is, for APScheduler to accept or report."""
    base, slash, step_text = part.partition("/")
    if base == "*" and not slash:
        return part
    bounds = [0, 7] if base == "*" else [_day_number(b) for b in base.split("-")]
    if len(bounds) == 1 and slash:
        bounds.append(7)  # crontab's N/step: from N to the end of the week
    step = int(step_text) if step_text.isdigit() else 0 if slash else 1
    first, last = bounds[0], bounds[-1]
    if len(bounds) > 2 or first is None or last is None or first > last or step < 1:
        return part
    return ",".join(dict.fromkeys(_DOW[day % 7] for day in range(first, last + 1, step)))


def _day_number(text: str) -> int | None:
    """0-7 (0 and 7 are Sunday) or a day's three-letter name; None for anything else."""
    if text.isdigit() and int(text) <= 7:
        return int(text)
    return _DOW.index(text.lower()) if text.lower() in _DOW else None
