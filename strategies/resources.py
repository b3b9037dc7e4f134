"""Memory and pod count beside CPU (pure): their bands, the node classes they make, what a node has above
target, and the room a destination keeps under every target.

The descheduler's rule: a node is hot when any configured resource is over its target, cold when every
one is under its threshold. CPU stays in :mod:`strategies.thresholds` as it always was; the resources here
are added to it only where a policy configures them. Memory is the working set in bytes (requests with
``classifyBy: requests``) and unknown when not read or missing, never zero; pods are the non-terminal pods
bound to the node against its allocatable pods. A node with any configured resource unknown is UNKNOWN.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from rebalancer.domain.model import Pod
from rebalancer.domain.quantity import bytes_text, cores_text
from rebalancer.planning.plan import NodeClass, NodeDecision, ResourceUse
from rebalancer.planning.snapshot import ClusterSnapshot


@dataclass(frozen=True, slots=True)
class ResourceBand:
    """Effective percentages of one resource other than CPU, for one pool."""

    resource: str  # memory or pods
    low_pct: float
    high_pct: float
    explanation: str


def node_amount(snapshot: ClusterSnapshot, name: str, resource: str) -> tuple[int | None, int, str | None]:
    """The node's use of ``resource`` (None: unknown), its allocatable amount, and why unknown."""
    load, node = snapshot.load[name], snapshot.nodes[name]
    if resource == "memory":
        why = load.memory_unknown_reason or "memory usage not read"
        return load.memory_usage, node.allocatable_memory, None if load.memory_usage is not None else why
    return load.pod_count, node.allocatable_pods, None


def pod_amount(snapshot: ClusterSnapshot, pod: Pod, resource: str) -> int | None:
    """What moving ``pod`` takes off its node in ``resource`` ("cpu": its usage; None: unknown)."""
    if resource == "memory":
        return snapshot.memory_of(pod)
    if resource == "pods":
        return 1
    return snapshot.usage_of(pod)


def amount_text(resource: str, amount: float) -> str:
    """An amount as a sentence says it: cores, GiB, pods."""
    if resource == "memory":
        return bytes_text(amount)
    if resource == "pods":
        return f"{amount:g} pod(s)"
    return cores_text(amount)


def resource_band(
    snapshot: ClusterSnapshot, pool: str, resource: str, low: float, high: float, deviation: bool
) -> ResourceBand:
    """One pool's band of ``resource``: absolute, or around the mean of the pool's known nodes."""
    if not deviation:
        return ResourceBand(resource, low, high, f"pool {pool}: below {low:g}% cold, above {high:g}% hot")
    pcts = []
    for name in snapshot.nodes:
        if snapshot.pool_of[name] == pool:
            used, allocatable, _ = node_amount(snapshot, name, resource)
            if used is not None and allocatable > 0:
                pcts.append(100.0 * used / allocatable)
    if not pcts:
        return ResourceBand(resource, 0.0, 100.0, f"no node of pool {pool} with known {resource}, no mean")
    mean = sum(pcts) / len(pcts)
    lo, hi = max(0.0, mean - low), min(100.0, mean + high)
    text = f"pool {pool}: mean {mean:.1f}% - {low:g} = {lo:.1f}% cold, mean + {high:g} = {hi:.1f}% hot"
    return ResourceBand(resource, lo, hi, text)


def uses(snapshot: ClusterSnapshot, name: str, bands: Iterable[ResourceBand]) -> tuple[ResourceUse, ...]:
    """The node's use of each banded resource (``used`` and ``pct`` None when unknown)."""
    out = []
    for band in bands:
        used, allocatable, _ = node_amount(snapshot, name, band.resource)
        pct = None if used is None or allocatable <= 0 else 100.0 * used / allocatable
        out.append(ResourceUse(band.resource, used, allocatable, pct, band.low_pct, band.high_pct))
    return tuple(out)


def unknown_reason(snapshot: ClusterSnapshot, name: str, bands: Iterable[ResourceBand]) -> str | None:
    """Why some banded resource of the node is unknown (None: all known)."""
    for band in bands:
        used, allocatable, why = node_amount(snapshot, name, band.resource)
        if used is None:
            return f"{band.resource} unknown: {why}"
        if allocatable <= 0:
            return f"node reports no allocatable {band.resource}"
    return None


def _class_of(pct: float, low: float, high: float) -> NodeClass:
    if pct > high:
        return NodeClass.HOT
    return NodeClass.COLD if pct < low else NodeClass.NORMAL


def combined_class(snapshot: ClusterSnapshot, name: str, cpu: NodeClass, bands: Iterable[ResourceBand]) -> NodeClass:
    """Hot when any resource is over its target, cold when every one is under its threshold, unknown when
    any is unknown. Made for every node of the cluster each cycle: no record per resource."""
    hot, all_cold = cpu is NodeClass.HOT, cpu is NodeClass.COLD
    for band in bands:
        used, allocatable, _ = node_amount(snapshot, name, band.resource)
        if used is None or allocatable <= 0:
            return NodeClass.UNKNOWN
        own = _class_of(100.0 * used / allocatable, band.low_pct, band.high_pct)
        hot = hot or own is NodeClass.HOT
        all_cold = all_cold and own is NodeClass.COLD
    if hot:
        return NodeClass.HOT
    return NodeClass.COLD if all_cold else NodeClass.NORMAL


def combined_reason(
    node_class: NodeClass,
    cpu_class: NodeClass,
    cpu_reason: str,
    bands: Iterable[ResourceBand],
    found: Iterable[ResourceUse],
) -> str:
    """The reasons of the resources that make the class: the hot ones for a hot node, every one otherwise."""
    cpu = cpu_reason if cpu_reason.startswith("CPU ") else f"CPU {cpu_reason}"  # "CPU requests ...": said once
    parts = [] if node_class is NodeClass.HOT and cpu_class is not NodeClass.HOT else [cpu]
    for band, use in zip(bands, found, strict=True):
        assert use.pct is not None
        own = _class_of(use.pct, use.low_pct, use.high_pct)
        if node_class is NodeClass.HOT and own is not NodeClass.HOT:
            continue
        if own is NodeClass.HOT:
            parts.append(f"{use.resource} {use.pct:.1f}% > target {use.high_pct:.1f}% ({band.explanation})")
        elif own is NodeClass.COLD:
            parts.append(f"{use.resource} {use.pct:.1f}% < threshold {use.low_pct:.1f}% ({band.explanation})")
        else:
            parts.append(f"{use.resource} {use.pct:.1f}% within [{use.low_pct:.1f}%, {use.high_pct:.1f}%]")
    return "; ".join(parts)


def bands_named(bands: Iterable[ResourceBand]) -> tuple[str, ...]:
    return tuple(band.resource for band in bands)


def hot_text(decision: NodeDecision, usage_word: str) -> str:
    """What is over target on a hot node: "usage 85.0% > 70.0%", "memory 90.0% > 80.0%", or both."""
    pct, high = decision.usage_pct or 0.0, decision.high_pct or 0.0
    parts = [f"{usage_word} {pct:.1f}% > {high:.1f}%"] if not decision.others or pct > high else []
    parts += [
        f"{use.resource} {use.pct:.1f}% > {use.high_pct:.1f}%"
        for use in decision.others
        if use.pct is not None and use.pct > use.high_pct
    ]
    return ", ".join(parts)


def relief_order(hot: Iterable[NodeDecision]) -> list[NodeDecision]:
    """The order hot nodes are relieved in, the node most over target first. With CPU alone: by CPU percentage,
    highest first. With memory or pods too: by how far the node's most-over resource is above its target,
    relative to that target, so that a node far over on memory alone comes before one barely over on CPU."""
    found = list(hot)
    if not any(d.others for d in found):
        return sorted(found, key=lambda d: -(d.usage_pct or 0.0))
    return sorted(found, key=lambda d: -relative_excess(d))


def relative_excess(decision: NodeDecision) -> float:
    """How far the decision's most-over resource is above its target, as a fraction of the target (0.25: a
    quarter above it); CPU counts as one resource among the others."""
    found = [(decision.usage_pct or 0.0, decision.high_pct or 0.0)]
    found += [(use.pct, use.high_pct) for use in decision.others if use.pct is not None]
    return max((pct - high) / max(high, 1.0) for pct, high in found)


def target_amount(allocatable: int, pct: float) -> int:
    """The amount ``pct`` percent of ``allocatable`` allows (rounded down)."""
    return int(allocatable * pct / 100.0)


@dataclass(slots=True)
class Excess:
    """What a hot node has above target, per resource ("cpu" in millicores, memory in bytes, pods); the
    resource to relieve next is the one most over, relative to the node's allocatable amount. ``slack``:
    how much of a resource's amount may stay (CPU's, when it is counted down to a level under the target
    but the relief stops at the target)."""

    amounts: dict[str, int]
    allocatable: dict[str, int]
    slack: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, snapshot: ClusterSnapshot, name: str, cpu_excess: int, bands: Iterable[ResourceBand]) -> Excess:
        amounts = {"cpu": cpu_excess}
        allocatable = {"cpu": max(1, snapshot.nodes[name].allocatable_cpu_m)}
        for band in bands:
            used, whole, _ = node_amount(snapshot, name, band.resource)
            assert used is not None, "a hot node's configured resources are known"
            amounts[band.resource] = used - target_amount(whole, band.high_pct)
            allocatable[band.resource] = max(1, whole)
        return cls(amounts, allocatable)

    def over(self) -> str | None:
        """The resource most over its target (None: every one is at or under it)."""
        over = [
            (amount / self.allocatable[r], r) for r, amount in self.amounts.items() if amount > self.slack.get(r, 0)
        ]
        return max(over)[1] if over else None

    def take(self, amounts: Mapping[str, int | None]) -> None:
        for resource, amount in amounts.items():
            if resource in self.amounts and amount is not None:
                self.amounts[resource] -= amount


@dataclass(slots=True)
class ExtraRoom:
    """Room under the targets of memory and pods on destination nodes, consumed as moves are planned
    (CPU room stays with :class:`~strategies.placement.RoomTracker` and the landing predictor)."""

    snapshot: ClusterSnapshot
    bands_of: Callable[[str], tuple[ResourceBand, ...]]
    resources: frozenset[str]  # those some pool's thresholds name
    added: dict[tuple[str, str], int] = field(default_factory=dict)
    _rooms: dict[str, tuple[tuple[str, int | None], ...]] = field(default_factory=dict)  # before any move
    _journal: list[tuple[str, str, int]] = field(default_factory=list)  # the commits, for rollback

    def refuser(self, pod: Pod) -> Callable[[str], str | None]:
        """``refusal`` for one pod, asked of many nodes (the landing predictor weighs hundreds for each
        candidate): the pod's amounts and each node's room are looked up once, the reason written only for
        a node that refuses."""
        needs = {resource: pod_amount(self.snapshot, pod, resource) for resource in self.resources}

        def refuse(node: str) -> str | None:
            rooms = self._rooms.get(node)
            if rooms is None:
                rooms = self._rooms[node] = self._rooms_under_target(node)
            for resource, room in rooms:
                need = needs.get(resource)
                if room is None or need is None or self.added.get((node, resource), 0) + need > room:
                    return self.refusal(node, pod)
            return None

        return refuse

    def _rooms_under_target(self, node: str) -> tuple[tuple[str, int | None], ...]:
        """What ``node`` may take of each banded resource before any planned move (None: unknown)."""
        out = []
        for band in self.bands_of(node):
            used, allocatable, _ = node_amount(self.snapshot, node, band.resource)
            out.append(
                (
                    band.resource,
                    None if used is None or allocatable <= 0 else target_amount(allocatable, band.high_pct) - used,
                )
            )
        return tuple(out)

    def refusal(self, node: str, pod: Pod) -> str | None:
        """Why ``pod`` may not go to ``node``: a resource over its target after the move (None: fits)."""
        for band in self.bands_of(node):
            used, allocatable, _ = node_amount(self.snapshot, node, band.resource)
            need = pod_amount(self.snapshot, pod, band.resource)
            if used is None or need is None or allocatable <= 0:
                what = "the pod's" if need is None else f"{node}'s"
                return f"{what} {band.resource} usage is unknown: {node}'s room under its target cannot be told"
            after = used + self.added.get((node, band.resource), 0) + need
            if after > target_amount(allocatable, band.high_pct):
                return (
                    f"would put {node}'s {band.resource} at {100.0 * after / allocatable:.1f}% > target "
                    f"{band.high_pct:.1f}% ({amount_text(band.resource, after)} of "
                    f"{amount_text(band.resource, allocatable)})"
                )
        return None

    def commit(self, node: str, pod: Pod) -> None:
        for band in self.bands_of(node):
            need = pod_amount(self.snapshot, pod, band.resource) or 0
            self.added[(node, band.resource)] = self.added.get((node, band.resource), 0) + need
            self._journal.append((node, band.resource, need))

    def checkpoint(self) -> int:
        return len(self._journal)

    def rollback(self, checkpoint: int) -> None:
        """Take back the moves committed since ``checkpoint`` (a group that stays after all)."""
        while len(self._journal) > checkpoint:
            node, resource, need = self._journal.pop()
            self.added[(node, resource)] -= need
