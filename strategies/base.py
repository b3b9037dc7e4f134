"""The strategy contract: a pure function from snapshot to plan, with its own settings model."""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import Field, model_validator

from rebalancer.plan import StrategyResult
from rebalancer.protections import Protections
from rebalancer.settings import Duration, FieldProblems, Model
from rebalancer.snapshot import ClusterSnapshot

_CRON_FIELDS = ("minute", "hour", "day of month", "month", "day of week")
_CRON_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))
_CRON_NAMES = (
    (),
    (),
    (),
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
    ("sun", "mon", "tue", "wed", "thu", "fri", "sat"),
)


def cron_problem(expression: str) -> str | None:
    """Why a five-field crontab expression is invalid, or None (pure: the service builds the trigger)."""
    fields = expression.split()
    if len(fields) != 5:
        return f"expected 5 fields (minute hour day-of-month month day-of-week), got {len(fields)}"
    for value, name, (low, high), names in zip(fields, _CRON_FIELDS, _CRON_RANGES, _CRON_NAMES, strict=True):
        for part in value.lower().split(","):
            base, _, step = part.partition("/")
            if step and not (step.isdigit() and int(step) > 0):
                return f"{name}: step {step!r} is not a positive number"
            if base == "*":
                continue
            for bound in base.split("-", 1):
                number = names.index(bound) + (1 if name == "month" else 0) if bound in names else None
                if number is None and not bound.isdigit():
                    return f"{name}: {bound!r} is not a number{' or a name' if names else ''}"
                if not low <= (number if number is not None else int(bound)) <= high:
                    return f"{name}: {bound} is outside {low}-{high}"
    return None


class Schedule(Model):
    """When ``rebalancer serve`` runs a strategy: every ``interval``, or on a ``cron`` expression."""

    interval: Duration | None = Field(default=None, description="For example 5m.")
    cron: str | None = Field(default=None, description="Five-field crontab, in service.timeZone.")

    @model_validator(mode="after")
    def _one(self) -> Schedule:
        if (self.interval is None) == (self.cron is None):
            raise FieldProblems([("interval", "set exactly one of interval and cron")])
        if self.cron is not None and (why := cron_problem(self.cron)) is not None:
            raise FieldProblems([("cron", why)])
        return self


class StrategySettings(Model):
    """Fields every strategy accepts; subclasses add a ``kind`` literal and their arguments."""

    enabled: bool = Field(default=True, description="Disabled strategies are validated but not run.")
    schedule: Schedule = Field(
        default_factory=lambda: Schedule(interval="5m"), description="When `serve` runs it (default every 5m)."
    )


def percentage_of_nodes_to_score_field() -> Any:
    """The ``percentageOfNodesToScore`` setting of the strategies that predict placement."""
    return Field(
        default=None,
        ge=0,
        le=100,
        description="With predictPlacement: the cluster scheduler's percentageOfNodesToScore (its "
        "KubeSchedulerConfiguration), how many of the feasible nodes it scores before choosing. Unset or 0: the "
        "scheduler's adaptive default (50% minus 1% per 125 nodes, at least 5% and at least 100 nodes); 100: "
        "every node. Below 100 nodes every node is scored whatever the setting.",
    )


class Strategy(Protocol):
    """Receives an immutable snapshot, returns planned evictions and their decision record.

    No I/O, no clock, no eviction: ``snapshot.taken_at`` is the only notion of time.
    """

    @property
    def name(self) -> str: ...

    def plan(self, snapshot: ClusterSnapshot, protections: Protections) -> StrategyResult: ...
