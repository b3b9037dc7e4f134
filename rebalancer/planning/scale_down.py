"""The ReplicaSet controller's choice of pods to delete on a scale-down, as a pure function.

Implemented from the documented rules of the controller (``ActivePodsWithRanks`` in
k8s.io/kubernetes pkg/controller, with PodDeletionCost on since 1.22 and LogarithmicScaleDown on
since 1.22, GA in 1.31). Of the active pods of the ReplicaSet, the one deleted first is, rule by rule:

1. not yet assigned to a node (before an assigned one);
2. in an earlier phase: Pending, then Unknown, then Running (any other phase counts as Pending);
3. not ready (before a ready one);
4. of the lower ``controller.kubernetes.io/pod-deletion-cost`` (absent or invalid: 0);
5. doubled up: on a node with more active pods of the same workload (all its ReplicaSets count);
6. both ready: ready for less time; the times compare in buckets of floor(log2(nanoseconds since)),
   and equal buckets go by UID (the smaller first); a pod without a ready time goes first;
7. more container restarts (the largest count of any of its containers), then, when equal, more sidecar
   restarts (the largest count of its init containers with ``restartPolicy: Always``, Kubernetes 1.28+);
8. newer: creation times compare in the same logarithmic buckets, equal buckets by UID; a pod
   without a creation time goes first.

Two pods equal on every rule are in no defined order (the controller uses an unstable sort): they are
kept by name here, and the reason says so.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import cmp_to_key

from rebalancer.domain.model import parse_deletion_cost

_PHASE_ORDER = {"Pending": 0, "Unknown": 1, "Running": 2}  # a phase not listed counts as 0, as in a Go map
_INACTIVE_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True, slots=True)
class RankedPod:
    """What the controller looks at in a pod. Times are epoch seconds; None is Go's zero time."""

    name: str
    uid: str
    node_name: str  # "" when not assigned
    phase: str
    ready: bool
    ready_since: float | None  # lastTransitionTime of the Ready condition, when ready
    deletion_cost_text: str | None  # the annotation's raw value
    max_restarts: int  # the largest restartCount of its containers
    created: float | None
    terminating: bool = False
    max_sidecar_restarts: int = 0  # the largest restartCount of its sidecars (init containers restartPolicy Always)

    @property
    def active(self) -> bool:
        return self.phase not in _INACTIVE_PHASES and not self.terminating

    @property
    def deletion_cost(self) -> int:
        return parse_deletion_cost(self.deletion_cost_text)[0]


class Rule(StrEnum):
    UNASSIGNED = "unassigned before assigned"
    PHASE = "Pending < Unknown < Running"
    NOT_READY = "not ready before ready"
    DELETION_COST = "lower pod-deletion-cost first"
    DOUBLED_UP = "more pods of the workload on its node first"
    READY_TIME = "ready for less time first (log2 buckets)"
    READY_TIME_UID = "same ready-time bucket: smaller UID first"
    RESTARTS = "more container restarts first"
    SIDECAR_RESTARTS = "same container restarts: more sidecar restarts first"
    CREATED = "newer first (log2 buckets)"
    CREATED_UID = "same creation-time bucket: smaller UID first"
    TIE = "equal on every rule: the controller's order is undefined (kept by name here)"


@dataclass(frozen=True, slots=True)
class Ranked:
    """One pod in deletion order: ``rank`` 1 goes first; ``reason`` is why it goes before the next pod."""

    rank: int
    pod: RankedPod
    pods_on_node: int  # active pods of the workload on its node (rule 5)
    rule: Rule | None  # None for the last pod
    reason: str


def pods_per_node(related: Iterable[RankedPod]) -> dict[str, int]:
    """Active pods of the workload (every ReplicaSet of it) per node name, as the controller counts them."""
    counts: dict[str, int] = {}
    for pod in related:
        if pod.active:
            counts[pod.node_name] = counts.get(pod.node_name, 0) + 1
    return counts


def _nanos(seconds: float) -> int:
    return round(seconds * 1e9)


def log_bucket(at: float, now: float) -> int:
    """floor(log2(nanoseconds from ``at`` to ``now``)); -1 when ``at`` is not before ``now``."""
    elapsed = _nanos(now) - _nanos(at)
    return int(math.log2(float(elapsed))) if elapsed > 0 else -1


def _by_time(a: float | None, b: float | None, a_uid: str, b_uid: str, now: float | None) -> tuple[int, bool]:
    """(-1: a first, 1: b first, 0: undecided; whether the UID decided). Zero times go first; a later time
    goes first: without ``now`` exactly, with it by logarithmic bucket, then by UID."""
    if a == b:
        return 0, False
    if a is None or b is None or now is None:
        if a is None or b is None:
            return (-1 if a is None else 1), False
        return (-1 if _nanos(a) > _nanos(b) else 1) if _nanos(a) != _nanos(b) else 0, False
    diff = log_bucket(a, now) - log_bucket(b, now)
    if diff == 0:
        if a_uid == b_uid:
            return 0, True
        return (-1 if a_uid < b_uid else 1), True
    return (-1 if diff < 0 else 1), False


def compare(a: RankedPod, b: RankedPod, on_node: dict[str, int], now: float | None) -> tuple[int, Rule]:
    """-1 when the controller deletes ``a`` before ``b``, 1 when after; 0 (with Rule.TIE) when undecided."""
    if a.node_name != b.node_name and (not a.node_name or not b.node_name):
        return (-1 if not a.node_name else 1), Rule.UNASSIGNED
    pa, pb = _PHASE_ORDER.get(a.phase, 0), _PHASE_ORDER.get(b.phase, 0)
    if pa != pb:
        return (-1 if pa < pb else 1), Rule.PHASE
    if a.ready != b.ready:
        return (-1 if not a.ready else 1), Rule.NOT_READY
    ca, cb = a.deletion_cost, b.deletion_cost
    if ca != cb:
        return (-1 if ca < cb else 1), Rule.DELETION_COST
    ra, rb = on_node.get(a.node_name, 0), on_node.get(b.node_name, 0)
    if ra != rb:
        return (-1 if ra > rb else 1), Rule.DOUBLED_UP
    if a.ready and b.ready:
        order, by_uid = _by_time(a.ready_since, b.ready_since, a.uid, b.uid, now)
        if order or by_uid:
            return order, Rule.READY_TIME_UID if by_uid else Rule.READY_TIME
    if a.max_restarts != b.max_restarts:
        return (-1 if a.max_restarts > b.max_restarts else 1), Rule.RESTARTS
    if a.max_sidecar_restarts != b.max_sidecar_restarts:
        return (-1 if a.max_sidecar_restarts > b.max_sidecar_restarts else 1), Rule.SIDECAR_RESTARTS
    order, by_uid = _by_time(a.created, b.created, a.uid, b.uid, now)
    if order or by_uid:
        return order, Rule.CREATED_UID if by_uid else Rule.CREATED
    return 0, Rule.TIE


def deletion_order(
    pods: Sequence[RankedPod], related: Sequence[RankedPod] | None = None, now: float | None = None
) -> list[Ranked]:
    """The active ``pods`` of one ReplicaSet, first deleted first, each with the rule that put it before the
    next. ``related``: every pod of the workload (its other ReplicaSets' too) for rule 5 (default ``pods``).
    ``now``: the controller's clock for the logarithmic buckets (None: plain time comparison, as with
    LogarithmicScaleDown off)."""
    active = [p for p in pods if p.active]
    on_node = pods_per_node(related if related is not None else pods)

    def order(a: RankedPod, b: RankedPod) -> int:
        result, _ = compare(a, b, on_node, now)
        return result if result else (-1 if a.name < b.name else (1 if a.name > b.name else 0))

    ordered = sorted(active, key=cmp_to_key(order))
    out = []
    for index, pod in enumerate(ordered):
        count = on_node.get(pod.node_name, 0)
        if index + 1 == len(ordered):
            out.append(Ranked(index + 1, pod, count, None, "last"))
            continue
        following = ordered[index + 1]
        _, rule = compare(pod, following, on_node, now)
        out.append(
            Ranked(index + 1, pod, count, rule, f"before {following.name}: {_explain(rule, pod, following, on_node)}")
        )
    return out


def to_delete(
    pods: Sequence[RankedPod], count: int, related: Sequence[RankedPod] | None = None, now: float | None = None
) -> list[RankedPod]:
    """The ``count`` pods a scale-down by ``count`` deletes."""
    return [r.pod for r in deletion_order(pods, related, now)[: max(count, 0)]]


def _explain(rule: Rule, a: RankedPod, b: RankedPod, on_node: dict[str, int]) -> str:
    if rule is Rule.UNASSIGNED:
        return "not assigned to a node"
    if rule is Rule.PHASE:
        return f"phase {a.phase} before {b.phase}"
    if rule is Rule.NOT_READY:
        return "not ready"
    if rule is Rule.DELETION_COST:
        return f"pod-deletion-cost {_cost_text(a)} < {_cost_text(b)}"
    if rule is Rule.DOUBLED_UP:
        return f"{on_node.get(a.node_name, 0)} pods of the workload on {a.node_name} > {on_node.get(b.node_name, 0)}"
    if rule is Rule.RESTARTS:
        return f"{a.max_restarts} container restarts > {b.max_restarts}"
    if rule is Rule.SIDECAR_RESTARTS:
        return f"{a.max_sidecar_restarts} sidecar restarts > {b.max_sidecar_restarts}"
    return rule.value


def _cost_text(pod: RankedPod) -> str:
    value, valid = parse_deletion_cost(pod.deletion_cost_text)
    if pod.deletion_cost_text is None:
        return "0 (unset)"
    return str(value) if valid else f"0 (invalid {pod.deletion_cost_text!r})"
