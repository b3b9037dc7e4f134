"""Where an evicted pod's replacement will land, and whether the move relieves anything there (pure).

The default scheduler places the replacement by requests, not by real usage: when requests are
balanced and usage is not, the relieved node is the least requested one and the replacement lands
right back. :class:`LandingPredictor` asks :class:`rebalancer.scheduler_model.SchedulerModel` where the
replacement would go (as if the pod had left its node, with the moves already planned this cycle
applied) and accepts the move only when that node is a destination of the strategy with the real-usage
room to take the pod's usage.

Room accounting follows the prediction: a move's usage is committed to the node the replacement is
predicted to land on (the plan's ``room_on`` and ``landing`` are then the same node), because that is
where it will really go; any other node with room would be bookkeeping for a move that does not happen.

Ties: the scheduler picks uniformly at random among the best-scored nodes, so every tied node must be
acceptable; the recorded landing is the model's deterministic choice among them (first by name).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum

from rebalancer.model import Pod
from rebalancer.plan import NodeDecision
from rebalancer.scheduler_model import WEIGHT_BALANCED, WEIGHT_FIT, WEIGHT_SPREAD, WEIGHT_TAINT, SchedulerModel
from rebalancer.snapshot import ClusterSnapshot
from strategies.placement import signature

MAX_SCORE = 100 * (WEIGHT_FIT + WEIGHT_BALANCED + WEIGHT_TAINT + WEIGHT_SPREAD)


class LandingVerdict(StrEnum):
    """Why a predicted landing is refused (the counts say why a node got no eviction)."""

    BACK = "back"  # on the pod's own node
    ELSEWHERE = "elsewhere"  # on a node that is not a destination (hot, normal, other pool, unknown)
    NO_ROOM = "no-room"  # on a destination without the real-usage room
    UNSCHEDULABLE = "unschedulable"  # the replacement would stay Pending


@dataclass(frozen=True, slots=True)
class Landing:
    """The predicted landing node (None: refused), why, and the refusal kind (None: accepted)."""

    node: str | None
    reason: str
    refused: LandingVerdict | None = None


class LandingPredictor:
    """Predicted landings for one plan, kept current as moves are committed (local working state only).

    ``room``: destination node -> real CPU usage it may still take (its cap minus its usage).
    ``same_pool``: a landing must be in the source node's pool.
    """

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        decisions: Mapping[str, NodeDecision],
        room: Mapping[str, int],
        *,
        same_pool: bool,
    ) -> None:
        self._snapshot = snapshot
        self._decisions = decisions
        self._room = dict(room)
        self._same_pool = same_pool
        self._model = SchedulerModel(snapshot)
        self._cache: dict[tuple[object, ...], tuple[str | None, int, tuple[str, ...], str]] = {}

    def land(self, pod: Pod, source: str, usage_m: int) -> Landing:
        """Where ``pod``'s replacement is predicted to land if it is evicted from ``source`` now, and
        whether that node takes ``usage_m`` of real usage as a destination."""
        node, score, tied, why = self._place(pod, source)
        if node is None:
            return Landing(None, f"its replacement would not be scheduled ({why})", LandingVerdict.UNSCHEDULABLE)
        for candidate in _chosen_first(node, tied):
            refusal = self._refusal(candidate, source, usage_m)
            if refusal is not None:
                kind, text = refusal
                scored = f"scheduler score {score}/{MAX_SCORE}"
                if len(tied) > 1:
                    scored += f", tied with {len(tied) - 1} other node(s): the scheduler picks one at random"
                verb = "predicted to land" if candidate == node else "may land"
                return Landing(None, f"{verb} {text} ({scored})", kind)
        room = self._room[node]
        ties = f", tied with {len(tied) - 1} other destination(s)" if len(tied) > 1 else ""
        reason = f"predicted to land on {node} (scheduler score {score}/{MAX_SCORE}{ties}), {room}m of real-usage room"
        return Landing(node, reason)

    def commit(self, pod: Pod, landing: str, usage_m: int) -> None:
        """The move is planned: the replacement is bound to ``landing`` and uses its room."""
        self._model.remove(pod)
        self._model.add(pod, landing)
        self._room[landing] -= usage_m
        self._cache.clear()

    def _place(self, pod: Pod, source: str) -> tuple[str | None, int, tuple[str, ...], str]:
        """The model's answer, cached until the model changes: pods of one workload on one node with the
        same requests and constraints get the same answer."""
        key = (pod.workload, source, signature(pod), pod.cpu_request_m, pod.memory_request, pod.terminating)
        found = self._cache.get(key) if pod.workload is not None else None
        if found is None:
            scheduled = self._model.place(pod, vacate=True)
            found = (scheduled.node, scheduled.score, scheduled.tied, scheduled.reason)
            if pod.workload is not None:
                self._cache[key] = found
        return found

    def _refusal(self, node: str, source: str, usage_m: int) -> tuple[LandingVerdict, str] | None:
        if node == source:
            return LandingVerdict.BACK, f"back on {node}"
        pool_of = self._snapshot.pool_of
        if self._same_pool and pool_of.get(node) != pool_of.get(source):
            return LandingVerdict.ELSEWHERE, f"on {node} of pool {pool_of.get(node)}, not a destination of this pool"
        if node not in self._room:
            decision = self._decisions.get(node)
            what = f"a {decision.node_class.value} node" if decision is not None else "an unclassified node"
            return LandingVerdict.ELSEWHERE, f"on {node}, {what}, not a destination"
        room = self._room[node]
        if room < usage_m:
            return LandingVerdict.NO_ROOM, f"on {node}, which has {room}m of real-usage room, not {usage_m}m"
        return None


def _chosen_first(node: str, tied: tuple[str, ...]) -> Iterator[str]:
    yield node
    yield from (t for t in tied if t != node)
