"""What one variant reached (pure): the figures of the comparison table, JSON and plots."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from rebalancer.domain.efficiency_records import EfficiencyState
from rebalancer.offline.simulate.config import DAY
from rebalancer.offline.simulate.landing_guard import SimGuard
from rebalancer.offline.simulate.overshoot import Overshoot
from rebalancer.offline.simulate.variants import Variant
from rebalancer.offline.simulate.world import Move, World
from rebalancer.records.rates import PoolRates


@dataclass(frozen=True, slots=True)
class GuardFigures:
    """What the landing guard did in one run."""

    changes: Mapping[str, int]  # "action reason" (set hot, refresh relieved, clear expired, ...) -> count
    marked_at_end: int  # nodes still carrying a mark when the run ended
    outliving: int  # of those, marks expired at the last step (never: the sweep clears a mark at its expiry)

    @classmethod
    def of(cls, guard: SimGuard, last: float) -> GuardFigures:
        marks = guard.marked()
        return cls(
            {f"{action} {reason}": n for (action, reason), n in sorted(guard.changes.items())},
            len(marks),
            sum(1 for m in marks.values() if m.expires <= last),
        )

    def count(self, action: str) -> int:
        return sum(n for key, n in self.changes.items() if key.split(" ")[0] == action)


@dataclass(frozen=True, slots=True)
class VariantResult:
    name: str
    description: str
    hot_node_minutes: float  # sum over steps of (nodes above the hot threshold) x step minutes
    evictions: int
    landed_back: int  # replacements bound to the node their pod was evicted from
    unbound: int  # replacements still Pending at the end
    cycles: int
    max_per_cycle: int
    rates: PoolRates | None  # the production efficiency rates over the measured days (None: never ran)
    hot_series: tuple[int, ...]  # hot nodes at each step
    step_seconds: int
    moves: tuple[Move, ...] = ()
    blocked: Mapping[str, int] = field(default_factory=dict)  # limiter -> evictions it blocked
    pods: int = 0  # slots filled at the end (bound or Pending): never fewer than at the start
    early_minutes: float = 0.0  # hot-node-minutes within the first lag_minutes of their hot episode
    lag_minutes: float = 0.0  # the usage window plus a cycle interval: how late a reactive cycle finds a hot node
    guard: GuardFigures | None = None  # None: no landing guard in this variant
    interval_seconds: int = 0  # a scheduled cycle every this long
    overshoot: Overshoot | None = None  # evictions beyond need (None: never ran, or no cpu thresholds to judge by)
    focused_cycles: int = 0  # alert-driven cycles (also counted in cycles)
    notifications: int = 0  # alert notifications the webhook received
    unmet_core_minutes: float = 0.0  # the pods' demand beyond their nodes' CPU (throttled away), core-minutes
    unavoidable_minutes: float = 0.0  # hot-node-minutes no placement fixes: a pod alone or the pool is hot
    hot_again: int = 0  # evictions whose source node was hot again within the hour after
    hot_again_watched: int = 0  # evictions with their whole hour after within the measured days

    @classmethod
    def of(
        cls,
        variant: Variant,
        world: World,
        hot_series: npt.NDArray[np.int64],
        step_seconds: int,
        rates: PoolRates,
        per_cycle: Sequence[int],
        blocked: Mapping[str, int],
        records: EfficiencyState | None,
    ) -> VariantResult:
        return cls(
            name=variant.name,
            description=variant.description,
            hot_node_minutes=float(hot_series.sum()) * step_seconds / 60,
            evictions=len(world.moves),
            landed_back=sum(1 for m in world.moves if m.landed_back),
            unbound=world.pending,
            cycles=len(per_cycle),
            max_per_cycle=max(per_cycle, default=0),
            rates=rates if records is not None else None,
            hot_series=tuple(int(v) for v in hot_series),
            step_seconds=step_seconds,
            moves=tuple(world.moves),
            blocked=dict(sorted(blocked.items())),
            pods=len(world.pods),
        )

    @property
    def cooled(self) -> int | None:
        return None if self.rates is None else self.rates.cooled

    @property
    def evictions_per_cooled(self) -> float | None:
        if self.rates is None or not self.rates.cooled:
            return None
        return self.evictions / self.rates.cooled

    @property
    def evictions_per_pod_day(self) -> float | None:
        days = len(self.hot_series) * self.step_seconds / DAY
        return self.evictions / self.pods / days if self.pods and days else None

    @property
    def overshoot_evictions(self) -> float | None:
        return None if self.overshoot is None else float(self.overshoot.evictions)

    @property
    def landed_on_marked(self) -> int:
        """Replacements bound on a node that carried the guard's taint at that moment."""
        return sum(1 for m in self.moves if m.marked is not None)

    @property
    def landed_back_share(self) -> float | None:
        return self.landed_back / self.evictions if self.evictions else None

    @property
    def unavoidable_share(self) -> float | None:
        """Of the hot-node-minutes, those no placement fixes."""
        return self.unavoidable_minutes / self.hot_node_minutes if self.hot_node_minutes else None

    @property
    def hot_again_share(self) -> float | None:
        """Of the evictions watched for the whole hour after, those whose node was hot again in it."""
        return self.hot_again / self.hot_again_watched if self.hot_again_watched else None

    def evictions_per_100_saved(self, baseline: VariantResult | None) -> float | None:
        """The price: evictions per 100 hot-node-minutes fewer than ``baseline`` (no rebalancing); None
        without evictions, a baseline, or a cut (every eviction then bought nothing)."""
        if baseline is None or not self.evictions:
            return None
        saved = baseline.hot_node_minutes - self.hot_node_minutes
        return 100 * self.evictions / saved if saved > 0 else None

    def record(self) -> dict[str, Any]:
        r = self.rates
        return {
            "name": self.name,
            "description": self.description,
            "hotNodeMinutes": self.hot_node_minutes,
            "hotNodeMinutesEarly": self.early_minutes,
            "detectionLagMinutes": self.lag_minutes,
            "evictions": self.evictions,
            "evictionsPerPodPerDay": self.evictions_per_pod_day,
            "hotAgainWithinHour": self.hot_again,
            "hotAgainWatched": self.hot_again_watched,
            "hotAgainShare": self.hot_again_share,
            "unmetCoreMinutes": self.unmet_core_minutes,
            "unavoidableHotNodeMinutes": self.unavoidable_minutes,
            "unavoidableShare": self.unavoidable_share,
            "intervalSeconds": self.interval_seconds,
            "overshoot": None
            if self.overshoot is None
            else {
                "evictions": self.overshoot.evictions,
                "belowCold": self.overshoot.below_cold,
                "again": self.overshoot.again,
            },
            "focusedCycles": self.focused_cycles,
            "alertNotifications": self.notifications,
            "landedBack": self.landed_back,
            "landedBackShare": self.landed_back_share,
            "unbound": self.unbound,
            "cycles": self.cycles,
            "maxEvictionsPerCycle": self.max_per_cycle,
            "cooled": self.cooled,
            "evictionsPerCooledNode": self.evictions_per_cooled,
            "rates": None
            if r is None
            else {
                "discovery": r.discovery,
                "eviction": r.eviction,
                "effective": r.effective,
                "hotByReference": r.reference,
                "found": r.found,
                "acted": r.acted,
                "reliefs": r.reliefs,
                "judged": r.judged,
                "uncooled": dict(r.uncooled),
                "unacted": dict(r.unacted),
                "bounceBacks": r.bounce_backs,
                "replacementsSeen": r.landed,
                "landedBackRate": r.landed_back_rate,  # the production inference, beside the simulation's own count
                "landingHitRate": r.landing_hit_rate,  # of the evictions with a predicted landing
            },
            "landingGuard": None
            if self.guard is None
            else {
                "marksSet": self.guard.count("set"),
                "marksRefreshed": self.guard.count("refresh"),
                "marksCleared": self.guard.count("clear"),
                "changes": dict(self.guard.changes),
                "markedAtEnd": self.guard.marked_at_end,
                "landedOnMarkedNode": self.landed_on_marked,
            },
            "blockedByLimiter": dict(self.blocked),
            "pods": self.pods,
        }
