"""LowNodeUtilization's receive threshold: which nodes may take a hot node's pods, beside the cold ones.

The descheduler's rule moves load only onto cold nodes (under ``thresholds``), each up to
``targetThresholds``: a pool whose nodes all sit a little over the cold threshold leaves its hot nodes
hot. With ``receiveThresholds`` a node of the pool that is neither hot nor of unknown usage is a
destination when its usage with the pod's added stays under the receive threshold, and the pool acts as
soon as one node is under it; cold nodes then receive up to the receive threshold too. The room search
and the landing prediction read the same caps (:meth:`strategies.thresholds.NodeClasses.receive_cap_m`).

A hot node is relieved down to the receive threshold too (not only to its target): the same gap that
keeps a receiver from turning hot keeps the relieved node cool through the next rise of the pods that
stay. LowNodeUtilization does it in two passes, so that scarce room first brings every hot node under
its target. On the simulator (seed 1), relief to the target left 19 of 124 reliefs still hot after the
follow-up window, 15 of them because the pods that stayed grew; relief to the receive threshold, 8 of
104 (``bench/HISTORY.md``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from pydantic import Field

from rebalancer.domain.settings.shared import ResourceThresholds
from rebalancer.planning.plan import NodeClass
from rebalancer.planning.snapshot import ClusterSnapshot
from strategies.thresholds import Band, NodeClasses, PoolThresholds, pool_mean

RECEIVE = "receiveThresholds"


class ReceivingThresholds(PoolThresholds):
    """Thresholds for the nodes of one resource pool, with the receive threshold of its destinations."""

    receive_thresholds: ResourceThresholds | None = Field(
        default=None,
        description="A node that is neither hot nor of unknown usage receives a hot node's pod when its usage "
        "with the pod's added stays under this (cpu only; a deviation above the pool's mean with "
        "useDeviationThresholds), and a pool with a hot node acts as soon as one node (of any pool without "
        "destinationsInSamePool) is under it. Cold nodes receive up to it too. Between thresholds and "
        "targetThresholds; the gap up to targetThresholds keeps a receiver from turning hot with the next "
        "rise of its usage. A hot node is relieved down to it too, for the same reason: every hot node under "
        "targetThresholds first, then deeper with the room left. "
        "Replaces landOnNormalNodes where set. null: the descheduler's rule, only cold nodes receive (up to "
        "targetThresholds), only a cold node makes a pool act, and a hot node is relieved to targetThresholds.",
    )

    def receive_problems(self, strategy_default: bool) -> list[tuple[str, str]]:
        """The receive threshold out of order or naming a resource other than CPU: (field, message) each."""
        receive = self.receive_thresholds
        if receive is None:
            return []
        problems = [
            (f"{RECEIVE}.{resource}", "only cpu is read: memory and pods destinations stay under targetThresholds")
            for resource, _ in receive.extra()
        ]
        high = self.target_thresholds.cpu
        if receive.cpu > high:
            problems.append((f"{RECEIVE}.cpu", f"{receive.cpu:g} must not be above targetThresholds.cpu ({high:g})"))
        low = self.thresholds.cpu
        if not self.effective_deviation(strategy_default) and receive.cpu < low:
            problems.append((f"{RECEIVE}.cpu", f"{receive.cpu:g} must not be below thresholds.cpu ({low:g})"))
        return problems


def with_receive(
    snapshot: ClusterSnapshot,
    bands: Mapping[str, Band],
    default: ReceivingThresholds,
    per_pool: Mapping[str, ReceivingThresholds],
    deviation_default: bool,
) -> dict[str, Band]:
    """Each pool's band with its receive percentage (absolute, or above the pool's mean with deviation)."""
    out = dict(bands)
    for pool, band in bands.items():
        settings = per_pool.get(pool, default)
        receive = settings.receive_thresholds
        if receive is None:
            continue
        pct = receive.cpu
        if settings.effective_deviation(deviation_default):
            mean = pool_mean(snapshot, pool)
            pct = band.high_pct if mean is None else min(100.0, mean + receive.cpu)
        out[pool] = replace(band, receive_pct=pct, explanation=f"{band.explanation}, receives up to {pct:.1f}%")
    return out


def coolest(snapshot: ClusterSnapshot, classes: NodeClasses, pool: str) -> str:
    """Which node of ``pool`` comes closest to receiving, for a note on a pool where none receives."""
    known = [
        (pct, name)
        for name, pct in classes.pct.items()
        if pct is not None and snapshot.pool_of[name] == pool and classes.of[name] is not NodeClass.HOT
    ]
    if not known:
        return " (no node of known usage that is not hot)"
    pct, name = min(known)
    return f" (the coolest: {name} at {pct:.1f}%)"
