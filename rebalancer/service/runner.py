"""What `rebalancer serve` runs and when: cycles on the strategies' schedules (APScheduler 3) and on
alerts, one at a time; hot reload of the policy file; a graceful stop.

I/O stays out: the cycle itself (snapshot, plan, evict) is an injected callable built by the
composition root, and so are leadership and the clock.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Protocol
from zoneinfo import ZoneInfo

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from rebalancer.actions.evictor import EvictorReport
from rebalancer.domain.errors import ConfigError, RebalancerError
from rebalancer.domain.settings.cron import cron_trigger
from rebalancer.domain.settings.shared import format_duration
from rebalancer.domain.timeline import Timeline
from rebalancer.planning.plan import EvictionPlan, NodeClass
from rebalancer.policy import Policy, load_policy
from rebalancer.policy.serve_checks import NotServable, load_for_serve, restart_required
from rebalancer.service.cycle_summary import cycle_line
from strategies.base import Schedule

log = logging.getLogger(__name__)
HOUSEKEEPING_SECONDS = 60.0
# what became of a changed policy file: taken, not a valid policy, or valid but refused by serve's checks
RELOAD_APPLIED, RELOAD_INVALID, RELOAD_REFUSED = "applied", "invalid", "refused"


@dataclass(frozen=True, slots=True)
class Trigger:
    kind: str  # "schedule" | "alert"
    strategies: tuple[int, ...]  # indices into policy.strategies
    nodes: frozenset[str] | None = None  # an alert's nodes: only they are relieved
    queued_at: float | None = None  # epoch seconds the oldest of those alerts was queued (for the timeline)


@dataclass(frozen=True, slots=True)
class CycleResult:
    plan: EvictionPlan
    report: EvictorReport | None
    timeline: Timeline | None = None  # where the cycle's time went (logged)


CycleFn = Callable[[Policy, Trigger], CycleResult]


class ServiceMetrics(Protocol):
    def observe_cycle(
        self, trigger: str, seconds: float, plan: EvictionPlan, report: EvictorReport | None, *, partial: bool = False
    ) -> None: ...

    def cycle_failed(self, reason: str) -> None: ...

    def policy_reload(self, result: str, *, restart_required: bool = False) -> None: ...


@dataclass(frozen=True, slots=True)
class AlertDecision:
    node: str | None
    action: str  # queued | already-queued | cooldown | resolved | unknown-node
    detail: str = ""


@dataclass
class _Alerts:
    pending: set[str] = field(default_factory=set)
    queued_at: dict[str, float] = field(default_factory=dict)  # pending node -> epoch seconds it was queued
    handled_at: dict[str, float] = field(default_factory=dict)
    wake: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)  # the HTTP threads and the worker


def schedule_trigger(schedule: Schedule, zone: ZoneInfo) -> CronTrigger | IntervalTrigger:
    if schedule.cron is not None:
        return cron_trigger(schedule.cron, zone)
    assert schedule.interval is not None
    return IntervalTrigger(seconds=schedule.interval.total_seconds(), timezone=zone)


def _schedule_text(schedule: Schedule) -> str:
    return f"every {format_duration(schedule.interval)}" if schedule.interval is not None else str(schedule.cron)


def _job_id(index: int, kind: str) -> str:
    return f"strategy-{index}-{kind}"


class Service:
    """Schedules, alerts and reloads; runs at most one cycle at a time, only while leading.

    With ``runOnStart`` each strategy runs once at start; a replica that does not lead yet runs that cycle
    when it first leads (:meth:`leadership_changed`), however much later that is.
    """

    def __init__(
        self,
        policy_path: Path,
        run_cycle: CycleFn,
        metrics: ServiceMetrics,
        is_leader: Callable[[], bool],
        clock: Callable[[], float] = time.time,
        housekeeping: Callable[[Policy], None] | None = None,
        policy: Policy | None = None,
        reloaded: Callable[[Policy], object] | None = None,
    ) -> None:
        """``housekeeping``: run at start and every ``HOUSEKEEPING_SECONDS`` between cycles, while leading
        (the landing guard's sweep of expired marks). ``policy``: the policy already read from ``policy_path``
        (else it is read here). ``reloaded``: called with each reloaded policy on every replica, leading or
        not (the watch cache it asks for is built before this replica leads); a failure is logged."""
        self._housekeeping = housekeeping
        self._reloaded = reloaded
        self._path = policy_path
        self._run_cycle = run_cycle
        self._metrics = metrics
        self._is_leader = is_leader
        self._clock = clock
        # an invalid policy at start is fatal: ConfigError (serve passes the one it checked with load_for_serve)
        self._policy = policy if policy is not None else load_policy(policy_path)
        self._started_with = self._policy  # what the settings read only at start come from
        self._digest = self._read_digest()
        self._cycle_lock = threading.Lock()
        self._alerts = _Alerts()
        self._stopping = threading.Event()
        self._ready = threading.Event()
        self._scheduler = BackgroundScheduler(
            timezone=ZoneInfo(self._policy.service.time_zone),
            job_defaults={"max_instances": 1, "coalesce": True, "misfire_grace_time": 60},
        )
        self._worker = threading.Thread(target=self._alert_loop, name="alert-cycles", daemon=True)
        self._on_start_lock = threading.Lock()  # the scheduler's threads and the leader election's
        self._on_start: set[str] = set()  # jobs whose run-on-start cycle has not run yet (waiting to lead)
        self._skips_noted = False  # a follower says once that it skips cycles, not at every tick

    @property
    def policy(self) -> Policy:
        return self._policy

    def ready(self) -> bool:
        return self._ready.is_set()

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        jobs = self._schedule(self._policy, first_run_now=self._policy.service.run_on_start)
        if self._policy.service.run_on_start:
            with self._on_start_lock:
                self._on_start = set(jobs)
        self._scheduler.add_job(
            self.reload, IntervalTrigger(seconds=self._policy.service.reload_interval.total_seconds()), id="reload"
        )
        if self._housekeeping is not None:
            self._scheduler.add_job(
                self.housekeep, IntervalTrigger(seconds=HOUSEKEEPING_SECONDS), id="housekeeping",
                next_run_time=datetime.now(ZoneInfo(self._policy.service.time_zone)),
            )  # fmt: skip
        self._scheduler.start()
        self._worker.start()

    def stop(self, timeout: float = 60.0) -> None:
        """Stop taking work, let the cycle in flight finish (its reservations are already persisted)."""
        self._stopping.set()
        self._alerts.wake.set()
        self._scheduler.shutdown(wait=True)
        if self._worker.is_alive():
            self._worker.join(timeout)

    def _schedule(self, policy: Policy, first_run_now: bool = False) -> list[str]:
        """One job per enabled strategy; at start each runs once at once, then on its schedule. Returns
        the jobs' ids."""
        zone = ZoneInfo(policy.service.time_zone)
        extra = {"next_run_time": datetime.now(zone)} if first_run_now else {}
        for job in self._scheduler.get_jobs():
            if job.id.startswith("strategy-"):
                job.remove()
        jobs: list[str] = []
        for index, strategy in enumerate(policy.strategies):
            if not strategy.enabled:
                continue
            jobs.append(_job_id(index, strategy.kind))
            self._scheduler.add_job(
                self.run,
                schedule_trigger(strategy.schedule, zone),
                args=(Trigger("schedule", (index,)),),
                id=jobs[-1],
                name=f"{strategy.kind} ({_schedule_text(strategy.schedule)})",
                **extra,
            )
        return jobs

    def leadership_changed(self, leading: bool) -> None:
        """Called by the leader election: on becoming leader, the run-on-start cycles that have not run yet
        (this replica did not lead at start) run now, once; after that each strategy keeps its schedule."""
        if not leading:
            return
        with self._on_start_lock:
            waiting = sorted(self._on_start)
        for job_id in waiting:
            job = self._scheduler.get_job(job_id)
            if job is None:  # the strategy went with a reload
                with self._on_start_lock:
                    self._on_start.discard(job_id)
                continue
            # a job of its own: the strategy's job may be finishing the run it skipped (one instance at a time)
            self._scheduler.add_job(self._run, args=(*job.args, job_id), id=f"on-start-{job_id}", replace_existing=True)

    # -- hot reload -------------------------------------------------------------------------------

    def _read_digest(self) -> str:
        try:
            return hashlib.sha256(self._path.read_bytes()).hexdigest()
        except OSError:
            return ""

    def reload(self) -> bool:
        """Take a changed policy file when `serve` would start with it (:func:`load_for_serve`); one it would
        refuse, invalid or not servable, keeps the last good policy. Each is logged and counted; a change
        to a setting read only at start is taken as far as it can be and said to need a restart."""
        digest = self._read_digest()
        if digest == self._digest:
            return False
        self._digest = digest
        try:
            policy, warnings = load_for_serve(self._path)
        except NotServable as exc:
            log.error("policy reload refused, keeping the last good policy: serve would not start with it:\n%s", exc)
            self._metrics.policy_reload(RELOAD_REFUSED)
            return False
        except ConfigError as exc:
            log.error("policy reload rejected, keeping the last good policy:\n%s", exc)
            self._metrics.policy_reload(RELOAD_INVALID)
            return False
        with self._cycle_lock:  # never swap under a running cycle
            self._policy = policy
            self._schedule(policy)
        log.info("policy reloaded from %s", self._path)
        for path, message in warnings:
            log.warning("%s: %s: %s", self._path, path, message)
        pending = restart_required(self._started_with, policy)
        if pending:
            log.warning("policy reloaded, but these settings are read only at start and need a restart: %s",
                        "; ".join(pending))  # fmt: skip
        self._metrics.policy_reload(RELOAD_APPLIED, restart_required=bool(pending))
        if self._reloaded is not None:
            try:
                self._reloaded(policy)
            except RebalancerError as exc:
                log.warning("applying the reloaded policy failed: %s: %s", type(exc).__name__, exc)
        return True

    def housekeep(self) -> None:
        """The housekeeping callable, between cycles and only while leading; a failure is logged."""
        if self._housekeeping is None:
            return
        with self._cycle_lock:
            if self._stopping.is_set() or not self._is_leader():
                return
            try:
                self._housekeeping(self._policy)
            except RebalancerError as exc:
                log.warning("housekeeping failed: %s: %s", type(exc).__name__, exc)

    # -- cycles -----------------------------------------------------------------------------------

    def run(self, trigger: Trigger) -> CycleResult | None:
        return self._run(trigger)

    def _run(self, trigger: Trigger, on_start_of: str | None = None) -> CycleResult | None:
        """``on_start_of``: the run-on-start cycle of that job, run only if it has not run yet."""
        with self._cycle_lock:
            if self._stopping.is_set():
                return None
            if not self._is_leader():
                self._note_skipped(trigger)
                return None
            if on_start_of is not None:
                with self._on_start_lock:
                    if on_start_of not in self._on_start:
                        return None  # the strategy's own job ran it meanwhile
            self._skips_noted = False
            policy = self._policy
            if trigger.kind == "schedule":
                self._ran_on_start(policy, trigger)
            started = self._clock()
            try:
                result = self._run_cycle(policy, trigger)
            except RebalancerError as exc:
                log.error("%s cycle failed: %s: %s", trigger.kind, type(exc).__name__, exc)
                self._metrics.cycle_failed(type(exc).__name__)
                return None
            seconds = self._clock() - started
            # an alert's cycle reports the decisions of the nodes it needed only: the others' are kept
            partial = trigger.nodes is not None
            self._metrics.observe_cycle(trigger.kind, seconds, result.plan, result.report, partial=partial)
            log.info("%s", cycle_line(trigger.kind, trigger.nodes, result.plan, result.report, seconds))
            if result.timeline is not None:
                log.debug("%s cycle timings (ms): %s", trigger.kind, result.timeline.text())
            if not result.plan.blocked:
                self._ready.set()
            return result

    def _ran_on_start(self, policy: Policy, trigger: Trigger) -> None:
        done = {_job_id(i, policy.strategies[i].kind) for i in trigger.strategies if i < len(policy.strategies)}
        with self._on_start_lock:
            self._on_start -= done

    def _note_skipped(self, trigger: Trigger) -> None:
        """A follower skips cycles: said at INFO once while following (at every alert: they are rare)."""
        if self._skips_noted and trigger.kind != "alert":
            log.debug("not the leader: %s cycle skipped", trigger.kind)
            return
        self._skips_noted = True
        with self._on_start_lock:
            waiting = bool(self._on_start)
        if waiting and trigger.kind == "schedule":
            log.info("not the leader yet: the run-on-start cycle runs once this replica leads")
        else:
            log.info("not the leader: %s cycles are skipped while another replica leads", trigger.kind)

    # -- alerts -----------------------------------------------------------------------------------

    def submit_alerts(self, alerts: Iterable[tuple[str | None, str, str]]) -> list[AlertDecision]:
        """(node or None, status, why the node is unknown) per alert; returns at once, work runs later."""
        now = self._clock()
        cooldown = self._policy.service.webhook.alert_node_cooldown.total_seconds()
        decisions: list[AlertDecision] = []
        with self._alerts.lock:
            queued = self._triage(alerts, now, cooldown, decisions)
        if queued:
            self._alerts.wake.set()
        return decisions

    def _triage(
        self, alerts: Iterable[tuple[str | None, str, str]], now: float, cooldown: float, out: list[AlertDecision]
    ) -> bool:
        decisions = out  # appended to in place
        queued = False
        for node, status, unknown_reason in alerts:
            if node is None:
                decisions.append(AlertDecision(None, "unknown-node", unknown_reason))
            elif status != "firing":
                decisions.append(AlertDecision(node, "resolved", "resolved alerts are recorded, not acted on"))
            elif node in self._alerts.pending:
                decisions.append(AlertDecision(node, "already-queued"))
            elif now - self._alerts.handled_at.get(node, float("-inf")) < cooldown:
                wait = cooldown - (now - self._alerts.handled_at[node])
                decisions.append(AlertDecision(node, "cooldown", f"handled recently; next in {wait:.0f} s"))
            else:
                self._alerts.pending.add(node)
                self._alerts.queued_at[node] = time.time()
                decisions.append(AlertDecision(node, "queued"))
                queued = True
        return queued

    def _alert_loop(self) -> None:
        while not self._stopping.is_set():
            self._alerts.wake.wait()
            self._alerts.wake.clear()
            if self._stopping.is_set():
                return
            with self._alerts.lock:
                nodes = frozenset(self._alerts.pending)
                queued_at = min((self._alerts.queued_at[n] for n in nodes), default=None)
            if not nodes:
                continue
            relieving = tuple(i for i, s in enumerate(self._policy.strategies) if s.enabled)
            result = self.run(Trigger("alert", relieving, nodes, queued_at))
            judged = judged_nodes(result, nodes)
            if judged != nodes:
                log.info("no alert cooldown for %s: the cycle did not judge them", ", ".join(sorted(nodes - judged)))
            now = self._clock()
            with self._alerts.lock:
                for node in nodes:
                    if node in judged:  # a cycle that could not judge a node leaves its next alert free to run
                        self._alerts.handled_at[node] = now
                    self._alerts.pending.discard(node)
                    self._alerts.queued_at.pop(node, None)


def judged_nodes(result: CycleResult | None, nodes: frozenset[str]) -> frozenset[str]:
    """Those of an alert's ``nodes`` that its cycle really judged: none when the cycle did not run, failed or
    was blocked (its usage read failed); else all but those every strategy found of unknown usage (Prometheus
    answered nothing for them). Only these start the alert cooldown."""
    if result is None or result.plan.blocked:
        return frozenset()
    classes: dict[str, set[NodeClass]] = {}
    for strategy in result.plan.results:
        for decision in strategy.node_decisions:
            if decision.node in nodes:
                classes.setdefault(decision.node, set()).add(decision.node_class)
    return frozenset(n for n in nodes if classes.get(n, set()) - {NodeClass.UNKNOWN} or n not in classes)
