"""The three rates, per pool and for the cluster, over a period (pure).

* **discovery** = hot nodes found / hot nodes by the reference (found *and* hot by the reference, over
  hot by the reference); found nodes the reference never saw hot are counted apart (``found_only``);
* **eviction** = found hot nodes with at least one pod evicted while found hot / found hot nodes, and for
  each of the rest its most frequent reason;
* **effective** = reliefs whose node fell below target within the follow-up window / reliefs judged,
  with the reason for each of the rest. Pending reliefs and those that could not be judged (usage
  unknown, node gone) are counted apart, never as cooled and never as failed;
* **overshoot** = reliefs beyond need / reliefs: those that cooled their node below its cold threshold,
  and those of a node whose earlier relief was still pending.

And the price of what they did:

* **evictions per 100 hot-node-minutes saved**: the minutes saved are estimated from the reliefs alone,
  each cooled relief counting its follow-up window (the node would have stayed hot that long had it not
  been relieved). A node also cools by itself, so this over-counts the saving: the price is a lower bound.
  The simulation (``rebalancer simulate``) measures it against a run without rebalancing instead;
* **hot again within the hour**: evictions of reliefs whose node a later cycle found hot within the hour
  (its hot episode went on, or a new one began).

A rate with an empty denominator is None ("nothing to measure"), never 0 or 1.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from rebalancer.domain.efficiency_records import COOLED, UNJUDGED, EfficiencyState, Relief

CLUSTER = "*"  # the pool key of the cluster-wide figures


@dataclass(frozen=True, slots=True)
class PoolRates:
    pool: str
    reference: int | None  # hot nodes by the reference (None: no reference available)
    found: int
    found_and_reference: int | None
    found_only: int | None  # found hot, never hot by the reference
    acted: int
    unacted: Mapping[str, int]  # reason -> found hot nodes not acted on
    reliefs: int
    judged: int
    cooled: int
    uncooled: Mapping[str, int]  # reason -> reliefs judged not cooled
    pending: int
    unjudged: Mapping[str, int]  # unknown / node-gone
    evictions: int
    bounce_backs: int
    blocked: Mapping[str, int] = field(default_factory=dict)  # limiter -> evictions blocked (cluster only)
    reference_minutes: float | None = None
    unacted_nodes: Mapping[str, str] = field(default_factory=dict)  # node -> reason
    missed_nodes: tuple[str, ...] = ()  # hot by the reference, never found
    landed: int = 0  # evictions whose replacement was seen scheduled
    landed_back: int = 0  # ... onto the node it was evicted from
    predicted_landed: int = 0  # evictions with a landing prediction whose replacement was seen
    landing_hits: int = 0  # ... on the predicted node
    passed_lands_back: int = 0  # candidates passed over (per cycle): their replacement would land back
    passed_recently_moved: int = 0  # candidates passed over (per cycle): they had just moved (bounce-back memory)
    overshoot: int = 0  # reliefs beyond need: below the cold threshold, or again while an earlier one was pending
    overshoot_below_cold: int = 0  # ... that cooled the node below its cold threshold
    overshoot_repeat: int = 0  # ... of a node whose earlier relief was still pending
    overshoot_evictions: int = 0  # pods evicted in the reliefs beyond need
    saved_minutes: float = 0.0  # hot-node-minutes saved, estimated: each cooled relief's follow-up window
    hot_again: int = 0  # evictions of reliefs whose node a later cycle found hot within the hour

    @property
    def discovery(self) -> float | None:
        if not self.reference or self.found_and_reference is None:
            return None
        return self.found_and_reference / self.reference

    @property
    def eviction(self) -> float | None:
        return self.acted / self.found if self.found else None

    @property
    def effective(self) -> float | None:
        return self.cooled / self.judged if self.judged else None

    @property
    def overshoot_rate(self) -> float | None:
        """Of the reliefs, those beyond need."""
        return self.overshoot / self.reliefs if self.reliefs else None

    @property
    def landed_back_rate(self) -> float | None:
        """Of the replacements seen, those scheduled back onto the node they were evicted from."""
        return self.landed_back / self.landed if self.landed else None

    @property
    def evictions_per_100_saved(self) -> float | None:
        """Evictions per 100 hot-node-minutes saved (estimated: ``saved_minutes``)."""
        return 100 * self.evictions / self.saved_minutes if self.evictions and self.saved_minutes else None

    @property
    def hot_again_share(self) -> float | None:
        return self.hot_again / self.evictions if self.evictions else None

    @property
    def landing_hit_rate(self) -> float | None:
        """Of the predicted landings seen, those on the predicted node."""
        return self.landing_hits / self.predicted_landed if self.predicted_landed else None


@dataclass(frozen=True, slots=True)
class EfficiencyReport:
    start: float
    end: float
    pools: tuple[PoolRates, ...]  # the cluster (pool "*") first
    reference_problem: str | None = None  # why there is no discovery rate
    reference_definition: str | None = None  # which definition of a hot node the reference is, in words

    def pool(self, name: str) -> PoolRates:
        return next(p for p in self.pools if p.pool == name)

    @property
    def cluster(self) -> PoolRates:
        return self.pool(CLUSTER)


def compute_rates(
    state: EfficiencyState,
    reference_minutes: Mapping[str, float] | None,
    pool_of: Mapping[str, str],
    start: float,
    end: float,
    reference_problem: str | None = None,
    *,
    start_open: bool = False,
) -> EfficiencyReport:
    """``reference_minutes``: node -> minutes hot by the reference in [start, end] (only nodes hot at least
    once); None when the reference could not be read (``reference_problem`` says why). ``pool_of``: the
    pools of the nodes the reference names (records carry their own pool). ``start_open``: the period is
    (start, end], a time bucket after the first (what happened at ``start`` is counted in the one before)."""

    def within(at: float) -> bool:
        return (start < at if start_open else start <= at) and at <= end

    sightings = [s for s in state.sightings if (s.last > start if start_open else s.last >= start) and s.first <= end]
    found_pool: dict[str, str] = {}
    acted: set[str] = set()
    reason_counts: dict[str, Counter[str]] = {}
    for s in sightings:
        found_pool.setdefault(s.node, s.pool)
        if s.acted:
            acted.add(s.node)
        reason_counts.setdefault(s.node, Counter()).update(s.reasons)
    reliefs = [r for r in state.reliefs if within(r.at)]  # a node emptied while not hot acted on none
    unacted = {node: _top(reason_counts.get(node, Counter())) for node in found_pool if node not in acted}
    ref_pool = None
    if reference_minutes is not None:
        ref_pool = {n: pool_of.get(n, found_pool.get(n, "unknown")) for n in reference_minutes}
    pools = sorted({*found_pool.values(), *(ref_pool or {}).values(), *(r.pool for r in reliefs)})
    bounces = [b for b in state.bounce_backs if within(b.at)]
    blocked: Counter[str] = Counter()
    lands_back: Counter[str] = Counter()
    recently_moved: Counter[str] = Counter()
    for c in state.cycles:
        if within(c.at):
            blocked.update(c.blocked)
            lands_back.update(c.lands_back)
            recently_moved.update(c.recently_moved)

    found_again: dict[str, list[tuple[float, float]]] = {}
    for s in state.sightings:
        found_again.setdefault(s.node, []).append((s.first, s.last))

    def rates(pool: str | None) -> PoolRates:
        def mine(p: str) -> bool:
            return pool is None or p == pool

        found = {n for n, p in found_pool.items() if mine(p)}
        mine_reliefs = [r for r in reliefs if mine(r.pool)]
        judged = [r for r in mine_reliefs if r.result is not None and r.result not in UNJUDGED]
        ref = None if ref_pool is None else {n for n, p in ref_pool.items() if mine(p)}
        return PoolRates(
            pool=CLUSTER if pool is None else pool,
            reference=None if ref is None else len(ref),
            found=len(found),
            found_and_reference=None if ref is None else len(found & ref),
            found_only=None if ref is None else len(found - ref),
            acted=len(found & acted),
            unacted=dict(Counter(why for n, why in unacted.items() if n in found)),
            reliefs=len(mine_reliefs),
            judged=len(judged),
            cooled=sum(1 for r in judged if r.result == COOLED),
            uncooled=dict(Counter(r.result for r in judged if r.result != COOLED and r.result is not None)),
            pending=sum(1 for r in mine_reliefs if r.result is None),
            unjudged=dict(Counter(r.result for r in mine_reliefs if r.result in UNJUDGED and r.result is not None)),
            evictions=sum(len(r.evicted) for r in mine_reliefs),
            bounce_backs=sum(1 for b in bounces if mine(b.pool)),
            blocked=dict(blocked) if pool is None else {},
            reference_minutes=None
            if ref is None or reference_minutes is None
            else sum(reference_minutes[n] for n in ref),
            unacted_nodes={n: why for n, why in sorted(unacted.items()) if n in found},
            missed_nodes=() if ref is None else tuple(sorted(ref - found)),
            **_landings(mine_reliefs),
            passed_lands_back=sum(n for p, n in lands_back.items() if mine(p)),
            passed_recently_moved=sum(n for p, n in recently_moved.items() if mine(p)),
            **_overshoot(mine_reliefs),
            saved_minutes=sum((r.deadline - r.at) / 60 for r in judged if r.result == COOLED),
            hot_again=sum(len(r.evicted) for r in mine_reliefs if _hot_again(r, found_again)),
        )

    return EfficiencyReport(start, end, (rates(None), *(rates(p) for p in pools)), reference_problem)


HOT_AGAIN_SECONDS = 3600


def _hot_again(relief: Relief, sightings: Mapping[str, list[tuple[float, float]]]) -> bool:
    """A cycle after the relief, within the hour, found its node hot."""
    end = relief.at + HOT_AGAIN_SECONDS
    return any(last > relief.at and first <= end for first, last in sightings.get(relief.node, ()))


def _top(counts: Counter[str]) -> str:
    """The most frequent reason (ties: alphabetical), or not-planned when none was recorded."""
    if not counts:
        return "not-planned"
    return min(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0]


def _landings(reliefs: list[Relief]) -> dict[str, int]:
    seen = [(relief.node, pod) for relief in reliefs for pod in relief.evicted if pod.landed is not None]
    predicted = [pod for _, pod in seen if pod.predicted is not None]
    return {
        "landed": len(seen),
        "landed_back": sum(1 for node, pod in seen if pod.landed == node),
        "predicted_landed": len(predicted),
        "landing_hits": sum(1 for pod in predicted if pod.landed == pod.predicted),
    }


def _overshoot(reliefs: list[Relief]) -> dict[str, int]:
    beyond = [r for r in reliefs if r.overshoot]
    return {
        "overshoot": len(beyond),
        "overshoot_below_cold": sum(1 for r in reliefs if r.below_cold),
        "overshoot_repeat": sum(1 for r in reliefs if r.repeat),
        "overshoot_evictions": sum(len(r.evicted) for r in beyond),
    }
