"""Threshold settings shared by the utilization strategies, and node classification by pool."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from statistics import fmean

from pydantic import Field

from rebalancer.plan import NodeClass, NodeDecision
from rebalancer.settings import Model, ResourceThresholds
from rebalancer.snapshot import ClusterSnapshot


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

    def order_problem(self, strategy_default: bool) -> tuple[str, str] | None:
        """Absolute thresholds must not exceed targetThresholds (deviations may): (field, message)."""
        if self.effective_deviation(strategy_default):
            return None
        if self.thresholds.cpu > self.target_thresholds.cpu:
            return (
                "thresholds.cpu",
                f"{self.thresholds.cpu:g} must not be above targetThresholds.cpu ({self.target_thresholds.cpu:g})",
            )
        return None


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
