"""Prometheus metrics of rebalancer, in a registry of its own (no global registry, no module state).

Names follow the Prometheus conventions: a ``rebalancer_`` prefix, base units (seconds, ratios 0..1),
``_total`` on counters, one ``_info`` gauge for the build.

Label cardinality. Most labels take a few values fixed by the code or the policy: ``result`` (the
evictor's outcomes), ``strategy``, ``pool``, ``class``, ``trigger``, ``reason``, ``limiter`` (stable limiter
names such as ``global.maxPerPeriod[1h]``), ``code``, ``status``, ``action``. Two are per object, as
the descheduler's ``descheduler_pods_evicted`` has them: ``node`` and ``namespace``.
``rebalancer_node_cpu_utilization_ratio`` has one series per node with known usage (5,000 at the
largest cluster we plan for) and drops a node's series when the node disappears or its usage becomes
unknown. ``rebalancer_pods_evicted_total`` grows with the (namespace, node) pairs that ever had a planned
eviction, whatever its outcome (a blocked one included): at most namespaces x nodes per outcome and
strategy, never more; pod names are never labels.
"""

from __future__ import annotations

import re
import threading
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rebalancer import __version__
from rebalancer.actions.evictor import EvictorReport, Outcome
from rebalancer.actions.guard.applier import GuardReport
from rebalancer.actions.steerer import SteeringReport
from rebalancer.planning.plan import EvictionPlan, NodeClass
from rebalancer.records import EfficiencyReport

TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The classic text exposition format, which every Prometheus 2.x scrapes."""

CYCLE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""A targeted cycle takes tens of milliseconds; a full cycle at 150,000 pods about ten seconds."""

PLAN_BLOCKED = "plan_blocked"
EVICTOR_ABORTED = "evictor_aborted"

_LABEL_VALUE = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")


def _checked(kind: str, value: str) -> str:
    """Trigger, reason, status and action come from small vocabularies (words, exception class names),
    never free text: a message in a label would make a new series per message."""
    if not _LABEL_VALUE.match(value):
        raise ValueError(f"{kind} must be one short word (letters, digits, _ . -), got {value!r}")
    return value


class _WithoutCreated(Collector):
    """The registry's metrics without the ``*_created`` timestamps prometheus_client adds to counters and
    histograms: they double the series and nothing here reads them. (The library's own switch,
    ``disable_created_metrics()``, is process-wide state.)"""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterable[Metric]:
        for family in self._registry.collect():
            family.samples = [s for s in family.samples if not s.name.endswith("_created")]
            yield family


@dataclass(frozen=True, slots=True)
class WatchStat:
    """One watched collection of serve's cache, as read at scrape time."""

    collection: str  # nodes, pods, replicasets, poddisruptionbudgets
    events: int
    relists: int
    seconds_since_contact: float | None  # None: never listed


class _WatchCollector(Collector):
    def __init__(self, read: Callable[[], Sequence[WatchStat]]) -> None:
        self._read = read

    def collect(self) -> Iterable[Metric]:
        stats = self._read()
        events = CounterMetricFamily(
            "rebalancer_watch_events", "Watch events applied to serve's cache.", labels=("collection",)
        )
        relists = CounterMetricFamily(
            "rebalancer_watch_relists",
            "Listings of a collection after the first (after a 410: events were lost).",
            labels=("collection",),
        )
        silence = GaugeMetricFamily(
            "rebalancer_watch_seconds_since_contact",
            "Seconds this collection has had no watch open on the API server (0 while one is, however quiet).",
            labels=("collection",),
        )
        for stat in stats:
            events.add_metric((stat.collection,), stat.events)
            relists.add_metric((stat.collection,), stat.relists)
            if stat.seconds_since_contact is not None:
                silence.add_metric((stat.collection,), stat.seconds_since_contact)
        yield from (events, relists, silence)


@dataclass(frozen=True, slots=True)
class _NodeState:
    pool: str
    node_class: NodeClass
    ratio: float | None  # None: usage unknown, no utilization series


class _NodeCollector(Collector):
    """``rebalancer_nodes`` and ``rebalancer_node_cpu_utilization_ratio`` from the last cycle's node states."""

    def __init__(self, read: Callable[[], Mapping[str, _NodeState]]) -> None:
        self._read = read

    def collect(self) -> Iterable[Metric]:
        state = self._read()
        nodes = GaugeMetricFamily(
            "rebalancer_nodes",
            "Nodes per class (hot, cold, normal, unknown) and pool, as classified by the first strategy "
            "in the last cycle.",
            labels=("class", "pool"),
        )
        utilization = GaugeMetricFamily(
            "rebalancer_node_cpu_utilization_ratio",
            "Real CPU usage of the node over its allocatable CPU (1 = all of it; above 1 when usage exceeds "
            "allocatable), as the last cycle measured it. No series while the node's usage is unknown.",
            labels=("node", "pool"),
        )
        counts = Tally((s.node_class.value, s.pool) for s in state.values())
        for pool in sorted({s.pool for s in state.values()}):
            for node_class in NodeClass:  # zeros too, per pool seen
                nodes.add_metric((node_class.value, pool), counts[(node_class.value, pool)])
        for node, s in state.items():
            if s.ratio is not None:
                utilization.add_metric((node, s.pool), s.ratio)
        yield from (nodes, utilization)


class _EfficiencyCollector(Collector):
    """The efficiency rates over ``efficiency.period``, as computed after the last scheduled cycle.

    Reason labels come from small vocabularies: the strategies' and evictor's reason codes, the follow-up
    results, and ``limiter:<stable limiter name>``."""

    def __init__(self, read: Callable[[], EfficiencyReport | None]) -> None:
        self._read = read

    def collect(self) -> Iterable[Metric]:
        report = self._read()
        if report is None:
            return
        ratio = GaugeMetricFamily(
            "rebalancer_efficiency_ratio",
            'Efficiency over efficiency.period, per pool (pool="*": the cluster): rate=discovery (hot nodes '
            "found / hot by the reference), eviction (found hot nodes with an eviction / found), effective "
            "(reliefs whose node fell below target within the follow-up window / reliefs judged), landed_back "
            "(replacements seen scheduled back onto the node their pod was evicted from / replacements seen), "
            "landing_hit (predicted landings seen on the predicted node / predicted landings seen), overshoot "
            "(reliefs beyond need: below the cold threshold or again while pending / reliefs). No series while a "
            "rate has nothing to measure.",
            labels=("pool", "rate"),
        )
        nodes = GaugeMetricFamily(
            "rebalancer_efficiency_hot_nodes",
            "Hot nodes over efficiency.period, per pool: kind=reference (hot by the reference), found (by "
            "rebalancer), found_and_reference, found_only (never hot by the reference), missed (hot by the "
            "reference, never found), acted (found, with at least one pod evicted).",
            labels=("pool", "kind"),
        )
        unacted = GaugeMetricFamily(
            "rebalancer_efficiency_unacted_nodes",
            "Found hot nodes no pod was evicted from over efficiency.period, by their most frequent reason.",
            labels=("pool", "reason"),
        )
        reliefs = GaugeMetricFamily(
            "rebalancer_efficiency_reliefs",
            "Evictions from a hot node in one cycle (reliefs) over efficiency.period, by follow-up result: cooled, "
            "why not (landed-back, new-pods, others-grew, too-little-moved), pending, unknown, node-gone.",
            labels=("pool", "result"),
        )
        bounces = GaugeMetricFamily(
            "rebalancer_efficiency_bounce_backs",
            "Evictions over efficiency.period of a pod created after its workload's previous eviction "
            "(it had just moved).",
            labels=("pool",),
        )
        landings = GaugeMetricFamily(
            "rebalancer_efficiency_landings",
            "Replacements of evicted pods seen scheduled over efficiency.period: kind=seen, landed_back (on the "
            "node the pod was evicted from), predicted (seen, with a landing prediction), hit (on the predicted "
            "node).",
            labels=("pool", "kind"),
        )
        avoided = GaugeMetricFamily(
            "rebalancer_efficiency_bounce_backs_avoided",
            "Candidates passed over over efficiency.period so as not to bounce back, counted once per cycle: "
            "by=prediction (placement prediction sent the replacement back onto its node), memory (the pod had "
            "just moved there: the bounce-back guard).",
            labels=("pool", "by"),
        )
        evictions = GaugeMetricFamily(
            "rebalancer_efficiency_evictions", "Pods evicted from hot nodes over efficiency.period.", labels=("pool",)
        )
        overshoot = GaugeMetricFamily(
            "rebalancer_efficiency_overshoot_reliefs",
            "Reliefs beyond need over efficiency.period, by kind: below_cold (the relief cooled its node below the "
            "strategy's cold threshold), repeat (the node was relieved again while an earlier relief was pending). "
            "A relief of both kinds counts in each.",
            labels=("pool", "kind"),
        )
        overshoot_evictions = GaugeMetricFamily(
            "rebalancer_efficiency_overshoot_evictions",
            "Pods evicted over efficiency.period in reliefs beyond need (below_cold or repeat).",
            labels=("pool",),
        )
        blocked = GaugeMetricFamily(
            "rebalancer_efficiency_limiter_blocks",
            "Evictions blocked over efficiency.period, by limiter.",
            labels=("limiter",),
        )
        for p in report.pools:
            rates = {"discovery": p.discovery, "eviction": p.eviction, "effective": p.effective}
            rates |= {"landed_back": p.landed_back_rate, "landing_hit": p.landing_hit_rate}
            rates |= {"overshoot": p.overshoot_rate}
            for rate, value in rates.items():
                if value is not None:
                    ratio.add_metric((p.pool, rate), value)
            kinds = {"found": p.found, "acted": p.acted, "reference": p.reference, "missed": len(p.missed_nodes)}
            kinds |= {"found_and_reference": p.found_and_reference, "found_only": p.found_only}
            for kind, count in kinds.items():
                if count is not None and (kind != "missed" or p.reference is not None):
                    nodes.add_metric((p.pool, kind), count)
            for reason, count in sorted(p.unacted.items()):
                unacted.add_metric((p.pool, reason), count)
            results = {"cooled": p.cooled, "pending": p.pending, **p.uncooled, **p.unjudged}
            for result, count in sorted(results.items()):
                reliefs.add_metric((p.pool, result), count)
            bounces.add_metric((p.pool,), p.bounce_backs)
            evictions.add_metric((p.pool,), p.evictions)
            overshoot.add_metric((p.pool, "below_cold"), p.overshoot_below_cold)
            overshoot.add_metric((p.pool, "repeat"), p.overshoot_repeat)
            overshoot_evictions.add_metric((p.pool,), p.overshoot_evictions)
            seen = {"seen": p.landed, "landed_back": p.landed_back, "predicted": p.predicted_landed}
            for kind, count in (seen | {"hit": p.landing_hits}).items():
                landings.add_metric((p.pool, kind), count)
            avoided.add_metric((p.pool, "prediction"), p.passed_lands_back)
            avoided.add_metric((p.pool, "memory"), p.passed_recently_moved)
        for limiter, count in sorted(report.cluster.blocked.items()):
            blocked.add_metric((limiter,), count)
        period = GaugeMetricFamily(
            "rebalancer_efficiency_period_seconds", "The period the efficiency figures cover (efficiency.period)."
        )
        period.add_metric((), report.end - report.start)
        yield from (ratio, nodes, unacted, reliefs, bounces, landings, avoided, evictions, overshoot,
                    overshoot_evictions, blocked, period)  # fmt: skip


class Metrics:
    """Every metric of the service. Thread-safe: cycles and HTTP requests update it concurrently."""

    def __init__(self, version: str = __version__) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        registry = self.registry
        self.pods_evicted = Counter(
            "rebalancer_pods_evicted",
            "Planned evictions handled by the evictor, by outcome: result=evicted when the pod was evicted, "
            "otherwise why not (blocked, rejected, backoff, gone, replaced, skipped, failed, unanswered, dry-run, "
            "server-dry-run).",
            ("result", "strategy", "namespace", "node", "pool"),
            registry=registry,
        )
        self.deletion_cost_patches = Counter(
            "rebalancer_deletion_cost_patches",
            "Planned pod-deletion-cost patches (DeletionCostSteering) handled by the steerer, by outcome: "
            "result=patched when the annotation was set, otherwise why not (unchanged, foreign, opted-out, gone, "
            "replaced, conflict, capped, skipped, failed, unanswered, dry-run, server-dry-run).",
            ("result", "strategy", "namespace", "pool"),
            registry=registry,
        )
        self.landing_guard_marks = Counter(
            "rebalancer_landing_guard_marks",
            "Landing-guard mark changes on nodes by pool, action (set, refresh, clear), reason (hot, relieved; "
            "cooled, expired, guard-off, over-cap, taint-removed, released) and result (applied, dry-run, "
            "server-dry-run, skipped, gone, failed).",
            ("pool", "action", "reason", "result"),
            registry=registry,
        )
        self.cycle_duration = Histogram(
            "rebalancer_cycle_duration_seconds",
            "Wall time of one cycle (snapshot, plan, evictions), by what triggered it.",
            ("trigger",),
            buckets=CYCLE_BUCKETS,
            registry=registry,
        )
        self.limiter_blocked = Counter(
            "rebalancer_limiter_blocked",
            "Evictions a limiter, window, list or service level blocked, by the limiter's stable name.",
            ("limiter",),
            registry=registry,
        )
        self.cycle_failures = Counter(
            "rebalancer_cycle_failures",
            "Cycles that could not evict: plan_blocked (a usage source failed), evictor_aborted, or the error "
            "the cycle raised before it had a plan (for example KubeUnavailable, MetricsUnavailable).",
            ("reason",),
            registry=registry,
        )
        self.webhook_requests = Counter(
            "rebalancer_webhook_requests",
            "Answers to POST /webhook/alertmanager, by HTTP status code.",
            ("code",),
            registry=registry,
        )
        self.webhook_refused = Counter(
            "rebalancer_webhook_refused",
            "Webhook requests refused, by reason (unauthenticated, token-unavailable, content-type, "
            "length-required, too-large, timeout, truncated, busy, not-utf8, not-json, invalid-payload, "
            "not-leader, no-such-path, method, internal); the log says at most once a minute per client address.",
            ("reason",),
            registry=registry,
        )
        self.webhook_unauthenticated = Gauge(
            "rebalancer_webhook_unauthenticated",
            "1 when the webhook accepts requests without a token (service.webhook.allowUnauthenticated), else 0.",
            registry=registry,
        )
        self.http_connections_evicted = Counter(
            "rebalancer_http_connections_evicted",
            "Connections closed to make room at service.maxConnections, by listener (webhook, status): each was "
            "the oldest still waiting for its request or its body, or idle between two requests.",
            ("listener",),
            registry=registry,
        )
        self.http_connections_open = Gauge(
            "rebalancer_http_connections",
            "Client connections open now, by listener (webhook, status); each listener keeps at most "
            "service.maxConnections.",
            ("listener",),
            registry=registry,
        )
        self.alerts = Counter(
            "rebalancer_alerts",
            "Alerts received from Alertmanager, by alert status and what the service did with each: queued "
            "(a targeted rebalance of its node), already-queued, cooldown, resolved (recorded only), "
            "unknown-node (never acted on).",
            ("status", "action"),
            registry=registry,
        )
        self.policy_reloads = Counter(
            "rebalancer_policy_reload",
            "Changed policy files read by the hot reload, by result: applied; invalid (not a valid policy) or "
            "refused (valid, but serve would not start with it, for example no webhook token): the last good "
            "policy stays in force.",
            ("result",),
            registry=registry,
        )
        for result in ("applied", "invalid", "refused"):
            self.policy_reloads.labels(result)  # each at 0 from the start, so that increase() sees the first one
        self.policy_restart_required = Gauge(
            "rebalancer_policy_restart_required",
            "1 when the policy in force changed a setting serve reads only at start (addresses, ports, the "
            "webhook's token file and labels, leader election, reloadInterval): it takes effect at the next "
            "restart; the log names it.",
            registry=registry,
        )
        self.policy_valid = Gauge(
            "rebalancer_policy_valid",
            "1 when the policy file last read was valid, 0 when it was not (the last good policy is in force).",
            registry=registry,
        )
        self.policy_valid.set(1)  # the service never starts on an invalid policy
        self.leader = Gauge(
            "rebalancer_leader",
            "1 while this instance holds the leader Lease (only the leader evicts), else 0.",
            registry=registry,
        )
        self.followups = Counter(
            "rebalancer_followups",
            "Follow-ups of reliefs (evictions from a hot node in one cycle) as they are decided: result=cooled, "
            "landed-back, new-pods, others-grew, too-little-moved, unknown, node-gone.",
            ("pool", "result"),
            registry=registry,
        )
        self.bounce_backs = Counter(
            "rebalancer_bounce_backs",
            "Evictions of a pod created after its workload's previous eviction within efficiency.bounceBackMemory.",
            ("pool",),
            registry=registry,
        )
        self.build_info = Gauge(
            "rebalancer_build_info",
            "Always 1; the version label names the running build.",
            ("version",),
            registry=registry,
        )
        self.build_info.labels(version).set(1)
        self._lock = threading.Lock()
        self._node_state: dict[str, _NodeState] = {}
        self._efficiency: EfficiencyReport | None = None
        registry.register(_NodeCollector(self._nodes_now))
        registry.register(_EfficiencyCollector(self._efficiency_now))
        self._exposed = _WithoutCreated(self.registry)

    # -- cycles -------------------------------------------------------------------------------------

    def observe_cycle(
        self,
        trigger: str,
        seconds: float,
        plan: EvictionPlan,
        report: EvictorReport | None,
        *,
        partial: bool = False,
    ) -> None:
        """Record one finished cycle (``report`` None: planned only, nothing handed to the evictor).

        A blocked plan counts as a cycle failure ``plan_blocked``, an aborted evictor run as
        ``evictor_aborted``; the runner calls :meth:`cycle_failed` only for cycles that produced no plan.
        Node classes and utilization come from the first strategy's node decisions and replace those of
        the previous cycle; ``partial=True`` (a targeted cycle that saw only some nodes) updates the nodes
        it saw and keeps the others.
        """
        self.cycle_duration.labels(_checked("trigger", trigger)).observe(seconds)
        if plan.blocked:
            self.cycle_failures.labels(PLAN_BLOCKED).inc()
        elif report is not None and report.aborted:
            self.cycle_failures.labels(EVICTOR_ABORTED).inc()
        if report is not None:
            for result in report.results:
                e = result.eviction
                self.pods_evicted.labels(result.outcome.value, e.strategy, e.namespace, e.node, e.pool).inc()
                if result.outcome is Outcome.BLOCKED and result.limiter:
                    self.limiter_blocked.labels(result.limiter).inc()
        self._update_nodes(plan, partial)

    def observe_steering(self, report: SteeringReport) -> None:
        """Record what the steerer did with each planned pod-deletion-cost patch of a cycle."""
        for result in report.results:
            p = result.patch
            self.deletion_cost_patches.labels(result.outcome.value, p.strategy, p.namespace, p.pool).inc()

    def observe_guard(self, report: GuardReport) -> None:
        """Record the landing guard's changes of a cycle, a sweep or the release at shutdown."""
        for result in report.results:
            c = result.change
            self.landing_guard_marks.labels(c.pool, c.action.value, c.reason, result.outcome.value).inc()

    def cycle_failed(self, reason: str) -> None:
        """A cycle that produced no plan (a source failed, permission refused, unexpected error)."""
        self.cycle_failures.labels(_checked("reason", reason)).inc()

    def _update_nodes(self, plan: EvictionPlan, partial: bool) -> None:
        """Keeps the nodes' classes and ratios; the series are made at scrape time (:class:`_NodeCollector`):
        setting 5,000 labelled gauges after every cycle took about 100 ms, on the alert path."""
        decisions = next((r.node_decisions for r in plan.results if r.node_decisions), ())  # steering has none
        fresh = {}
        for d in decisions:
            known = d.usage_pct is not None and d.node_class is not NodeClass.UNKNOWN
            ratio = d.usage_pct / 100.0 if known and d.usage_pct is not None else None
            fresh[d.node] = _NodeState(d.pool, d.node_class, ratio)
        with self._lock:
            self._node_state = {**self._node_state, **fresh} if partial else fresh

    def _nodes_now(self) -> dict[str, _NodeState]:
        with self._lock:
            return self._node_state

    def observe_followups(self, judged: Iterable[tuple[str, str]], bounced_pools: Iterable[str]) -> None:
        """Follow-ups decided by a cycle, as (pool, result), and the pools of the bounce-backs it made."""
        for pool, result in judged:
            self.followups.labels(pool, result).inc()
        for pool in bounced_pools:
            self.bounce_backs.labels(pool).inc()

    def observe_efficiency(self, report: EfficiencyReport) -> None:
        """The rates after a cycle (replaces the previous ones)."""
        with self._lock:
            self._efficiency = report

    def _efficiency_now(self) -> EfficiencyReport | None:
        with self._lock:
            return self._efficiency

    # -- service ------------------------------------------------------------------------------------

    def webhook_answered(self, code: int) -> None:
        self.webhook_requests.labels(str(code)).inc()

    def webhook_refused_for(self, reason: str) -> None:
        self.webhook_refused.labels(_checked("reason", reason)).inc()

    def set_webhook_unauthenticated(self, unauthenticated: bool) -> None:
        self.webhook_unauthenticated.set(1 if unauthenticated else 0)

    def http_connection_evicted(self, listener: str) -> None:
        self.http_connections_evicted.labels(_checked("listener", listener)).inc()

    def http_connections(self, listener: str, read: Callable[[], int]) -> None:
        """Expose the open connections of ``listener``, read from ``read`` at each scrape."""
        self.http_connections_open.labels(_checked("listener", listener)).set_function(read)

    def alert_handled(self, status: str, action: str) -> None:
        self.alerts.labels(_checked("status", status), _checked("action", action)).inc()

    def policy_reload(self, result: str, *, restart_required: bool = False) -> None:
        """A changed policy file was read: ``applied`` (``restart_required``: some of it waits for a restart),
        or ``invalid`` / ``refused`` (the last good policy stays, and so does the restart gauge)."""
        self.policy_reloads.labels(_checked("result", result)).inc()
        applied = result == "applied"
        self.policy_valid.set(1 if applied else 0)
        if applied:
            self.policy_restart_required.set(1 if restart_required else 0)

    def set_leader(self, leader: bool) -> None:
        self.leader.set(1 if leader else 0)

    def watch_cache(self, read: Callable[[], Sequence[WatchStat]]) -> None:
        """Expose the watch cache's counters, read from ``read`` at each scrape."""
        self.registry.register(_WatchCollector(read))

    def exposition(self) -> tuple[bytes, str]:
        """The text exposition of every metric: (body, content type)."""
        return generate_latest(self._exposed), TEXT_CONTENT_TYPE
