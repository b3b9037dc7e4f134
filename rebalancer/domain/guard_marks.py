"""What a landing-guard mark is on a node, read from and written to its taints and one annotation (pure).

A mark is two things set together by one patch: a taint ``rebalancer.io/landing-guard=<reason>:<effect>``
and the annotation ``rebalancer.io/landing-guard`` whose JSON value names the owner (the instance that
last wrote it), the effect, the reason and the expiry (RFC 3339, UTC). The taint is what the scheduler
reads; the annotation is what proves the taint is the project's own.

The key is the project's, but a taint with it is only treated as a mark when the annotation is there and
names its value (the reason) and effect: anything else (a taint of the key set by hand or by another
tool without the annotation, a second taint of the key, one whose value the annotation does not name,
an unreadable annotation) is *foreign* and never changed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from rebalancer.domain.model import Node, Taint
from rebalancer.domain.times import RFC3339, rfc3339

GUARD_KEY = "rebalancer.io/landing-guard"
"""The taint key and the annotation key of a mark."""

EFFECTS = ("PreferNoSchedule", "NoSchedule")


class MarkReason(StrEnum):
    HOT = "hot"  # the node is hot: kept while it is, cleared when it cools
    RELIEVED = "relieved"  # pods were evicted from it: kept until its expiry (the hold after relief)


@dataclass(frozen=True, slots=True)
class Mark:
    owner: str
    effect: str
    reason: MarkReason
    expires: float  # epoch seconds

    def taint(self) -> Taint:
        return Taint(key=GUARD_KEY, value=self.reason.value, effect=self.effect)

    def annotation(self) -> str:
        return json.dumps(
            {"owner": self.owner, "effect": self.effect, "reason": self.reason.value, "expires": rfc3339(self.expires)},
            separators=(",", ":"),
        )


@dataclass(frozen=True, slots=True)
class Orphan:
    """The annotation without its taint (someone removed the taint): only the annotation is cleared."""

    mark: Mark


@dataclass(frozen=True, slots=True)
class Foreign:
    """Something with the project's key that the project did not set, or cannot read: never touched."""

    why: str


MarkState = Mark | Orphan | Foreign | None


def parse_annotation(text: str) -> Mark | None:
    """The mark an annotation value describes; None when it is not one the project wrote."""
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or set(data) != {"owner", "effect", "reason", "expires"}:
            return None
        owner, effect, reason, expires = data["owner"], data["effect"], data["reason"], data["expires"]
        if not (isinstance(owner, str) and owner and effect in EFFECTS and isinstance(expires, str)):
            return None
        when = datetime.strptime(expires, RFC3339).replace(tzinfo=UTC)
        return Mark(owner, effect, MarkReason(reason), when.timestamp())
    except (ValueError, TypeError):
        return None


def carries_guard_key(node: Node) -> bool:
    """The node carries the mark's annotation or a taint of its key (the project's or not)."""
    return GUARD_KEY in node.annotations or any(t.key == GUARD_KEY for t in node.taints)


def read_mark(taints: tuple[Taint, ...], annotation: str | None) -> MarkState:
    """The mark a node carries, given its taints and the value of the ``GUARD_KEY`` annotation."""
    keyed = [t for t in taints if t.key == GUARD_KEY]
    if annotation is None:
        return Foreign(f"a taint {GUARD_KEY} without the owner annotation") if keyed else None
    mark = parse_annotation(annotation)
    if mark is None:
        return Foreign(f"the annotation {GUARD_KEY} is not one rebalancer wrote")
    own = [t for t in keyed if t == mark.taint()]
    if len(own) != len(keyed):
        return Foreign(f"another taint {GUARD_KEY} than the annotation's {mark.reason.value}:{mark.effect}")
    return Orphan(mark) if not own else mark


@dataclass(frozen=True, slots=True)
class NodeEdit:
    """A node's taints and guard annotation after a change (None: the annotation removed)."""

    taints: tuple[Taint, ...]
    annotation: str | None


def with_mark(taints: tuple[Taint, ...], mark: Mark | None) -> NodeEdit:
    """``taints`` without any taint of the key, plus ``mark``'s taint (None: none); every other taint kept
    in place. Only call it on a node whose state is a Mark, an Orphan or None (never Foreign)."""
    kept = tuple(t for t in taints if t.key != GUARD_KEY)
    if mark is None:
        return NodeEdit(kept, None)
    return NodeEdit((*kept, mark.taint()), mark.annotation())
