"""Where the default kube-scheduler would place a pod (pure): filters, then weighted plugin scores.

Filters: :func:`rebalancer.scheduling.placement_blocker` (cordon, NotReady, NoSchedule/NoExecute
taints, nodeSelector, required node affinity) and NodeResourcesFit on requests (CPU and memory
checked only when the pod requests them, as the scheduler does; pod count always).

Scores (each 0-100 like the scheduler's, times the default plugin weight):

- NodeResourcesFit LeastAllocated, weight 1: per resource ``(alloc - requested) * 100 // alloc`` in
  integers, CPU and memory averaged; pods requesting nothing count as 100m / 200Mi ("non-zero" requests).
- NodeResourcesBalancedAllocation, weight 1: ``(1 - |cpu fraction - memory fraction| / 2) * 100``.
- TaintToleration, weight 3: the number of PreferNoSchedule taints the pod does not tolerate,
  normalized in reverse (the node with most such taints scores 0, a node with none 100).
- PodTopologySpread, weight 2, the default system constraints (hostname maxSkew 3 and
  ``topology.kubernetes.io/zone`` maxSkew 5, ScheduleAnyway) over the pod's workload: fewer pods of
  the same workload on the node (and in its zone) scores higher. Bare pods have no such constraint.

Not modelled: ImageLocality, preferred node and inter-pod affinity, volume plugins, pods' own
topologySpreadConstraints.

``place``: the best-scored feasible node. Ties: the scheduler picks uniformly at random among the best
nodes. Without an ``rng`` the model takes the first of them by node name (deterministic); with a seeded
``random.Random`` it picks uniformly like the scheduler, reproducibly. ``place`` scores every feasible
node (as with percentageOfNodesToScore 100).

``landing_distribution``: the probability of each node, with the scheduler's sampling. On clusters of
100 nodes or more the scheduler stops filtering once it has found ``numFeasibleNodesToFind`` feasible
nodes (:func:`feasible_nodes_to_find`, from percentageOfNodesToScore) and picks the best of those. It
walks its node list from a start index that moves on after every pod; the model approximates that
sample by a **uniformly random subset** of the feasible nodes of that size (a modelling choice: the
real walk is a window of a zone-interleaved list, which the model does not know). Under that model the
distribution is exact: the node list sorted by score into groups of equal score, a group of ``t`` nodes
with ``a`` nodes scoring above it wins when none of the ``a`` is sampled and one of its own is, that is
with probability ``(C(n - a, k) - C(n - a - t, k)) / C(n, k)`` (hypergeometric: ``n`` feasible nodes,
``k`` sampled); the sampled nodes of the group tie, so by symmetry each of its nodes wins ``1/t`` of
that. (Summing over ``j`` sampled nodes of the group, ``C(t-1, j-1) / j = C(t, j) / t`` turns the
average of ``1/j`` into this difference.) With ``k >= n`` the best group takes everything, uniformly:
the rule of ``place`` with an ``rng``.

Cost: node data is kept in numpy arrays built once; a query is a handful of vectorized operations
over the nodes (the planner asks once per candidate pod on 5,000-node clusters). ``remove``/``add``
keep the model current as pods leave or are bound (planning moves, or a simulation's evictions);
``replace_node`` as a node changes (a landing guard's PreferNoSchedule taint, a cordon).
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rebalancer.model import Node, Pod, PodKey, WorkloadRef
from rebalancer.scheduling import placement_blocker
from rebalancer.snapshot import ClusterSnapshot

MAX_NODE_SCORE = 100
WEIGHT_FIT, WEIGHT_BALANCED, WEIGHT_TAINT, WEIGHT_SPREAD = 1, 1, 3, 2
DEFAULT_CPU_M, DEFAULT_MEMORY = 100, 200 * 2**20  # the scheduler's non-zero request defaults
HOSTNAME_SKEW, ZONE_SKEW = 3, 5
ZONE_LABEL = "topology.kubernetes.io/zone"

MIN_FEASIBLE_NODES_TO_FIND, MIN_FEASIBLE_PERCENTAGE, BASE_PERCENTAGE = 100, 5, 50  # kube-scheduler's constants

Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]
Floats = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Scheduled:
    """The node the scheduler would choose (None: unschedulable, and why), its score and the ties."""

    node: str | None
    score: int
    tied: tuple[str, ...]
    reason: str


@dataclass(frozen=True, slots=True, eq=False)
class LandingDistribution:
    """Where the scheduler puts a pod: the feasible nodes (``index`` into :attr:`SchedulerModel.names`),
    their probabilities and total weighted scores, aligned; all empty when nothing is feasible, and
    ``reason`` says why."""

    names: tuple[str, ...]
    index: Ints
    probabilities: Floats
    scores: Ints
    sampled: int  # how many feasible nodes the scheduler scores: min(feasible, numFeasibleNodesToFind)
    reason: str

    @property
    def feasible(self) -> int:
        return len(self.index)

    def as_dict(self) -> dict[str, float]:
        """Node -> probability, nodes with a probability above 0 only."""
        names, p = self.names, self.probabilities
        return {names[int(i)]: float(q) for i, q in zip(self.index, p, strict=True) if q > 0}


def feasible_nodes_to_find(all_nodes: int, percentage: int | None) -> int:
    """kube-scheduler's ``numFeasibleNodesToFind``: how many feasible nodes it looks for before scoring.
    ``percentage``: percentageOfNodesToScore; 0 or None is adaptive (``50 - all_nodes / 125`` %, at least
    5 %); below 100 nodes, or at 100 %, every node; never fewer than 100 nodes."""
    if all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return all_nodes
    pct = percentage or max(MIN_FEASIBLE_PERCENTAGE, BASE_PERCENTAGE - all_nodes // 125)
    return max(MIN_FEASIBLE_NODES_TO_FIND, all_nodes * pct // 100)


def winning_probabilities(scores: Ints, sampled: int, tables: dict[tuple[int, int], Floats] | None = None) -> Floats:
    """The probability that each of ``scores`` (the feasible nodes' scores) is the scheduler's choice
    when it scores a uniformly random subset of ``sampled`` of them and picks the best, ties uniformly
    (the module's docstring derives it). Vectorized: the nodes counted per score (or one sort when scores
    spread wide), one table of ``C(m, k) / C(n, k)``, kept in ``tables`` when given (one per size)."""
    n = len(scores)
    if n == 0:
        return np.zeros(0, np.float64)
    k = min(max(sampled, 1), n)
    low = int(scores.min())
    span = int(scores.max()) - low + 1
    if span <= 4 * n + 1024:  # scheduler scores (0-700): count each score value, no sort
        offset = scores - low
        counts = np.bincount(offset, minlength=span)[::-1]  # best score first
        group = span - 1 - offset
    else:
        _, group, counts = np.unique(-scores, return_inverse=True, return_counts=True)
        group = group.reshape(-1)
    above = np.cumsum(counts) - counts  # nodes scoring above each group
    unsampled = _all_in_table(n, k, {} if tables is None else tables)  # [m]: P(the sample lies within m nodes)
    # score values no node has: 0 / 1, never looked up (no np.errstate: entering it costs more than this)
    per_group = (unsampled[n - above] - unsampled[n - above - counts]) / np.maximum(counts, 1)
    probabilities: Floats = per_group[group]
    return probabilities


def _all_in_table(n: int, k: int, tables: dict[tuple[int, int], Floats]) -> Floats:
    """``C(m, k) / C(n, k)`` for m = 0..n, by ``C(m - 1, k) = C(m, k) * (m - k) / m`` down from 1 at
    m = n (0 below k); cached in ``tables`` (a few sizes per cluster)."""
    found = tables.get((n, k))
    if found is None:
        m = np.arange(n, 0, -1, dtype=np.float64)  # n, n-1, ..., 1
        steps = np.maximum(m - k, 0.0) / m  # C(m-1, k) / C(m, k)
        table = np.empty(n + 1, np.float64)
        table[n] = 1.0
        table[:n] = np.cumprod(steps)[::-1]  # table[m - 1] = table[m] * steps(m)
        if len(tables) >= 64:
            tables.clear()
        found = tables[(n, k)] = table
    return found


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
        self._workload: dict[WorkloadRef, dict[int, int]] = {}  # workload -> node index -> non-terminating pods
        self._where: dict[PodKey, int] = {}
        self._masks: dict[tuple[object, ...], tuple[Bools, Bools, str]] = {}
        self._prefer: dict[tuple[object, ...], Ints] = {}
        self._statics: dict[tuple[object, ...], tuple[Bools, str, Ints]] = {}
        self._names_array = np.array(self.names, dtype=object)
        self._tables: dict[tuple[int, int], Floats] = {}
        self._load(snapshot)

    def _load(self, snapshot: ClusterSnapshot) -> None:
        """Every bound pod ``add``-ed, summed in plain integers first (150,000 pods: numpy item updates
        one pod at a time cost several times more)."""
        sums = np.zeros((5, len(self.names)), np.int64)  # requested cpu, memory, pods, non-zero cpu, memory
        workload, where = self._workload, self._where
        for i, name in enumerate(self.names):
            cpu = memory = nz_cpu = nz_memory = count = 0
            for pod in snapshot.pods_on(name):
                cpu += pod.cpu_request_m
                memory += pod.memory_request
                nz_cpu += pod.cpu_request_m or DEFAULT_CPU_M
                nz_memory += pod.memory_request or DEFAULT_MEMORY
                count += 1
                where[(pod.namespace, pod.name)] = i
                if pod.workload is not None and not pod.terminating:
                    counts = workload.setdefault(pod.workload, {})
                    counts[i] = counts.get(i, 0) + 1
            sums[:, i] = (cpu, memory, count, nz_cpu, nz_memory)
        self._req_cpu, self._req_mem, self._pods, self._nz_cpu, self._nz_mem = (row.copy() for row in sums)

    def add(self, pod: Pod, node: str) -> None:
        """``pod`` is bound to ``node`` from now on."""
        i = self._index[node]
        self._shift(pod, i, 1)
        self._where[pod.key] = i

    def remove(self, pod: Pod) -> None:
        """``pod`` left its node (evicted, deleted or moved by a plan); unknown pods are ignored."""
        i = self._where.pop(pod.key, None)
        if i is not None:
            self._shift(pod, i, -1)

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
        self._prefer.clear()
        self._statics.clear()  # the static scores depend on taints and allocatable

    def node_of(self, pod: Pod) -> str | None:
        i = self._where.get(pod.key)
        return None if i is None else self.names[i]

    def place(
        self, pod: Pod, *, vacate: bool = False, exclude: Collection[str] = (), rng: random.Random | None = None
    ) -> Scheduled:
        """Where a pod like ``pod`` would be scheduled now. ``vacate``: as if ``pod`` itself had left its
        node first (where an evicted pod's replacement lands). ``exclude``: nodes not to consider."""
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
        for :meth:`place`."""
        feasible, why, total = self._totals(pod, vacate, exclude)
        if total is None:
            none = np.zeros(0, np.int64)
            return LandingDistribution(self.names, none, np.zeros(0), none, 0, why)
        index = feasible.nonzero()[0]  # flatnonzero of a 1-D array, without its dispatch (~10 µs)
        scores = total[index]
        probabilities = winning_probabilities(scores, self.sample_size, self._tables)
        sampled = min(len(index), self.sample_size)
        reason = f"the best of {sampled} sampled of {len(index)} feasible node(s)"
        return LandingDistribution(self.names, index, probabilities, scores, sampled, reason)

    def _totals(self, pod: Pod, vacate: bool, exclude: Collection[str]) -> tuple[Bools, str, Ints | None]:
        """Feasible nodes, why none, and the total scores (None when none is feasible)."""
        where = self._where.get(pod.key) if vacate else None
        if exclude:
            feasible, why = self._feasible(pod, where, exclude)
            if not feasible.any():
                return feasible, why, None
            return feasible, why, self._scores(pod, where, feasible)
        feasible, why, static = self._static(pod, where)
        if not feasible.any():
            return feasible, why, None
        total: Ints = static + WEIGHT_SPREAD * self._spread(pod, where, feasible)
        return feasible, why, total

    def scores(self, pod: Pod, *, vacate: bool = False) -> dict[str, int]:
        """Every feasible node's total weighted score (for explanations and tests)."""
        where = self._where.get(pod.key) if vacate else None
        feasible, _ = self._feasible(pod, where, ())
        total = self._scores(pod, where, feasible)
        return {self.names[i]: int(total[i]) for i in np.flatnonzero(feasible)}

    def _static(self, pod: Pod, where: int | None) -> tuple[Bools, str, Ints]:
        """Feasibility and every score but spreading, which depend only on the pod's requests and
        constraints and on where it is vacated from: shared by the pods of a node with the same requests
        and constraints until the model changes (a planner asks for many of them in a row)."""
        key = (where, pod.cpu_request_m, pod.memory_request, *self._constraint_key(pod))
        found = self._statics.get(key)
        if found is None:
            feasible, why = self._feasible(pod, where, ())
            cpu, memory = nonzero(pod)
            nz_cpu = self._requested(self._nz_cpu, cpu, where)
            nz_mem = self._requested(self._nz_mem, memory, where)
            fit = (_least(nz_cpu, self._alloc_cpu) + _least(nz_mem, self._alloc_mem)) // 2
            taint = _reverse_normalized(self._untolerated(pod), feasible)
            static: Ints = WEIGHT_FIT * fit + WEIGHT_BALANCED * self._balanced(pod, where) + WEIGHT_TAINT * taint
            if len(self._statics) >= 256:
                self._statics.clear()
            found = self._statics[key] = (feasible, why, static)
        return found

    def _shift(self, pod: Pod, i: int, sign: int) -> None:
        self._statics.clear()
        cpu, memory = nonzero(pod)
        self._req_cpu[i] += sign * pod.cpu_request_m
        self._req_mem[i] += sign * pod.memory_request
        self._nz_cpu[i] += sign * cpu
        self._nz_mem[i] += sign * memory
        self._pods[i] += sign
        if pod.workload is not None and not pod.terminating:
            counts = self._workload.setdefault(pod.workload, {})
            counts[i] = counts.get(i, 0) + sign

    def _requested(self, values: Ints, pod_value: int, where: int | None) -> Ints:
        """Node sums with the pod added everywhere (and taken off its own node when vacating)."""
        out = values + pod_value
        if where is not None:
            out[where] -= pod_value
        return out

    def _feasible(self, pod: Pod, where: int | None, exclude: Collection[str]) -> tuple[Bools, str]:
        allowed, _, blocked_why = self._constraint_masks(pod)
        cpu = self._requested(self._req_cpu, pod.cpu_request_m, where)
        mem = self._requested(self._req_mem, pod.memory_request, where)
        count = self._requested(self._pods, 1, where)
        fits_cpu = (cpu <= self._alloc_cpu) if pod.cpu_request_m > 0 else np.ones(len(self.names), np.bool_)
        fits_mem = (mem <= self._alloc_mem) if pod.memory_request > 0 else np.ones(len(self.names), np.bool_)
        fits_pods = count <= self._alloc_pods
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

    @staticmethod
    def _constraint_key(pod: Pod) -> tuple[object, ...]:
        return (pod.tolerations, tuple(sorted(pod.node_selector.items())), pod.required_affinity)

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
        cpu, memory = nonzero(pod)
        nz_cpu = self._requested(self._nz_cpu, cpu, where)
        nz_mem = self._requested(self._nz_mem, memory, where)
        fit = (_least(nz_cpu, self._alloc_cpu) + _least(nz_mem, self._alloc_mem)) // 2
        balanced = self._balanced(pod, where)
        taint = _reverse_normalized(self._untolerated(pod), feasible)
        spread = self._spread(pod, where, feasible)
        total: Ints = WEIGHT_FIT * fit + WEIGHT_BALANCED * balanced + WEIGHT_TAINT * taint + WEIGHT_SPREAD * spread
        return total

    def _balanced(self, pod: Pod, where: int | None) -> Ints:
        cpu = self._requested(self._req_cpu, pod.cpu_request_m, where)
        mem = self._requested(self._req_mem, pod.memory_request, where)
        with np.errstate(divide="ignore", invalid="ignore"):
            f_cpu = np.minimum(np.where(self._alloc_cpu > 0, cpu / self._alloc_cpu, 0.0), 1.0)
            f_mem = np.minimum(np.where(self._alloc_mem > 0, mem / self._alloc_mem, 0.0), 1.0)
        score: Ints = ((1.0 - np.abs(f_cpu - f_mem) / 2) * MAX_NODE_SCORE).astype(np.int64)
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

    def _spread(self, pod: Pod, where: int | None, feasible: Bools) -> Ints:
        """PodTopologySpread's normalized score on every node. A node holding none of the workload's pods
        scores its zone's value (or the zoneless one): the arithmetic is done once per zone and once per
        node holding some, then spread over the nodes by their zone (the same float operations as node by
        node, so the same integers)."""
        size = len(self.names)
        if pod.workload is None:
            return np.zeros(size, np.int64)
        on = dict(self._workload.get(pod.workload, {}))
        if where is not None and not pod.terminating:
            on[where] = on.get(where, 0) - 1
        held = np.fromiter(on, np.int64, len(on))
        held_count = np.fromiter(on.values(), np.int64, len(on))
        zone_of_held = self._zone[held]
        # column 0: no zone, column z + 1: zone z (zone-free arithmetic adds 0.0, as node by node)
        per_domain = np.bincount(self._zone[feasible] + 1, minlength=self._zones + 1)
        host_log = math.log(int(per_domain.sum()) + 2)
        zone_raw = np.zeros(self._zones + 1, np.float64)
        if self._zones:
            _, affine, _ = self._constraint_masks(pod)
            counted = (zone_of_held >= 0) & affine[held]
            per_zone = np.bincount(zone_of_held[counted], weights=held_count[counted], minlength=self._zones)
            domains = int(np.count_nonzero(per_domain[1:]))
            zone_raw[1:] = per_zone * math.log(domains + 2) + (ZONE_SKEW - 1)
        empty = np.floor((0.0 + (HOSTNAME_SKEW - 1)) + zone_raw + 0.5).astype(np.int64)
        mine = np.floor((held_count * host_log + (HOSTNAME_SKEW - 1)) + zone_raw[zone_of_held + 1] + 0.5).astype(
            np.int64
        )  # Go's math.Round: half away from zero (raw >= 0 here)
        held_feasible = feasible[held]
        empty_feasible = per_domain - np.bincount(zone_of_held[held_feasible] + 1, minlength=self._zones + 1)
        candidates = [empty[empty_feasible > 0], mine[held_feasible]]
        values = np.concatenate(candidates)
        if len(values) == 0:
            score = empty[self._zone + 1]
            score[held] = mine
            return score
        low, high = int(values.min()), int(values.max())
        if high == 0:
            return np.full(size, MAX_NODE_SCORE, np.int64)
        normalized: Ints = ((MAX_NODE_SCORE * (high + low - empty)) // high)[self._zone + 1]
        normalized[held] = (MAX_NODE_SCORE * (high + low - mine)) // high
        return normalized


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
