"""Where the default kube-scheduler would place a pod (pure): filters, then weighted plugin scores.

Filters: :func:`rebalancer.planning.scheduling.placement_blocker` (cordon, NotReady, NoSchedule/NoExecute
taints, nodeSelector, required node affinity) and NodeResourcesFit on requests (CPU and memory
checked only when the pod requests them, as the scheduler does; pod count always).

Scores (each 0-100 like the scheduler's, times the default plugin weight):

- NodeResourcesFit LeastAllocated, weight 1: per resource ``(alloc - requested) * 100 // alloc`` in
  integers, CPU and memory averaged; pods requesting nothing count as 100m / 200Mi ("non-zero" requests).
- NodeResourcesBalancedAllocation, weight 1 (as of Kubernetes 1.36): how much the pod improves the
  balance of CPU and memory requests, ``50 + (50 + with - without) // 2`` where ``with`` and ``without``
  are ``(1 - |cpu fraction - memory fraction| / 2) * 100`` truncated, with and without the pod; a pod
  requesting neither gets no such score (the scheduler skips the plugin for it).
- TaintToleration, weight 3: the number of PreferNoSchedule taints the pod does not tolerate,
  normalized in reverse (the node with most such taints scores 0, a node with none 100).
- NodeAffinity, weight 2: the weights of the pod's preferred node affinity terms a node matches, summed
  and normalized (the feasible node with the most scores 100; none preferred: 0 everywhere).
- InterPodAffinity, weight 2 (:mod:`rebalancer.planning.inter_pod`): the preferred inter-pod terms of the pod
  and of the pods on the nodes, and existing pods' required affinity terms, min-max normalized; its filter
  (required affinity and anti-affinity, the pod's own and existing pods' against it) runs with the others,
  counting terminating pods as the scheduler does. A term with a non-empty ``namespaceSelector`` cannot be
  evaluated (namespace labels are not read): the answer then carries a ``caveat`` and claims no certainty.
- PodTopologySpread, weight 2, the default system constraints (hostname maxSkew 3 and
  ``topology.kubernetes.io/zone`` maxSkew 5, ScheduleAnyway) over the pod's workload: fewer pods of
  the same workload on the node (and in its zone) scores higher. Bare pods have no such constraint.

Not modelled: ImageLocality (hollow and real nodes alike: the image is rarely the tie-breaker), volume
plugins, pods' own topologySpreadConstraints (``bench/landing_vs_scheduler.py`` measures what they cost against the real
scheduler).

**Vacating** (``vacate=True``, :meth:`SchedulerModel.terminate`): an evicted pod terminates during its grace
period, and its ReplicaSet's replacement is scheduled meanwhile, within a fraction of a second. The
scheduler skips terminating pods when it counts a workload's pods for spreading, but keeps their requests
on the node until the pod object is deleted: the model does the same (only a pod deleted with a grace
period of 0 leaves at once).

``place``: the best-scored feasible node. Ties: the scheduler picks uniformly at random among the best
nodes. Without an ``rng`` the model takes the first of them by node name (deterministic); with a seeded
``random.Random`` it picks uniformly like the scheduler, reproducibly. ``place`` scores every feasible
node (as with percentageOfNodesToScore 100).

``landing_distribution`` / ``landing_groups``: the probability of each node, with the scheduler's
sampling of feasible nodes (:mod:`rebalancer.planning.scheduler_sampling`: the model and its exact
probabilities), built from per-class rankings so that only the nodes that can win are looked at.

Cost: node data is kept in numpy arrays built once; ``place`` is a handful of vectorized operations
over the nodes, ``landing_groups`` a merge of ranking buckets (the planner asks once per candidate pod
on 5,000-node clusters). ``remove``/``add``
keep the model current as pods leave or are bound (a simulation's evictions), ``terminate`` as planned
evictions start;
``replace_node`` as a node changes (a landing guard's PreferNoSchedule taint, a cordon).
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rebalancer.domain.model import Node, Pod, PodKey, WorkloadRef
from rebalancer.planning.inter_pod import InterPodAffinity, Verdict, normalized
from rebalancer.planning.landing_groups import LandingGroups, RankedBuckets, best_first, merge_groups
from rebalancer.planning.scheduler_sampling import (
    Floats,
    all_in_table,
    feasible_nodes_to_find,
    reached_nodes,
    winning_probabilities,
)
from rebalancer.planning.scheduling import placement_blocker
from rebalancer.planning.snapshot import ClusterSnapshot, node_pods

MAX_NODE_SCORE = 100
WEIGHT_FIT, WEIGHT_BALANCED, WEIGHT_TAINT, WEIGHT_SPREAD, WEIGHT_NODE_AFFINITY, WEIGHT_INTER_POD = 1, 1, 3, 2, 2, 2
DEFAULT_CPU_M, DEFAULT_MEMORY = 100, 200 * 2**20  # the scheduler's non-zero request defaults
HOSTNAME_SKEW, ZONE_SKEW = 3, 5
ZONE_LABEL = "topology.kubernetes.io/zone"

DIRTY_LIMIT = 32  # nodes changed since a class's ranking was built, beyond which it is built again
TOUCHED_LIMIT = 256  # nodes InterPodAffinity filters or scores for a pod, beyond which it is scored in full

Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class Scheduled:
    """The node the scheduler would choose (None: unschedulable, and why), its score and the ties."""

    node: str | None
    score: int
    tied: tuple[str, ...]
    reason: str


@dataclass(frozen=True, slots=True, eq=False)
class LandingDistribution:
    """Where the scheduler puts a pod: the feasible nodes (``index`` into :attr:`SchedulerModel.names`, in
    index order) with a chance of being chosen, their probabilities and total weighted scores, aligned;
    all empty when nothing is feasible, and ``reason`` says why. Nodes so low in the ranking that the
    scheduler reaches them with a probability of at most :data:`EPSILON` (all of them together) are left
    out: on a 5,000-node cluster only the best few hundred nodes can win."""

    names: tuple[str, ...]
    index: Ints
    probabilities: Floats
    scores: Ints
    sampled: int  # how many feasible nodes the scheduler scores: min(feasible, numFeasibleNodesToFind)
    feasible: int  # how many nodes are feasible (``index`` may leave out those it never reaches, see EPSILON)
    reason: str
    caveat: str = ""  # what the model could not evaluate for this pod ("": nothing): then nothing is certain

    def as_dict(self) -> dict[str, float]:
        """Node -> probability, nodes with a probability above 0 only."""
        names, p = self.names, self.probabilities
        return {names[int(i)]: float(q) for i, q in zip(self.index, p, strict=True) if q > 0}


@dataclass(slots=True)
class _Ranking:
    """One class of pods (requests and constraints), nothing vacated, as the model stood when it was
    built: every node's feasibility and static score (every score but spreading), and the feasible
    nodes in buckets of one zone column (0: no zone, z + 1: zone z) and one static score, best first.
    ``dirty``: nodes changed since (their entries are stale; queries score them exactly)."""

    feasible: Bools
    feasible_list: list[bool]  # the same, for lookups one node at a time
    static_list: list[int]
    per_domain: list[int]  # feasible nodes per zone column
    taint_high: int  # the highest count of untolerated PreferNoSchedule taints on a feasible node
    at_high: int  # feasible nodes with that count
    buckets: RankedBuckets
    bucket_nodes: list[list[int]]  # per bucket: its nodes, in index order
    bucket_of: list[int]  # per node: its bucket (-1: not feasible)
    serial: int  # tells rankings apart (a reader's per-bucket counts are kept by it)
    dirty: set[int]


@dataclass(frozen=True, slots=True)
class _Domains:
    """The feasible nodes per zone column (0: no zone, z + 1: zone z) and the logarithms PodTopologySpread
    weighs a workload's pods with: of the feasible nodes (hostname) and of the zones holding some, plus 2."""

    per_domain: list[int]
    feasible: int  # their sum
    host_log: float
    zone_log: float

    @classmethod
    def of(cls, per_domain: list[int]) -> _Domains:
        feasible, zones = sum(per_domain), sum(1 for d in per_domain[1:] if d)
        return cls(per_domain, feasible, math.log(feasible + 2), math.log(zones + 2))


@dataclass(frozen=True, slots=True)
class _Changed:
    """The nodes whose ranking entry is stale for one query (changed since the ranking): their feasibility
    and static score now, and what follows for the query."""

    static: list[int]
    feasible: list[bool]
    position: dict[int, int]  # node -> its place in ``static`` and ``feasible``
    feasible_static: list[tuple[int, int]]  # (node, static score) of the feasible ones
    domains: _Domains  # feasible nodes per zone column, these counted as they are now
    excluded: dict[int, tuple[int, ...]]  # ranking bucket -> those of them it held
    offset: int = 0  # InterPodAffinity's weighted score of every other node (``static`` holds theirs)
    at_high: int = 0  # feasible nodes with the class's highest untolerated taint count, these counted as now

    @property
    def feasible_count(self) -> int:
        return self.domains.feasible


def max_score(pod: Pod) -> int:
    """The highest total weighted score a node can have for ``pod`` (NodeAffinity's only with preferences)."""
    weights = WEIGHT_FIT + WEIGHT_BALANCED + WEIGHT_TAINT + WEIGHT_SPREAD
    return MAX_NODE_SCORE * (weights + (WEIGHT_NODE_AFFINITY if pod.preferred_affinity else 0))


def nonzero(pod: Pod) -> tuple[int, int]:
    """The requests the scheduler scores with: nothing requested counts as 100m CPU / 200Mi memory."""
    return (pod.cpu_request_m or DEFAULT_CPU_M, pod.memory_request or DEFAULT_MEMORY)


class SchedulerModel:
    """The default scheduler's choice for a pod over a cluster, kept current with ``remove``/``add``."""

    def __init__(self, snapshot: ClusterSnapshot, *, percentage_of_nodes_to_score: int | None = None) -> None:
        """``percentage_of_nodes_to_score``: the cluster scheduler's setting (None or 0: adaptive, 100:
        every node), for :meth:`landing_distribution`."""
        self.names: tuple[str, ...] = tuple(sorted(snapshot.nodes))
        self.sample_size = feasible_nodes_to_find(len(self.names), percentage_of_nodes_to_score)
        self._index = {name: i for i, name in enumerate(self.names)}
        nodes = [snapshot.nodes[n] for n in self.names]
        self._nodes: tuple[Node, ...] = tuple(nodes)
        self._alloc_cpu = np.array([n.allocatable_cpu_m for n in nodes], dtype=np.int64)
        self._alloc_mem = np.array([n.allocatable_memory for n in nodes], dtype=np.int64)
        self._alloc_pods = np.array([n.allocatable_pods for n in nodes], dtype=np.int64)
        size = len(nodes)
        self._req_cpu, self._req_mem, self._pods = (np.zeros(size, np.int64) for _ in range(3))
        self._nz_cpu, self._nz_mem = np.zeros(size, np.int64), np.zeros(size, np.int64)
        self._zone_names = sorted({n.labels[ZONE_LABEL] for n in nodes if ZONE_LABEL in n.labels})
        self._zone = np.array(
            [self._zone_names.index(n.labels[ZONE_LABEL]) if ZONE_LABEL in n.labels else -1 for n in nodes],
            dtype=np.int64,
        )
        self._zones = len(self._zone_names)
        self._zone_list: list[int] = self._zone.tolist()
        self._workload: dict[WorkloadRef, dict[int, int]] = {}  # workload -> node index -> non-terminating pods
        self._where: dict[PodKey, int | None] = {}  # pods looked up, added or removed (None: not bound)
        self._pods_on = snapshot.pods_on
        self._masks: dict[tuple[object, ...], tuple[Bools, Bools, str]] = {}
        self._affine_lists: dict[tuple[object, ...], list[bool]] = {}
        self._prefer: dict[tuple[object, ...], Ints] = {}
        self._preferred: dict[tuple[object, ...], Ints] = {}
        self._statics: dict[tuple[object, ...], tuple[Bools, str, Ints]] = {}
        self._rankings: dict[tuple[object, ...], _Ranking] = {}
        self._changes: dict[tuple[object, ...], _Changed | None] = {}  # (ranking serial, inter-pod key) -> stale nodes
        self._unsampled_lists: dict[tuple[int, int], list[float]] = {}
        self._reached_counts: dict[tuple[int, int], int] = {}
        self._serial = 0
        self._names_array = np.array(self.names, dtype=object)
        self._tables: dict[tuple[int, int], Floats] = {}
        self._inter = InterPodAffinity(nodes, snapshot.pods_on, snapshot.groups)
        self._load(snapshot)

    def _load(self, snapshot: ClusterSnapshot) -> None:
        """Every bound pod ``add``-ed: a node's request sums as the snapshot grouped them (serve's watch cache
        keeps them event by event; 150,000 pods summed again would cost tens of milliseconds per cycle),
        else summed from its pods."""
        sums = np.zeros((len(self.names), 5), np.int64)  # requested cpu, memory, pods, non-zero cpu, memory
        groups = snapshot.groups
        for i, name in enumerate(self.names):
            group = groups.get(name) if groups is not None else None
            if group is None:
                pods = snapshot.pods_on(name)
                if not pods:
                    continue
                group = node_pods(pods)
            cpu, memory = group.cpu_request_m, group.memory_request
            nz_cpu = cpu + DEFAULT_CPU_M * group.cpu_unrequested
            nz_memory = memory + DEFAULT_MEMORY * group.memory_unrequested
            sums[i] = (cpu, memory, len(group.pods), nz_cpu, nz_memory)
        self._req_cpu, self._req_mem, self._pods, self._nz_cpu, self._nz_mem = (sums[:, k].copy() for k in range(5))
        self._by_workload = snapshot.by_workload  # then a workload's pods are counted when first asked
        if self._by_workload is None:
            self._count_workloads(snapshot)

    def _count_workloads(self, snapshot: ClusterSnapshot) -> None:
        workload = self._workload
        for i, name in enumerate(self.names):
            for pod in snapshot.pods_on(name):
                if pod.workload is not None and not pod.terminating:
                    counts = workload.get(pod.workload)
                    if counts is None:
                        workload[pod.workload] = {i: 1}
                    else:
                        counts[i] = counts.get(i, 0) + 1

    def add(self, pod: Pod, node: str) -> None:
        """``pod`` is bound to ``node`` from now on."""
        i = self._index[node]
        self._shift(pod, i, 1)
        self._where[pod.key] = i
        self._inter.add(i, pod)

    def remove(self, pod: Pod) -> None:
        """``pod`` left its node (evicted, deleted or moved by a plan); unknown pods are ignored."""
        i = self.bound(pod)
        self._where[pod.key] = None
        if i is not None:
            self._shift(pod, i, -1)
            self._inter.remove(i, pod)

    def terminate(self, pod: Pod) -> None:
        """``pod`` was evicted and terminates: it stops counting for spreading (the scheduler skips
        terminating pods there) but its requests stay on its node (the scheduler's cache holds the pod
        until its object is deleted, after its grace period; its replacement is scheduled meanwhile).
        Unknown pods are ignored."""
        i = self.bound(pod)
        self._where[pod.key] = None
        if i is not None and pod.workload is not None and not pod.terminating:
            counts = self.workload_counts(pod.workload)
            counts[i] = counts.get(i, 0) - 1

    def restore(self, pod: Pod, node: str) -> None:
        """Undoes :meth:`terminate`: ``pod`` runs on ``node`` again (its requests never left)."""
        i = self._index[node]
        self._where[pod.key] = i
        if pod.workload is not None and not pod.terminating:
            counts = self.workload_counts(pod.workload)
            counts[i] = counts.get(i, 0) + 1

    def replace_node(self, node: Node) -> None:
        """A node changed (taints, cordon, labels, allocatable): later queries see it. Its pods stay."""
        i = self._index[node.name]
        nodes = list(self._nodes)
        nodes[i] = node
        self._nodes = tuple(nodes)
        self._alloc_cpu[i], self._alloc_mem[i], self._alloc_pods[i] = (
            node.allocatable_cpu_m, node.allocatable_memory, node.allocatable_pods,
        )  # fmt: skip
        zone = node.labels.get(ZONE_LABEL)
        if zone is not None and zone not in self._zone_names:
            self._zone_names.append(zone)
        self._zones = len(self._zone_names)
        self._zone[i] = -1 if zone is None else self._zone_names.index(zone)
        self._masks.clear()
        self._affine_lists.clear()
        self._prefer.clear()
        self._preferred.clear()
        self._statics.clear()  # the static scores depend on taints, labels and allocatable
        self._rankings.clear()
        self._changes.clear()
        self._zone_list = self._zone.tolist()
        self._inter.replace_node(i, node)

    def bound(self, pod: Pod) -> int | None:
        """The index of the node ``pod`` is bound to in the model (None: not bound). A snapshot's pod is
        looked up among its node's pods the first time (150,000 of them are not indexed up front)."""
        key = pod.key
        if key in self._where:
            return self._where[key]
        i = self._index.get(pod.node_name) if pod.node_name is not None else None
        if i is not None:
            on = self._pods_on(self.names[i])
            # the snapshot's own pod object is found by identity in C; another object by its key
            if pod not in on and not any(p.name == pod.name and p.namespace == pod.namespace for p in on):
                i = None
        self._where[key] = i
        return i

    def node_of(self, pod: Pod) -> str | None:
        i = self.bound(pod)
        return None if i is None else self.names[i]

    def place(
        self, pod: Pod, *, vacate: bool = False, exclude: Collection[str] = (), rng: random.Random | None = None
    ) -> Scheduled:
        """Where a pod like ``pod`` would be scheduled now. ``vacate``: as if ``pod`` itself were evicted and
        terminating (where its replacement lands; see the module's docstring). ``exclude``: nodes not to
        consider."""
        feasible, why, total = self._totals(pod, vacate, exclude)
        if total is None:
            return Scheduled(None, 0, (), why)
        best = int(total[feasible].max())
        tied = tuple(self._names_array[np.flatnonzero(feasible & (total == best))].tolist())
        chosen = tied[0] if rng is None or len(tied) == 1 else rng.choice(tied)
        return Scheduled(chosen, best, tied, f"highest score {best} of {int(feasible.sum())} feasible node(s)")

    def landing_distribution(
        self, pod: Pod, *, vacate: bool = False, exclude: Collection[str] = ()
    ) -> LandingDistribution:
        """The probability of each node being where a pod like ``pod`` is scheduled now, with the
        scheduler's sampling of feasible nodes (see the module docstring); ``vacate`` and ``exclude`` as
        for :meth:`place`. The nodes of :meth:`landing_groups`, one by one."""
        if exclude:
            return self.full_distribution(pod, vacate=vacate, exclude=exclude)
        found = self.landing_groups(pod, vacate=vacate)
        pairs = sorted((i, g) for g in found.groups for i in found.members(g))
        index = np.array([i for i, _ in pairs], np.int64)
        probabilities = np.array([g.probability for _, g in pairs], np.float64)
        scores = np.array([g.total for _, g in pairs], np.int64)
        return LandingDistribution(
            self.names, index, probabilities, scores, found.sampled, found.feasible, found.reason, found.caveat
        )

    def landing_groups(self, pod: Pod, *, vacate: bool = False) -> LandingGroups:
        """Where a pod like ``pod`` is scheduled now, as groups of equally scored nodes (see
        :mod:`rebalancer.planning.landing_groups`).

        Only the best-ranked nodes can win (:func:`reached_nodes`), so the groups are merged from the pod
        class's :class:`_Ranking` (per zone, the feasible nodes in buckets of equal static score, best
        first): a bucket's nodes score its static score plus their zone's spreading score, but for the
        nodes scored exactly, whose score differs for this pod (its own node when vacated, the nodes
        changed since the ranking was built, the nodes holding its workload's pods). Their probabilities
        are those of :meth:`full_distribution` (the property tests compare them)."""
        if pod.preferred_affinity:  # its static scores depend on which feasible node matches most: scored in full
            return self._groups_of(self.full_distribution(pod, vacate=vacate))
        where = self.bound(pod) if vacate else None
        key = self._class_key(pod)
        ranking = self._ranking(pod, key)
        changed = self._changed(pod, ranking)
        if changed is None or changed.feasible_count == 0:  # taints renormalized, or unschedulable: the full path
            return self._groups_of(self.full_distribution(pod, vacate=vacate))
        held = self._held(pod, where)
        position, zone = changed.position, self._zone_list
        held_feasible = [
            ranking.feasible_list[i] if (j := position.get(i)) is None else changed.feasible[j] for i in held
        ]
        empty, mine = self._spread_parts(pod, held, changed.domains, held_feasible, key[2:])
        spread_of = [WEIGHT_SPREAD * e for e in empty]
        offset = changed.offset
        exact = [(s + spread_of[zone[i] + 1], i) for i, s in changed.feasible_static if i not in held]
        excluded = changed.excluded
        for i, spread, ok in zip(held, mine, held_feasible, strict=True):
            j = position.get(i)
            if j is None:  # unchanged: its ranking entry holds but for spreading, so it is scored exactly
                b = ranking.bucket_of[i]
                if b >= 0:
                    if excluded is changed.excluded:
                        excluded = dict(excluded)
                    excluded[b] = (*excluded.get(b, ()), i)
            if ok:
                static = ranking.static_list[i] + offset if j is None else changed.static[j]
                exact.append((static + WEIGHT_SPREAD * spread, i))
        n = changed.feasible_count
        sampled = min(n, self.sample_size)
        groups = merge_groups(
            ranking.buckets,
            [spread + offset for spread in spread_of] if offset else spread_of,
            best_first(exact),
            excluded,
            n,
            self._reached(n, sampled),
            self._unsampled(n, sampled),
        )
        reason = f"the best of {sampled} sampled of {n} feasible node(s)"
        verdict = self._inter.verdict(pod)
        caveat = "" if verdict is None else verdict.caveat
        return LandingGroups(groups, n, sampled, reason, ranking.serial, ranking.bucket_nodes, excluded, caveat)

    def _groups_of(self, spread: LandingDistribution) -> LandingGroups:
        """A distribution computed node by node, as groups of exact nodes (the rare fallback)."""
        exact = best_first(zip(spread.scores.tolist(), spread.index.tolist(), strict=True))
        n = spread.feasible
        groups = merge_groups(
            RankedBuckets((), (), ()),
            (),
            exact,
            {},
            n,
            self._reached(n, spread.sampled),
            self._unsampled(n, spread.sampled),
        )
        return LandingGroups(groups, n, spread.sampled, spread.reason, -1, (), {}, spread.caveat)

    def _reached(self, n: int, k: int) -> int:
        found = self._reached_counts.get((n, k))
        if found is None:
            if len(self._reached_counts) >= 256:
                self._reached_counts.clear()
            found = self._reached_counts[(n, k)] = reached_nodes(n, k, self._tables)
        return found

    def _unsampled(self, n: int, k: int) -> list[float]:
        """``C(m, k) / C(n, k)`` for m = 0..n as a list (lookups one at a time)."""
        found = self._unsampled_lists.get((n, k))
        if found is None:
            if len(self._unsampled_lists) >= 64:
                self._unsampled_lists.clear()
            found = self._unsampled_lists[(n, k)] = all_in_table(n, k, self._tables).tolist()
        return found

    def full_distribution(
        self, pod: Pod, *, vacate: bool = False, exclude: Collection[str] = ()
    ) -> LandingDistribution:
        """:meth:`landing_distribution` over every feasible node, every node scored (the reference)."""
        feasible, why, total = self._totals(pod, vacate, exclude)
        verdict = self._inter.verdict(pod)
        caveat = "" if verdict is None else verdict.caveat
        if total is None:
            none = np.zeros(0, np.int64)
            return LandingDistribution(self.names, none, np.zeros(0), none, 0, 0, why, caveat)
        index = feasible.nonzero()[0]  # flatnonzero of a 1-D array, without its dispatch (~10 µs)
        scores = total[index]
        probabilities = winning_probabilities(scores, self.sample_size, self._tables)
        sampled = min(len(index), self.sample_size)
        reason = f"the best of {sampled} sampled of {len(index)} feasible node(s)"
        return LandingDistribution(self.names, index, probabilities, scores, sampled, len(index), reason, caveat)

    def _ranking(self, pod: Pod, key: tuple[object, ...]) -> _Ranking:
        """The pod class's ranking (requests and constraints: ``key``, nothing vacated), built again when
        more than :data:`DIRTY_LIMIT` nodes changed since."""
        found = self._rankings.get(key)
        if found is None or len(found.dirty) > DIRTY_LIMIT:
            feasible, _, static = self._static(pod, inter_pod=False)
            raw = self._untolerated(pod)
            high = int(raw[feasible].max()) if feasible.any() else 0
            index = feasible.nonzero()[0]
            column, score = self._zone[index] + 1, static[index]
            order = np.lexsort((index, -score, column))  # per column, best first, ties in index order
            index, column, score = index[order], column[order], score[order]
            starts = np.flatnonzero(np.diff(column, prepend=-1) | np.diff(score, prepend=-1)).tolist()
            sizes = np.diff([*starts, len(index)]).tolist()
            nodes = index.tolist()
            bucket_of = np.full(len(self.names), -1, np.int64)
            bucket_of[index] = np.repeat(np.arange(len(starts)), sizes)
            column_buckets: list[list[int]] = [[] for _ in range(self._zones + 1)]
            for b, c in enumerate(column[starts].tolist()):
                column_buckets[c].append(b)
            if len(self._rankings) >= 64:
                self._rankings.clear()
            self._serial += 1
            found = self._rankings[key] = _Ranking(
                feasible=feasible,
                feasible_list=feasible.tolist(),
                static_list=static.tolist(),
                per_domain=np.bincount(column, minlength=self._zones + 1).tolist(),
                taint_high=high,
                at_high=int(np.count_nonzero(feasible & (raw == high))),
                buckets=RankedBuckets(column_buckets, score[starts].tolist(), sizes),
                bucket_nodes=[nodes[a : a + s] for a, s in zip(starts, sizes, strict=True)],
                bucket_of=bucket_of.tolist(),
                serial=self._serial,
                dirty=set(),
            )
        return found

    def _changed(self, pod: Pod, ranking: _Ranking) -> _Changed | None:
        """Feasibility and static score (every score but spreading) of the nodes whose ranking entry is
        stale (changed since the ranking, or filtered or scored by InterPodAffinity for this pod), or None
        when they would change the class's taint normalization (its highest untolerated count) or
        InterPodAffinity touches too many nodes. Kept for that ranking until the model changes: a node's pods
        are asked in a row. A vacated pod's own node is stale only for spreading (its requests stay there)."""
        base = self._changed_nodes(pod, ranking)
        verdict = self._inter.verdict(pod)
        if base is None or verdict is None or not verdict.touched:
            return base  # no node filtered, every node the same InterPodAffinity score: nothing to add
        key = (ranking.serial, *self._inter.key(pod))
        if key in self._changes:
            return self._changes[key]
        found = None if len(verdict.touched) > TOUCHED_LIMIT else self._with_inter_pod(pod, ranking, base, verdict)
        if len(self._changes) >= 256:
            self._changes.clear()
        self._changes[key] = found
        return found

    def _changed_nodes(self, pod: Pod, ranking: _Ranking) -> _Changed | None:
        """:meth:`_changed` without InterPodAffinity: the nodes changed since the ranking (shared by the pods
        of its class)."""
        key = (ranking.serial,)  # what it holds is in that ranking's terms (its buckets, its dirty set)
        if key in self._changes:
            return self._changes[key]
        stale = ranking.dirty
        at = np.fromiter(sorted(stale), np.int64, len(stale))
        feasible = self._fits(pod, at)
        raw = self._untolerated(pod)[at]
        high = ranking.taint_high
        at_high = (
            ranking.at_high
            - int(np.count_nonzero(ranking.feasible[at] & (raw == high)))
            + int(np.count_nonzero(feasible & (raw == high)))
        )
        found = None
        if not (feasible & (raw > high)).any() and (high == 0 or at_high > 0):
            if high == 0:
                taint = np.full(len(at), MAX_NODE_SCORE, np.int64)
            else:
                taint = MAX_NODE_SCORE - (MAX_NODE_SCORE * raw) // high
            static = self._fit_balanced(pod, at) + WEIGHT_TAINT * taint
            found = self._changes_of(ranking, at.tolist(), feasible.tolist(), static.tolist(), at_high=at_high)
        if len(self._changes) >= 256:
            self._changes.clear()
        self._changes[key] = found
        return found

    def _with_inter_pod(self, pod: Pod, ranking: _Ranking, base: _Changed, verdict: Verdict) -> _Changed | None:
        """``base`` with the nodes InterPodAffinity filters or scores for ``pod`` (its ``touched``): stale too,
        out where its filter keeps them out, and every node's static score with the plugin's weighted score
        (the untouched ones all score the same: :attr:`_Changed.offset`). None when the nodes it keeps out
        change the class's taint normalization."""
        nodes = sorted(set(base.position).union(verdict.touched))
        static, feasible = [], []
        position, out = base.position, verdict.out
        untolerated, high = self._untolerated(pod), ranking.taint_high
        at_high, dropped = base.at_high, 0
        for i in nodes:
            j = position.get(i)
            ok = ranking.feasible_list[i] if j is None else base.feasible[j]
            static.append(ranking.static_list[i] if j is None else base.static[j])
            if ok and i in out:
                ok = False
                dropped += 1
                at_high -= int(untolerated[i]) == high
            feasible.append(ok)
        if high > 0 and at_high <= 0:
            return None
        offset = 0
        if verdict.scored:
            raw_of = verdict.raw_of
            raw = np.array([raw_of.get(i, 0) for i in nodes], np.int64)
            ok_mask = np.array(feasible, np.bool_)
            values = raw[ok_mask].tolist()
            if base.domains.feasible - dropped > len(values):  # some feasible node untouched: raw 0
                values.append(0)
            low, high_raw = (min(values), max(values)) if values else (0, 0)
            if high_raw > low:
                span = float(high_raw - low)
                scored = WEIGHT_INTER_POD * (100.0 * ((raw - low) / span)).astype(np.int64)
                static = (np.array(static, np.int64) + scored).tolist()
                offset = WEIGHT_INTER_POD * int(100.0 * ((0 - low) / span))
        return self._changes_of(ranking, nodes, feasible, static, offset=offset, at_high=at_high)

    def _changes_of(
        self,
        ranking: _Ranking,
        nodes: list[int],
        feasible: list[bool],
        static: list[int],
        *,
        offset: int = 0,
        at_high: int = 0,
    ) -> _Changed:
        """The changed nodes with what a query needs of them: the feasible nodes per zone column and the
        ranking buckets that no longer hold them."""
        per_domain = list(ranking.per_domain)
        excluded: dict[int, tuple[int, ...]] = {}
        for i, now in zip(nodes, feasible, strict=True):
            per_domain[self._zone_list[i] + 1] += int(now) - int(ranking.feasible_list[i])
            b = ranking.bucket_of[i]
            if b >= 0:
                excluded[b] = (*excluded.get(b, ()), i)
        return _Changed(
            static=static,
            feasible=feasible,
            position={i: j for j, i in enumerate(nodes)},
            feasible_static=[(i, s) for i, s, ok in zip(nodes, static, feasible, strict=True) if ok],
            domains=_Domains.of(per_domain),
            excluded=excluded,
            offset=offset,
            at_high=at_high,
        )

    def _totals(self, pod: Pod, vacate: bool, exclude: Collection[str]) -> tuple[Bools, str, Ints | None]:
        """Feasible nodes, why none, and the total scores (None when none is feasible)."""
        where = self.bound(pod) if vacate else None
        if exclude:
            feasible, why = self._feasible(pod, exclude)
            if not feasible.any():
                return feasible, why, None
            return feasible, why, self._scores(pod, where, feasible)
        feasible, why, static = self._static(pod)
        if not feasible.any():
            return feasible, why, None
        total: Ints = static + WEIGHT_SPREAD * self._spread(pod, where, feasible)
        return feasible, why, total

    def scores(self, pod: Pod, *, vacate: bool = False) -> dict[str, int]:
        """Every feasible node's total weighted score (for explanations and tests)."""
        where = self.bound(pod) if vacate else None
        feasible, _ = self._feasible(pod, ())
        total = self._scores(pod, where, feasible)
        return {self.names[i]: int(total[i]) for i in np.flatnonzero(feasible)}

    def _static(self, pod: Pod, *, inter_pod: bool = True) -> tuple[Bools, str, Ints]:
        """Feasibility and every score but spreading, which depend only on the pod's requests and
        constraints: shared by the pods with the same requests and constraints until the model changes (a
        planner asks for many of them in a row). ``inter_pod``: with InterPodAffinity's filter and score,
        shared only by pods alike in namespace, labels and terms too (False: without them, as a class's
        ranking holds it: they change with moves beyond the moved pod's node)."""
        key = (*self._class_key(pod), *self._inter.key(pod)) if inter_pod else self._class_key(pod)
        found = self._statics.get(key)
        if found is None:
            feasible, why = self._feasible(pod, (), inter_pod=inter_pod)
            taint = _reverse_normalized(self._untolerated(pod), feasible)
            static: Ints = self._fit_balanced(pod) + WEIGHT_TAINT * taint
            if pod.preferred_affinity:
                static += self._node_affinity(pod, feasible)
            if inter_pod:
                static += self._inter_pod(pod, feasible)
            if len(self._statics) >= 256:
                self._statics.clear()
            found = self._statics[key] = (feasible, why, static)
        return found

    def _shift(self, pod: Pod, i: int, sign: int) -> None:
        self._statics.clear()
        self._changes.clear()
        for ranking in self._rankings.values():
            ranking.dirty.add(i)
        cpu, memory = nonzero(pod)
        self._req_cpu[i] += sign * pod.cpu_request_m
        self._req_mem[i] += sign * pod.memory_request
        self._nz_cpu[i] += sign * cpu
        self._nz_mem[i] += sign * memory
        self._pods[i] += sign
        if pod.workload is not None and not pod.terminating:
            counts = self.workload_counts(pod.workload)
            counts[i] = counts.get(i, 0) + sign

    @staticmethod
    def _requested(values: Ints, pod_value: int, at: Ints | None) -> Ints:
        """Node sums with the pod added, on every node or on the nodes ``at``. A vacated pod's own requests
        stay on its node (see :meth:`terminate`)."""
        out: Ints = values + pod_value if at is None else values[at] + pod_value
        return out

    def _fit_masks(self, pod: Pod, at: Ints | None = None) -> tuple[Bools, Bools, Bools]:
        """NodeResourcesFit on requests: CPU, memory (each only when requested) and pod count."""
        size = len(self.names) if at is None else len(at)

        def pick(values: Ints) -> Ints:
            return values if at is None else values[at]

        cpu = self._requested(self._req_cpu, pod.cpu_request_m, at)
        mem = self._requested(self._req_mem, pod.memory_request, at)
        count = self._requested(self._pods, 1, at)
        fits_cpu = (cpu <= pick(self._alloc_cpu)) if pod.cpu_request_m > 0 else np.ones(size, np.bool_)
        fits_mem = (mem <= pick(self._alloc_mem)) if pod.memory_request > 0 else np.ones(size, np.bool_)
        return fits_cpu, fits_mem, count <= pick(self._alloc_pods)

    def _fits(self, pod: Pod, at: Ints) -> Bools:
        """Feasibility on the nodes ``at``."""
        fits_cpu, fits_mem, fits_pods = self._fit_masks(pod, at)
        allowed: Bools = self._constraint_masks(pod)[0][at] & fits_cpu & fits_mem & fits_pods
        return allowed

    def _feasible(self, pod: Pod, exclude: Collection[str], *, inter_pod: bool = True) -> tuple[Bools, str]:
        allowed, _, blocked_why = self._constraint_masks(pod)
        verdict = self._inter.verdict(pod) if inter_pod else None
        if verdict is not None and verdict.allowed is not None:
            allowed = allowed & verdict.allowed
            inter_why = ", ".join(f"{n} {why}" for why, n in verdict.blocked.items())
            blocked_why = f"{blocked_why}, {inter_why}" if blocked_why else inter_why
        fits_cpu, fits_mem, fits_pods = self._fit_masks(pod)
        feasible = allowed & fits_cpu & fits_mem & fits_pods
        for name in exclude:
            if name in self._index:
                feasible[self._index[name]] = False
        if feasible.any():
            return feasible, ""
        reasons = [blocked_why] if blocked_why else []
        for label, mask in (
            ("Insufficient cpu", fits_cpu),
            ("Insufficient memory", fits_mem),
            ("Too many pods", fits_pods),
        ):
            short = int((allowed & ~mask).sum())
            if short:
                reasons.append(f"{short} {label}")
        if exclude:
            reasons.append("the rest excluded")
        return feasible, f"0/{len(self.names)} nodes are available: " + ", ".join(reasons or ["no nodes"])

    @classmethod
    def _class_key(cls, pod: Pod) -> tuple[object, ...]:
        """What the static scores but InterPodAffinity's depend on: the pod's requests and constraints."""
        return (pod.cpu_request_m, pod.memory_request, pod.preferred_affinity, *cls._constraint_key(pod))

    @staticmethod
    def _constraint_key(pod: Pod) -> tuple[object, ...]:
        return (pod.tolerations, tuple(sorted(pod.node_selector.items())), pod.required_affinity)

    def _affine(self, pod: Pod, key: tuple[object, ...]) -> list[bool]:
        """The nodes the pod's selector and required affinity match, as a list (read node by node);
        ``key``: the pod's :meth:`_constraint_key`."""
        found = self._affine_lists.get(key)
        if found is None:
            found = self._affine_lists[key] = self._constraint_masks(pod)[1].tolist()
        return found

    def _constraint_masks(self, pod: Pod) -> tuple[Bools, Bools, str]:
        """Nodes the pod's constraints allow, nodes its selector/affinity match (the spread counts over
        those, taints ignored as the default nodeTaintsPolicy says), and a summary of the blockers."""
        key = self._constraint_key(pod)
        found = self._masks.get(key)
        if found is None:
            reasons: dict[str, int] = {}
            allowed, affine = np.zeros(len(self.names), np.bool_), np.zeros(len(self.names), np.bool_)
            for i, node in enumerate(self._nodes):
                why = placement_blocker(pod, node)
                allowed[i] = why is None
                affine[i] = why is None or not (why.startswith("nodeSelector") or why.startswith("required"))
                if why is not None:
                    reasons[why] = reasons.get(why, 0) + 1
            summary = ", ".join(f"{n} {why}" for why, n in sorted(reasons.items(), key=lambda kv: -kv[1])[:3])
            found = self._masks[key] = (allowed, affine, summary)
        return found

    def _scores(self, pod: Pod, where: int | None, feasible: Bools) -> Ints:
        taint = _reverse_normalized(self._untolerated(pod), feasible)
        spread = self._spread(pod, where, feasible)
        total: Ints = self._fit_balanced(pod) + WEIGHT_TAINT * taint + WEIGHT_SPREAD * spread
        if pod.preferred_affinity:
            total += self._node_affinity(pod, feasible)
        total += self._inter_pod(pod, feasible)
        return total

    def _inter_pod(self, pod: Pod, feasible: Bools) -> Ints | int:
        """InterPodAffinity's weighted score, normalized over the feasible nodes (0: none for this pod)."""
        verdict = self._inter.verdict(pod)
        if verdict is None or verdict.raw is None:
            return 0
        score: Ints = WEIGHT_INTER_POD * normalized(verdict.raw, feasible)
        return score

    def inter_pod_key(self, pod: Pod) -> tuple[object, ...]:
        """What tells apart the answers for pods alike but for their namespace, labels and inter-pod terms:
        () when InterPodAffinity has no effect on ``pod``."""
        return self._inter.key(pod)

    def max_score(self, pod: Pod) -> int:
        """The highest total weighted score a node can have for ``pod`` now (InterPodAffinity's only when it
        scores for this pod)."""
        verdict = self._inter.verdict(pod)
        inter_pod = verdict is not None and verdict.raw is not None
        return max_score(pod) + (MAX_NODE_SCORE * WEIGHT_INTER_POD if inter_pod else 0)

    def _fit_balanced(self, pod: Pod, at: Ints | None = None) -> Ints:
        """NodeResourcesFit (LeastAllocated) and NodeResourcesBalancedAllocation, weighted, on every node
        or on the nodes ``at``."""
        cpu, memory = nonzero(pod)
        alloc_cpu = self._alloc_cpu if at is None else self._alloc_cpu[at]
        alloc_mem = self._alloc_mem if at is None else self._alloc_mem[at]
        nz_cpu = self._requested(self._nz_cpu, cpu, at)
        nz_mem = self._requested(self._nz_mem, memory, at)
        fit = (_least(nz_cpu, alloc_cpu) + _least(nz_mem, alloc_mem)) // 2
        score: Ints = WEIGHT_FIT * fit
        if pod.cpu_request_m or pod.memory_request:  # the scheduler skips BalancedAllocation for the others
            held_cpu = self._req_cpu if at is None else self._req_cpu[at]
            held_mem = self._req_mem if at is None else self._req_mem[at]
            with_pod = _balance(held_cpu + pod.cpu_request_m, held_mem + pod.memory_request, alloc_cpu, alloc_mem)
            # how much the pod improves the balance, from 0-100 to 50-100 (at least 0: with the pod at least 50)
            change = MAX_NODE_SCORE // 2 + with_pod - _balance(held_cpu, held_mem, alloc_cpu, alloc_mem)
            score += WEIGHT_BALANCED * (MAX_NODE_SCORE // 2 + change // 2)
        return score

    def _node_affinity(self, pod: Pod, feasible: Bools) -> Ints:
        """NodeAffinity's weighted score: the summed weights of the preferred terms each node matches,
        normalized over the feasible nodes (the highest scores 100)."""
        raw = self._preferred.get(pod.preferred_affinity)
        if raw is None:
            raw = self._preferred[pod.preferred_affinity] = np.array(
                [sum(t.weight for t in pod.preferred_affinity if t.preference.matches(n.name, n.labels))
                 for n in self._nodes],
                dtype=np.int64,
            )  # fmt: skip
        high = int(raw[feasible].max()) if feasible.any() else 0
        score: Ints = WEIGHT_NODE_AFFINITY * ((MAX_NODE_SCORE * raw) // high if high > 0 else np.zeros_like(raw))
        return score

    def _untolerated(self, pod: Pod) -> Ints:
        key = pod.tolerations
        found = self._prefer.get(key)
        if found is None:
            tolerations = [t for t in pod.tolerations if t.effect in ("", "PreferNoSchedule")]
            found = self._prefer[key] = np.array(
                [
                    sum(
                        1
                        for t in n.taints
                        if t.effect == "PreferNoSchedule" and not any(x.tolerates(t) for x in tolerations)
                    )
                    for n in self._nodes
                ],
                dtype=np.int64,
            )
        return found

    def workload_counts(self, workload: WorkloadRef) -> dict[int, int]:
        """Node index -> the workload's non-terminating pods on it (the model's own, kept current). From
        the snapshot's pods by workload when it has them (the serve mode's watch cache), counted the
        first time the workload is asked instead of for every pod up front."""
        counts = self._workload.get(workload)
        if counts is None:
            counts = self._workload[workload] = {}
            if self._by_workload is not None:
                index = self._index
                for pod in self._by_workload.get(workload, ()):
                    i = index.get(pod.node_name) if pod.node_name is not None else None
                    if i is not None and not pod.terminating:
                        counts[i] = counts.get(i, 0) + 1
        return counts

    def _held(self, pod: Pod, where: int | None) -> dict[int, int]:
        """Node index -> the pods of ``pod``'s workload on it (the vacated one taken off): the nodes whose
        spreading score is their own (every other node scores its zone's)."""
        if pod.workload is None:
            return {}
        on = dict(self.workload_counts(pod.workload))
        if where is not None and not pod.terminating:
            on[where] = on.get(where, 0) - 1
        return on

    def _spread(self, pod: Pod, where: int | None, feasible: Bools) -> Ints:
        """PodTopologySpread's normalized score on every node (see :meth:`_spread_parts`)."""
        held = self._held(pod, where)
        index = np.fromiter(held, np.int64, len(held))
        per_domain = np.bincount(self._zone[feasible] + 1, minlength=self._zones + 1).tolist()
        domains = _Domains.of(per_domain)
        empty, mine = self._spread_parts(pod, held, domains, feasible[index].tolist(), self._constraint_key(pod))
        score = np.array(empty, np.int64)[self._zone + 1]
        score[index] = mine
        return score

    def _spread_parts(
        self,
        pod: Pod,
        held: dict[int, int],
        domains: _Domains,
        held_feasible: list[bool],
        constraint_key: tuple[object, ...],
    ) -> tuple[list[int], list[int]]:
        """PodTopologySpread's normalized score of a node holding none of the workload's pods, per zone
        column (0: no zone, z + 1: zone z), and of each ``held`` node (in its order). ``domains``: the
        feasible nodes per zone column; ``held_feasible``: which held nodes are feasible;
        ``constraint_key``: the pod's (for the nodes its selector and affinity match). The
        arithmetic is done once per zone and once per node holding some, in the same float operations
        as node by node (so the same integers), in plain Python (a workload holds a few nodes)."""
        columns = self._zones + 1
        if pod.workload is None:
            return [0] * columns, [0] * len(held)
        zone = self._zone_list
        host_log = domains.host_log
        zone_raw = [0.0] * columns  # zone-free arithmetic adds 0.0, as node by node
        if self._zones:
            affine = self._affine(pod, constraint_key)
            per_zone = [0.0] * columns
            for i, count in held.items():
                if zone[i] >= 0 and affine[i]:
                    per_zone[zone[i] + 1] += count
            zone_log = domains.zone_log
            zone_raw[1:] = [z * zone_log + (ZONE_SKEW - 1) for z in per_zone[1:]]
        # Go's math.Round: half away from zero (raw >= 0 here)
        empty = [math.floor((0.0 + (HOSTNAME_SKEW - 1)) + raw + 0.5) for raw in zone_raw]
        mine = [
            math.floor((count * host_log + (HOSTNAME_SKEW - 1)) + zone_raw[zone[i] + 1] + 0.5)
            for i, count in held.items()
        ]
        empty_feasible = list(domains.per_domain)
        values = []
        for i, value, ok in zip(held, mine, held_feasible, strict=True):
            if ok:
                empty_feasible[zone[i] + 1] -= 1
                values.append(value)
        values.extend(value for value, left in zip(empty, empty_feasible, strict=True) if left > 0)
        if not values:
            return empty, mine
        low, high = min(values), max(values)
        if high == 0:
            return [MAX_NODE_SCORE] * columns, [MAX_NODE_SCORE] * len(held)
        return (
            [(MAX_NODE_SCORE * (high + low - v)) // high for v in empty],
            [(MAX_NODE_SCORE * (high + low - v)) // high for v in mine],
        )


def _balance(cpu: Ints, memory: Ints, alloc_cpu: Ints, alloc_mem: Ints) -> Ints:
    """How balanced CPU and memory requests are on each node: ``(1 - std) * 100`` of the two fractions of
    allocatable (each at most 1), truncated; a resource a node has none of is left out (std 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        f_cpu = np.minimum(cpu / np.maximum(alloc_cpu, 1), 1.0)
        f_mem = np.minimum(memory / np.maximum(alloc_mem, 1), 1.0)
    std = np.where((alloc_cpu > 0) & (alloc_mem > 0), np.abs(f_cpu - f_mem) / 2, 0.0)
    score: Ints = ((1.0 - std) * MAX_NODE_SCORE).astype(np.int64)
    return score


def _least(requested: Ints, allocatable: Ints) -> Ints:
    safe = np.maximum(allocatable, 1)
    score: Ints = np.where(
        (allocatable <= 0) | (requested > allocatable), 0, ((allocatable - requested) * MAX_NODE_SCORE) // safe
    )
    return score


def _reverse_normalized(raw: Ints, feasible: Bools) -> Ints:
    high = int(raw[feasible].max()) if feasible.any() else 0
    if high == 0:
        return np.full(len(raw), MAX_NODE_SCORE, np.int64)
    score: Ints = MAX_NODE_SCORE - (MAX_NODE_SCORE * raw) // high
    return score
