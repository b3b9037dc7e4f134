"""Threshold settings shared by the utilization strategies, and node classification by pool."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from statistics import fmean

from pydantic import Field

from rebalancer.domain.guard_marks import carries_guard_key
from rebalancer.domain.settings.shared import Model, ResourceThresholds
from rebalancer.planning.plan import NodeClass, NodeDecision
from rebalancer.planning.snapshot import ClusterSnapshot
from strategies.resources import (
    ExtraRoom,
    ResourceBand,
    combined_class,
    combined_reason,
    resource_band,
    target_amount,
    unknown_reason,
    uses,
)


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
        problems += self._extra_problems(deviation, targets_select_hot=targets_select_hot)
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

    def _extra_problems(self, deviation: bool, *, targets_select_hot: bool) -> list[tuple[str, str]]:
        """Memory and pods: named on both sides or neither, in order, and not making every node warm."""
        consequence = "hot nodes have nowhere to go" if targets_select_hot else "no node is ever emptied"
        low, high = dict(self.thresholds.extra()), dict(self.target_thresholds.extra())
        problems = []
        for resource in sorted(set(low) | set(high)):
            if resource not in low or resource not in high:
                missing = "thresholds" if resource not in low else "targetThresholds"
                other = "targetThresholds" if resource not in low else "thresholds"
                problems.append((f"{missing}.{resource}", f"missing: {other}.{resource} is set; set both or neither"))
            elif not deviation and low[resource] > high[resource]:
                problems.append(
                    (
                        f"thresholds.{resource}",
                        f"{low[resource]:g} must not be above targetThresholds.{resource} ({high[resource]:g})",
                    )
                )
            elif (low[resource] >= 100) if deviation else (low[resource] == 0):
                problems.append(
                    (
                        f"thresholds.{resource}",
                        f"{low[resource]:g} makes no node cold (a node is cold only under every threshold): "
                        f"{consequence}; leave the resource out instead",
                    )
                )
        return problems

    def resources(self) -> tuple[str, ...]:
        """The resources other than CPU these thresholds classify by."""
        return tuple(name for name, _ in self.target_thresholds.extra())

    def selects_nothing(self, strategy_default: bool, *, targets_select_hot: bool) -> bool:
        """No node is ever selected with these thresholds (the pool is left alone)."""
        cold_off = self._cold_off(self.effective_deviation(strategy_default))
        return cold_off and (self._hot_off() or not targets_select_hot)

    def _cold_off(self, deviation: bool) -> bool:
        return self.thresholds.cpu >= 100 if deviation else self.thresholds.cpu == 0

    def _hot_off(self) -> bool:
        """No usage passes any target: a node is hot when any resource named is over its target."""
        return self.target_thresholds.cpu >= 100 and all(pct >= 100 for _, pct in self.target_thresholds.extra())


def names_memory(default: PoolThresholds, pools: Mapping[str, PoolThresholds]) -> bool:
    """Some of a strategy's thresholds, its own or a pool's, classify by memory."""
    return any("memory" in t.resources() for t in (default, *pools.values()))


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
    """Effective percentages for one pool in this snapshot (deviation already resolved); ``extra``: those
    of memory and pods, when the thresholds name them; ``receive_pct``: the CPU a destination may reach
    with a pod added (LowNodeUtilization's receiveThresholds; None: unset, cold nodes receive up to
    ``high_pct``)."""

    low_pct: float
    high_pct: float
    explanation: str
    extra: tuple[ResourceBand, ...] = ()
    receive_pct: float | None = None


def pool_bands(
    snapshot: ClusterSnapshot,
    default: PoolThresholds,
    per_pool: Mapping[str, PoolThresholds],
    deviation_default: bool,
) -> dict[str, Band]:
    """Resolve each pool's low/high band, taking the pool's mean usage when deviation is on."""
    bands = _cpu_bands(snapshot, default, per_pool, deviation_default)
    for pool, band in bands.items():
        settings = per_pool.get(pool, default)
        deviation = settings.effective_deviation(deviation_default)
        highs = dict(settings.target_thresholds.extra())
        extra = tuple(
            resource_band(snapshot, pool, resource, low, highs[resource], deviation)
            for resource, low in settings.thresholds.extra()
            if resource in highs
        )
        if extra:
            bands[pool] = replace(band, extra=extra)
    return bands


def _cpu_bands(
    snapshot: ClusterSnapshot,
    default: PoolThresholds,
    per_pool: Mapping[str, PoolThresholds],
    deviation_default: bool,
) -> dict[str, Band]:
    bands: dict[str, Band] = {}
    for pool in snapshot.pools():
        settings = per_pool.get(pool, default)
        deviation = settings.effective_deviation(deviation_default)
        low, high = settings.thresholds.cpu, settings.target_thresholds.cpu
        if not deviation:
            bands[pool] = Band(low, high, f"pool {pool}: below {low:g}% cold, above {high:g}% hot")
            continue
        mean = pool_mean(snapshot, pool)
        if mean is None:
            bands[pool] = Band(0.0, 100.0, f"pool {pool}: no node with known usage, no mean")
            continue
        lo, hi = max(0.0, mean - low), min(100.0, mean + high)
        bands[pool] = Band(
            lo,
            hi,
            f"pool {pool}: mean {mean:.1f}% - {low:g} = {lo:.1f}% cold, mean + {high:g} = {hi:.1f}% hot",
        )
    return bands


def pool_mean(snapshot: ClusterSnapshot, pool: str) -> float | None:
    """The mean CPU usage in percent of the pool's nodes with known usage (None: no such node)."""
    usages = [pct for name, pct in _known_pcts(snapshot) if snapshot.pool_of[name] == pool]
    return fmean(usages) if usages else None


def _known_pcts(snapshot: ClusterSnapshot) -> list[tuple[str, float]]:
    out = []
    for name, node in snapshot.nodes.items():
        usage = snapshot.load[name].usage_m
        if usage is not None:
            out.append((name, 100.0 * usage / node.allocatable_cpu_m))
    return out


class NodeClasses:
    """One strategy's class of every node and its usage in percent: cheap to make for the whole cluster.
    The decision records, with their reasons, are made for the nodes asked only (a cycle focused on an
    alert's nodes reports those it needs, not the cluster). Nodes with unknown usage are UNKNOWN, never
    hot or cold.

    ``class_of`` gives a known usage's class in its pool's band; ``decide`` the same class with its reason.
    ``targets_select_hot`` False: a node over a memory or pods target is normal, not hot (where targetThresholds
    only caps the destinations, HighNodeUtilization). ``only``: class those nodes alone (the bands stay the
    whole pool's), for a question about a few nodes, not a plan."""

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        strategy: str,
        bands: Mapping[str, Band],
        class_of: Callable[[float, Band], NodeClass],
        decide: Callable[[float, Band], tuple[NodeClass, str]],
        *,
        targets_select_hot: bool = True,
        only: Collection[str] | None = None,
    ) -> None:
        self._snapshot, self._strategy, self._bands, self._decide = snapshot, strategy, bands, decide
        self.of: dict[str, NodeClass] = {}
        self.pct: dict[str, float | None] = {}
        self._held: dict[str, tuple[NodeClass, str]] = {}
        pool_of, load, nodes = snapshot.pool_of, snapshot.load, snapshot.nodes
        for name in nodes if only is None else [name for name in nodes if name in only]:
            node = nodes[name]
            usage = load[name].usage_m
            if usage is None:
                self.of[name], self.pct[name] = NodeClass.UNKNOWN, None
            else:
                pct = 100.0 * usage / node.allocatable_cpu_m
                band = bands[pool_of[name]]
                self.of[name], self.pct[name] = class_of(pct, band), pct
                if band.extra:  # memory, pods: only where the thresholds name them
                    combined = combined_class(snapshot, name, self.of[name], band.extra)
                    hot = combined is NodeClass.HOT and not targets_select_hot
                    self.of[name] = NodeClass.NORMAL if hot else combined

    def hold(self, name: str, node_class: NodeClass, reason: str) -> None:
        """Class ``name`` as ``node_class``, for ``reason``, instead of what its usage gives (a strategy's own
        rule, such as a node predicted hot whose peak is not near yet)."""
        self.of[name] = node_class
        self._held[name] = (node_class, reason)

    def band(self, name: str) -> Band:
        return self._bands[self._snapshot.pool_of[name]]

    def pool_band(self, pool: str) -> Band:
        return self._bands[pool]

    def cap_m(self, name: str) -> int:
        """The usage the node may reach: its pool's upper percentage of its allocatable CPU."""
        return target_amount(self._snapshot.nodes[name].allocatable_cpu_m, self.band(name).high_pct)

    def receive_cap_m(self, name: str) -> int:
        """The usage the node may reach as a destination: its pool's receive percentage of its allocatable
        CPU, the upper one when the pool has none."""
        band = self.band(name)
        pct = band.high_pct if band.receive_pct is None else band.receive_pct
        return target_amount(self._snapshot.nodes[name].allocatable_cpu_m, pct)

    def receives(self, name: str) -> bool:
        """The node is a destination: cold, or, where its pool has a receive percentage, neither hot nor
        unknown and under it (the room a given pod needs is the room search's and the predictor's)."""
        node_class = self.of[name]
        receive = self.band(name).receive_pct
        if receive is None or node_class in (NodeClass.HOT, NodeClass.UNKNOWN):
            return node_class is NodeClass.COLD
        pct = self.pct[name]
        return pct is not None and pct < receive

    def extra_room(self) -> ExtraRoom | None:
        """Room under the memory and pods targets of the destinations (None: no thresholds name them)."""
        resources = frozenset(extra.resource for band in self._bands.values() for extra in band.extra)
        if not resources:
            return None
        return ExtraRoom(self._snapshot, lambda name: self.band(name).extra, resources)

    def named(self, node_class: NodeClass) -> list[str]:
        """The nodes of that class, in the snapshot's order."""
        return [name for name, found in self.of.items() if found is node_class]

    def decision(self, name: str) -> NodeDecision:
        snapshot = self._snapshot
        pool = snapshot.pool_of[name]
        band = self._bands[pool]
        load = snapshot.load[name]
        pct = self.pct[name]
        others = uses(snapshot, name, band.extra)
        if name in self._held:
            node_class, reason = self._held[name]
        elif pct is None:
            node_class, reason = NodeClass.UNKNOWN, load.unknown_reason or "usage unknown"
        else:
            node_class, reason = self._decide(pct, band)
            if band.extra:
                cpu_class, node_class = node_class, self.of[name]
                unknown = unknown_reason(snapshot, name, band.extra) if node_class is NodeClass.UNKNOWN else None
                reason = unknown or combined_reason(node_class, cpu_class, reason, band.extra, others)
        return NodeDecision(
            strategy=self._strategy,
            node=name,
            pool=pool,
            node_class=node_class,
            reason=reason,
            usage_m=load.usage_m,
            allocatable_m=snapshot.nodes[name].allocatable_cpu_m,
            usage_pct=pct,
            low_pct=band.low_pct,
            high_pct=band.high_pct,
            others=others,
            usage_source=load.usage_source,
        )

    def decisions(self, names: Collection[str] | None = None) -> tuple[NodeDecision, ...]:
        """The decision records of ``names`` (None: every node), in the snapshot's order."""
        return tuple(self.decision(name) for name in self.of if names is None or name in names)

    def reported(self, touched: Iterable[str] = ()) -> tuple[NodeDecision, ...]:
        """The decision records a plan reports: every node's; in a cycle focused on an alert's nodes, those
        its readers need: the focused nodes and ``touched`` (its evictions' destinations), the hot and
        unknown ones (the cycle's summary and records count them) and those carrying the landing guard's
        key or annotation (the guard's pass decides on their class). A cool node none of these is left out:
        nothing of the cycle is decided on its record."""
        snapshot = self._snapshot
        if snapshot.focus is None:
            return self.decisions()
        wanted = set(snapshot.focus) | set(touched)
        for name, node_class in self.of.items():
            if (
                node_class is NodeClass.HOT
                or node_class is NodeClass.UNKNOWN
                or carries_guard_key(snapshot.nodes[name])
            ):
                wanted.add(name)
        return self.decisions(wanted)
