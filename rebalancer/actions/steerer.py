"""The steerer: the only component that writes pod-deletion-cost, and where its safety rules hold.

For each planned cost patch, in order: the per-cycle cap of its strategy; a re-read of the pod just
before writing (gone, replaced by a pod of another uid, opted out now, its cost set by someone else
since the plan, or already at the cost: left alone and recorded); a token bucket that paces the writes;
then one JSON merge patch of ``metadata.annotations`` only (the cost and rebalancer's ownership record),
conditional on the resourceVersion just read; and an Event on the pod. Dry runs: ``client`` reads and
writes nothing; ``server`` re-reads and sends the patch with ``dryRun=All``. The steps every actuator
shares are in :mod:`rebalancer.actions.actuation`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from rebalancer.actions.actuation import Actuation, DryRun, Report, Result, Unanswered, note_event, until_aborted
from rebalancer.domain.errors import PatchError
from rebalancer.domain.model import DELETION_COST_ANNOTATION, Pod
from rebalancer.planning.plan import EvictionPlan, PlannedCostPatch
from rebalancer.planning.protections import DELETION_COST_OWNER_ANNOTATION, Protections, foreign_deletion_cost
from rebalancer.planning.snapshot import ClusterSnapshot
from strategies.deletion_cost import KIND, DeletionCostSteeringSettings

log = logging.getLogger(__name__)


class SteerOutcome(StrEnum):
    PATCHED = "patched"
    DRY_RUN = "dry-run"
    SERVER_DRY_RUN = "server-dry-run"
    UNCHANGED = "unchanged"  # the pod already has that cost
    FOREIGN = "foreign"  # someone else set its cost since the plan (overwriteForeign off)
    OPTED_OUT = "opted-out"  # the pod opted out since the plan
    GONE = "gone"
    REPLACED = "replaced"  # another pod (new uid) carries the name
    CONFLICT = "conflict"  # 409: the pod changed between the re-read and the patch; next cycle
    CAPPED = "capped"  # over the strategy's maxPatchesPerCycle
    SKIPPED = "skipped"  # not attempted: the cycle stopped (leadership lost, API unavailable)
    FAILED = "failed"  # any other refusal (400, 415, 422)
    UNANSWERED = "unanswered"  # sent, no clear answer: the cost may be set (the cycle stopped)


@dataclass(frozen=True, slots=True)
class SteerResult(Result[PlannedCostPatch, SteerOutcome]):
    @property
    def patch(self) -> PlannedCostPatch:
        return self.subject


@dataclass(frozen=True, slots=True)
class SteeringReport(Report[SteerResult]):
    """One cycle's cost patches; ``problems`` names the Events not recorded."""


@dataclass(frozen=True, slots=True)
class SteeringRules:
    """One steering strategy's limits, as the policy sets them."""

    max_per_cycle: int
    per_second: float
    burst: int
    overwrite_foreign: bool = False


class LivePodMeta(Protocol):
    @property
    def uid(self) -> str: ...

    @property
    def resource_version(self) -> str: ...

    @property
    def annotations(self) -> Mapping[str, str]: ...


class PodPatcher(Protocol):
    def read(self, namespace: str, name: str) -> LivePodMeta | None: ...

    def set_annotations(
        self,
        namespace: str,
        name: str,
        annotations: Mapping[str, str | None],
        *,
        resource_version: str,
        dry_run: bool = False,
    ) -> LivePodMeta: ...


class EventRecorder(Protocol):
    def record_event(self, pod: Pod, *, reason: str, message: str, action: str) -> bool: ...


@dataclass
class TokenBucket:
    """``burst`` tokens, refilled at ``per_second``; :meth:`wait` is how long until the next one."""

    per_second: float
    burst: int
    tokens: float = field(init=False)
    at: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.tokens = float(self.burst)

    def wait(self, now: float) -> float:
        self._refill(now)
        return 0.0 if self.tokens >= 1 else (1 - self.tokens) / self.per_second

    def take(self, now: float) -> None:
        self._refill(now)
        self.tokens -= 1

    def _refill(self, now: float) -> None:
        if self.at is not None:
            self.tokens = min(float(self.burst), self.tokens + max(0.0, now - self.at) * self.per_second)
        self.at = now


class Steerer:
    def __init__(
        self,
        patcher: PodPatcher,
        events: EventRecorder,
        rules: Mapping[str, SteeringRules],
        protections: Protections,
        dry_run: DryRun = DryRun.OFF,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        may_act: Callable[[], bool] = lambda: True,
        buckets: dict[str, TokenBucket] | None = None,
    ) -> None:
        """``buckets``: token buckets kept between cycles by strategy name (serve keeps them, so the rate holds
        across cycles; a CronJob run starts with full buckets); None: fresh ones for this steerer."""
        self._buckets = buckets if buckets is not None else {}
        self._patcher = patcher
        self._events = events
        self._rules = rules
        self._protections = protections
        self._act = Actuation(dry_run, may_act)
        self._clock = clock
        self._sleep = sleep

    def apply(self, plan: EvictionPlan, snapshot: ClusterSnapshot) -> SteeringReport:
        patches = plan.cost_patches
        if not patches:
            return SteeringReport()
        buckets = self._buckets
        for name, r in self._rules.items():
            kept = buckets.get(name)
            if kept is None or (kept.per_second, kept.burst) != (r.per_second, r.burst):  # new, or the policy changed
                buckets[name] = TokenBucket(r.per_second, r.burst)
        sent: dict[str, int] = {}
        results: list[SteerResult] = []
        problems: list[str] = []

        def each_patch() -> None:
            for patch in patches:
                rules = self._rules.get(patch.strategy)
                if rules is None:  # a plan from a policy that no longer has the strategy: never act on it
                    results.append(SteerResult(patch, SteerOutcome.SKIPPED, f"no rules for strategy {patch.strategy}"))
                elif sent.get(patch.strategy, 0) >= rules.max_per_cycle:
                    results.append(SteerResult(patch, SteerOutcome.CAPPED, f"maxPatchesPerCycle {rules.max_per_cycle}"))
                else:
                    try:
                        results.append(self._one(patch, rules, buckets[patch.strategy], snapshot, sent, problems))
                    except Unanswered as stop:  # the rest is not attempted; this one may have been applied
                        why = f"sent without a clear answer ({stop.__cause__}): the cost may be set"
                        results.append(SteerResult(patch, SteerOutcome.UNANSWERED, why))
                        raise

        aborted = until_aborted(patches, results, each_patch, lambda p, why: SteerResult(p, SteerOutcome.SKIPPED, why))
        return SteeringReport(tuple(results), tuple(problems), aborted)

    def _one(
        self,
        patch: PlannedCostPatch,
        rules: SteeringRules,
        bucket: TokenBucket,
        snapshot: ClusterSnapshot,
        sent: dict[str, int],
        problems: list[str],
    ) -> SteerResult:
        wanted = str(patch.cost)
        if self._act.calls_nothing:  # the plan's view of the pod stands
            sent[patch.strategy] = sent.get(patch.strategy, 0) + 1
            return SteerResult(patch, SteerOutcome.DRY_RUN, f"would set pod-deletion-cost {wanted}: {patch.reason}")
        key = f"{patch.namespace}/{patch.name}"
        live = self._act.reread(key, lambda: self._patcher.read(patch.namespace, patch.name))
        refusal = self._refusal(patch, live, rules, wanted)
        if refusal is not None:
            return refusal
        assert live is not None
        wait = bucket.wait(self._clock())
        if wait > 0:
            self._sleep(wait)
        annotations = {DELETION_COST_ANNOTATION: wanted, DELETION_COST_OWNER_ANNOTATION: wanted}

        def send(dry_run: bool) -> LivePodMeta:
            bucket.take(self._clock())
            sent[patch.strategy] = sent.get(patch.strategy, 0) + 1
            return self._patcher.set_annotations(
                patch.namespace, patch.name, annotations, resource_version=live.resource_version, dry_run=dry_run
            )

        try:
            self._act.write(key, "patch", send)
        except PatchError as exc:
            outcome = {404: SteerOutcome.GONE, 409: SteerOutcome.CONFLICT}.get(exc.status or 0, SteerOutcome.FAILED)
            return SteerResult(patch, outcome, str(exc))
        if self._act.server_dry_run:
            return SteerResult(patch, SteerOutcome.SERVER_DRY_RUN, f"the API server would set {wanted} (dryRun=All)")
        before = live.annotations.get(DELETION_COST_ANNOTATION)
        message = f"pod-deletion-cost {before if before is not None else 'unset'} -> {wanted} by rebalancer " \
                  f"({patch.strategy}): {patch.reason}"  # fmt: skip
        pod = _snapshot_pod(snapshot, patch)
        if pod is not None:
            recorded = self._events.record_event(
                pod, reason="DeletionCostSet", message=message, action="SetDeletionCost"
            )
            note_event(recorded, key, problems)
        return SteerResult(patch, SteerOutcome.PATCHED, message)

    def _refusal(
        self, patch: PlannedCostPatch, live: LivePodMeta | None, rules: SteeringRules, wanted: str
    ) -> SteerResult | None:
        if live is None:
            return SteerResult(patch, SteerOutcome.GONE, "the pod no longer exists")
        if live.uid != patch.uid:
            return SteerResult(patch, SteerOutcome.REPLACED, f"a new pod (uid {live.uid}) carries the name now")
        why = self._protections.steering_opt_out(live.annotations)
        if why is not None:
            return SteerResult(patch, SteerOutcome.OPTED_OUT, why)
        current = live.annotations.get(DELETION_COST_ANNOTATION)
        if current == wanted:
            return SteerResult(patch, SteerOutcome.UNCHANGED, f"already {wanted}")
        foreign = foreign_deletion_cost(live.annotations)
        if foreign is not None and not rules.overwrite_foreign:
            return SteerResult(patch, SteerOutcome.FOREIGN, f"pod-deletion-cost {foreign!r} was set by someone else")
        return None


def steering_summary(report: SteeringReport) -> str:
    """``3 patched, 1 foreign`` (and why the steerer stopped, if it did)."""
    counts = {o: report.count(o) for o in SteerOutcome if report.count(o)}
    text = ", ".join(f"{n} {o.value}" for o, n in counts.items()) or "nothing planned"
    return text + (f" (aborted: {report.aborted})" if report.aborted else "")


def steering_rules(strategies: Iterable[object]) -> dict[str, SteeringRules]:
    """The rules of the policy's enabled DeletionCostSteering strategies, by strategy name (the first wins)."""
    rules: dict[str, SteeringRules] = {}
    for s in strategies:
        if isinstance(s, DeletionCostSteeringSettings) and s.enabled and KIND not in rules:
            rules[KIND] = SteeringRules(s.max_patches_per_cycle, s.rate.per_second, s.rate.burst, s.overwrite_foreign)
    return rules


def _snapshot_pod(snapshot: ClusterSnapshot, patch: PlannedCostPatch) -> Pod | None:
    return next((p for p in snapshot.pods_on(patch.node) if p.key == patch.key), None)
