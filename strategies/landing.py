"""Where an evicted pod's replacement will land, and whether the move relieves anything there (pure).

The default scheduler places the replacement by requests, not by real usage: when requests are
balanced and usage is not, the relieved node is the least requested one and the replacement lands
right back. :class:`LandingPredictor` asks :class:`rebalancer.scheduler_model.SchedulerModel` for the
probability of each landing node (as if the pod had left its node, with the moves already planned this
cycle applied): the scheduler picks at random among equally scored nodes, and on clusters of 100 nodes
or more it scores only a sample of the feasible ones (percentageOfNodesToScore).

The risk rule: the **landing risk** is the total probability of landing on a node that is not an
acceptable destination: the pod's own node, a node that is not a destination of the strategy (hot,
normal, unknown, unclassified, or of another pool), or a destination without the real-usage room for
the pod's usage. The move is accepted when the risk is at most ``max_risk`` (``maxLandingRisk``); 0
refuses any chance of a bad landing (with every node scored: every tied best node must be acceptable).

Room accounting follows the prediction: a move's usage is committed to the most probable acceptable
node (the plan's ``room_on`` and ``landing`` are then the same node), because that is where it will
most likely go; any other node with room would be bookkeeping for a move that does not happen. The
rest of the probability (at most the risk, plus other acceptable nodes) is not bookkept anywhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum, StrEnum

import msgspec
import numpy as np
import numpy.typing as npt

from rebalancer.guard.marks import GUARD_KEY, MarkReason
from rebalancer.model import Node, Pod, Taint
from rebalancer.plan import NodeDecision
from rebalancer.scheduler_model import (
    WEIGHT_BALANCED,
    WEIGHT_FIT,
    WEIGHT_SPREAD,
    WEIGHT_TAINT,
    LandingDistribution,
    SchedulerModel,
)
from rebalancer.snapshot import ClusterSnapshot
from strategies.placement import signature

MAX_SCORE = 100 * (WEIGHT_FIT + WEIGHT_BALANCED + WEIGHT_TAINT + WEIGHT_SPREAD)
NAMED = 3  # bad destinations named in a decision record, most probable first
CACHED = 64  # distributions kept (80 KB each at 5,000 nodes); a node's pods are asked in a row
TOLERANCE = 1e-9  # float sums: a 50/50 tie must compare equal to a 0.5 cap


class LandingVerdict(StrEnum):
    """Why a predicted landing is refused (the counts say why a node got no eviction)."""

    BACK = "back"  # on the pod's own node
    ELSEWHERE = "elsewhere"  # on a node that is not a destination (hot, normal, other pool, unknown)
    NO_ROOM = "no-room"  # on a destination without the real-usage room
    UNSCHEDULABLE = "unschedulable"  # the replacement would stay Pending


class _Kind(IntEnum):
    """Each node's verdict for one candidate, as small integers for vectorized sums."""

    OK = 0
    BACK = 1
    ELSEWHERE = 2
    NO_ROOM = 3


_VERDICTS = {_Kind.BACK: LandingVerdict.BACK, _Kind.ELSEWHERE: LandingVerdict.ELSEWHERE}
_KINDS = tuple(_Kind)  # by value: indexing a tuple costs less than calling the enum
# plain ints for the hot path (an IntEnum member's class attribute lookup costs about 2 µs in Python 3.11)
_OK, _BACK, _ELSEWHERE, _NO_ROOM = (int(k) for k in _Kind)


@dataclass(frozen=True, slots=True)
class Landing:
    """The predicted landing node (None: refused), why (the landing risk included), and the refusal kind
    (None: accepted)."""

    node: str | None
    reason: str
    refused: LandingVerdict | None = None


class LandingPredictor:
    """Predicted landings for one plan, kept current as moves are committed (local working state only).

    ``room``: destination node -> real CPU usage it may still take (its cap minus its usage).
    ``same_pool``: a landing must be in the source node's pool. ``max_risk``: the highest accepted
    landing risk. ``percentage_of_nodes_to_score``: the cluster scheduler's setting (None: adaptive).
    """

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        decisions: Mapping[str, NodeDecision],
        room: Mapping[str, int],
        *,
        same_pool: bool,
        max_risk: float = 0.1,
        percentage_of_nodes_to_score: int | None = None,
        marked: Mapping[str, Node] | None = None,
    ) -> None:
        self._snapshot = snapshot
        self._decisions = decisions
        self._same_pool = same_pool
        self._max_risk = max_risk
        self._model = SchedulerModel(snapshot, percentage_of_nodes_to_score=percentage_of_nodes_to_score)
        for node in (marked or {}).values():
            self._model.replace_node(node)  # as the scheduler will see it when the replacement comes
        names = self._model.names
        self._index = {name: i for i, name in enumerate(names)}
        self._room = np.array([room.get(n, 0) for n in names], np.int64)
        self._destination = np.array([n in room for n in names], np.bool_)
        pools = sorted({snapshot.pool_of.get(n, "") for n in names})
        self._pool = np.array([pools.index(snapshot.pool_of.get(n, "")) for n in names], np.int64)
        self._cache: dict[tuple[object, ...], LandingDistribution] = {}

    def land(self, pod: Pod, source: str, usage_m: int) -> Landing:
        """Where ``pod``'s replacement most probably lands among the acceptable destinations if it is
        evicted from ``source`` now, or why the move is refused (landing risk above the cap)."""
        spread = self._distribution(pod, source)
        if spread.feasible == 0:
            why = spread.reason
            return Landing(None, f"its replacement would not be scheduled ({why})", LandingVerdict.UNSCHEDULABLE)
        kinds = self._kinds(spread.index, source, usage_m)
        p = spread.probabilities
        masses = np.bincount(kinds, weights=p, minlength=len(_KINDS))
        risk = float(masses[_BACK:].sum())
        sampled = "" if spread.sampled == spread.feasible else f"; {spread.sampled} of {spread.feasible} nodes scored"
        if risk > self._max_risk + TOLERANCE:
            worst = _KINDS[int(np.argmax(masses[_BACK:])) + _BACK]
            text = (
                f"predicted landing risk {_pct(risk)} > maxLandingRisk {_pct(self._max_risk)}: "
                f"{self._bad(spread, kinds, source, usage_m, risk)}{sampled}"
            )
            return Landing(None, text, _VERDICTS.get(worst, LandingVerdict.NO_ROOM))
        j = int(np.argmax(np.where(kinds == _OK, p, -1.0)))
        i = int(spread.index[j])
        node = spread.names[i]
        scored = f"{_pct(float(p[j]))}, scheduler score {int(spread.scores[j])}/{MAX_SCORE}{sampled}"
        reason = f"predicted to land on {node} ({scored}), {int(self._room[i])}m of real-usage room"
        if risk > 0:
            reason += f"; landing risk {_pct(risk)}: {self._bad(spread, kinds, source, usage_m, risk)}"
        return Landing(node, reason)

    def commit(self, pod: Pod, landing: str, usage_m: int) -> None:
        """The move is planned: the replacement is bound to ``landing`` and uses its room."""
        self._model.remove(pod)
        self._model.add(pod, landing)
        self._room[self._index[landing]] -= usage_m
        self._cache.clear()

    def _distribution(self, pod: Pod, source: str) -> LandingDistribution:
        """The model's answer, cached until the model changes: pods of one workload on one node with the
        same requests and constraints get the same answer."""
        key = (pod.workload, source, signature(pod), pod.cpu_request_m, pod.memory_request, pod.terminating)
        found = self._cache.get(key) if pod.workload is not None else None
        if found is None:
            found = self._model.landing_distribution(pod, vacate=True)
            if pod.workload is not None:
                if len(self._cache) >= CACHED:
                    self._cache.clear()
                self._cache[key] = found
        return found

    def _kinds(self, index: npt.NDArray[np.int64], source: str, usage_m: int) -> npt.NDArray[np.int64]:
        """The verdict on each of the nodes ``index`` for a pod leaving ``source`` with ``usage_m``."""
        s = self._index[source]
        destination = self._destination[index]
        if self._same_pool:
            destination &= self._pool[index] == self._pool[s]
        fits = np.where(self._room[index] >= usage_m, _OK, _NO_ROOM)
        kinds: npt.NDArray[np.int64] = np.where(destination, fits, _ELSEWHERE)
        kinds[index == s] = _BACK
        return kinds

    def _bad(
        self, spread: LandingDistribution, kinds: npt.NDArray[np.int64], source: str, usage_m: int, risk: float
    ) -> str:
        """The most probable bad destinations (first by name among equals) with their probabilities and
        scores, and the rest of the ``risk`` summed."""
        bad_p = np.where(kinds != _OK, spread.probabilities, 0.0)
        positive = bad_p.nonzero()[0]  # flatnonzero of a 1-D array, without its dispatch
        values = bad_p[positive]
        count = len(positive)
        if count > NAMED:  # only those at least as probable as the NAMED-th
            kept = values >= np.partition(values, count - NAMED)[count - NAMED]
            positive, values = positive[kept], values[kept]
        named = positive[np.lexsort((positive, -values))[:NAMED]].tolist()
        parts = []
        for j in named:
            where, detail = self._describe(int(spread.index[j]), _KINDS[int(kinds[j])], source, usage_m)
            parts.append(f"{where} {_pct(float(bad_p[j]))} ({detail}score {int(spread.scores[j])}/{MAX_SCORE})")
        if count > len(named):
            rest = risk - sum(float(bad_p[j]) for j in named)
            parts.append(f"{count - len(named)} more node(s) {_pct(rest)}")
        return ", ".join(parts)

    def _describe(self, i: int, kind: _Kind, source: str, usage_m: int) -> tuple[str, str]:
        """Where a bad landing goes, and the detail that makes it bad (empty or ending in "; ")."""
        node = self._model.names[i]
        if kind == _BACK:
            return f"back on {node}", ""
        if kind == _NO_ROOM:
            return f"on {node}", f"{int(self._room[i])}m of real-usage room, not {usage_m}m; "
        pool_of = self._snapshot.pool_of
        if self._same_pool and pool_of.get(node) != pool_of.get(source):
            return f"on {node}", f"pool {pool_of.get(node)}, not a destination of this pool; "
        decision = self._decisions.get(node)
        what = decision.node_class.value if decision is not None else "unclassified"
        return f"on {what} {node}", ""


def _pct(p: float) -> str:
    """A probability as a short percentage that never rounds a possibility away."""
    if p <= 0:
        return "0%"
    if p < 0.001:
        return "<0.1%"
    if p >= 1:
        return "100%"
    if p > 0.999:
        return ">99.9%"
    return f"{p * 100:.1f}%" if p < 0.1 else f"{p * 100:.0f}%"


def guard_marks(snapshot: ClusterSnapshot, hot: Iterable[str]) -> dict[str, Node]:
    """The hot nodes of pools with a landing guard, with the guard's taint they will carry before any of
    their pods is evicted (the guard marks them ahead of the evictor), for those not carrying it yet."""
    out = {}
    for name in hot:
        effect = snapshot.guarded_pools.get(snapshot.pool_of.get(name, ""))
        node = snapshot.nodes.get(name)
        if effect is None or node is None or any(t.key == GUARD_KEY for t in node.taints):
            continue
        mark = Taint(key=GUARD_KEY, value=MarkReason.HOT.value, effect=effect)
        out[name] = msgspec.structs.replace(node, taints=(*node.taints, mark))
    return out
