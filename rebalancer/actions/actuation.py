"""The steps every actuator shares; each actuator (the evictor, the steerer, the landing guard's applier)
keeps only its own rules between them.

- Dry runs: ``client`` calls nothing that changes anything; ``server`` sends each write with dryRun=All
  (the API server checks it, stores nothing) and records no Event.
- The object is re-read just before acting and judged as it is then, not as planned; the write is
  conditional on that read (a resourceVersion or uid precondition, sent by the adapter) and is made only
  while the service may still act (the leader).
- An Event on the object changed; one that cannot be recorded is a problem of the run, not a failure.
- One result per planned change and one report per run. A run stopped early (:class:`Abort`) reports
  every change it did not reach as not attempted; a change sent without a clear answer (:class:`Unanswered`)
  is the actuator's to report as such: it may have happened.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar

from rebalancer.domain.errors import KubeForbidden, KubeUnavailable

S = TypeVar("S")  # what was planned: an eviction, a cost patch, a guard change
OutcomeT = TypeVar("OutcomeT", bound=StrEnum)  # the actuator's outcomes (their values are metrics labels)
R = TypeVar("R", bound="Result[Any, Any]")
T = TypeVar("T")


class DryRun(StrEnum):
    OFF = "off"
    CLIENT = "client"  # plan and record; no call that changes anything (limiter state is read, not written)
    SERVER = "server"  # writes sent with dryRun=All: the server checks them (budgets included), nothing changes


class Abort(Exception):
    """Stop this run: nothing more is attempted (the message says why)."""


class Unanswered(Abort):
    """Stop this run: a write was sent and got no clear answer, so it may have taken effect."""


@dataclass(frozen=True, slots=True)
class Result(Generic[S, OutcomeT]):
    """What became of one planned change."""

    subject: S
    outcome: OutcomeT
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Report(Generic[R]):
    """One run of an actuator."""

    results: tuple[R, ...] = ()
    problems: tuple[str, ...] = ()  # non-fatal: Events not recorded, state not saved
    aborted: str | None = None  # the run stopped early, and why

    def count(self, outcome: StrEnum) -> int:
        return sum(1 for r in self.results if r.outcome is outcome)


@dataclass(frozen=True, slots=True)
class Actuation:
    """How an actuator may act in this run: its dry-run mode and whether it is still allowed to."""

    dry_run: DryRun
    may_act: Callable[[], bool]

    @property
    def calls_nothing(self) -> bool:
        return self.dry_run is DryRun.CLIENT

    @property
    def server_dry_run(self) -> bool:
        return self.dry_run is DryRun.SERVER

    def reread(self, key: str, read: Callable[[], T]) -> T:
        """The object as it is just before acting; an API server that does not answer stops the run."""
        try:
            return read()
        except KubeUnavailable as exc:  # KubeForbidden included: the message names what to grant
            raise Abort(f"re-reading {key} failed: {exc}") from exc

    def write(self, key: str, what: str, send: Callable[[bool], T]) -> T:
        """``send(server_dry_run)`` while still allowed to act. A refusal by RBAC or no clear answer
        (:class:`Unanswered`) stops the run; any other error is the actuator's to judge."""
        if not self.may_act():
            raise Abort("no longer allowed to act (leadership lost)")
        try:
            return send(self.server_dry_run)
        except KubeForbidden as exc:
            raise Abort(str(exc)) from exc
        except KubeUnavailable as exc:
            raise Unanswered(f"the {what} of {key} got no clear answer ({exc}); stopping this cycle") from exc


def until_aborted(
    planned: Sequence[S], results: list[R], act: Callable[[], None], not_attempted: Callable[[S, str], R]
) -> str | None:
    """Run ``act``, which appends one result per planned change, in order. If it stops early, every
    change it did not reach gets ``not_attempted(change, why)``; returns why it stopped (None: it did not)."""
    try:
        act()
    except Abort as stop:
        why = str(stop)
        results.extend(not_attempted(p, f"not attempted: {why}") for p in planned[len(results) :])
        return why
    return None


def note_event(recorded: bool, key: str, problems: list[str]) -> None:
    """An Event that could not be recorded is a problem of the run; the change itself stands."""
    if not recorded:
        problems.append(f"no Event recorded on {key}")
