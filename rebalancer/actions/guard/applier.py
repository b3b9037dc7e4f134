"""Makes the landing guard's changes on the nodes, through an injected node reader/writer (no client here).

Each change is made on the node as read just before the write (``apply_change``), with the read's
resourceVersion as a precondition (the adapter's patch): a conflict re-reads and redoes it, a node that
no longer carries the mark the change was decided on is left alone. A client dry run records what would
be done and calls nothing; a server dry run sends each patch with dryRun=All (the API server validates
it, stores nothing). ``may_act`` (the service: still the leader) is asked before each write. Unlike the
evictor and the steerer, which stop the cycle, a change that fails or is not allowed is reported and the
next one is tried. The steps every actuator shares are in :mod:`rebalancer.actions.actuation`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol, TypeVar

from rebalancer.actions.actuation import Actuation, DryRun, Report, Result
from rebalancer.actions.guard.decide import Action, Change, GuardDecision, Note, apply_change
from rebalancer.domain.errors import PatchError, RebalancerError
from rebalancer.domain.guard_marks import GUARD_KEY, MarkReason, NodeEdit
from rebalancer.domain.model import Taint
from rebalancer.domain.times import rfc3339

log = logging.getLogger(__name__)
MAX_ATTEMPTS = 4  # a node's resourceVersion moves with its status updates: a conflict is retried on a fresh read


class GuardOutcome(StrEnum):
    APPLIED = "applied"
    DRY_RUN = "dry-run"  # --dry-run client: no call that changes anything
    SERVER_DRY_RUN = "server-dry-run"  # --dry-run server: the patch sent with dryRun=All, the server checked it
    SKIPPED = "skipped"  # the node changed since (the decision no longer applies), or not the leader any more
    GONE = "gone"  # the node no longer exists
    FAILED = "failed"  # refused (RBAC, validation), or the API server did not answer


@dataclass(frozen=True, slots=True)
class GuardResult(Result[Change, GuardOutcome]):
    @property
    def change(self) -> Change:
        return self.subject


@dataclass(frozen=True, slots=True)
class GuardReport(Report[GuardResult]):
    notes: tuple[Note, ...] = ()

    def summary(self) -> str:
        """``set n1 (hot), clear n2 (cooled): applied`` per outcome, for logs and run --once."""
        by_outcome: dict[str, list[str]] = {}
        for r in self.results:
            c = r.change
            by_outcome.setdefault(r.outcome.value, []).append(f"{c.action.value} {c.node} ({c.reason})")
        return "; ".join(f"{', '.join(items)}: {outcome}" for outcome, items in by_outcome.items()) or "no change"


class LiveMarks(Protocol):
    @property
    def uid(self) -> str: ...

    @property
    def taints(self) -> tuple[Taint, ...]: ...

    @property
    def annotation(self) -> str | None: ...


_N = TypeVar("_N", bound=LiveMarks)


class NodeMarks(Protocol[_N]):
    def read(self, name: str) -> _N | None: ...

    def write(self, node: _N, edit: NodeEdit, *, dry_run: bool = False) -> _N | None: ...


class NodeEvents(Protocol):
    def record_node_event(self, node: str, uid: str, *, reason: str, message: str, action: str) -> bool: ...


EVENT_REASONS = {Action.SET: "LandingGuardMarked", Action.CLEAR: "LandingGuardCleared"}  # a renewal: no Event


def event_message(change: Change) -> str:
    if change.mark is None:
        return f"rebalancer removed its {GUARD_KEY} taint ({change.reason})"
    mark = change.mark
    why = "pods were evicted from it" if mark.reason is MarkReason.RELIEVED else "it is hot"
    return (f"rebalancer set the taint {GUARD_KEY}={mark.reason.value}:{mark.effect} until {rfc3339(mark.expires)}: "
            f"{why}; replacements should land elsewhere")  # fmt: skip


class GuardApplier:
    def __init__(
        self,
        marks: NodeMarks[_N],
        *,
        dry_run: DryRun,
        may_act: Callable[[], bool] = lambda: True,
        events: NodeEvents | None = None,
    ) -> None:
        self._events = events
        self._read: Callable[[str], LiveMarks | None] = marks.read
        self._write: Callable[..., LiveMarks | None] = marks.write
        self._act = Actuation(dry_run, may_act)

    def apply(self, decision: GuardDecision) -> GuardReport:
        results = []
        # pools where a clear was not made (failed, or the node changed since and may still carry the key): a
        # new mark there could pass the cap
        uncleared: set[str] = set()
        for change in decision.changes:
            if self._act.calls_nothing:
                results.append(GuardResult(change, GuardOutcome.DRY_RUN))
                continue
            if not self._act.may_act():
                results.append(GuardResult(change, GuardOutcome.SKIPPED, "not the leader any more"))
                continue
            if change.action is Action.SET and change.pool in uncleared:
                results.append(GuardResult(change, GuardOutcome.SKIPPED, "a clear in the pool was not made: the cap"))
                continue
            result = self._one(change)
            if change.action is Action.CLEAR and result.outcome in (GuardOutcome.FAILED, GuardOutcome.SKIPPED):
                uncleared.add(change.pool)
            results.append(result)
        for r in results:
            level = logging.WARNING if r.outcome is GuardOutcome.FAILED else logging.INFO
            log.log(level, "landing guard: %s %s (%s) in pool %s: %s%s", r.change.action.value, r.change.node,
                    r.change.reason, r.change.pool, r.outcome.value, f": {r.detail}" if r.detail else "")  # fmt: skip
        return GuardReport(tuple(results), notes=decision.notes)

    def _event(self, change: Change, uid: str) -> str:
        """An Event on the node for a mark set or cleared; the detail says when it could not be recorded."""
        reason = EVENT_REASONS.get(change.action)
        if self._events is None or reason is None:
            return ""
        if self._events.record_node_event(change.node, uid, reason=reason, message=event_message(change),
                                          action=change.action.value.capitalize()):  # fmt: skip
            return ""
        return "no Event recorded"

    def _one(self, change: Change) -> GuardResult:
        detail = ""
        for attempt in range(MAX_ATTEMPTS):
            if attempt and not self._act.may_act():  # asked before each write, a redone one too
                return GuardResult(change, GuardOutcome.SKIPPED, "not the leader any more")
            try:
                node = self._read(change.node)
                if node is None:
                    return GuardResult(change, GuardOutcome.GONE)
                edit = apply_change(change, node.taints, node.annotation)
                if edit is None:
                    return GuardResult(change, GuardOutcome.SKIPPED, "the node's mark changed since it was read")
                server_dry_run = self._act.server_dry_run
                if self._write(node, edit, dry_run=server_dry_run) is None:
                    return GuardResult(change, GuardOutcome.GONE)
                if server_dry_run:
                    return GuardResult(change, GuardOutcome.SERVER_DRY_RUN)
                return GuardResult(change, GuardOutcome.APPLIED, self._event(change, node.uid))
            except PatchError as exc:
                if exc.status != 409:
                    return GuardResult(change, GuardOutcome.FAILED, str(exc))
                detail = str(exc)  # modified since read: read again
            except RebalancerError as exc:
                return GuardResult(change, GuardOutcome.FAILED, f"{type(exc).__name__}: {exc}")
        return GuardResult(change, GuardOutcome.FAILED, f"still conflicting after {MAX_ATTEMPTS} attempts: {detail}")
