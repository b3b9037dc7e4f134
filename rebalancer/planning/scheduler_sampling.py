"""The default kube-scheduler's sampling of feasible nodes, and the exact chance of each node (pure).

On clusters of 100 nodes or more the scheduler stops filtering once it has found
``numFeasibleNodesToFind`` feasible nodes (:func:`feasible_nodes_to_find`, from
percentageOfNodesToScore) and picks the best of those. It walks its node list from a start index that
moves on after every pod; the model approximates that sample by a **uniformly random subset** of the
feasible nodes of that size (a modelling choice: the real walk is a window of a zone-interleaved list,
which the model does not know). Under that model the distribution is exact: the node list sorted by
score into groups of equal score, a group of ``t`` nodes with ``a`` nodes scoring above it wins when
none of the ``a`` is sampled and one of its own is, that is with probability
``(C(n - a, k) - C(n - a - t, k)) / C(n, k)`` (hypergeometric: ``n`` feasible nodes, ``k`` sampled); the
sampled nodes of the group tie, so by symmetry each of its nodes wins ``1/t`` of that. (Summing over
``j`` sampled nodes of the group, ``C(t-1, j-1) / j = C(t, j) / t`` turns the average of ``1/j`` into
this difference.) With ``k >= n`` the best group takes everything, uniformly: the rule of
:meth:`rebalancer.planning.scheduler_model.SchedulerModel.place` with an ``rng``.

A node below the best ``a`` is chosen only when none of them is sampled, ``C(n - a, k) / C(n, k)``:
:func:`reached_nodes` says how many of the best can be chosen at all, the rest together having at most
:data:`EPSILON` (on 5,000 nodes with 500 sampled, the best few hundred).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

MIN_FEASIBLE_NODES_TO_FIND, MIN_FEASIBLE_PERCENTAGE, BASE_PERCENTAGE = 100, 5, 50  # kube-scheduler's constants
EPSILON = 1e-12  # a distribution leaves out the nodes chosen with at most this probability, all together

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]


def feasible_nodes_to_find(all_nodes: int, percentage: int | None) -> int:
    """kube-scheduler's ``numFeasibleNodesToFind``: how many feasible nodes it looks for before scoring.
    ``percentage``: percentageOfNodesToScore; 0 or None is adaptive (``50 - all_nodes / 125`` %, at least
    5 %); below 100 nodes, or at 100 %, every node; never fewer than 100 nodes."""
    if all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return all_nodes
    pct = percentage or max(MIN_FEASIBLE_PERCENTAGE, BASE_PERCENTAGE - all_nodes // 125)
    return max(MIN_FEASIBLE_NODES_TO_FIND, all_nodes * pct // 100)


def winning_probabilities(
    scores: Ints,
    sampled: int,
    tables: dict[tuple[int, int], Floats] | None = None,
    *,
    population: int | None = None,
) -> Floats:
    """The probability that each of ``scores`` (the feasible nodes' scores) is the scheduler's choice
    when it scores a uniformly random subset of ``sampled`` of them and picks the best, ties uniformly
    (the module's docstring derives it). ``population``: how many nodes are feasible when ``scores`` are
    only the best of them (every node scoring above the lowest of ``scores`` included, see
    :meth:`SchedulerModel.landing_distribution`); their probabilities are the same as among all. Vectorized:
    the nodes counted per score (or one sort when scores spread wide), one table of ``C(m, k) / C(n, k)``,
    kept in ``tables`` when given (one per size)."""
    if len(scores) == 0:
        return np.zeros(0, np.float64)
    n = len(scores) if population is None else population
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
    unsampled = all_in_table(n, k, {} if tables is None else tables)  # [m]: P(the sample lies within m nodes)
    # score values no node has: 0 / 1, never looked up (no np.errstate: entering it costs more than this)
    per_group = (unsampled[n - above] - unsampled[n - above - counts]) / np.maximum(counts, 1)
    probabilities: Floats = per_group[group]
    return probabilities


def reached_nodes(n: int, k: int, tables: dict[tuple[int, int], Floats]) -> int:
    """How many of the best of ``n`` feasible nodes (``k`` sampled) can be chosen at all: the scheduler
    picks below them only when none of them is sampled, a probability of at most :data:`EPSILON`
    (``C(n - a, k) / C(n, k)``, looked up in the table). 1 when every node is scored."""
    table = all_in_table(n, k, tables)
    return n + 1 - int(np.searchsorted(table, EPSILON, side="right"))


def all_in_table(n: int, k: int, tables: dict[tuple[int, int], Floats]) -> Floats:
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
