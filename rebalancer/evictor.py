"""The evictor: the only component that acts, and the one place every safety rule is enforced.

For each planned eviction, in order: the pod's backoff after an earlier budget refusal; a re-read just
before acting (still there, same uid, still on that node, still not protected); the limiters (lists,
service level, windows, caps, rates, the workload's unavailability); a reservation persisted with
optimistic concurrency *before* the eviction (a crash in between wastes a token, never exceeds a cap);
then the Eviction API, so PodDisruptionBudgets hold; and an Event on the pod moved.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from rebalancer.backoff import BackoffState
from rebalancer.errors import (
    EvictionConflict,
    EvictionError,
    EvictionRejected,
    KubeForbidden,
    KubeUnavailable,
    PodGone,
    StateConflict,
)
from rebalancer.limits import (
    CycleCounts,
    EvictionRequest,
    LimiterState,
    LimitSettings,
    ReplicaCounts,
    StateCorrupt,
    Verdict,
    check,
    reserve,
)
from rebalancer.model import Node, Pod, WorkloadRef
from rebalancer.plan import EvictionPlan, PlannedEviction
from rebalancer.protections import Protections
from rebalancer.snapshot import ClusterSnapshot

log = logging.getLogger(__name__)
MAX_RESERVE_ATTEMPTS = 5
ANNOTATION_PREFIX = "rebalancer.io/"


class DryRun(StrEnum):
    OFF = "off"
    CLIENT = "client"  # plan and record; no call that changes anything (limiter state is read, not written)
    SERVER = "server"  # the Eviction API with dryRun=All: the server checks budgets, nothing changes


class Outcome(StrEnum):
    EVICTED = "evicted"
    DRY_RUN = "dry-run"
    SERVER_DRY_RUN = "server-dry-run"
    BLOCKED = "blocked"  # a limiter, window, list or service level; ``limiter`` names it
    BACKOFF = "backoff"  # a budget refused this pod earlier; waiting out its backoff
    REJECTED = "rejected"  # 429: the disruption budget (or API throttling) refused it
    GONE = "gone"  # the pod no longer exists
    REPLACED = "replaced"  # another pod (new uid) carries the name now
    SKIPPED = "skipped"  # the re-check failed (moved, protected now) or the cycle was aborted
    FAILED = "failed"  # any other refusal by the API server


@dataclass(frozen=True, slots=True)
class EvictionResult:
    eviction: PlannedEviction
    outcome: Outcome
    detail: str
    limiter: str | None = None
    retry_at: float | None = None


@dataclass(frozen=True, slots=True)
class EvictorReport:
    results: tuple[EvictionResult, ...] = ()
    problems: tuple[str, ...] = ()  # non-fatal: Events not recorded, backoff not saved, state replaced
    aborted: str | None = None  # the cycle stopped early, and why

    def count(self, outcome: Outcome) -> int:
        return sum(1 for r in self.results if r.outcome is outcome)


class ClusterActions(Protocol):
    def get_pod(self, namespace: str, name: str, annotations: frozenset[str]) -> Pod | None: ...

    def evict(self, namespace: str, name: str, uid: str, *, dry_run: bool, annotations: Mapping[str, str]) -> None: ...

    def record_event(self, pod: Pod, *, reason: str, message: str, action: str) -> bool: ...


class StateStore(Protocol):
    def load(self) -> tuple[str | None, str | None]: ...

    def save(self, text: str, resource_version: str | None) -> str: ...


class _Abort(Exception):
    """Stop this cycle: nothing more may be evicted (the reason is recorded)."""


@dataclass
class _Run:
    """Working state of one apply(): local, never shared."""

    now: float
    state: LimiterState
    version: str | None
    backoff: BackoffState
    backoff_version: str | None
    backoff_changed: bool = False
    cycle: CycleCounts = field(default_factory=CycleCounts)
    results: list[EvictionResult] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


class Evictor:
    def __init__(
        self,
        actions: ClusterActions,
        limits_store: StateStore,
        backoff_store: StateStore,
        settings: LimitSettings,
        protections: Protections,
        dry_run: DryRun = DryRun.OFF,
        requester: str = "rebalancer",
    ) -> None:
        self._actions = actions
        self._limits_store = limits_store
        self._backoff_store = backoff_store
        self._settings = settings
        self._protections = protections
        self._dry_run = dry_run
        self._requester = requester

    def apply(self, plan: EvictionPlan, snapshot: ClusterSnapshot, now: float) -> EvictorReport:
        if plan.blocked:
            return EvictorReport(aborted=f"plan blocked: {plan.blocked}")
        if not plan.evictions:
            return EvictorReport()
        run = self._start(now)
        if isinstance(run, EvictorReport):
            return run
        replicas = _replica_counts(snapshot)
        pending = list(plan.evictions)
        aborted = None
        while pending:
            eviction = pending.pop(0)
            try:
                run.results.append(self._one(run, eviction, snapshot, replicas))
            except _Abort as stop:
                aborted = str(stop)
                run.results.append(EvictionResult(eviction, Outcome.SKIPPED, f"not attempted: {aborted}"))
                run.results.extend(EvictionResult(e, Outcome.SKIPPED, f"not attempted: {aborted}") for e in pending)
                break
        self._save_backoff(run)
        return EvictorReport(tuple(run.results), tuple(run.problems), aborted)

    # -- state ------------------------------------------------------------------------------------

    def _start(self, now: float) -> _Run | EvictorReport:
        text, version = self._limits_store.load()
        try:
            state = LimiterState() if text is None else LimiterState.from_json(text, now)
        except StateCorrupt as exc:
            return self._replace_corrupt_state(exc, version, now)
        backoff, backoff_version = self._load_backoff()
        state = state.prune(now, self._settings.horizon_seconds)
        return _Run(now, state, version, backoff.pruned(now), backoff_version)

    def _replace_corrupt_state(self, exc: StateCorrupt, version: str | None, now: float) -> EvictorReport:
        """Never trust it: report, store a conservative replacement (empty token buckets), evict nothing."""
        horizon = self._settings.horizon_seconds
        problem = f"{exc}; replaced: no evictions for {horizon} s (the longest window), then token buckets start empty"
        log.error("%s", problem)
        if self._dry_run is DryRun.OFF:
            replacement = LimiterState.replacement(now, self._settings.bucket_scopes(), horizon)
            try:
                self._limits_store.save(replacement.to_json(), version)
            except StateConflict:
                problem += " (another instance replaced it first)"
        return EvictorReport(problems=(problem,), aborted=str(exc))

    def _load_backoff(self) -> tuple[BackoffState, str | None]:
        text, version = self._backoff_store.load()
        if text is None:
            return BackoffState(), version
        try:
            return BackoffState.from_json(text), version
        except ValueError as exc:
            log.warning("%s; starting afresh", exc)
            return BackoffState(), version

    def _save_backoff(self, run: _Run) -> None:
        if not run.backoff_changed or self._dry_run is not DryRun.OFF:
            return
        try:
            self._backoff_store.save(run.backoff.to_json(), run.backoff_version)
        except (StateConflict, KubeUnavailable) as exc:
            run.problems.append(f"eviction backoff not saved ({exc}); a refused pod may be retried early")

    def _reserve(self, run: _Run, request: EvictionRequest) -> Verdict | None:
        """Persist the reservation before evicting; re-check against fresher state on conflicts."""
        for _ in range(MAX_RESERVE_ATTEMPTS):
            new_state = reserve(request, run.state, self._settings, run.now)
            if self._dry_run is not DryRun.OFF:
                run.state = new_state  # dry runs count their reservations in memory only
                return None
            try:
                run.version = self._limits_store.save(new_state.to_json(), run.version)
            except StateConflict:
                text, run.version = self._limits_store.load()
                try:
                    fresh = LimiterState() if text is None else LimiterState.from_json(text, run.now)
                except StateCorrupt as exc:
                    raise _Abort(f"limiter state became unreadable: {exc}") from exc
                run.state = fresh.prune(run.now, self._settings.horizon_seconds)
                verdict = check(request, run.state, run.cycle, self._settings, run.now)
                if not verdict.allowed:
                    return verdict  # fresher state (another instance's evictions) blocks it now
                continue
            except KubeUnavailable as exc:
                raise _Abort(f"could not persist the reservation: {exc}") from exc
            run.state = new_state
            return None
        raise _Abort(f"limiter state kept changing under {MAX_RESERVE_ATTEMPTS} attempts to reserve")

    # -- one eviction -----------------------------------------------------------------------------

    def _one(
        self,
        run: _Run,
        planned: PlannedEviction,
        snapshot: ClusterSnapshot,
        replicas: Mapping[WorkloadRef, ReplicaCounts],
    ) -> EvictionResult:
        key = f"{planned.namespace}/{planned.name}"
        until = run.backoff.blocked_until(key, run.now)
        if until is not None:
            wait = until - run.now
            return EvictionResult(planned, Outcome.BACKOFF, f"a budget refused it earlier; retry in {wait:.0f} s",
                                  retry_at=until)  # fmt: skip
        pod, why_not = self._recheck(planned, snapshot)
        if pod is None:
            return EvictionResult(planned, why_not[0], why_not[1])
        node: Node = snapshot.nodes[planned.node]
        request = EvictionRequest.of(pod, node, planned.pool, replicas.get(pod.workload) if pod.workload else None)
        verdict = check(request, run.state, run.cycle, self._settings, run.now)
        if verdict.allowed:
            verdict = self._reserve(run, request) or verdict
        if not verdict.allowed:
            return EvictionResult(planned, Outcome.BLOCKED, verdict.reason, verdict.limiter, verdict.retry_at)
        run.cycle = run.cycle.add(request)
        return self._evict(run, planned, pod, key)

    def _recheck(self, planned: PlannedEviction, snapshot: ClusterSnapshot) -> tuple[Pod | None, tuple[Outcome, str]]:
        if self._dry_run is DryRun.CLIENT:  # call nothing: the snapshot's pod stands in
            pod = next((p for p in snapshot.pods_on(planned.node) if p.key == planned.key), None)
        else:
            try:
                pod = self._actions.get_pod(planned.namespace, planned.name, self._protections.annotations_read())
            except KubeForbidden:
                raise
            except KubeUnavailable as exc:
                raise _Abort(f"re-reading {planned.namespace}/{planned.name} failed: {exc}") from exc
        if pod is None:
            return None, (Outcome.GONE, "the pod no longer exists")
        if pod.uid != planned.uid:
            return None, (Outcome.REPLACED, f"a new pod (uid {pod.uid}) carries the name now; left alone")
        if pod.node_name != planned.node:
            return None, (Outcome.SKIPPED, f"the pod moved to {pod.node_name} since the plan")
        why = self._protections.reason(pod)
        if why is not None:
            return None, (Outcome.SKIPPED, f"protected now: {why}")
        return pod, (Outcome.SKIPPED, "")

    def _evict(self, run: _Run, planned: PlannedEviction, pod: Pod, key: str) -> EvictionResult:
        if self._dry_run is DryRun.CLIENT:
            return EvictionResult(planned, Outcome.DRY_RUN, f"would evict: {planned.reason}")
        annotations = {
            f"{ANNOTATION_PREFIX}strategy": planned.strategy,
            f"{ANNOTATION_PREFIX}reason": planned.reason[:1000],
            f"{ANNOTATION_PREFIX}requested-by": self._requester,
        }
        server_dry_run = self._dry_run is DryRun.SERVER
        try:
            self._actions.evict(planned.namespace, planned.name, planned.uid, dry_run=server_dry_run,
                                annotations=annotations)  # fmt: skip
        except EvictionRejected as exc:
            if exc.budget and not server_dry_run:
                run.backoff = run.backoff.after_rejection(key, run.now, exc.retry_after)
                run.backoff_changed = True
            retry = run.backoff.blocked_until(key, run.now)
            return EvictionResult(planned, Outcome.REJECTED, str(exc), retry_at=retry)
        except PodGone as exc:
            return EvictionResult(planned, Outcome.GONE, str(exc))
        except EvictionConflict as exc:
            return EvictionResult(planned, Outcome.REPLACED, str(exc))
        except KubeForbidden:
            raise
        except EvictionError as exc:
            return EvictionResult(planned, Outcome.FAILED, str(exc))
        except KubeUnavailable as exc:
            raise _Abort(f"the eviction of {key} got no clear answer ({exc}); stopping this cycle") from exc
        if server_dry_run:
            return EvictionResult(planned, Outcome.SERVER_DRY_RUN, "the API server would evict it (dryRun=All)")
        if run.backoff.pods.get(key):
            run.backoff = run.backoff.cleared(key)
            run.backoff_changed = True
        message = f"Evicted from {planned.node} by rebalancer ({planned.strategy}): {planned.reason}"
        if not self._actions.record_event(pod, reason="Rebalanced", message=message, action="Evict"):
            run.problems.append(f"no Event recorded on {key}")
        return EvictionResult(planned, Outcome.EVICTED, planned.reason)


def _replica_counts(snapshot: ClusterSnapshot) -> dict[WorkloadRef, ReplicaCounts]:
    """Per workload, from the snapshot's pods: desired = its non-terminal pods, ready, unavailable.

    The controllers' own replica counts are not listed, so a workload scaled up but not yet scheduled
    counts only the pods that exist (pending pods count as unavailable).
    """
    totals: dict[WorkloadRef, list[int]] = {}
    for pods in snapshot.pods_by_node.values():
        for pod in pods:
            if pod.workload is not None:
                entry = totals.setdefault(pod.workload, [0, 0])
                entry[0] += 1
                entry[1] += 1 if pod.ready and not pod.terminating else 0
    return {w: ReplicaCounts(desired=t, ready=r, unavailable=t - r) for w, (t, r) in totals.items()}
