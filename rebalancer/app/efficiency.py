"""The efficiency records in the composition root: read before a cycle (bounce-back guard), written after
it (hot nodes found, evictions, follow-ups), and read with the reference for the rates.

Recording is best effort: it measures and never allows an eviction, so a failure to read or write the
records is logged and reported, and the cycle's evictions stand. The bounce-back guard reads the records
before planning; when they cannot be read it guards nothing that cycle (logged).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol

from rebalancer.actions.evictor import EvictorReport
from rebalancer.domain.documents import DocumentStore, StateStore
from rebalancer.domain.efficiency_records import EFFICIENCY_RECORDS, BounceBack, Relief
from rebalancer.domain.errors import RebalancerError, SourceError, StateConflict
from rebalancer.domain.model import ClusterFacts, PodKey, UsageReport
from rebalancer.domain.settings.shared import PoolSettings
from rebalancer.planning.inflight import EarlierReliefs
from rebalancer.planning.plan import EvictionPlan
from rebalancer.planning.snapshot import ClusterSnapshot, build_snapshot
from rebalancer.records import (
    EfficiencyReport,
    EfficiencySettings,
    EfficiencyState,
    RecordsCorrupt,
    compute_rates,
    judge_followups,
    observe_cycle,
    recently_moved,
)
from rebalancer.records.landings import observe_landings
from rebalancer.records.ledger import close_oldest_pending, overdue

log = logging.getLogger(__name__)
RECORDS_KEY = "records.json"
MAX_RECORDS_BYTES = 900_000  # a ConfigMap holds 1 MiB in all
MAX_SAVE_ATTEMPTS = 4
LATE_GRACE_SECONDS = 60.0  # a follow-up window closed longer ago is judged on the usage read at its close
MAX_LATE_READS = 10  # per cycle; the rest wait for the next one

EFFICIENCY_OFF = (
    "efficiency.enabled is false: the evictions of earlier cycles are not recorded, so a node relieved "
    "within the usage window reads as hot until the window has caught up"
)
Earlier = tuple[Mapping[PodKey, str], EarlierReliefs]  # the bounce-back guard's pods, the earlier reliefs


class UsageAt(Protocol):
    """Usage at a past time, for some nodes (``memory``: the working set too); raises a ``SourceError``."""

    def __call__(self, at: float, nodes: frozenset[str], *, memory: bool = ...) -> UsageReport: ...


@dataclass(frozen=True, slots=True)
class Recorded:
    state: EfficiencyState | None  # a dry run's: what it would have written
    problem: str | None = None
    judged: tuple[Relief, ...] = ()  # follow-ups decided by this cycle (a dry run decides none: it writes none)
    bounced: tuple[BounceBack, ...] = ()  # bounce-backs this cycle made


class EfficiencyRecorder:
    """One cycle's reads and writes of the records (``state.efficiencyConfigMap``, key records.json)."""

    def __init__(
        self, store: StateStore, settings: EfficiencySettings, pools: PoolSettings, *, write: bool = True
    ) -> None:
        self._store = DocumentStore(store, EFFICIENCY_RECORDS)
        self._settings = settings
        self._pools = pools
        self._write = write

    def load(self, now: float) -> tuple[EfficiencyState, str | None]:
        """The records and their resourceVersion; corrupt records are replaced by empty ones (logged): they
        only measure, so starting afresh loses history, never safety. Records a newer build wrote raise: they
        are left as they are."""
        try:
            loaded = self._store.load(now)
        except RecordsCorrupt as exc:
            if exc.newer:
                raise
            log.error("%s; starting the efficiency records afresh", exc)
            return EfficiencyState(), exc.version
        return loaded.document, loaded.version

    def earlier(self, facts: ClusterFacts, now: float) -> Earlier:
        """What earlier cycles did, for this cycle's plan: the bounce-back guard's pods and the reliefs
        (the in-flight correction). When the records are off or cannot be read, no pod is guarded and the
        reliefs say why they are unknown (logged); corrupt records are unknown too, not empty ones."""
        if not self._settings.enabled:
            return {}, EarlierReliefs(missing=EFFICIENCY_OFF)
        try:
            state = self._store.load(now).document
        except RebalancerError as exc:
            log.warning("bounce-back guard and in-flight correction off this cycle: cannot read the efficiency "
                        "records: %s", exc)  # fmt: skip
            return {}, EarlierReliefs(missing=f"cannot read the efficiency records: {type(exc).__name__}: {exc}")
        moved = recently_moved(state, facts, now, self._settings) if self._settings.bounce_back_guard else {}
        return moved, EarlierReliefs(state.reliefs)

    def record(
        self,
        snapshot: ClusterSnapshot,
        plan: EvictionPlan,
        report: EvictorReport,
        trigger: str,
        facts: ClusterFacts | None,
        usage_at: UsageAt | None,
    ) -> Recorded:
        if not self._settings.enabled:
            return Recorded(None)
        try:
            before, state = self._record(snapshot, plan, report, trigger, facts, usage_at)
        except RebalancerError as exc:
            log.warning("efficiency records not updated: %s: %s", type(exc).__name__, exc)
            return Recorded(None, f"{type(exc).__name__}: {exc}")
        if not self._write:  # nothing was decided: the next cycle judges the same reliefs again from the records
            return Recorded(state)
        pending = {(r.node, r.at) for r in before.reliefs if r.result is None}
        judged = tuple(r for r in state.reliefs if r.result is not None and (r.node, r.at) in pending)
        bounced = tuple(b for b in state.bounce_backs if b.at == snapshot.taken_at)
        return Recorded(state, None, judged, bounced)

    def _record(
        self,
        snapshot: ClusterSnapshot,
        plan: EvictionPlan,
        report: EvictorReport,
        trigger: str,
        facts: ClusterFacts | None,
        usage_at: UsageAt | None,
    ) -> tuple[EfficiencyState, EfficiencyState]:
        """(the records as loaded, as saved)."""
        now = snapshot.taken_at
        late: dict[float, ClusterSnapshot] = {}  # read once, re-applied after a conflict
        for attempt in range(MAX_SAVE_ATTEMPTS):
            before, version = self.load(now)
            state = before
            state = self._judge_late(state, now, facts, usage_at, late)
            state = judge_followups(state, snapshot)
            if facts is not None:
                state = observe_landings(state, facts, now, self._settings.follow_up_window.total_seconds())
            state = observe_cycle(state, snapshot, plan, report, trigger, self._settings)
            state = bounded(state, self._settings, now)
            if not self._write:
                return before, state
            try:
                self._store.save(state, version)
                return before, state
            except StateConflict:
                if attempt == MAX_SAVE_ATTEMPTS - 1:
                    raise
                log.info("efficiency records changed under us; reading them again")
        raise AssertionError("unreachable")

    def _judge_late(
        self,
        state: EfficiencyState,
        now: float,
        facts: ClusterFacts | None,
        usage_at: UsageAt | None,
        cache: dict[float, ClusterSnapshot],
    ) -> EfficiencyState:
        """Follow-ups whose window closed while nothing ran (CronJob): judged on the usage at their close."""
        if usage_at is None or facts is None:
            return state
        for deadline, nodes in list(overdue(state, now, LATE_GRACE_SECONDS).items())[:MAX_LATE_READS]:
            at_deadline = cache.get(deadline)
            if at_deadline is None:
                try:
                    usage = usage_at(deadline, nodes, memory=_judged_on_memory(state, deadline))
                except SourceError as exc:
                    log.warning("follow-up of %s at %.0f left pending: %s", ", ".join(sorted(nodes)), deadline, exc)
                    continue
                at_deadline = cache[deadline] = build_snapshot(facts, usage, self._pools, deadline, nodes)
            state = judge_followups(state, at_deadline, only=_closing_at(deadline))
        return state


def bounded(state: EfficiencyState, settings: EfficiencySettings, now: float) -> EfficiencyState:
    """The records pruned to ``efficiency.maxRecords`` of each kind, then fewer while they are over
    :data:`MAX_RECORDS_BYTES`, down to 10. Pending reliefs are kept through that (their follow-ups are still
    to be judged), so when those alone overflow (each lists the usage of the pods that stayed on its node),
    the oldest are closed as unknown until the records fit: unjudged, and counted so, rather than no record
    written at all. The in-flight correction reads the evictions of a relief, which stay; only when the reliefs
    closed so still overflow by their evictions alone (whole nodes emptied) are the oldest of them dropped
    like any judged record, rather than no record written in any cycle."""
    horizon = settings.horizon.total_seconds()
    limit = settings.max_records
    state = state.prune(now, horizon, limit)
    while len(state.to_json()) > MAX_RECORDS_BYTES and limit > 10:
        limit = max(10, limit // 2)
        log.warning("efficiency records above %d bytes: keeping the newest %d of each kind", MAX_RECORDS_BYTES, limit)
        state = state.prune(now, horizon, limit)
    pending = sum(1 for r in state.reliefs if r.result is None)
    while len(state.to_json()) > MAX_RECORDS_BYTES and pending:
        count = (pending + 1) // 2
        detail = f"left unjudged: {pending} reliefs pending made the records larger than {MAX_RECORDS_BYTES} bytes"
        log.warning("efficiency records above %d bytes: the oldest %d of %d pending reliefs closed as unknown",
                    MAX_RECORDS_BYTES, count, pending)  # fmt: skip
        state = close_oldest_pending(state, now, count, detail)
        pending -= count
    if len(state.to_json()) > MAX_RECORDS_BYTES:
        log.warning("efficiency records above %d bytes with every relief closed: keeping the newest %d of each kind",
                    MAX_RECORDS_BYTES, limit)  # fmt: skip
        state = state.prune(now, horizon, limit)
    return state


def _judged_on_memory(state: EfficiencyState, deadline: float) -> bool:
    """Some pending relief closing at ``deadline`` is judged on memory: its late read takes the working set."""
    return any(
        r.result is None and r.deadline == deadline and any(resource == "memory" for resource, _ in r.judged_on)
        for r in state.reliefs
    )


def _closing_at(deadline: float) -> Callable[[Relief], bool]:
    return lambda relief: relief.deadline == deadline


def rates_over_period(
    state: EfficiencyState,
    settings: EfficiencySettings,
    pool_of: Mapping[str, str],
    end: float,
    reference: Callable[[float, float], dict[str, float]] | None,
    reference_definition: str | None = None,
) -> EfficiencyReport:
    """The rates over ``efficiency.period`` up to ``end``; the reference read failing leaves discovery unknown.
    ``reference_definition``: which definition of a hot node ``reference`` reads, in words (the report says it)."""
    start = end - settings.period.total_seconds()
    minutes, problem = None, None
    if reference is not None:
        try:
            minutes = reference(start, end)
        except StillUnknown as exc:  # warned when it was read
            problem = exc.problem
        except SourceError as exc:
            problem = f"{type(exc).__name__}: {exc}"
            log.warning("efficiency reference unknown: %s", problem)
    else:
        problem = "no reference query configured (efficiency.reference.query is null)"
    report = compute_rates(state, minutes, pool_of, start, end, problem)
    return replace(report, reference_definition=reference_definition)


class StillUnknown(SourceError):
    """The reference read failed within its refresh interval: the failure as first read (and warned of)."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


class CachedReference:
    """The reference's hot minutes, re-read at most every ``refreshInterval`` (serve mode). A failed read
    is not retried before the interval either: the cycles in between get :class:`StillUnknown` (no stale
    value, no query per cycle against a Prometheus without the reference's inputs, one warning)."""

    def __init__(
        self,
        read: Callable[[float, float], dict[str, float]],
        refresh_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read
        self._refresh = refresh_seconds
        self._at = float("-inf")
        self._value: dict[str, float] | None = None
        self._failure: str | None = None
        self._clock = clock

    def __call__(self, start: float, end: float) -> dict[str, float]:
        if self._clock() - self._at < self._refresh:
            if self._failure is not None:
                raise StillUnknown(self._failure)
            if self._value is not None:
                return self._value
        self._value, self._failure = None, None
        try:
            self._value = self._read(start, end)
        except SourceError as exc:
            self._failure = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            self._at = self._clock()
        return self._value
