"""Evictions beyond need, judged on the simulation's ground truth (pure).

A *relief* is one cycle's evictions from one node. A relief within the usage window of the node's previous
relief (the window still holds samples from before it: the node still reads as it was) continues that
relief's *episode*. Two ways an episode evicts more than it needed:

* **again**: an eviction of a later relief of the episode while the node's real usage at that step was at
  or under the target (the stale window was the only reason to relieve it again);
* **below cold**: the node's real usage over the follow-up window after the episode's last relief (its
  ``quantile``, the policy's statistic) is under the cold threshold; the evictions beyond need are then
  the most of the episode's evictions that could be put back, smallest first, with the node still at or
  under the target over that window (a replacement bound back on the node is already there: not counted).

An episode's overshoot is the larger of the two counts (both can name the same evictions).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rebalancer.offline.simulate.world import Move

Floats = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Overshoot:
    evictions: int = 0  # evictions beyond need
    below_cold: int = 0  # episodes that left their node under the cold threshold
    again: int = 0  # evictions from a node relieved again while its last relief was pending and not hot


@dataclass(frozen=True, slots=True)
class Truth:
    """Real usage over the measured steps: ``nodes[node, i]`` (bound pods and system), ``slots[slot, i]``;
    step ``i`` is at ``start + i * step_seconds``."""

    nodes: Floats
    slots: npt.NDArray[np.float32]
    start: float
    step_seconds: int

    def index(self, at: float) -> int:
        return round((at - self.start) / self.step_seconds)


@dataclass(frozen=True, slots=True)
class Bounds:
    """Per node, in millicores: under ``cold_m`` is cold, over ``target_m`` is hot."""

    cold_m: Floats
    target_m: Floats


def overshoot(
    moves: Sequence[Move],
    node_index: dict[str, int],
    truth: Truth,
    bounds: Bounds,
    quantile: float,
    pending_seconds: float,
    follow_up_seconds: float,
) -> Overshoot:
    reliefs: dict[tuple[str, float], list[Move]] = defaultdict(list)
    for move in moves:
        reliefs[(move.source, move.at)].append(move)
    by_node: dict[str, list[tuple[float, list[Move]]]] = defaultdict(list)
    for (node, at), relief in sorted(reliefs.items()):
        by_node[node].append((at, relief))
    total = Overshoot()
    for node, timeline in by_node.items():
        episode: list[tuple[float, list[Move]]] = []
        for at, relief in timeline:
            if episode and at - episode[-1][0] >= pending_seconds:
                total = _add(total, _judge(episode, node_index[node], truth, bounds, quantile, follow_up_seconds))
                episode = []
            episode.append((at, relief))
        total = _add(total, _judge(episode, node_index[node], truth, bounds, quantile, follow_up_seconds))
    return total


def _add(a: Overshoot, b: Overshoot) -> Overshoot:
    return Overshoot(a.evictions + b.evictions, a.below_cold + b.below_cold, a.again + b.again)


def _judge(
    episode: list[tuple[float, list[Move]]],
    node: int,
    truth: Truth,
    bounds: Bounds,
    quantile: float,
    follow_up_seconds: float,
) -> Overshoot:
    target, cold = bounds.target_m[node], bounds.cold_m[node]
    again = sum(len(relief) for at, relief in episode[1:] if truth.nodes[node, truth.index(at)] <= target)
    last = truth.index(episode[-1][0])
    follow = slice(last + 1, min(last + 1 + round(follow_up_seconds / truth.step_seconds), truth.nodes.shape[1]))
    seen = truth.nodes[node, follow]
    if not seen.size or np.quantile(seen, quantile) >= cold:
        return Overshoot(again, 0, again)
    gone = [m for _, relief in episode for m in relief if m.destination != m.source]
    series = sorted(
        (truth.slots[m.slot, follow].astype(np.float64) for m in gone), key=lambda s: np.quantile(s, quantile)
    )
    back = 0
    for pod in series:
        if np.quantile(seen + pod, quantile) > target:
            break
        seen = seen + pod
        back += 1
    return Overshoot(max(back, again), 1, again)
