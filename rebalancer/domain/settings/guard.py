"""The policy's ``landingGuard:`` section: which pools mark their hot and relieved nodes, and how."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Literal

from pydantic import Field, model_validator

from rebalancer.domain.settings.shared import Duration, DurationBounds, FieldProblems, Model

Effect = Literal["PreferNoSchedule", "NoSchedule"]
Lifetime = Annotated[Duration, DurationBounds(le=timedelta(days=7))]  # a mark nobody renews still goes


class PoolGuardSettings(Model):
    """The landing guard of one pool: while a node of it is hot, or for a while after an eviction from it,
    the node carries the project's taint, so the scheduler places replacements elsewhere."""

    pool: str = Field(min_length=1, description="The pool (pools.definitions name, pools.label value or defaultPool).")
    effect: Effect = Field(
        default="PreferNoSchedule",
        description="The taint's effect. PreferNoSchedule: the scheduler avoids the node when another fits, "
        "pods without a toleration still land there when nothing else fits (the safe choice). NoSchedule: "
        "no pod without a toleration lands there at all, so a Pending replica waits until the mark goes.",
    )
    hold_after_relief: Lifetime = Field(
        default=timedelta(minutes=10),
        description="After an eviction from the node, the mark stays this long even when the node already looks "
        "cool (replacements are scheduled in the minutes after the eviction, and the usage window lags).",
    )
    mark_ttl: Lifetime = Field(
        default=timedelta(minutes=15),
        description="Every mark carries an expiry; while the node stays hot each cycle renews it to now plus "
        "this. A mark nobody renews (the cycles stopped, the instance crashed) is removed once it has expired. "
        "Make it longer than the interval between the pool's cycles, or a hot node's mark lapses in between.",
    )
    max_marked_fraction: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="At most this fraction of the pool's nodes that take pods (neither cordoned nor NotReady), "
        "rounded down, carries the taint at once, and never all of them: a pool fully tainted NoSchedule would "
        "leave its replicas nowhere to go. 0: no node "
        "is marked and every mark is cleared (how to turn the guard off while the chart still grants patch nodes).",
    )


class LandingGuardSettings(Model):
    """The soft landing guard (opt-in, off by default): marks hot and just-relieved nodes with a taint of
    the project's own key so that replacements of evicted pods land on other nodes. Needs ``patch nodes``."""

    pools: tuple[PoolGuardSettings, ...] = Field(
        default=(), description="Pools whose nodes are marked; empty: the guard is off (no node is ever patched)."
    )

    @property
    def enabled(self) -> bool:
        return bool(self.pools)

    def for_pool(self, pool: str) -> PoolGuardSettings | None:
        return next((p for p in self.pools if p.pool == pool), None)

    @model_validator(mode="after")
    def _unique_pools(self) -> LandingGuardSettings:
        names = [p.pool for p in self.pools]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise FieldProblems([("pools", f"each pool at most once, repeated: {', '.join(repeated)}")])
        return self
