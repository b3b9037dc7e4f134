"""The policy's ``limits:`` section: caps, rates, time windows, lists and service levels for evictions.

Pydantic v2 models on the project's ``Model`` base (frozen, unknown fields rejected, camelCase in YAML,
every field described). Field names follow the descheduler and Koordinator where the meaning is the same;
docs/user-guide.md documents each limiter with an example. Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
import zoneinfo
from collections import Counter
from collections.abc import Iterable
from datetime import timedelta
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, PlainValidator, model_validator

from rebalancer.domain.settings.shared import Duration, FieldProblems, LabelSelectorSpec, Model, format_duration

Weekday = Literal["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
WEEKDAYS: tuple[Weekday, ...] = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")

_CLOCK = re.compile(r"^([01][0-9]|2[0-3]):([0-5][0-9])$")
_PERCENT = re.compile(r"^(100|[1-9][0-9]?)%$")
POOL_NAME = r"^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$"


def _check_start(text: str) -> str:
    if _CLOCK.match(text) is None:
        raise ValueError(f"{text!r} is not a time of day HH:MM between 00:00 and 23:59")
    return text


def _check_end(text: str) -> str:
    if text != "24:00" and _CLOCK.match(text) is None:
        raise ValueError(f"{text!r} is not a time of day HH:MM between 00:01 and 24:00")
    return text


def _check_zone(name: str) -> str:
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown time zone {name!r} (an IANA name such as Europe/Amsterdam or UTC)") from exc
    return name


def clock_minutes(text: str) -> int:
    """Minutes since midnight of ``HH:MM`` (``24:00`` is 1440)."""
    hours, minutes = text.split(":")
    return int(hours) * 60 + int(minutes)


StartClock = Annotated[str, AfterValidator(_check_start)]
EndClock = Annotated[str, AfterValidator(_check_end)]
TimeZoneName = Annotated[str, AfterValidator(_check_zone)]


def _duplicates(values: Iterable[object]) -> list[str]:
    return sorted(str(v) for v, n in Counter(values).items() if n > 1)


# ---------------------------------------------------------------------------------------------- caps


class PeriodCap(Model):
    """At most ``count`` evictions in any sliding window of length ``period``."""

    count: int = Field(ge=1, description="Evictions allowed in any window of the period.")
    period: Duration = Field(description="Length of the sliding window (1h, 1d, ...).")


class TokenBucket(Model):
    """A token bucket: ``burst`` evictions at once, then ``perMinute`` on average."""

    per_minute: float = Field(ge=0.001, le=10_000, description="Tokens added per minute (0.1: one every 10 minutes).")
    burst: int = Field(ge=1, description="Bucket size: evictions allowed back to back after a quiet spell.")

    @property
    def per_second(self) -> float:
        return self.per_minute / 60.0


def _period_problems(caps: tuple[PeriodCap, ...]) -> list[tuple[str, str]]:
    periods = [cap.period for cap in caps]
    problems = []
    for i, period in enumerate(periods):
        if period in periods[:i]:
            first = periods.index(period)
            problems.append(
                (f"maxPerPeriod.{i}.period", f"{format_duration(period)} repeats the period of maxPerPeriod.{first}")
            )
    return problems


class ScopeLimits(Model):
    """Caps on every eviction in a scope (the whole cluster, or one resource pool)."""

    max_per_cycle: int | None = Field(
        default=None, ge=1, description="At most this many evictions per cycle (descheduler: maxNoOfPodsToEvictTotal)."
    )
    max_per_period: tuple[PeriodCap, ...] = Field(
        default=(), description="Sliding-window caps, for example 20 per 1h and 100 per 1d; all must hold."
    )
    rate: TokenBucket | None = Field(default=None, description="Token-bucket rate limit with a burst.")

    @model_validator(mode="after")
    def _periods_unique(self) -> ScopeLimits:
        if problems := _period_problems(self.max_per_period):
            raise FieldProblems(problems)
        return self


class GlobalLimits(ScopeLimits):
    """Cluster-wide caps, and per resource pool caps that hold in addition."""

    pools: dict[Annotated[str, Field(pattern=POOL_NAME)], ScopeLimits] = Field(
        default_factory=dict, description="Pool name -> caps on the evictions from that pool's nodes."
    )


class NodeLimits(Model):
    """Caps per source node (every node alike)."""

    max_per_cycle: int | None = Field(
        default=None,
        ge=1,
        description="At most this many evictions per source node per cycle, every strategy's together (the "
        "descheduler's top-level maxNoOfPodsToEvictPerNode). Applied by the evictor, after each LowNodeUtilization's "
        "own maxNoOfPodsToEvictPerNode has capped what it planned.",
    )
    max_per_period: tuple[PeriodCap, ...] = Field(
        default=(), description="Sliding-window caps per node, for example 3 per 1h."
    )
    cooldown: Duration | None = Field(
        default=None, description="After an eviction from a node, no other eviction from it for this long."
    )

    @model_validator(mode="after")
    def _periods_unique(self) -> NodeLimits:
        if problems := _period_problems(self.max_per_period):
            raise FieldProblems(problems)
        return self


class NamespaceLimits(Model):
    """Caps per namespace of the evicted pods (every namespace alike)."""

    max_per_cycle: int | None = Field(
        default=None,
        ge=1,
        description="At most this many evictions per namespace per cycle, every strategy's together (the "
        "descheduler's maxNoOfPodsToEvictPerNamespace).",
    )


def _int_or_percent(value: object) -> int | str:
    """A Kubernetes IntOrString as maxUnavailable takes it: a whole number >= 1, or 1% ... 100%."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    if isinstance(value, str) and _PERCENT.match(value) is not None:
        return value
    raise ValueError(f"{value!r} is neither a whole number >= 1 nor a percentage from 1% to 100% (such as 25%)")


IntOrPercent = Annotated[int | str, PlainValidator(_int_or_percent, json_schema_input_type=int | str)]


class WorkloadLimits(Model):
    """Caps per workload (the Deployment, StatefulSet, ... a pod belongs to)."""

    max_per_cycle: int | None = Field(
        default=None, ge=1, description="At most this many evictions per workload per cycle (maxMigratingPerWorkload)."
    )
    max_per_period: tuple[PeriodCap, ...] = Field(
        default=(), description="Sliding-window caps per workload, for example 2 per 1h."
    )
    max_unavailable: IntOrPercent | None = Field(
        default=None,
        description="Koordinator's maxUnavailablePerWorkload: a whole number (>= 1) or a percentage such as '25%' "
        "of the desired replicas, rounded down. Pods already unavailable count; when the eviction would make more "
        "than this many replicas unavailable it waits. Unknown replica counts block.",
    )
    min_interval: Duration | None = Field(
        default=None, description="At least this long between two evictions of the same workload."
    )

    @model_validator(mode="after")
    def _periods_unique(self) -> WorkloadLimits:
        if problems := _period_problems(self.max_per_period):
            raise FieldProblems(problems)
        return self

    def unavailable_allowed(self, desired: int) -> int | None:
        """maxUnavailable in pods for ``desired`` replicas (a percentage is rounded down); None: no cap."""
        value = self.max_unavailable
        if value is None:
            return None
        if isinstance(value, int):
            return value
        return desired * int(value.removesuffix("%")) // 100


# ------------------------------------------------------------------------------------------- windows


class TimeWindow(Model):
    """Local wall-clock hours on some weekdays. ``start`` after ``end`` crosses midnight: the window opens
    on the listed day and closes at ``end`` the next day."""

    days: tuple[Weekday, ...] = Field(
        default=WEEKDAYS, min_length=1, description="Days the window opens on (Mon ... Sun); default every day."
    )
    start: StartClock = Field(description="Opening time HH:MM (local, inclusive).")
    end: EndClock = Field(description="Closing time HH:MM (local, exclusive); 24:00 is midnight at the end of the day.")

    @model_validator(mode="after")
    def _well_formed(self) -> TimeWindow:
        problems = []
        if self.start_minute == self.end_minute:
            problems.append(("end", f"equals start {self.start}: use start 00:00, end 24:00 for a whole day"))
        if repeated := _duplicates(self.days):
            problems.append(("days", f"repeated: {', '.join(repeated)}"))
        if problems:
            raise FieldProblems(problems)
        return self

    @property
    def start_minute(self) -> int:
        return clock_minutes(self.start)

    @property
    def end_minute(self) -> int:
        return clock_minutes(self.end)

    @property
    def weekdays(self) -> frozenset[int]:
        """Python weekday numbers (Monday 0)."""
        return frozenset(WEEKDAYS.index(d) for d in self.days)


class _Windows(Model):
    allowed: tuple[TimeWindow, ...] = Field(
        default=(), description="Evictions only inside one of these windows (empty: at any time)."
    )
    blackout: tuple[TimeWindow, ...] = Field(default=(), description="Never an eviction inside these windows.")


class PoolWindows(_Windows):
    """A pool's allowed and blackout windows; they narrow the cluster's windows, never widen them."""

    time_zone: TimeZoneName | None = Field(
        default=None, description="IANA time zone of these windows; default the cluster's timeZone."
    )


class WindowSettings(_Windows):
    """When evictions may happen, in local wall-clock time. A blackout wins over an allowed window; no
    allowed window listed means always allowed outside blackouts. A pool's windows apply as well."""

    time_zone: TimeZoneName = Field(
        default="UTC", description="IANA time zone of the windows (Europe/Amsterdam, Asia/Tokyo, UTC)."
    )
    pools: dict[Annotated[str, Field(pattern=POOL_NAME)], PoolWindows] = Field(
        default_factory=dict, description="Pool name -> windows that also apply to evictions from that pool."
    )

    def zone_of(self, pool: str) -> str:
        """The time zone of ``pool``'s windows: its own, else the cluster's."""
        windows = self.pools.get(pool)
        return (windows.time_zone if windows is not None else None) or self.time_zone


# --------------------------------------------------------------------------------------------- lists


class NameList(Model):
    """Names in a black list and a white list."""

    black: tuple[str, ...] = Field(default=(), description="Never these (black wins over white).")
    white: tuple[str, ...] = Field(default=(), description="When non-empty: only these.")


class NodeList(NameList):
    """Nodes by name or by node label selector."""

    black_selectors: tuple[LabelSelectorSpec, ...] = Field(
        default=(), description="Never nodes matching one of these node label selectors."
    )
    white_selectors: tuple[LabelSelectorSpec, ...] = Field(
        default=(), description="With white: only nodes named there or matching one of these selectors."
    )


class WorkloadName(Model):
    """A workload by kind, namespace and name."""

    kind: str = Field(min_length=1, description="Controller kind: Deployment, StatefulSet, Job, ...")
    namespace: str = Field(min_length=1, description="Namespace of the workload.")
    name: str = Field(min_length=1, description="Name of the workload.")

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"


class WorkloadList(Model):
    """Workloads by kind/namespace/name or by pod label selector."""

    black: tuple[WorkloadName, ...] = Field(default=(), description="Never pods of these workloads.")
    white: tuple[WorkloadName, ...] = Field(default=(), description="When any white entry is set: only these.")
    black_selectors: tuple[LabelSelectorSpec, ...] = Field(
        default=(), description="Never pods matching one of these pod label selectors."
    )
    white_selectors: tuple[LabelSelectorSpec, ...] = Field(
        default=(), description="With white: only pods of workloads named there or matching one of these selectors."
    )


class ListSettings(Model):
    """Black and white lists. Every black list is checked before any white list, and black wins: a
    listed item is blocked even if a white list names it. A category whose white list (names or selectors)
    is non-empty passes only what that white list names. Categories are independent: all must pass."""

    namespaces: NameList = Field(default_factory=NameList, description="Namespaces of the pods.")
    pools: NameList = Field(default_factory=NameList, description="Resource pools of the source nodes.")
    nodes: NodeList = Field(default_factory=NodeList, description="Source nodes, by name or node labels.")
    workloads: WorkloadList = Field(default_factory=WorkloadList, description="Workloads, by name or pod labels.")


# ------------------------------------------------------------------------------------- service level


class TierRule(Model):
    """What a service tier allows: ``never`` evicted, or only inside ``windows``."""

    rule: Literal["never", "windows"] = Field(description="never: never evicted; windows: only inside windows.")
    windows: tuple[TimeWindow, ...] = Field(default=(), description="With rule windows: the allowed windows.")
    time_zone: TimeZoneName | None = Field(default=None, description="Zone of the windows; default the cluster's.")

    @model_validator(mode="after")
    def _rule_fits(self) -> TierRule:
        if self.rule == "windows" and not self.windows:
            raise FieldProblems([("windows", "rule windows needs at least one window")])
        if self.rule == "never" and self.windows:
            raise FieldProblems([("windows", "rule never takes no windows")])
        return self


class ServiceLevelSettings(Model):
    """Service levels that no eviction opt-in overrides (unlike protections.protectedPriorityClasses)."""

    protected_priority_classes: tuple[str, ...] = Field(
        default=(), description="Pods of these PriorityClasses are never evicted, whatever their annotations."
    )
    tier_label: str | None = Field(
        default=None, min_length=1, description="Pod label naming the service tier (for example service-tier)."
    )
    tiers: dict[str, TierRule] = Field(
        default_factory=dict,
        description="Tier (label value) -> rule. Pods of other tiers or without the label: "
        "no service-level restriction.",
    )

    @model_validator(mode="after")
    def _label_for_tiers(self) -> ServiceLevelSettings:
        if self.tiers and self.tier_label is None:
            raise FieldProblems([("tierLabel", "tiers are set: name the pod label that carries the tier")])
        return self


# ------------------------------------------------------------------------------------------------ root


class LimitSettings(Model):
    """The ``limits:`` section. Every configured limit holds at once; nothing is limited by default."""

    cluster: GlobalLimits = Field(
        default_factory=GlobalLimits,
        validation_alias="global",
        serialization_alias="global",
        description="Cluster-wide caps (and per pool caps under pools).",
    )
    node: NodeLimits = Field(default_factory=NodeLimits, description="Caps per source node.")
    namespace: NamespaceLimits = Field(default_factory=NamespaceLimits, description="Caps per namespace.")
    workload: WorkloadLimits = Field(default_factory=WorkloadLimits, description="Caps per workload.")
    windows: WindowSettings = Field(default_factory=WindowSettings, description="When evictions may happen.")
    lists: ListSettings = Field(default_factory=ListSettings, description="Black and white lists.")
    service_level: ServiceLevelSettings = Field(
        default_factory=ServiceLevelSettings, description="Priority classes and service tiers."
    )

    @model_validator(mode="after")
    def _horizon_bounded(self) -> LimitSettings:
        # The state is trusted only for times within 31 days of now (state.MAX_RECOVERY_SECONDS), and
        # recovery from corrupt state waits one horizon: a longer span could never recover.
        if self.horizon_seconds > 31 * 86_400:
            raise FieldProblems([("", "periods, cooldown and minInterval must not exceed 31d")])
        return self

    @property
    def period_horizon_seconds(self) -> int:
        """The longest sliding window: how long individual reservations must be kept."""
        caps = [
            *self.cluster.max_per_period,
            *(cap for pool in self.cluster.pools.values() for cap in pool.max_per_period),
            *self.node.max_per_period,
            *self.workload.max_per_period,
        ]
        return max([0, *(int(cap.period.total_seconds()) for cap in caps)])

    @property
    def horizon_seconds(self) -> int:
        """How long state must be kept: the longest period, cooldown or minimum interval configured."""
        spans = [timedelta(0)]
        scopes: list[ScopeLimits | NodeLimits | WorkloadLimits] = [
            self.cluster,
            *self.cluster.pools.values(),
            self.node,
            self.workload,
        ]
        for scope in scopes:
            spans.extend(cap.period for cap in scope.max_per_period)
        for span in (self.node.cooldown, self.workload.min_interval):
            if span is not None:
                spans.append(span)
        return int(max(spans).total_seconds())

    def bucket_scopes(self) -> dict[str, TokenBucket]:
        """Token-bucket scope key (``global``, ``pool/<name>``) -> its bucket settings."""
        out: dict[str, TokenBucket] = {}
        if self.cluster.rate is not None:
            out["global"] = self.cluster.rate
        for name, pool in sorted(self.cluster.pools.items()):
            if pool.rate is not None:
                out[f"pool/{name}"] = pool.rate
        return out
