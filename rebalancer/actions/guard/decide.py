"""The landing guard's decisions (pure): which nodes get, keep, renew or lose their mark this cycle.

Inputs are plain values so that serve, run --once and the simulator call the same code:

- ``GuardedNode``: a node's pool, its class this cycle (``NodeClass``: hot, cold, normal, unknown),
  whether pods were evicted from it this cycle (``relieved``), its usage in percent and how far its
  most-over resource is above its target (priority under the cap), its taints and the value of its ``rebalancer.io/landing-guard`` annotation. ``guarded_nodes``
  builds those the rules can change or note from a snapshot, a plan and the relieved nodes, ``pool_sizes``
  the pools' sizes the caps are fractions of.
- ``decide(nodes, settings, owner, now, sizes)`` -> ``GuardDecision``: the ``Change`` to make per node (set,
  refresh, clear, each with a reason; the clears first, so that making them in order never puts more
  marks on a pool than its cap) and a ``Note`` for each node left alone on purpose.
- ``release(nodes, owner)``: the changes that clear the marks ``owner`` wrote (graceful shutdown).
- ``apply_change(change, taints, annotation)``: the node's taints and annotation after the change, made
  on the node as read just before the patch; None when that node no longer carries the mark the change
  was decided on (someone changed it in between: nothing is written, the next cycle decides again).

Rules, per node of a pool with a guard (``landingGuard.pools``):

- hot (known usage above the strategy's target, in any resource its thresholds name: CPU, memory, pod
  count) or relieved: marked. A hot mark expires ``markTtl``
  after the last cycle that saw the node hot (renewed once half of it has passed, not at every cycle);
  a relieved mark ``holdAfterRelief`` after the last eviction.
- a hot mark on a node known to be no longer hot (and not relieved): cleared (``cooled``).
- a mark set to last longer than the policy now lets a mark of its reason last (``markTtl`` or
  ``holdAfterRelief`` shortened since): its expiry is cut to that, from now (a hot mark's to ``markTtl``, a
  relieved mark's to the longer of the two, which a relieved node seen hot carries).
- a relieved mark: kept until its expiry, even on a cool node: the replacements are scheduled in the
  minutes after an eviction, and the usage window lags behind.
- unknown usage (no data, stale data, a failed usage source): no mark is set, and none is cleared as
  cooled: missing data says nothing about the node's load, so it is kept until its expiry, when it goes
  whatever the node's state (``expired``). A mark nobody renews always ends at its expiry: that bounds
  how long a mark can outlive a crashed instance.
- at most ``maxMarkedFraction`` of the pool's nodes that take pods (neither cordoned nor NotReady), rounded
  down, and never all of them, carry the key at once. Taints of the key the project did not set count too,
  and so do marks on nodes that take no pods, which rank last (a mark there steers nothing). Then relieved
  nodes come first (ahead of the evictions: every node the plan may relieve, ``relievable``, so that which
  of them the cap leaves unmarked does not depend on the plan, and the landing prediction, made on this
  decision before planning, sees the marks the guard sets), then the marks already there (no swapping),
  then the hottest (the most over a target, relative to it). New marks beyond the cap are not set
  (``capped`` note), and existing marks beyond it (the fraction was lowered, the pool shrank, a node was
  cordoned) are cleared (``over-cap``).
- a pool without a guard (never had one, or the policy dropped it) keeps no mark (``guard-off``).
- any instance renews and clears the project's marks, whoever wrote them (only the leader acts):
  after a crash, failover or a CronJob's next run, the hold of a relieved node is honoured and the
  owner becomes the instance that renews it. ``release`` only clears the releasing owner's own marks,
  so a stopping instance never removes what a new leader took over.
- a taint of the key without the annotation, a second taint of the key, an unreadable annotation: foreign,
  never changed, and no mark of the project's is added beside it (``foreign`` note).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from rebalancer.domain.guard_marks import (
    GUARD_KEY,
    Foreign,
    Mark,
    MarkReason,
    MarkState,
    NodeEdit,
    Orphan,
    carries_guard_key,
    read_mark,
    with_mark,
)
from rebalancer.domain.model import Node, Taint
from rebalancer.domain.settings.guard import LandingGuardSettings, PoolGuardSettings
from rebalancer.planning.plan import EvictionPlan, NodeClass
from rebalancer.planning.snapshot import ClusterSnapshot
from strategies.resources import relative_excess


class Action(StrEnum):
    SET = "set"
    REFRESH = "refresh"
    CLEAR = "clear"


class ClearReason(StrEnum):
    COOLED = "cooled"  # a hot mark, the node known to be below target now
    EXPIRED = "expired"  # nobody renewed it in time (end of the hold after relief, or of markTtl)
    GUARD_OFF = "guard-off"  # the node's pool has no guard (any more)
    OVER_CAP = "over-cap"  # more marks in the pool than maxMarkedFraction allows
    TAINT_REMOVED = "taint-removed"  # the annotation stayed, the taint was removed by someone: the annotation goes
    RELEASED = "released"  # the owner stops (graceful shutdown)


@dataclass(frozen=True, slots=True)
class GuardedNode:
    name: str
    pool: str
    node_class: NodeClass
    relieved: bool
    taints: tuple[Taint, ...] = ()
    annotation: str | None = None  # the value of the rebalancer.io/landing-guard annotation
    usage_pct: float | None = None
    # how far the node's most-over resource (CPU, memory, pods) is above its target, relative to it (0.25: a
    # quarter above); None: not known, the usage alone ranks it
    over_target: float | None = None
    relievable: bool = False  # the plan may relieve it (a hot node, ahead of the evictions): ranks as relieved
    takes_pods: bool = True  # neither cordoned nor NotReady: a replacement could land there

    @property
    def state(self) -> MarkState:
        return read_mark(self.taints, self.annotation)


@dataclass(frozen=True, slots=True)
class Change:
    node: str
    pool: str
    action: Action
    reason: str  # MarkReason for set and refresh, ClearReason for clear
    mark: Mark | None  # the mark after the change (None: cleared)
    previous: Mark | None  # the mark the change was decided on (None: no mark)
    orphan: bool = False  # ``previous`` was only the annotation, without its taint


@dataclass(frozen=True, slots=True)
class Note:
    """A node of a guarded pool left as it is on purpose, and why (shown by plan output and logs)."""

    node: str
    pool: str
    why: str


@dataclass(frozen=True, slots=True)
class GuardDecision:
    changes: tuple[Change, ...] = ()
    notes: tuple[Note, ...] = ()


def guarded_nodes(
    snapshot: ClusterSnapshot,
    plan: EvictionPlan,
    relieved: Collection[str],
    *,
    every_node: bool = False,
    relievable: Collection[str] = (),
) -> tuple[GuardedNode, ...]:
    """The snapshot's nodes as the guard sees them. A node is hot when a strategy classified it hot;
    unknown when no strategy classified it, one found its usage unknown, or the plan is blocked (the
    usage source failed); cool otherwise.

    Only the nodes the rules can change or note: hot, relieved, or carrying the key or its annotation
    (``every_node``: all of them). Any other node is left as it is whatever its class, and only counts
    toward its pool's size (:func:`pool_sizes`): a cycle's guard pass so costs what its hot and marked
    nodes cost, not the cluster."""
    classes: dict[str, list[NodeClass]] = {}
    usage: dict[str, float] = {}
    over: dict[str, float] = {}
    for result in plan.results:
        for d in result.node_decisions:
            classes.setdefault(d.node, []).append(d.node_class)
            if d.usage_pct is not None:
                usage[d.node] = max(usage.get(d.node, d.usage_pct), d.usage_pct)
                if d.high_pct is not None:
                    excess = relative_excess(d)
                    over[d.node] = max(over.get(d.node, excess), excess)
    out = []
    for name, node in snapshot.nodes.items():
        seen = classes.get(name, [])
        annotation = node.annotations.get(GUARD_KEY)
        if not (every_node or NodeClass.HOT in seen or name in relieved or carries_guard_key(node)):
            continue
        if plan.blocked or not seen:
            node_class = NodeClass.UNKNOWN
        elif NodeClass.HOT in seen:
            node_class = NodeClass.HOT
        elif NodeClass.UNKNOWN in seen:
            node_class = NodeClass.UNKNOWN
        else:
            node_class = NodeClass.NORMAL if NodeClass.NORMAL in seen else NodeClass.COLD
        out.append(
            GuardedNode(
                name,
                snapshot.pool_of[name],
                node_class,
                name in relieved,
                node.taints,
                annotation,
                usage.get(name),
                over.get(name),
                name in relievable,
                takes_pods(node),
            )
        )
    return tuple(out)


MARK_CLOCK_SKEW_SECONDS = 60.0


def takes_pods(node: Node) -> bool:
    """A replacement could land on ``node``: it is neither cordoned nor NotReady."""
    return node.ready and not node.unschedulable


def pool_sizes(snapshot: ClusterSnapshot) -> dict[str, int]:
    """How many nodes of each pool of the snapshot take pods (what a pool's cap is a fraction of): a cordoned
    or NotReady node takes no replacement, so marking every other node would leave them nowhere to go."""
    return dict(Counter(snapshot.pool_of[name] for name, node in snapshot.nodes.items() if takes_pods(node)))


def pool_cap(settings: PoolGuardSettings, pool_size: int) -> int:
    """How many of a pool's nodes may carry the key at once: the fraction, rounded down, never all."""
    return max(0, min(math.floor(settings.max_marked_fraction * pool_size + 1e-9), pool_size - 1))


def decide(
    nodes: Iterable[GuardedNode],
    settings: LandingGuardSettings,
    owner: str,
    now: float,
    sizes: Mapping[str, int] | None = None,
) -> GuardDecision:
    """The changes that bring every node's mark in line with the rules above. ``nodes``: every node of
    the cluster, or at least every one the rules can change or note (:func:`guarded_nodes`); ``sizes``:
    each pool's number of nodes that take pods, which its cap is a fraction of (None: the nodes given are the
    whole pools)."""
    by_pool: dict[str, list[GuardedNode]] = {}
    for node in nodes:
        by_pool.setdefault(node.pool, []).append(node)
    changes: list[Change] = []
    notes: list[Note] = []
    for pool, members in sorted(by_pool.items()):
        guard = settings.for_pool(pool)
        if guard is None:
            changes.extend(_clear(n, ClearReason.GUARD_OFF) for n in members if isinstance(n.state, Mark | Orphan))
            continue
        open_members = sum(1 for n in members if n.takes_pods)
        size = open_members if sizes is None else max(sizes.get(pool, 0), open_members)
        _decide_pool(members, size, guard, owner, now, changes, notes)
    changes.sort(key=lambda c: c.action is not Action.CLEAR)  # clears first: no moment above the cap
    return GuardDecision(tuple(changes), tuple(notes))


def release(nodes: Iterable[GuardedNode], owner: str) -> GuardDecision:
    """Clear every mark ``owner`` wrote (graceful shutdown); marks another instance renewed since stay."""
    changes = []
    for node in nodes:
        state = node.state
        mark = state.mark if isinstance(state, Orphan) else state
        if isinstance(mark, Mark) and mark.owner == owner:
            changes.append(_clear(node, ClearReason.RELEASED))
    return GuardDecision(tuple(changes))


def apply_change(change: Change, taints: tuple[Taint, ...], annotation: str | None) -> NodeEdit | None:
    """``change`` made on a node as it is now; None when the node no longer carries the state the change
    was decided on (nothing must be written then). Taints other than the mark's are kept as they are."""
    state = read_mark(taints, annotation)
    if isinstance(state, Foreign):
        return None
    current = state.mark if isinstance(state, Orphan) else state
    if current != change.previous or isinstance(state, Orphan) != change.orphan:
        return None
    return with_mark(taints, change.mark)


# -- one pool ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Want:
    node: GuardedNode
    mark: Mark
    previous: Mark | None
    orphan: bool


def _decide_pool(
    members: list[GuardedNode],
    size: int,
    guard: PoolGuardSettings,
    owner: str,
    now: float,
    changes: list[Change],
    notes: list[Note],
) -> None:
    wanted: list[_Want] = []
    foreign = 0
    for node in members:
        state = node.state
        if isinstance(state, Foreign):
            foreign += 1
            notes.append(Note(node.name, node.pool, f"foreign: {state.why}; left as it is"))
            continue
        previous = state.mark if isinstance(state, Orphan) else state
        mark = _wanted_mark(node, previous, guard, owner, now)
        if mark is not None:
            wanted.append(_Want(node, mark, previous, isinstance(state, Orphan)))
        elif isinstance(state, Orphan):
            changes.append(_clear(node, ClearReason.TAINT_REMOVED))
        elif state is not None:
            kept = _kept_or_cleared(node, state, guard, now, changes, notes)
            if kept is not None:
                wanted.append(_Want(node, kept, state, False))
    room = pool_cap(guard, size) - foreign
    wanted.sort(key=_priority)
    for index, want in enumerate(wanted):
        node, previous = want.node, want.previous
        if index >= room:
            if previous is None or want.orphan:
                notes.append(Note(node.name, node.pool, f"capped: {max(room, 0)} of {size} node(s) may be marked"))
                if want.orphan:
                    changes.append(_clear(node, ClearReason.TAINT_REMOVED))
            else:
                changes.append(_clear(node, ClearReason.OVER_CAP))
            continue
        if previous is None or want.orphan:
            changes.append(Change(node.name, node.pool, Action.SET, want.mark.reason, want.mark, previous, want.orphan))
        elif want.mark != previous:
            changes.append(Change(node.name, node.pool, Action.REFRESH, want.mark.reason, want.mark, previous))


def _wanted_mark(
    node: GuardedNode, previous: Mark | None, guard: PoolGuardSettings, owner: str, now: float
) -> Mark | None:
    """The mark a hot or relieved node should carry (the current one when it is still good enough)."""
    hot = node.node_class is NodeClass.HOT
    if not (hot or node.relieved):
        return None
    ttl, hold = guard.mark_ttl.total_seconds(), guard.hold_after_relief.total_seconds()
    expires = max(now + ttl if hot else now, now + hold if node.relieved else now)
    holding = previous is not None and previous.reason is MarkReason.RELIEVED and previous.expires > now
    reason = MarkReason.RELIEVED if node.relieved or holding else MarkReason.HOT
    if previous is not None and previous.expires > now:
        kept = _within_policy(previous, guard, now)
        expires = max(expires, kept)
        fresh_enough = kept - now >= ttl / 2
        if (
            not node.relieved
            and kept == previous.expires
            and fresh_enough
            and previous.effect == guard.effect
            and previous.owner == owner
            and previous.reason is reason
        ):
            return previous  # nothing to renew yet: no write
    return Mark(owner, guard.effect, reason, float(int(expires)))


def _kept_or_cleared(
    node: GuardedNode, mark: Mark, guard: PoolGuardSettings, now: float, changes: list[Change], notes: list[Note]
) -> Mark | None:
    """A mark on a node neither hot nor relieved: the mark it keeps (perhaps with the configured effect),
    or None when it is cleared (the change is appended)."""
    if now >= mark.expires:
        changes.append(_clear(node, ClearReason.EXPIRED))
        return None
    if node.node_class is NodeClass.UNKNOWN:
        notes.append(Note(node.name, node.pool, "usage unknown: the mark is kept until its expiry"))
    elif mark.reason is MarkReason.HOT:
        changes.append(_clear(node, ClearReason.COOLED))
        return None
    expires = _within_policy(mark, guard, now)
    if mark.effect != guard.effect or expires != mark.expires:
        return Mark(mark.owner, guard.effect, mark.reason, expires)
    return mark


def _within_policy(mark: Mark, guard: PoolGuardSettings, now: float) -> float:
    """``mark``'s expiry, cut to what the policy lets a mark of its reason last from now (``markTtl`` or
    ``holdAfterRelief`` shortened since it was written). A relieved mark lasts the longer of the two: a node
    seen hot during its hold (or hot when relieved) stretches it to ``markTtl``, and cutting that to the hold
    would rewrite it in every cycle. A mark up to :data:`MARK_CLOCK_SKEW_SECONDS` beyond that is left:
    another instance's clock may run ahead."""
    lasts = guard.mark_ttl
    if mark.reason is MarkReason.RELIEVED:
        lasts = max(lasts, guard.hold_after_relief)
    longest = now + lasts.total_seconds()
    return float(int(longest)) if mark.expires > longest + MARK_CLOCK_SKEW_SECONDS else mark.expires


def _priority(want: _Want) -> tuple[bool, int, int, float, float, str]:
    """Nodes that take pods before the others (cordoned, NotReady); then relieved (or, ahead of the evictions, about to be: any node the plan may relieve) before hot; then marks
    already there (no swap of two nodes' marks, two writes, each time
    their usage ranks change); then the hottest: the most over a target (a node far over its memory target
    before one barely over its CPU target), then the highest usage; then by name."""
    relieved = 0 if want.mark.reason is MarkReason.RELIEVED or want.node.relievable else 1
    new = 1 if want.previous is None or want.orphan else 0
    node = want.node
    over = math.inf if node.over_target is None else -node.over_target  # unknown: after every known one
    return (not node.takes_pods, relieved, new, over, -(node.usage_pct or 0.0), node.name)


def _clear(node: GuardedNode, reason: ClearReason) -> Change:
    state = node.state
    orphan = isinstance(state, Orphan)
    previous = state.mark if isinstance(state, Orphan) else state
    assert isinstance(previous, Mark)
    return Change(node.name, node.pool, Action.CLEAR, reason.value, None, previous, orphan)
