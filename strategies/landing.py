"""Where an evicted pod's replacement will land, and whether the move relieves anything there (pure).

The default scheduler places the replacement by requests, not by real usage: a node hot by usage is often
the least requested one, and the replacement lands right back. :class:`LandingPredictor` asks
:class:`rebalancer.planning.scheduler_model.SchedulerModel` for the probability of each landing node (the pod
evicted and terminating, its requests still on its node as the scheduler counts them, with the moves
already planned this cycle applied): the scheduler picks at random among equally scored nodes, and on clusters of 100 nodes
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

import functools
import itertools
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum, StrEnum

import msgspec

from rebalancer.domain.model import Node, Pod
from rebalancer.domain.quantity import cores_text
from rebalancer.planning.landing_groups import Group, LandingGroups
from rebalancer.planning.plan import NodeClass
from rebalancer.planning.scheduler_model import SchedulerModel
from rebalancer.planning.snapshot import ClusterSnapshot
from strategies.placement import signature

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


class Landing(msgspec.Struct, frozen=True, gc=False):
    """The predicted landing node (None: refused), why (the landing risk included), the refusal kind
    (None: accepted), the landing risk (1 when the replacement would not be scheduled), and what the
    scheduler model could not evaluate for the pod ("": nothing; else its probabilities are approximate)."""

    node: str | None
    reason: str
    refused: LandingVerdict | None = None
    risk: float = 0.0
    caveat: str = ""


@dataclass(frozen=True, slots=True)
class _BucketKinds:
    """A ranking bucket's nodes by kind for sources of one pool: the good destinations with their
    real-usage room when counted (ascending rooms too, to count those without room for a pod by
    bisection), and the others (index order)."""

    room_of: dict[int, int]
    rooms: list[int]
    by_room: list[tuple[int, int]]  # (room, node) of the good destinations, ascending
    others: list[int]  # not a destination for this pool: a landing there relieves nothing


@dataclass(slots=True)
class _Tally:
    """One candidate's landing: the probability mass of each kind, and per group the count of each kind."""

    masses: list[float]
    counts: list[list[int]]  # per group: [ok, back, elsewhere, no room]
    exact: list[list[tuple[int, int]]]  # per group: (node, kind) of its exactly scored nodes

    @property
    def risk(self) -> float:
        return self.masses[_BACK] + self.masses[_ELSEWHERE] + self.masses[_NO_ROOM]


class LandingPredictor:
    """Predicted landings for one plan, kept current as moves are committed (local working state only).

    ``classes``: each node's class (named in the reasons). ``room``: destination node -> real CPU usage it
    may still take (its cap minus its usage).
    ``same_pool``: a landing must be in the source node's pool. ``max_risk``: the highest accepted
    landing risk. ``percentage_of_nodes_to_score``: the cluster scheduler's setting (None: adaptive).

    The model answers in groups of equally scored nodes (:mod:`rebalancer.planning.landing_groups`); their
    ranking buckets are counted by kind once per pool of source nodes and kept while the ranking stands
    (a node whose room changes, a move's landing, changed in the model too: queries score it exactly).
    """

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        classes: Mapping[str, NodeClass],
        room: Mapping[str, int],
        *,
        same_pool: bool,
        max_risk: float = 0.1,
        percentage_of_nodes_to_score: int | None = None,
        marked: Mapping[str, Node] | None = None,
    ) -> None:
        self._same_pool = same_pool
        self._max_risk = max_risk
        self._model = SchedulerModel(snapshot, percentage_of_nodes_to_score=percentage_of_nodes_to_score)
        for node in (marked or {}).values():
            self._model.replace_node(node)  # as the scheduler will see it when the replacement comes
        names = self._model.names
        self._index = {name: i for i, name in enumerate(names)}
        self._room = [room.get(n, 0) for n in names]
        self._destination = [n in room for n in names]
        self._pool_names = sorted({snapshot.pool_of.get(n, "") for n in names})
        self._pool = [self._pool_names.index(snapshot.pool_of.get(n, "")) for n in names]
        self._what = [c.value if (c := classes.get(n)) is not None else "unclassified" for n in names]
        self._cache: dict[tuple[object, ...], LandingGroups] = {}
        self._kinds: dict[tuple[int, int, int], _BucketKinds] = {}
        self._described: dict[tuple[int, int, int, int, float, int], str] = {}
        self._over_cap = f" > maxLandingRisk {percent(max_risk)}: "
        self._journal: list[tuple[Pod, str | None, str | None, int]] = []  # pod, node before, landing, usage

    def land(self, pod: Pod, source: str, usage_m: int) -> Landing:
        """Where ``pod``'s replacement most probably lands among the acceptable destinations if it is
        evicted from ``source`` now, or why the move is refused (landing risk above the cap)."""
        found = self._groups(pod, source)
        caveat = found.caveat
        approximate = f"; approximate: not evaluated: {caveat}" if caveat else ""
        if found.feasible == 0:
            why = found.reason
            return Landing(None, f"its replacement would not be scheduled ({why}){approximate}",
                           LandingVerdict.UNSCHEDULABLE, 1.0, caveat)  # fmt: skip
        s = self._index[source]
        tally = self._tally(found, s, usage_m)
        risk = tally.risk
        sampled = "" if found.sampled == found.feasible else f"; {found.sampled} of {found.feasible} nodes scored"
        good = any(count[_OK] for group, count in zip(found.groups, tally.counts, strict=True) if group.probability > 0)
        if risk > self._max_risk + TOLERANCE or not good:  # a cap near 1 still needs a good node to land on
            bad = tally.masses[_BACK:]
            # the likeliest kind of bad landing; masses equal but for float sums go to the first (back first)
            worst = _KINDS[next(k for k, mass in enumerate(bad) if mass >= max(bad) - TOLERANCE) + _BACK]
            likeliest = self._bad(found, tally, s, usage_m, risk, self._model.max_score(pod))
            text = f"predicted landing risk {percent(risk)}{self._over_cap}{likeliest}{sampled}{approximate}"
            return Landing(None, text, _VERDICTS.get(worst, LandingVerdict.NO_ROOM), risk, caveat)
        i, group = self._likeliest_good(found, tally, s, usage_m)
        node = self._model.names[i]
        scored = f"{percent(group.probability)}, scheduler score {group.total}/{self._model.max_score(pod)}{sampled}"
        reason = f"predicted to land on {node} ({scored}), {cores_text(self._room[i])} of real-usage room"
        if risk > 0:
            reason += f"; landing risk {percent(risk)}: {self._bad(found, tally, s, usage_m, risk, self._model.max_score(pod))}"
        return Landing(node, reason + approximate, risk=risk, caveat=caveat)

    def chances(self, pod: Pod, source: str) -> dict[str, float]:
        """Node -> the probability that ``pod``'s replacement lands there if it is evicted from ``source`` now:
        the distribution :meth:`land` judges (nodes the model gives no chance left out)."""
        found = self._groups(pod, source)
        names = self._model.names
        return {names[i]: g.probability for g in found.groups if g.probability > 0 for i in found.members(g)}

    @property
    def max_risk(self) -> float:
        return self._max_risk

    def mass_refused(
        self, pod: Pod, source: str, usage_m: int, refusal: Callable[[str], str | None]
    ) -> tuple[float, str | None]:
        """The probability that ``pod``'s replacement, evicted from ``source`` now, lands where the landing is
        otherwise good (a destination with the CPU room) but ``refusal`` names a reason against it: what the
        landing risk leaves out when a destination refuses the pod for another resource. With the reason of
        the likeliest such node (None: no chance). ``refusal`` is asked only of nodes with some chance."""
        found = self._groups(pod, source)
        s = self._index[source]
        mass, first = 0.0, None
        for group in found.groups:
            if group.probability <= 0:
                continue
            for i in sorted(found.members(group)):
                if self._kind(i, s, usage_m) != _OK:
                    continue
                why = refusal(self._model.names[i])
                if why is not None:
                    mass += group.probability
                    first = first or why
        return mass, first

    def commit(self, pod: Pod, landing: str, usage_m: int) -> None:
        """The move is planned: the replacement is bound to ``landing`` and uses its room; the evicted pod
        terminates meanwhile (its requests stay on its node, see :meth:`SchedulerModel.terminate`)."""
        self._journal.append((pod, self._model.node_of(pod), landing, usage_m))
        self._model.terminate(pod)
        self._model.add(pod, landing)
        self._room[self._index[landing]] -= usage_m
        self._cache.clear()

    def vacate(self, pods: Iterable[Pod]) -> None:
        """The pods are evicted together (a node's group at once, replacements created while none of them
        is bound yet): later landings are predicted with all of them terminating."""
        for pod in pods:
            self._journal.append((pod, self._model.node_of(pod), None, 0))
            self._model.terminate(pod)
        self._cache.clear()

    def checkpoint(self) -> int:
        return len(self._journal)

    def rollback(self, checkpoint: int) -> None:
        """Undo the commits and vacates made since ``checkpoint``, latest first."""
        while len(self._journal) > checkpoint:
            pod, before, after, usage_m = self._journal.pop()
            self._model.remove(pod)  # its replacement, if bound
            if before is not None:
                self._model.restore(pod, before)
            if after is not None:
                self._room[self._index[after]] += usage_m
        self._cache.clear()

    def _groups(self, pod: Pod, source: str) -> LandingGroups:
        """The model's answer, cached until the model changes: pods of one workload on one node with the
        same requests and constraints get the same answer."""
        key = (pod.workload, source, signature(pod), pod.preferred_affinity, pod.cpu_request_m, pod.memory_request,
               pod.terminating, *self._model.inter_pod_key(pod))  # fmt: skip
        found = self._cache.get(key) if pod.workload is not None else None
        if found is None:
            found = self._model.landing_groups(pod, vacate=True)
            if pod.workload is not None:
                if len(self._cache) >= CACHED:
                    self._cache.clear()
                self._cache[key] = found
        return found

    def _good(self, i: int, pool: int) -> bool:
        """A landing on node ``i`` relieves a node of ``pool``, room permitting."""
        return self._destination[i] and (not self._same_pool or self._pool[i] == pool)

    def _kind(self, i: int, s: int, usage_m: int) -> int:
        if i == s:
            return _BACK
        if not self._good(i, self._pool[s]):
            return _ELSEWHERE
        return _OK if self._room[i] >= usage_m else _NO_ROOM

    def _bucket(self, found: LandingGroups, b: int, pool: int) -> _BucketKinds:
        key = (found.serial, b, pool)
        kinds = self._kinds.get(key)
        if kinds is None:
            room_of = {i: self._room[i] for i in found.bucket_nodes[b] if self._good(i, pool)}
            by_room = sorted((r, i) for i, r in room_of.items())
            others = [i for i in found.bucket_nodes[b] if i not in room_of]
            if len(self._kinds) >= 4096:
                self._kinds.clear()
            kinds = self._kinds[key] = _BucketKinds(room_of, [r for r, _ in by_room], by_room, others)
        return kinds

    def _tally(self, found: LandingGroups, s: int, usage_m: int) -> _Tally:
        """The mass and the count of each kind of landing, per group and in all."""
        pool = self._pool[s]
        masses = [0.0] * len(_KINDS)
        counts, exact = [], []
        for group in found.groups:
            count = [0] * len(_KINDS)
            for b in group.buckets:
                kinds = self._bucket(found, b, pool)
                good, short = len(kinds.room_of), bisect_left(kinds.rooms, usage_m)
                for i in found.excluded.get(b, ()):  # scored exactly: not in the bucket this time
                    room = kinds.room_of.get(i)
                    if room is not None:
                        good -= 1
                        short -= room < usage_m
                count[_OK] += good - short
                count[_NO_ROOM] += short
                count[_ELSEWHERE] += len(found.bucket_nodes[b]) - len(found.excluded.get(b, ())) - good
            kinds_of = [(i, self._kind(i, s, usage_m)) for i in group.nodes]
            for _, kind in kinds_of:
                count[kind] += 1
            for kind, n in enumerate(count):
                masses[kind] += group.probability * n
            counts.append(count)
            exact.append(kinds_of)
        return _Tally(masses, counts, exact)

    def _likeliest_good(self, found: LandingGroups, tally: _Tally, s: int, usage_m: int) -> tuple[int, Group]:
        """The good landing (first by index among the most probable) and its group."""
        groups = list(zip(found.groups, tally.counts, tally.exact, strict=True))
        top = max(g.probability for g, count, _ in groups if count[_OK])
        return min(
            ((self._first(found, g, exact, s, usage_m, bad=False, limit=1)[0], g) for g, count, exact in groups
             if count[_OK] and g.probability == top),
            key=lambda pair: pair[0],
        )  # fmt: skip

    def _first(
        self,
        found: LandingGroups,
        group: Group,
        exact: list[tuple[int, int]],
        s: int,
        usage_m: int,
        *,
        bad: bool,
        limit: int,
    ) -> list[int]:
        """The first ``limit`` good (or bad) nodes of ``group`` by index (``exact``: its exact nodes' kinds)."""
        pool = self._pool[s]
        picked = [i for i, kind in exact if (kind != _OK) == bad]
        for b in group.buckets:
            kinds = self._bucket(found, b, pool)
            left_out = found.excluded.get(b, ())
            if not bad:
                fits = (i for i in found.bucket_nodes[b] if kinds.room_of.get(i, -1) >= usage_m and i not in left_out)
                picked += itertools.islice(fits, limit)
                continue
            picked += itertools.islice((i for i in kinds.others if i not in left_out), limit)
            short = bisect_left(kinds.rooms, usage_m)
            if short:
                picked += sorted(i for _, i in kinds.by_room[:short] if i not in left_out)[:limit]
        picked.sort()
        return picked[:limit]

    def _bad(self, found: LandingGroups, tally: _Tally, s: int, usage_m: int, risk: float, top: int) -> str:
        """The most probable bad destinations (first by name among equals) with their probabilities and
        scores (of ``top``, the pod's highest possible), and the rest of the ``risk`` summed."""
        named: list[tuple[int, Group]] = []
        count = 0
        tier: list[tuple[int, Group]] = []  # bad nodes of consecutive groups with one probability
        for group, kinds, exact in zip(found.groups, tally.counts, tally.exact, strict=True):
            if group.probability <= 0:
                continue
            bad = kinds[_BACK] + kinds[_ELSEWHERE] + kinds[_NO_ROOM]
            count += bad
            if len(named) >= NAMED or not bad:
                continue
            if tier and tier[0][1].probability != group.probability:
                named += sorted(tier, key=lambda e: e[0])[: NAMED - len(named)]
                tier = []
            if len(named) < NAMED:
                tier += [(i, group) for i in self._first(found, group, exact, s, usage_m, bad=True, limit=NAMED)]
        named += sorted(tier, key=lambda e: e[0])[: NAMED - len(named)]
        parts = [self._named(i, group, s, usage_m, top) for i, group in named]
        if count > len(named):
            rest = risk - sum(group.probability for _, group in named)
            parts.append(f"{count - len(named)} more node(s) {percent(rest)}")
        return ", ".join(parts)

    def _named(self, i: int, group: Group, s: int, usage_m: int, top: int) -> str:
        """One named bad destination: where, its probability, why it is bad and its score. A landing back
        or elsewhere reads the same for every pod of the source's pool and that group: kept."""
        kind = self._kind(i, s, usage_m)
        key = None if kind == _NO_ROOM else (i, kind, self._pool[s], group.total, group.probability, top)
        text = None if key is None else self._described.get(key)
        if text is None:
            where, detail = self._describe(i, kind, s, usage_m)
            text = f"{where} {_group_pct(group.probability)} ({detail}score {group.total}/{top})"
            if key is not None:
                if len(self._described) >= 65536:
                    self._described.clear()
                self._described[key] = text
        return text

    def _describe(self, i: int, kind: int, s: int, usage_m: int) -> tuple[str, str]:
        """Where a bad landing goes, and the detail that makes it bad (empty or ending in "; ")."""
        node = self._model.names[i]
        if kind == _BACK:
            return f"back on {node}", ""
        if kind == _NO_ROOM:
            return f"on {node}", f"{cores_text(self._room[i])} of real-usage room, not {cores_text(usage_m)}; "
        if self._same_pool and self._pool[i] != self._pool[s]:
            return f"on {node}", f"pool {self._pool_names[self._pool[i]]}, not a destination of this pool; "
        return f"on {self._what[i]} {node}", ""


@functools.lru_cache(maxsize=4096)
def _group_pct(p: float) -> str:
    """:func:`_pct` of a group's probability (the same few floats for every pod of a node)."""
    return percent(p)


def percent(p: float) -> str:
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
