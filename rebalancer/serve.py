"""Composition root of `rebalancer serve`: the long-running Deployment form.

Builds the real clients once, then hands them to the runner (schedules, alerts, hot reload), the HTTP
app (webhook, /metrics, probes) and leader election; stops gracefully on SIGTERM.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

from rebalancer.app import Clock, ClusterConnection, run_cycle, state_namespace
from rebalancer.errors import RebalancerError
from rebalancer.evictor import DryRun
from rebalancer.kube import ApiClient, KubeSource, connect
from rebalancer.kube.lease import LeaseClient
from rebalancer.leader import LeaderElection, LeaderElector
from rebalancer.metrics import Metrics
from rebalancer.model import ClusterFacts
from rebalancer.policy import Policy
from rebalancer.runner import AlertDecision, CycleResult, Service, Trigger
from rebalancer.service import NodeAlert, TokenFile, make_app, serve_http

log = logging.getLogger(__name__)


class _KnownNodes:
    """Node names an alert may name, listed at most every ``ttl`` seconds (a cycle refreshes them too)."""

    def __init__(self, source: KubeSource, clock: Clock, ttl: float = 30.0) -> None:
        self._source, self._clock, self._ttl = source, clock, ttl
        self._names: frozenset[str] = frozenset()
        self._at = float("-inf")
        self._lock = threading.Lock()

    def update(self, names: frozenset[str]) -> None:
        with self._lock:
            self._names, self._at = names, self._clock()

    def __call__(self) -> frozenset[str]:
        with self._lock:
            if self._clock() - self._at < self._ttl:
                return self._names
            try:
                self._names = frozenset(n.name for n in self._source.read_nodes())
                self._at = self._clock()
            except RebalancerError as exc:  # keep what we knew; an unknown node is never acted on
                log.warning("listing nodes for the webhook failed: %s", exc)
            return self._names


class _Cycles:
    """The cycle the runner calls: the policy's chosen strategies, focused on an alert's nodes if any."""

    def __init__(
        self,
        api: ApiClient,
        dry_run: DryRun,
        clock: Clock,
        known: _KnownNodes,
        may_act: Callable[[], bool],
        identity: str,
    ) -> None:
        self._identity = identity
        self._may_act = may_act
        self._facts: ClusterFacts | None = None  # from the last full listing, for alert-driven cycles
        self._facts_at = float("-inf")
        self._api = api
        self._dry_run = dry_run
        self._clock = clock
        self._known = known

    def __call__(self, policy: Policy, trigger: Trigger) -> CycleResult:
        chosen = tuple(policy.strategies[i] for i in trigger.strategies)
        max_age = policy.service.alert_facts_max_age_seconds
        known = self._facts if trigger.nodes and time.monotonic() - self._facts_at < max_age else None
        outcome = run_cycle(
            policy.model_copy(update={"strategies": chosen}),
            self._api,
            self._dry_run,
            self._clock,
            trigger.nodes,
            self._may_act,
            known,
            f"rebalancer/{self._identity}",
        )
        if outcome.planned.facts is not None:
            self._facts = outcome.planned.facts
            if known is None:  # a full listing: the age of the facts restarts
                self._facts_at = time.monotonic()
        self._known.update(frozenset(outcome.planned.snapshot.nodes))
        return CycleResult(outcome.planned.plan, outcome.report)


def serve(
    policy_path: Path,
    connection: ClusterConnection,
    dry_run: DryRun = DryRun.OFF,
    clock: Clock = time.time,
    stop: threading.Event | None = None,
) -> int:
    """Run until SIGTERM / SIGINT (or ``stop``); returns the exit code."""
    stop = stop or threading.Event()
    api = connect(connection.kubeconfig, connection.context)
    known = _KnownNodes(KubeSource(api, frozenset()), time.monotonic)
    metrics = Metrics()
    election: LeaderElection | None = None
    identity = f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"  # the Lease holder and the evictions' requester

    def is_leader() -> bool:
        return election.is_leader() if election is not None else True

    cycles = _Cycles(api, dry_run, clock, known, is_leader, identity)

    service = Service(policy_path, cycles, metrics, is_leader, clock)
    policy = service.policy
    settings = policy.service
    if settings.leader_election.enabled:
        lease = settings.leader_election
        elector = LeaderElector(
            # a request must not outlast a retry period, or a lapse of leadership is noticed late
            LeaseClient(api, state_namespace(policy.state.namespace), lease.lease_name, lease.retry_period_seconds),
            identity,
            lease.lease_duration_seconds,
            lease.renew_deadline_seconds,
            lease.retry_period_seconds,
        )
        election = LeaderElection(elector, on_change=metrics.set_leader)
    else:
        metrics.set_leader(True)

    def submit(alerts: Sequence[NodeAlert]) -> Sequence[AlertDecision]:
        return service.submit_alerts((a.node, a.status, a.reason_if_unusable or "") for a in alerts)

    app = make_app(
        metrics=metrics,
        submit=submit,
        is_leader=is_leader,
        ready=service.ready,
        known_nodes=known,
        node_labels=settings.webhook.node_labels,
        token=TokenFile(Path(settings.webhook.token_file)) if settings.webhook.token_file else None,
    )
    http = serve_http(
        app,
        settings.host,
        settings.port,
        max_concurrent_requests=settings.max_concurrent_requests,
        on_refused=metrics.http_connection_refused,
    )
    log.info("serving on %s:%d (webhook, /metrics, /healthz, /readyz)", settings.host, http.port)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if election is not None:
        election.start()
    service.start()
    try:
        stop.wait()
    finally:
        log.info("stopping: no new requests, finishing the cycle in flight, releasing the lease")
        http.stop()
        service.stop()
        if election is not None:
            election.stop(release=True)
    return 0
