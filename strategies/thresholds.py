"""Threshold settings shared by the utilization strategies, and node classification by pool."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from statistics import fmean

from pydantic import Field

from rebalancer.domain.settings.shared import Model, ResourceThresholds
from rebalancer.planning.plan import NodeClass, NodeDecision
from rebalancer.planning.snapshot import ClusterSnapshot


class PoolThresholds(Model):
    """Thresholds for the nodes of one resource pool."""

    thresholds: ResourceThresholds = Field(description="Below this, a node is cold (underutilized).")
    target_thresholds: ResourceThresholds = Field(description="Above this, a node is hot (overutilized).")
    use_deviation_thresholds: bool | None = Field(
        default=None, description="Override the strategy's useDeviationThresholds for this pool."
    )

    def effective_deviation(self, strategy_default: bool) -> bool:
        if self.use_deviation_thresholds is None:
            return strategy_default
        return self.use_deviation_thresholds

    def band_problems(self, strategy_default: bool, *, targets_select_hot: bool) -> list[tuple[str, str]]:
        """Thresholds out of order, or selecting one side of the band only: (field, message) each.

        A side selects no node when no usage can pass it: cold below thresholds 0 (absolute) or below the
        mean minus 100 or more (deviation); hot above targetThresholds 100 (the band stops at 100 %). One
        side alone then never evicts anything (hot nodes without a destination, or cold nodes nobody moves
        to); both sides at once leave the pool alone on purpose. ``targets_select_hot``: False where
        targetThresholds only caps the destinations (HighNodeUtilization)."""
        deviation = self.effective_deviation(strategy_default)
        low, high = self.thresholds.cpu, self.target_thresholds.cpu
        problems = []
        if not deviation and low > high:
            problems.append(("thresholds.cpu", f"{low:g} must not be above targetThresholds.cpu ({high:g})"))
        if not targets_select_hot or self._cold_off(deviation) == self._hot_off():
            return problems
        off = 100 if deviation else 0
        alone = f"to leave the pool alone set both thresholds.cpu {off} and targetThresholds.cpu 100"
        if self._cold_off(deviation):
            problems.append(
                (
                    "thresholds.cpu",
                    f"{low:g} makes no node cold: hot nodes have nowhere to go, nothing is evicted; {alone}",
                )
            )
        else:
            problems.append(("targetThresholds.cpu", f"{high:g} makes no node hot: nothing is ever evicted; {alone}"))
        return problems

    def selects_nothing(self, strategy_default: bool, *, targets_select_hot: bool) -> bool:
        """No node is ever selected with these thresholds (the pool is left alone)."""
        cold_off = self._cold_off(self.effective_deviation(strategy_default))
        return cold_off and (self._hot_off() or not targets_select_hot)

    def _cold_off(self, deviation: bool) -> bool:
        return self.thresholds.cpu >= 100 if deviation else self.thresholds.cpu == 0

    def _hot_off(self) -> bool:
        return self.target_thresholds.cpu >= 100


def thresholds_problems(
    default: PoolThresholds, pools: Mapping[str, PoolThresholds], deviation_default: bool, *, targets_select_hot: bool
) -> list[tuple[str, str]]:
    """A strategy's band problems, the per-pool ones under ``pools.<name>.``, and one more when no pool's
    thresholds select any node (the strategy would never evict: ``enabled: false`` says that plainly)."""
    problems = default.band_problems(deviation_default, targets_select_hot=targets_select_hot)
    for pool, settings in pools.items():
        problems += [
            (f"pools.{pool}.{path}", message)
            for path, message in settings.band_problems(deviation_default, targets_select_hot=targets_select_hot)
        ]
    every = [default, *pools.values()]
    if not problems and all(t.selects_nothing(deviation_default, targets_select_hot=targets_select_hot) for t in every):
        problems.append(
            (
                "thresholds.cpu",
                "no pool's thresholds select any node, nothing is ever evicted; to turn the "
                "strategy off set enabled: false",
            )
        )
    return problems


@dataclass(frozen=True, slots=True)
class Band:
    """Effective percentages for one pool in this snapshot (deviation already resolved)."""

    low_pct: float
    high_pct: float
    explanation: str


def pool_bands(
    snapshot: ClusterSnapshot,
    default: PoolThresholds,
    per_pool: Mapping[str, PoolThresholds],
    deviation_default: bool,
) -> dict[str, Band]:
    """Resolve each pool's low/high band, taking the pool's mean usage when deviation is on."""
    bands: dict[str, Band] = {}
    for pool in snapshot.pools():
        settings = per_pool.get(pool, default)
        deviation = settings.effective_deviation(deviation_default)
        low, high = settings.thresholds.cpu, settings.target_thresholds.cpu
        if not deviation:
            bands[pool] = Band(low, high, f"pool {pool}: below {low:g}% cold, above {high:g}% hot")
            continue
        usages = [pct for name, pct in _known_pcts(snapshot) if snapshot.pool_of[name] == pool]
        if not usages:
            bands[pool] = Band(0.0, 100.0, f"pool {pool}: no node with known usage, no mean")
            continue
        mean = fmean(usages)
        lo, hi = max(0.0, mean - low), min(100.0, mean + high)
        bands[pool] = Band(
            lo,
            hi,
            f"pool {pool}: mean {mean:.1f}% - {low:g} = {lo:.1f}% cold, mean + {high:g} = {hi:.1f}% hot",
        )
    return bands


def _known_pcts(snapshot: ClusterSnapshot) -> list[tuple[str, float]]:
    out = []
    for name, node in snapshot.nodes.items():
        usage = snapshot.load[name].usage_m
        if usage is not None:
            out.append((name, 100.0 * usage / node.allocatable_cpu_m))
    return out


def classify_nodes(
    snapshot: ClusterSnapshot,
    strategy: str,
    bands: Mapping[str, Band],
    decide: Callable[[float, Band], tuple[NodeClass, str]],
) -> dict[str, NodeDecision]:
    """One decision per node; nodes with unknown usage are UNKNOWN, never hot or cold."""
    decisions: dict[str, NodeDecision] = {}
    for name, node in snapshot.nodes.items():
        pool = snapshot.pool_of[name]
        band = bands[pool]
        load = snapshot.load[name]
        if load.usage_m is None:
            node_class, reason, pct = NodeClass.UNKNOWN, load.unknown_reason or "usage unknown", None
        else:
            pct = 100.0 * load.usage_m / node.allocatable_cpu_m
            node_class, reason = decide(pct, band)
        decisions[name] = NodeDecision(
            strategy=strategy,
            node=name,
            pool=pool,
            node_class=node_class,
            reason=reason,
            usage_m=load.usage_m,
            allocatable_m=node.allocatable_cpu_m,
            usage_pct=pct,
            low_pct=band.low_pct,
            high_pct=band.high_pct,
        )
    return decisions


def cap_millis(allocatable_m: int, pct: float) -> int:
    """The usage in millicores that ``pct`` percent of ``allocatable_m`` allows (rounded down)."""
    return int(allocatable_m * pct / 100.0)
