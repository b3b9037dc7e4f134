"""Composition root of `rebalancer serve`: the long-running Deployment form.

Builds the real clients once, then hands them to the runner (schedules, alerts, hot reload), the two HTTP
listeners (the webhook; /metrics and the probes) and leader election; stops gracefully on SIGTERM.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import msgspec

from rebalancer.actions.evictor import DryRun, EvictorReport, Outcome
from rebalancer.actions.guard.applier import GuardReport
from rebalancer.actions.steerer import SteeringReport, steering_summary
from rebalancer.adapters.kube import ApiClient, KubeSource, connect
from rebalancer.adapters.kube.informer import WatchTiming
from rebalancer.adapters.kube.lease import LeaseClient
from rebalancer.adapters.kube.watch_cache import WatchCache
from rebalancer.adapters.prom import PrometheusUsageSource
from rebalancer.app import collector
from rebalancer.app.guard import release_marks, sweep
from rebalancer.app.root import ClusterConnection, run_cycle, state_namespace
from rebalancer.app.runtime import Clock, Focus, Runtime
from rebalancer.app.serve_efficiency import EfficiencyPublisher
from rebalancer.app.state_access import StateAccess, lease_name
from rebalancer.domain.errors import ConfigError, KubeForbidden, KubeUnavailable, RebalancerError
from rebalancer.domain.model import ClusterFacts, Node
from rebalancer.domain.settings.shared import PrometheusSettings
from rebalancer.domain.timeline import Timeline
from rebalancer.planning.protections import Protections
from rebalancer.policy import Policy, ServiceSettings
from rebalancer.policy.serve_checks import load_for_serve
from rebalancer.service import (
    STATUS_LIMITS,
    HttpServer,
    NodeAlert,
    ServerLimits,
    TokenFile,
    connections_allowed,
    make_app,
    make_status_app,
    serve_http,
)
from rebalancer.service.leader import LeaderElection, LeaderElector
from rebalancer.service.metrics import Metrics, WatchStat
from rebalancer.service.runner import AlertDecision, CycleResult, Service, Trigger
from rebalancer.service.server import App

log = logging.getLogger(__name__)
CACHE_SYNC_WAIT_SECONDS = 60.0  # a cycle right after start waits this long for the first listing


class _ClusterCache:
    """The watch cache the policy asks for (rebuilt when the kept annotations or its settings change)."""

    def __init__(self, api: ApiClient, on_pods_listed: Callable[[], None] | None = None) -> None:
        self._api = api
        self._on_pods_listed = on_pods_listed
        self._lock = threading.Lock()
        self._cache: WatchCache | None = None
        self._key: tuple[object, ...] | None = None

    def ensure(self, policy: Policy) -> WatchCache | None:
        settings = policy.service.watch_cache
        annotations = Protections.from_settings(policy.protections).annotations_read()
        list_mode = policy.kubernetes.list_mode
        key = (
            annotations,
            settings.max_stale,
            settings.watch_timeout,
            settings.relist_interval,
            list_mode,
            policy.kubernetes.encoding,
        )
        with self._lock:
            old = self._cache
            if not settings.enabled:
                self._cache = self._key = None
            elif old is None or key != self._key:
                timing = WatchTiming(
                    watch_seconds=int(settings.watch_timeout.total_seconds()),
                    relist_seconds=settings.relist_interval.total_seconds(),
                    list_mode=list_mode,
                    encoding=policy.kubernetes.encoding,
                )
                self._cache = WatchCache(
                    self._api,
                    annotations,
                    timing=timing,
                    max_stale=settings.max_stale.total_seconds(),
                    on_pods_listed=self._on_pods_listed,
                )
                self._key = key
                self._cache.start()
            current = self._cache
        if old is not None and old is not current:
            old.stop()
        return current

    def stats(self) -> list[WatchStat]:
        cache = self._cache
        return [WatchStat(*entry) for entry in cache.stats()] if cache is not None else []

    def current(self) -> WatchCache | None:
        """The cache when it can be trusted now (listed and fresh), else None."""
        cache = self._cache
        return cache if cache is not None and cache.problem() is None else None

    def stop(self) -> None:
        with self._lock:
            cache, self._cache = self._cache, None
        if cache is not None:
            cache.stop()


STALE_LISTINGS = 3  # readyz fails once the last successful node listing is this many ttl old


class _KnownNodes:
    """Nodes an alert may name, and their addresses: from the watch cache, else listed at most every
    ``ttl`` seconds (a cycle refreshes them too)."""

    def __init__(self, source: KubeSource, cache: _ClusterCache, clock: Clock, ttl: float = 30.0) -> None:
        self._source, self._cache, self._clock, self._ttl = source, cache, clock, ttl
        self._nodes: tuple[Node, ...] = ()
        self._at = float("-inf")  # when the nodes were last listed (successfully)
        self._lock = threading.Lock()

    def update(self, nodes: Sequence[Node]) -> None:
        """A cycle listed the cluster: its nodes are current, and the Kubernetes source answered (readyz)."""
        with self._lock:
            self._nodes, self._at = tuple(nodes), self._clock()

    def nodes(self) -> tuple[Node, ...]:
        return self._current(wait=True)

    def _current(self, *, wait: bool) -> tuple[Node, ...]:
        """The nodes, listed now when due; without ``wait``, what is known already while another thread lists."""
        cache = self._cache.current()
        if cache is not None:
            return cache.nodes()
        if not self._lock.acquire(blocking=wait):
            return self._nodes
        try:
            if self._clock() - self._at < self._ttl:
                return self._nodes
            try:
                self._nodes = self._source.read_nodes()
                self._at = self._clock()
            except RebalancerError as exc:  # keep what we knew; an unknown node is never acted on
                log.warning("listing nodes for the webhook failed: %s", exc)
            return self._nodes
        finally:
            self._lock.release()

    def names(self) -> frozenset[str]:
        return frozenset(n.name for n in self.nodes())

    def addresses(self) -> dict[str, str]:
        """address -> node name; an address two nodes claim names neither."""
        found: dict[str, str] = {}
        shared: set[str] = set()
        for node in self.nodes():
            for address in node.addresses:
                if found.setdefault(address, node.name) != node.name:
                    shared.add(address)
        for address in shared:
            del found[address]
        return found

    def source_ok(self) -> bool:
        """The Kubernetes source answers (readyz): the watch cache is current, or nodes were listed within
        ``STALE_LISTINGS`` ttl, listing them now when due. (A follower without the cache runs no cycle
        that would list: it must still turn ready, or a rolling update waits for it forever.) A probe never
        waits for a listing another thread has under way: against an API server that does not answer, each
        would hold one of the status port's two workers for the listing's timeouts, and /metrics behind them."""
        if self._cache.current() is not None:
            return True
        self._current(wait=False)
        return self._clock() - self._at < STALE_LISTINGS * self._ttl


class _UsageSource:
    """One Prometheus usage source, kept open between cycles (the connection stays warm for the next
    alert); a new one when the policy's Prometheus settings change. Cycles run one at a time."""

    def __init__(self) -> None:
        self._settings: PrometheusSettings | None = None
        self._source: PrometheusUsageSource | None = None

    def get(self, settings: PrometheusSettings) -> PrometheusUsageSource:
        if self._source is None or settings != self._settings:
            self.close()
            self._source, self._settings = PrometheusUsageSource(settings), settings
        return self._source

    def close(self) -> None:
        if self._source is not None:
            self._source.close()
            self._source = None


@dataclass(frozen=True, slots=True)
class CycleObservers:
    """Told about each cycle besides its result: the collector's pauses (the cycle's gc time), the
    efficiency rates, and the pod-deletion-cost patches and landing-guard marks it made."""

    pauses: collector.CollectorPauses | None = None
    efficiency: EfficiencyPublisher | None = None
    on_steering: Callable[[SteeringReport], None] | None = None
    on_guard: Callable[[GuardReport], None] | None = None


class _Cycles:
    """The cycle the runner calls: the policy's chosen strategies, focused on an alert's nodes if any, on
    ``runtime`` with the policy of the moment, the warm usage source and the watch cache."""

    def __init__(
        self, runtime: Runtime, known: _KnownNodes, cache: _ClusterCache, observers: CycleObservers | None = None
    ) -> None:
        if runtime.state_access is None:  # asked again only when the policy changes what it covers
            runtime = replace(runtime, state_access=StateAccess(runtime.api, dry_run=runtime.dry_run))
        self._runtime = runtime  # its steering buckets are kept between cycles: the patch rate holds
        self._known = known
        self._cache = cache
        self._observers = observers or CycleObservers()
        self._facts: ClusterFacts | None = None  # from the last full listing, for alert-driven cycles
        self._facts_at = float("-inf")
        self._usage = _UsageSource()

    def __call__(self, policy: Policy, trigger: Trigger) -> CycleResult:
        timeline = Timeline(trigger.queued_at)
        observers = self._observers
        paused = observers.pauses.seconds if observers.pauses is not None else 0.0
        chosen = tuple(policy.strategies[i] for i in trigger.strategies)
        cache = self._cache.ensure(policy)
        if cache is not None and not cache.wait_synced(CACHE_SYNC_WAIT_SECONDS):
            log.warning("the watch cache is not listed yet: this cycle plans on nothing and evicts nothing")
        max_age = policy.service.alert_facts_max_age
        young = max_age is not None and time.monotonic() - self._facts_at < max_age.total_seconds()
        known = self._facts if trigger.nodes and young else None
        runtime = replace(
            self._runtime,
            policy=policy.model_copy(update={"strategies": chosen}),
            usage=self._usage.get(policy.prometheus),
            watched=cache.facts if cache is not None else None,
        )
        focus = Focus(trigger.nodes, known) if trigger.nodes is not None else None
        with collector.paused():  # a cycle makes little cyclic garbage; collections in it were 10% of an alert cycle
            outcome = run_cycle(runtime, trigger.kind, focus, timeline)
        if observers.efficiency is not None:
            with timeline.step("rates"):
                observers.efficiency.after(policy, trigger.kind, outcome)
        facts = outcome.planned.facts
        if cache is None and facts is not None:
            self._facts = _after_evictions(facts, outcome.report)
            if known is None:  # a full listing: the age of the facts restarts
                self._facts_at = time.monotonic()
        if facts is not None:
            self._known.update(facts.nodes)
        if outcome.steering.results:
            log.info("%s cycle: pod-deletion-cost %s", trigger.kind, steering_summary(outcome.steering))
            if observers.on_steering is not None:
                observers.on_steering(outcome.steering)
        if outcome.guard.results:
            log.info("%s cycle: landing guard %s", trigger.kind, outcome.guard.summary())
            if observers.on_guard is not None:
                observers.on_guard(outcome.guard)
        if observers.pauses is not None:
            timeline.add("gc", observers.pauses.seconds - paused)  # mostly deferred to the cycle's end by the pause
        return CycleResult(outcome.planned.plan, outcome.report, timeline)

    def close(self) -> None:
        self._usage.close()
        if self._observers.efficiency is not None:
            self._observers.efficiency.close()


_MAY_HAVE_EVICTED = frozenset({Outcome.EVICTED, Outcome.UNANSWERED})


def _after_evictions(facts: ClusterFacts, report: EvictorReport) -> ClusterFacts:
    """``facts`` as an alert cycle takes them for the nodes it does not list: they were read before this
    cycle's evictions, so each pod it evicted (or may have: no clear answer) is terminating there, never
    ready. Else that cycle would count the pod's workload whole and exceed workload.maxUnavailable."""
    evicted = {(r.eviction.namespace, r.eviction.name, r.eviction.uid)
               for r in report.results if r.outcome in _MAY_HAVE_EVICTED}  # fmt: skip
    if not evicted:
        return facts
    pods = tuple(
        msgspec.structs.replace(p, terminating=True) if (p.namespace, p.name, p.uid) in evicted else p
        for p in facts.pods
    )
    return msgspec.structs.replace(facts, pods=pods)


def _sweep_marks(runtime: Runtime, known: _KnownNodes, metrics: Metrics, policy: Policy) -> None:
    """The housekeeping between cycles: the landing guard's sweep, with the policy in force. With no pool
    guarded too: the marks an earlier policy left go (guard-off) even when no cycle runs for hours (the
    nodes are at hand in the watch cache; without it, listed at most as often as with a guard)."""
    metrics.observe_guard(sweep(replace(runtime, policy=policy), known.nodes()))


def _release_marks(runtime: Runtime, leading: bool, metrics: Metrics) -> None:
    """Graceful shutdown: the landing guard's marks this instance wrote go (a follower wrote none it still
    owns, or a new leader took them over: it only acts while leading)."""
    if not leading or not runtime.policy.landing_guard.enabled:
        return  # with the guard off, the sweep clears any mark left (guard-off): no listing at every stop
    try:
        report = release_marks(runtime)
    except RebalancerError as exc:
        log.warning("landing guard: releasing the marks failed (they go at their expiry): %s", exc)
        return
    metrics.observe_guard(report)
    if report.results:
        log.info("landing guard at shutdown: %s", report.summary())


def _leader_election(
    policy: Policy, api: ApiClient, identity: str, dry_run: DryRun, on_change: Callable[[bool], None]
) -> LeaderElection | None:
    """The election on the policy's Lease (a dry run's own: :func:`lease_name`); None when leader election
    is off (this replica always leads)."""
    lease, elected = policy.service.leader_election, elected_lease(policy, dry_run)
    if elected is None:
        return None
    namespace, name = elected
    if dry_run is not DryRun.OFF:
        log.info("dry run: electing on Lease %s/%s, apart from the live service's", namespace, name)
    elector = LeaderElector(
        # a request must not outlast a retry period, or a lapse of leadership is noticed late
        LeaseClient(api, namespace, name, lease.retry_period.total_seconds()),
        identity,
        lease.lease_duration.total_seconds(),
        lease.renew_deadline.total_seconds(),
        lease.retry_period.total_seconds(),
    )
    return LeaderElection(elector, on_change=on_change)


def elected_lease(policy: Policy, dry_run: DryRun) -> tuple[str, str] | None:
    """The (namespace, name) of the Lease serve elects on with ``policy`` (a dry run's own: :func:`lease_name`);
    None when leader election is off."""
    if not policy.service.leader_election.enabled:
        return None
    return state_namespace(policy.state.namespace), lease_name(policy, dry_run)


def check_state_at_start(state_access: StateAccess, policy: Policy) -> None:
    """A missing state namespace or permission stops `serve` before it leads or plans (the Lease lives in
    that namespace too); an API server that does not answer yet is left to the cycles, which check first.
    The Lease is checked as the policy serve starts with names it (the elector is built from it, and keeps it
    through reloads)."""
    state_access.lease = elected_lease(policy, state_access.dry_run)
    try:
        state_access.check(policy, state_namespace(policy.state.namespace))
    except KubeUnavailable as exc:
        if isinstance(exc, KubeForbidden) or exc.status == 404:
            raise
        log.warning("state access not checked at start, the first cycle checks it: %s", exc)


def webhook_token(policy: Policy, metrics: Metrics) -> TokenFile | None:
    """The webhook's token file, read at start; None only when the policy lets the webhook run without one
    (:func:`check_for_serve` refuses it otherwise, and warns): ``rebalancer_webhook_unauthenticated`` is 1."""
    token_file = policy.service.webhook.token_file
    metrics.set_webhook_unauthenticated(token_file is None)
    return TokenFile(Path(token_file)) if token_file else None


def _listen(app: App, address: tuple[str, int, str], source: str, limits: ServerLimits, metrics: Metrics) -> HttpServer:
    """serve_http on (host, port); a port that cannot be bound is a ConfigError naming the field."""
    host, port, field = address
    listener = "status" if field == "service.metricsPort" else "webhook"
    try:
        server = serve_http(
            app, host, port, limits=limits, on_evicted=lambda: metrics.http_connection_evicted(listener)
        )
    except OSError as exc:
        app.close()
        raise ConfigError(source, [(field, f"cannot listen on {host}:{port}: {exc.strerror or exc}")]) from exc
    metrics.http_connections(listener, lambda: server.open_connections)
    return server


def server_limits(settings: ServiceSettings) -> tuple[ServerLimits, ServerLimits]:
    """The webhook's and the status port's limits from the policy; the connection cap lowered to what the
    open-files limit holds (raised as far as it goes first)."""
    allowed = connections_allowed(settings.max_connections)
    if allowed < settings.max_connections:
        log.warning(
            "service.maxConnections is %d but the open-files limit holds %d connections per listener: %d it is",
            settings.max_connections, allowed, allowed,
        )  # fmt: skip
    header, body = settings.header_timeout.total_seconds(), settings.body_timeout.total_seconds()
    webhook = ServerLimits(max_connections=allowed, header_timeout=header, body_timeout=body)
    status = replace(
        STATUS_LIMITS,
        max_connections=allowed,
        header_timeout=min(header, STATUS_LIMITS.header_timeout),
        body_timeout=min(body, STATUS_LIMITS.body_timeout),
    )
    return webhook, status


def _serve_http(
    policy: Policy, source: str, webhook: App, ready: Callable[[], bool], metrics: Metrics
) -> Callable[[], None]:
    """Start the webhook's listener and the status listener (/metrics and the probes), both or neither;
    returns what stops both (no new requests, the ones in flight finish). The webhook's first: once the
    probes answer, alerts are taken (a pod ready to the kubelet is one its Service may send alerts to)."""
    settings = policy.service
    status_host = settings.metrics_host if settings.metrics_host is not None else settings.host
    webhook_limits, status_limits = server_limits(settings)
    try:
        http = _listen(webhook, (settings.host, settings.port, "service.port"), source, webhook_limits, metrics)
    except BaseException:
        webhook.close()
        raise
    try:
        status_http = _listen(
            make_status_app(metrics=metrics, ready=ready),
            (status_host, settings.metrics_port, "service.metricsPort"),
            source,
            status_limits,
            metrics,
        )
    except BaseException:
        http.stop()
        raise
    log.info(
        "serving the webhook on %s:%d; /metrics, /healthz and /readyz on %s:%d",
        settings.host, http.port, status_host, status_http.port,
    )  # fmt: skip

    def stop() -> None:
        http.stop()
        status_http.stop()

    return stop


def _policy_at_start(path: Path) -> Policy:
    """The policy serve starts with: one it refuses is fatal (ConfigError); its warnings are said at once."""
    policy, warnings = load_for_serve(path)
    for field, message in warnings:
        log.warning("%s: %s: %s", path, field, message)
    return policy


def _quiet_scheduler_log() -> None:
    """APScheduler logs each job it runs (the reload check every 10 s): only at DEBUG do we keep that."""
    if not log.isEnabledFor(logging.DEBUG):
        logging.getLogger("apscheduler").setLevel(logging.WARNING)


class _StopSignals:
    """SIGTERM / SIGINT ask the service to stop.

    The handler only flips a flag: it runs on the main thread between two bytecodes, possibly while that
    thread holds the lock inside ``threading.Event.wait``, so setting an Event from it could deadlock.
    """

    def __init__(self) -> None:
        self.received = False
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)

    def _handle(self, *_: object) -> None:
        self.received = True

    def wait(self, stop: threading.Event, poll: float = 0.2) -> None:
        """Return once a signal came or ``stop`` was set."""
        while not self.received and not stop.wait(poll):
            pass


def serve(
    policy_path: Path,
    connection: ClusterConnection,
    dry_run: DryRun = DryRun.OFF,
    clock: Clock = time.time,
    stop: threading.Event | None = None,
) -> int:
    """Run until SIGTERM / SIGINT (or ``stop``); returns the exit code."""
    stop = stop or threading.Event()
    _quiet_scheduler_log()
    api = connect(connection.kubeconfig, connection.context)
    cache = _ClusterCache(api, on_pods_listed=collector.freeze_heap)
    known = _KnownNodes(KubeSource(api, frozenset()), cache, time.monotonic)
    metrics = Metrics()
    metrics.watch_cache(cache.stats)
    election: LeaderElection | None = None
    identity = f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"  # the Lease holder and the evictions' requester

    def is_leader() -> bool:
        return election.is_leader() if election is not None else True

    policy = _policy_at_start(policy_path)
    pauses = collector.CollectorPauses()
    state_access = StateAccess(api, dry_run=dry_run)
    runtime = Runtime(
        policy,
        api,
        clock,
        dry_run,
        requester=f"rebalancer/{identity}",  # the evictions' requester and the landing guard's marks' owner
        may_act=is_leader,
        state_access=state_access,
    )
    cycles = _Cycles(
        runtime,
        known,
        cache,
        CycleObservers(pauses, EfficiencyPublisher(metrics), metrics.observe_steering, metrics.observe_guard),
    )

    service = Service(
        policy_path,
        cycles,
        metrics,
        is_leader,
        clock,
        housekeeping=partial(_sweep_marks, runtime, known, metrics),
        policy=policy,
        reloaded=cache.ensure,
    )
    token = webhook_token(policy, metrics)
    check_state_at_start(state_access, policy)
    pauses.attach()
    cache.ensure(policy)  # listing starts now, on followers too: a new leader has the cluster at hand

    def leadership_changed(leading: bool) -> None:
        metrics.set_leader(leading)
        service.leadership_changed(leading)  # a run-on-start cycle waiting for leadership runs now

    election = _leader_election(policy, api, identity, dry_run, leadership_changed)
    if election is None:
        metrics.set_leader(True)

    def submit(alerts: Sequence[NodeAlert]) -> Sequence[AlertDecision]:
        return service.submit_alerts((a.node, a.status, a.reason_if_unusable or "") for a in alerts)

    webhook = make_app(
        metrics=metrics,
        submit=submit,
        is_leader=is_leader,
        known_nodes=known.names,
        node_addresses=known.addresses,
        node_labels=policy.service.webhook.node_labels,
        token=token,
        max_concurrent_requests=policy.service.max_concurrent_requests,
    )
    signals = _StopSignals()  # before the listeners: a SIGTERM once they answer must stop it the clean way
    stop_http = _serve_http(policy, str(policy_path), webhook, lambda: service.ready() or known.source_ok(), metrics)
    if election is not None:
        election.start()
    service.start()
    try:
        signals.wait(stop)
    finally:
        log.info("stopping: no new requests, finishing the cycle in flight, releasing the lease")
        stop_http()
        service.stop()
        _release_marks(replace(runtime, policy=service.policy), is_leader(), metrics)
        cycles.close()
        cache.stop()
        pauses.detach()
        if election is not None:
            election.stop(release=True)
    return 0
