"""The evictor: the only component that acts, and the one place every safety rule is enforced.

For each planned eviction, in order: the pod's backoff after an earlier budget refusal; the limiters on
the snapshot's pod (a pod they refuse is not read again: once a cap is reached, the rest of the plan costs
the API server nothing); a re-read just before acting (still there, same uid, still on that node, still not
protected); the limiters again on the pod read (lists, service level, windows, caps, rates, the workload's
unavailability); a reservation persisted with
optimistic concurrency *before* the eviction (a crash in between wastes a token, never exceeds a cap;
an answer that says the eviction did not happen — budget refusal, pod gone or replaced — gives it back);
then the Eviction API, so PodDisruptionBudgets hold; and an Event on the pod moved. The steps every
actuator shares (dry runs, the re-read, the write while still allowed to act, the Event, the report) are
in :mod:`rebalancer.actions.actuation`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Protocol

from rebalancer.actions.actuation import (
    Abort,
    Actuation,
    DryRun,
    Report,
    Result,
    Unanswered,
    note_event,
    until_aborted,
)
from rebalancer.actions.backoff import EVICTION_BACKOFF, BackoffCorrupt, BackoffState
from rebalancer.domain.documents import DocumentStore, StateStore
from rebalancer.domain.errors import (
    DocumentTooLarge,
    EvictionConflict,
    EvictionError,
    EvictionRejected,
    KubeUnavailable,
    PodGone,
    StateConflict,
)
from rebalancer.domain.model import Node, Pod, WorkloadRef
from rebalancer.planning.limits import (
    LIMITER_STATE,
    CycleCounts,
    EvictionRequest,
    LimiterState,
    LimitSettings,
    ReplicaCounts,
    StateCorrupt,
    Verdict,
    check,
    release,
    reserve,
)
from rebalancer.planning.plan import EvictionPlan, PlannedEviction
from rebalancer.planning.protections import Protections
from rebalancer.planning.snapshot import ClusterSnapshot

log = logging.getLogger(__name__)
MAX_RESERVE_ATTEMPTS = 5
ANNOTATION_PREFIX = "rebalancer.io/"


__all__ = ["ClusterActions", "DryRun", "EvictionResult", "Evictor", "EvictorReport", "Outcome", "StateStore"]


class Outcome(StrEnum):
    EVICTED = "evicted"
    DRY_RUN = "dry-run"
    SERVER_DRY_RUN = "server-dry-run"
    BLOCKED = "blocked"  # a limiter, window, list or service level; ``limiter`` names it
    BACKOFF = "backoff"  # a budget refused this pod (or one of its group) earlier; waiting out its backoff
    REJECTED = "rejected"  # 429: the disruption budget (or API throttling) refused it
    GONE = "gone"  # the pod no longer exists
    REPLACED = "replaced"  # another pod (new uid) carries the name now
    SKIPPED = "skipped"  # the re-check failed (moved, protected now) or the cycle was aborted
    FAILED = "failed"  # any other refusal by the API server
    UNANSWERED = "unanswered"  # sent, no clear answer: it may have happened (reservation kept, cycle stopped)


@dataclass(frozen=True, slots=True)
class EvictionResult(Result[PlannedEviction, Outcome]):
    limiter: str | None = None
    retry_at: float | None = None

    @property
    def eviction(self) -> PlannedEviction:
        return self.subject


@dataclass(frozen=True, slots=True)
class EvictorReport(Report[EvictionResult]):
    """``problems`` also names backoff not saved and limiter state replaced."""


class _Throttled(Abort):
    """The API server refused an eviction with a 429 naming no budget (its flow control): the rest of the
    run is not sent into it. ``result``: that eviction's (its reservation already given back)."""

    def __init__(self, result: EvictionResult, retry_after: float | None) -> None:
        after = f"; retry after {retry_after:.0f} s" if retry_after else ""
        super().__init__(f"the API server throttles evictions (HTTP 429, no disruption budget named{after})")
        self.result = result


class ClusterActions(Protocol):
    def get_pod(self, namespace: str, name: str, annotations: frozenset[str]) -> Pod | None: ...

    def evict(self, namespace: str, name: str, uid: str, *, dry_run: bool, annotations: Mapping[str, str]) -> None: ...

    def record_event(self, pod: Pod, *, reason: str, message: str, action: str) -> bool: ...


@dataclass
class _Run:
    """Working state of one apply(): local, never shared."""

    now: float
    state: LimiterState
    version: str | None
    backoff: BackoffState
    backoff_version: str | None
    backoff_changed: bool = False
    throttled: EvictionRejected | None = None  # the API server's flow control refused the last eviction
    cycle: CycleCounts = field(default_factory=CycleCounts)
    reserved_on: LimiterState | None = None  # the state the last reservation was made on
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
        clock: Callable[[], float] = time.time,
        may_act: Callable[[], bool] = lambda: True,
    ) -> None:
        self._actions = actions
        self._limits = DocumentStore(limits_store, LIMITER_STATE)
        self._backoff = DocumentStore(backoff_store, EVICTION_BACKOFF)
        self._settings = settings
        self._protections = protections
        self._act = Actuation(dry_run, may_act)
        self._requester = requester
        self._clock = clock

    def apply(self, plan: EvictionPlan, snapshot: ClusterSnapshot) -> EvictorReport:
        """Time is read from the clock for every eviction (windows, caps and cooldowns judge the moment
        its reservation is made, after the pod is re-read, not the snapshot's, which may be seconds old on
        a big cluster)."""
        if plan.blocked:
            return EvictorReport(aborted=f"plan blocked: {plan.blocked}")
        if not plan.evictions:
            return EvictorReport()
        run = self._start(self._clock())
        if isinstance(run, EvictorReport):
            return run
        replicas = _replica_counts(snapshot, {e.workload for e in plan.evictions if e.workload is not None})
        groups = _groups(plan.evictions)

        def each_group() -> None:
            for group in groups:
                self._group(run, group, snapshot, replicas)

        in_order = [e for g in groups for e in g]
        aborted = until_aborted(
            in_order, run.results, each_group, lambda e, why: EvictionResult(e, Outcome.SKIPPED, why)
        )
        self._save_backoff(run)
        return EvictorReport(tuple(run.results), tuple(run.problems), aborted)

    def _group(
        self,
        run: _Run,
        group: list[PlannedEviction],
        snapshot: ClusterSnapshot,
        replicas: Mapping[WorkloadRef, ReplicaCounts],
    ) -> None:
        """One eviction, or every eviction that empties one node (HighNodeUtilization): all or none.

        A node half emptied cannot be removed, so the whole group is checked against the limiters
        first; and once one of its evictions does not happen, the rest are not attempted."""
        if len(group) > 1:
            held = self._group_blocker(run, group, snapshot, replicas)
            if held is not None:
                run.results.extend(replace(held, subject=e) for e in group)
                return
        for index, planned in enumerate(group):
            try:
                result = self._one(run, planned, snapshot, replicas)
            except Unanswered as stop:  # the rest of the run is not attempted; this one may have happened
                why = f"sent without a clear answer ({stop.__cause__}): it may have happened; its reservation stands"
                run.results.append(EvictionResult(planned, Outcome.UNANSWERED, why))
                raise
            except _Throttled as stop:  # the rest of the run is not attempted; this one did not happen
                run.results.append(stop.result)
                raise
            run.results.append(result)
            if len(group) > 1 and result.outcome not in _DONE:
                why = f"{planned.node} cannot be emptied whole: {planned.namespace}/{planned.name} {result.outcome}"
                run.results.extend(EvictionResult(e, Outcome.SKIPPED, why) for e in group[index + 1 :])
                return

    def _group_blocker(
        self,
        run: _Run,
        group: list[PlannedEviction],
        snapshot: ClusterSnapshot,
        replicas: Mapping[WorkloadRef, ReplicaCounts],
    ) -> EvictionResult | None:
        """Would every eviction of the group pass the limiters (in memory, nothing reserved)? If not, the
        result of the first that would not (its outcome, limiter and retry time stand for the group's)."""
        state, cycle, now = run.state, run.cycle, max(run.now, self._clock())
        for planned in group:
            key = f"{planned.namespace}/{planned.name}"
            why = f"{planned.node} cannot be emptied whole: {key}"
            pod = _snapshot_pod(snapshot, planned)
            node = snapshot.nodes.get(planned.node)
            if pod is None or node is None:
                return EvictionResult(planned, Outcome.SKIPPED, f"{why} is not in the snapshot")
            if (until := run.backoff.blocked_until(key, now)) is not None:
                return EvictionResult(
                    planned, Outcome.BACKOFF, f"{why} is backing off after a budget refusal", retry_at=until
                )
            pool = snapshot.pool_of[node.name]
            request = _request(pod, node, pool, replicas)
            verdict = check(request, state, cycle, self._settings, now)
            if not verdict.allowed:
                return EvictionResult(
                    planned, Outcome.BLOCKED, f"{why}: {verdict.reason}", verdict.limiter, verdict.retry_at
                )
            state, cycle = reserve(request, state, self._settings, now), cycle.add(request)
        return None

    # -- state ------------------------------------------------------------------------------------

    def _start(self, now: float) -> _Run | EvictorReport:
        try:
            limits = self._limits.load(now)
            backoff, backoff_version = self._load_backoff(now)  # raises only for a newer build's backoff
        except StateCorrupt as exc:
            return self._leave_newer_state(exc) if exc.newer else self._replace_corrupt_state(exc, exc.version, now)
        except BackoffCorrupt as exc:
            return self._leave_newer_state(exc)
        state = self._pruned(limits.document, now)
        return _Run(now, state, limits.version, backoff.pruned(now), backoff_version)

    def _pruned(self, state: LimiterState, now: float) -> LimiterState:
        s = self._settings
        return state.prune(now, s.horizon_seconds, s.period_horizon_seconds)

    def _replace_corrupt_state(self, exc: StateCorrupt, version: str | None, now: float) -> EvictorReport:
        """Never trust it: report, store a conservative replacement (empty token buckets), evict nothing."""
        horizon = self._settings.horizon_seconds
        problem = f"{exc}; replaced: no evictions for {horizon} s (the longest window), then token buckets start empty"
        log.error("%s", problem)
        if self._act.dry_run is DryRun.OFF:
            replacement = LimiterState.replacement(now, self._settings.bucket_scopes(), horizon)
            try:
                self._limits.save(replacement, version)
            except StateConflict:
                problem += " (another instance replaced it first)"
        return EvictorReport(problems=(problem,), aborted=str(exc))

    def _leave_newer_state(self, exc: StateCorrupt | BackoffCorrupt) -> EvictorReport:
        """A newer build's state (a rollback, or the old pods of a rolling upgrade): this build cannot know
        what it records, so it evicts nothing and leaves it for the build that wrote it."""
        problem = f"{exc}; left as it is, and nothing is evicted while this build runs"
        log.error("%s", problem)
        return EvictorReport(problems=(problem,), aborted=str(exc))

    def _load_backoff(self, now: float) -> tuple[BackoffState, str | None]:
        try:
            loaded = self._backoff.load(now)
        except BackoffCorrupt as exc:
            if exc.newer:
                raise
            log.warning("%s; starting afresh", exc)
            return BackoffState(), exc.version
        return loaded.document, loaded.version

    def _save_backoff(self, run: _Run) -> None:
        if not run.backoff_changed or self._act.dry_run is not DryRun.OFF:
            return
        try:
            self._backoff.save(run.backoff, run.backoff_version)
        except (StateConflict, KubeUnavailable) as exc:
            run.problems.append(f"eviction backoff not saved ({exc}); a refused pod may be retried early")

    def _reserve(self, run: _Run, request: EvictionRequest) -> Verdict | None:
        """Persist the reservation before evicting; re-check against fresher state on conflicts."""
        for _ in range(MAX_RESERVE_ATTEMPTS):
            run.reserved_on = run.state
            new_state = reserve(request, run.state, self._settings, run.now)
            if self._act.dry_run is not DryRun.OFF:
                run.state = new_state  # dry runs count their reservations in memory only
                return None
            try:
                run.version = self._limits.save(new_state, run.version)
            except DocumentTooLarge as exc:
                raise Abort(
                    f"limiter state would be {exc.size} bytes, over {exc.limit} (a ConfigMap holds 1 MiB): "
                    "shorten the longest maxPerPeriod"
                ) from exc
            except StateConflict:
                try:
                    fresh = self._limits.load(run.now)
                except StateCorrupt as exc:
                    raise Abort(f"limiter state became unreadable: {exc}") from exc
                except KubeUnavailable as exc:  # raised in this handler: the clause below does not catch it
                    raise Abort(f"could not read the limiter state again after a conflict: {exc}") from exc
                run.now = max(run.now, self._clock())
                run.state, run.version = self._pruned(fresh.document, run.now), fresh.version
                verdict = check(request, run.state, run.cycle, self._settings, run.now)
                if not verdict.allowed:
                    return verdict  # fresher state (another instance's evictions) blocks it now
                continue
            except KubeUnavailable as exc:
                raise Abort(f"could not persist the reservation: {exc}") from exc
            run.state = new_state
            return None
        raise Abort(f"limiter state kept changing under {MAX_RESERVE_ATTEMPTS} attempts to reserve")

    # -- one eviction -----------------------------------------------------------------------------

    def _one(
        self,
        run: _Run,
        planned: PlannedEviction,
        snapshot: ClusterSnapshot,
        replicas: Mapping[WorkloadRef, ReplicaCounts],
    ) -> EvictionResult:
        key = f"{planned.namespace}/{planned.name}"
        run.now = max(run.now, self._clock())
        until = run.backoff.blocked_until(key, run.now)
        if until is not None:
            wait = until - run.now
            return EvictionResult(planned, Outcome.BACKOFF, f"a budget refused it earlier; retry in {wait:.0f} s",
                                  retry_at=until)  # fmt: skip
        node: Node | None = snapshot.nodes.get(planned.node)
        if node is None:
            return EvictionResult(planned, Outcome.SKIPPED, f"node {planned.node} is not in the snapshot")
        pool = snapshot.pool_of[node.name]  # never the plan's word: pool rules must hold whatever planned it
        seen = _snapshot_pod(snapshot, planned)
        if seen is not None:  # what the limiters refuse on the snapshot's pod is not read again from the API
            verdict = check(_request(seen, node, pool, replicas), run.state, run.cycle, self._settings, run.now)
            if not verdict.allowed:
                return EvictionResult(planned, Outcome.BLOCKED, verdict.reason, verdict.limiter, verdict.retry_at)
        pod, why_not = self._recheck(planned, snapshot, seen)
        if pod is None:
            return EvictionResult(planned, why_not[0], why_not[1])
        run.now = max(run.now, self._clock())  # a slow re-read: judge the moment of the reservation, not before it
        request = _request(pod, node, pool, replicas, seen)
        verdict = check(request, run.state, run.cycle, self._settings, run.now)
        if verdict.allowed:
            verdict = self._reserve(run, request) or verdict
        if not verdict.allowed:
            return EvictionResult(planned, Outcome.BLOCKED, verdict.reason, verdict.limiter, verdict.retry_at)
        run.cycle = run.cycle.add(request)
        reserved_at, reserved_on = run.now, run.reserved_on or run.state
        result = self._evict(run, planned, pod, key)
        if result.outcome in _DID_NOT_HAPPEN:
            run.cycle = run.cycle.remove(request)
            self._release(run, request, reserved_at, reserved_on)
        if run.throttled is not None:
            raise _Throttled(result, run.throttled.retry_after)
        return result

    def _release(self, run: _Run, request: EvictionRequest, at: float, before: LimiterState) -> None:
        """Give back the reservation of an eviction the API server said did not happen; failing that, the
        tokens stay spent (the safe side) and the run says so."""
        for _ in range(MAX_RESERVE_ATTEMPTS):
            new_state = release(request, at, before, run.state, self._settings, run.now)
            if new_state is run.state:
                return
            if self._act.dry_run is not DryRun.OFF:
                run.state = new_state
                return
            try:
                run.version = self._limits.save(new_state, run.version)
            except StateConflict:
                try:
                    fresh = self._limits.load(run.now)
                except (KubeUnavailable, StateCorrupt) as exc:
                    run.problems.append(
                        f"the reservation of {request.namespace}/{request.pod} was not given back: {exc}"
                    )
                    return
                run.state, run.version = self._pruned(fresh.document, run.now), fresh.version
                continue
            except KubeUnavailable as exc:
                run.problems.append(f"the reservation of {request.namespace}/{request.pod} was not given back: {exc}")
                return
            run.state = new_state
            return
        run.problems.append(
            f"the reservation of {request.namespace}/{request.pod} was not given back: state kept changing"
        )

    def _recheck(
        self, planned: PlannedEviction, snapshot: ClusterSnapshot, seen: Pod | None
    ) -> tuple[Pod | None, tuple[Outcome, str]]:
        """The pod as it is now (``seen``: the snapshot's), or why it is no longer to be evicted."""
        if self._act.calls_nothing:  # the snapshot's pod stands in
            pod = seen
        else:
            key, annotations = f"{planned.namespace}/{planned.name}", self._protections.annotations_read()
            pod = self._act.reread(key, lambda: self._actions.get_pod(planned.namespace, planned.name, annotations))
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
        if self._act.calls_nothing:
            return EvictionResult(planned, Outcome.DRY_RUN, f"would evict: {planned.reason}")
        annotations = {
            f"{ANNOTATION_PREFIX}strategy": planned.strategy,
            f"{ANNOTATION_PREFIX}reason": planned.reason[:1000],
            f"{ANNOTATION_PREFIX}requested-by": self._requester,
        }
        server_dry_run = self._act.server_dry_run
        try:
            self._act.write(key, "eviction", lambda dry_run: self._actions.evict(
                planned.namespace, planned.name, planned.uid, dry_run=dry_run, annotations=annotations))  # fmt: skip
        except EvictionRejected as exc:
            if not exc.budget:
                run.throttled = exc
            elif not server_dry_run:
                run.backoff = run.backoff.after_rejection(key, run.now, exc.retry_after)
                run.backoff_changed = True
            retry = run.backoff.blocked_until(key, run.now)
            return EvictionResult(planned, Outcome.REJECTED, str(exc), retry_at=retry)
        except PodGone as exc:
            return EvictionResult(planned, Outcome.GONE, str(exc))
        except EvictionConflict as exc:
            return EvictionResult(planned, Outcome.REPLACED, str(exc))
        except EvictionError as exc:
            return EvictionResult(planned, Outcome.FAILED, str(exc))
        if server_dry_run:
            return EvictionResult(planned, Outcome.SERVER_DRY_RUN, "the API server would evict it (dryRun=All)")
        if run.backoff.pods.get(key):
            run.backoff = run.backoff.cleared(key)
            run.backoff_changed = True
        message = f"Evicted from {planned.node} by rebalancer ({planned.strategy}): {planned.reason}"
        note_event(
            self._actions.record_event(pod, reason="Rebalanced", message=message, action="Evict"), key, run.problems
        )
        return EvictionResult(planned, Outcome.EVICTED, planned.reason)


_DONE = frozenset({Outcome.EVICTED, Outcome.DRY_RUN, Outcome.SERVER_DRY_RUN})
_DID_NOT_HAPPEN = frozenset({Outcome.REJECTED, Outcome.GONE, Outcome.REPLACED})  # the API server said so
_WHOLE_NODE_STRATEGIES = frozenset({"HighNodeUtilization"})


def _groups(evictions: tuple[PlannedEviction, ...]) -> list[list[PlannedEviction]]:
    """Each eviction alone, except those that empty one node together (all or none)."""
    groups: list[list[PlannedEviction]] = []
    by_node: dict[tuple[str, str], list[PlannedEviction]] = {}
    for eviction in evictions:
        if eviction.strategy in _WHOLE_NODE_STRATEGIES:
            key = (eviction.strategy, eviction.node)
            if key not in by_node:
                by_node[key] = []
                groups.append(by_node[key])
            by_node[key].append(eviction)
        else:
            groups.append([eviction])
    return groups


def _replica_counts(snapshot: ClusterSnapshot, wanted: set[WorkloadRef]) -> dict[WorkloadRef, ReplicaCounts]:
    """Per workload, from the snapshot's pods: desired = its non-terminal pods (bound or not), ready,
    unavailable. A replacement still Pending (unscheduled, or not ready) counts as unavailable. The
    controllers' own replica counts are not listed: replicas the controller has not created yet are
    not seen (a scale-up in progress). Only the ``wanted`` workloads (those of planned evictions) are
    counted: from the snapshot's pods by workload when it has them (serve's cache keeps them), else in
    one pass over every pod."""
    if snapshot.by_workload is not None:
        by_workload = snapshot.by_workload
        members: Iterable[Iterable[Pod]] = (by_workload.get(w, ()) for w in wanted)
    else:
        namespaces = {w.namespace for w in wanted}  # a str's hash is cached: a cheap first filter
        members = (
            [p for p in pods if p.namespace in namespaces and p.workload in wanted]
            for pods in (*snapshot.pods_by_node.values(), snapshot.unbound)
        )
    totals: dict[WorkloadRef, list[int]] = {}
    for pods in members:
        for pod in pods:
            if pod.workload is None:
                continue
            entry = totals.setdefault(pod.workload, [0, 0])
            entry[0] += 1
            entry[1] += 1 if pod.ready and not pod.terminating and pod.node_name else 0
    return {w: ReplicaCounts(desired=t, ready=r, unavailable=t - r) for w, (t, r) in totals.items()}


def _snapshot_pod(snapshot: ClusterSnapshot, planned: PlannedEviction) -> Pod | None:
    """The planned pod as the cycle's snapshot saw it (None: not there)."""
    return next((p for p in snapshot.pods_on(planned.node) if p.key == planned.key), None)


def _request(
    pod: Pod, node: Node, pool: str, replicas: Mapping[WorkloadRef, ReplicaCounts], seen: Pod | None = None
) -> EvictionRequest:
    """``seen``: the pod as the snapshot saw it. The replica counts are the snapshot's: a pod it counted
    ready that turned unready since is counted as made unavailable by its eviction (else, once evicted, it
    would count as neither unavailable nor evicted, and the workload's next eviction could exceed
    maxUnavailable)."""
    request = EvictionRequest.of(pod, node, pool, replicas.get(pod.workload) if pod.workload else None)
    if seen is not None and seen.ready and not request.pod_ready:
        request = replace(request, pod_ready=True)
    return request
