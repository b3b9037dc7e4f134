"""A landing distribution as groups of equally scored nodes (pure): the shape the planner reads.

The scheduler gives every node of a score group the same probability (module
:mod:`rebalancer.planning.scheduler_model`), and on a large cluster a group holds tens to hundreds of nodes of
the same pool, zone and requested load. :class:`LandingGroups` keeps the groups, best first, each with
its per-node probability and its members: whole **buckets** of a pod class's ranking (the nodes of one
zone with one static score, which all get the same spreading score unless they hold the workload's
pods) and the **exact** nodes scored one by one (the pod's own node, the nodes changed since the ranking
was built, the nodes holding its workload's pods). A reader counts a bucket's nodes by kind once per
bucket instead of once per node; the groups stop where the rest of the nodes are reached with a
probability of at most ``EPSILON`` together.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import msgspec


class Group(msgspec.Struct, frozen=True, gc=False):
    """Nodes with one total weighted score: each is chosen with ``probability``."""

    total: int
    probability: float
    size: int
    buckets: tuple[int, ...]  # ranking buckets, their nodes but the query's exact ones
    nodes: tuple[int, ...]  # exact nodes, in index order


class LandingGroups(msgspec.Struct, frozen=True, gc=False):
    """Where a pod lands, as score groups best first (no group when nothing is feasible: ``reason``)."""

    groups: tuple[Group, ...]
    feasible: int  # how many nodes are feasible
    sampled: int  # how many of them the scheduler scores
    reason: str
    serial: int  # the ranking the bucket numbers refer to (its nodes: ``bucket_nodes``)
    bucket_nodes: Sequence[Sequence[int]]  # per bucket: its nodes in index order, as the ranking was built
    excluded: Mapping[int, tuple[int, ...]]  # bucket -> its nodes scored exactly in this query (not in it)
    caveat: str = ""  # what the model could not evaluate for this pod ("": nothing): then nothing is certain

    def members(self, group: Group) -> Iterator[int]:
        """The nodes of ``group``: its buckets' (without the exact ones) and its exact nodes."""
        for b in group.buckets:
            left_out = self.excluded.get(b, ())
            yield from (i for i in self.bucket_nodes[b] if i not in left_out)
        yield from group.nodes


@dataclass(frozen=True, slots=True)
class RankedBuckets:
    """A pod class's ranking as buckets: per zone column, its buckets best static score first."""

    column_buckets: Sequence[Sequence[int]]
    static: Sequence[int]  # per bucket
    size: Sequence[int]  # per bucket


def best_first(exact: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """(total, node) pairs best total first, ties in node order: the order :func:`merge_groups` reads."""
    return sorted(exact, key=lambda e: (-e[0], e[1]))


def merge_groups(
    ranked: RankedBuckets,
    zone_spread: Sequence[int],
    exact: Sequence[tuple[int, int]],
    excluded: Mapping[int, tuple[int, ...]],
    population: int,
    needed: int,
    unsampled: Sequence[float],
) -> tuple[Group, ...]:
    """The score groups, best first, until they hold ``needed`` nodes (:func:`reached_nodes`).

    ``zone_spread``: per zone column, the weighted spreading score of a node holding none of the pod's
    workload; a bucket's nodes score its static score plus that. ``exact``: (total, node) of the
    feasible exact nodes, best first (:func:`best_first`); ``excluded``: per bucket, its nodes among the exact ones (stale
    there). ``unsampled[m]``: the probability that the scheduler's sample lies within ``m`` given nodes
    of the ``population`` (``C(m, k) / C(n, k)``): a group of ``t`` nodes below ``a`` better ones wins
    with ``unsampled[n - a] - unsampled[n - a - t]``, shared evenly."""
    columns = ranked.column_buckets
    pointers = [0] * len(columns)
    groups: list[Group] = []
    above = taken = 0
    while above < needed:
        best: int | None = None
        for c, buckets in enumerate(columns):
            if pointers[c] < len(buckets):
                total = ranked.static[buckets[pointers[c]]] + zone_spread[c]
                if best is None or total > best:
                    best = total
        if taken < len(exact) and (best is None or exact[taken][0] > best):
            best = exact[taken][0]
        if best is None:
            break
        members, size = [], 0
        for c, buckets in enumerate(columns):
            p = pointers[c]
            if p < len(buckets) and ranked.static[buckets[p]] + zone_spread[c] == best:
                pointers[c] = p + 1
                left = ranked.size[buckets[p]] - len(excluded.get(buckets[p], ()))
                if left:
                    members.append(buckets[p])
                    size += left
        nodes = []
        while taken < len(exact) and exact[taken][0] == best:
            nodes.append(exact[taken][1])
            taken += 1
        size += len(nodes)
        if size == 0:
            continue
        probability = (unsampled[population - above] - unsampled[population - above - size]) / size
        groups.append(Group(best, probability, size, tuple(members), tuple(sorted(nodes))))
        above += size
    return tuple(groups)
