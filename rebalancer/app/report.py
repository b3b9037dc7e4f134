"""Composition of `rebalancer report`: the efficiency records from the cluster, the nodes' pools, and the
reference from Prometheus, for the whole period and per bucket."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from rebalancer.adapters.kube import ConfigMapStateStore, KubeSource, connect
from rebalancer.adapters.prom.reference import ReferenceSource
from rebalancer.app.efficiency import RECORDS_KEY, rates_over_period
from rebalancer.app.root import ClusterConnection, state_namespace
from rebalancer.app.runtime import Clock
from rebalancer.domain.documents import DocumentStore
from rebalancer.domain.efficiency_records import EFFICIENCY_RECORDS
from rebalancer.domain.errors import ConfigError, MetricsUnavailable, SourceError
from rebalancer.domain.settings.shared import format_duration
from rebalancer.domain.times import rfc3339
from rebalancer.planning.snapshot import PoolResolver
from rebalancer.policy import Policy
from rebalancer.records import EfficiencyReport, EfficiencySettings, EfficiencyState
from rebalancer.records.series import Bucket, bucket_bounds, buckets

log = logging.getLogger(__name__)
MAX_BUCKETS = 2000  # 1m over a day, 5m over a week


@dataclass(frozen=True, slots=True)
class ReportData:
    report: EfficiencyReport
    timeline: tuple[Bucket, ...]
    no_records: str | None = None  # why there is nothing to report yet (None: there are records)


def efficiency_report(
    policy: Policy,
    connection: ClusterConnection,
    period: timedelta | None = None,
    bucket: timedelta = timedelta(hours=1),
    clock: Clock = time.time,
    until: float | None = None,
) -> ReportData:
    """The period ends at ``until`` (None: now). Raises a ``KubeUnavailable`` / ``KubeForbidden`` when the
    records or nodes cannot be read, ``RecordsCorrupt`` naming the field when the records are not valid
    (checked against the clock, whatever the period's end), and ``MetricsUnavailable`` when the reference's
    Prometheus cannot be reached; a reference that answers without a usable result leaves the discovery
    rate unknown (said in the report), never zero."""
    checked_at = clock()
    now = checked_at if until is None else until
    settings = policy.efficiency if period is None else policy.efficiency.model_copy(update={"period": period})
    bounds = bucket_bounds(now - settings.period.total_seconds(), now, bucket.total_seconds())
    if len(bounds) > MAX_BUCKETS:
        raise ConfigError(
            "rebalancer report",
            [
                (
                    "--bucket",
                    f"{format_duration(bucket)} cuts the period ({format_duration(settings.period)}) into "
                    f"{len(bounds)} buckets, more than {MAX_BUCKETS} (each a reference read and a row): "
                    "give a longer --bucket",
                )
            ],
        )
    api = connect(connection.kubeconfig, connection.context)
    namespace = state_namespace(policy.state.namespace)
    store = ConfigMapStateStore(api, namespace, policy.state.efficiency_config_map, RECORDS_KEY)
    state = DocumentStore(store, EFFICIENCY_RECORDS).load(checked_at).document  # a report replaces nothing
    _check_kept(state, policy.efficiency, now - settings.period.total_seconds())
    resolver = PoolResolver(policy.pools)
    pool_of = {
        node.name: resolver.pool_of(node)
        for node in KubeSource(
            api, frozenset(), list_mode=policy.kubernetes.list_mode, encoding=policy.kubernetes.encoding
        ).read_nodes()
    }
    no_records = _no_records(state, settings.enabled, f"ConfigMap {namespace}/{policy.state.efficiency_config_map}")
    described = settings.reference.describe(memory=policy.reads_memory)
    if settings.reference.query is None:
        report = rates_over_period(state, settings, pool_of, now, None, described)
        return ReportData(report, buckets(state, None, pool_of, bounds), no_records)
    with ReferenceSource(policy.prometheus, settings.reference, memory=policy.reads_memory) as reference:
        read = _reachable(reference, now - settings.period.total_seconds(), now)
        report = rates_over_period(state, settings, pool_of, now, read, described)
        per_bucket: dict[tuple[float, float], dict[str, float]] = {}
        if report.reference_problem is None:
            for lo, hi in bounds:
                try:
                    per_bucket[(lo, hi)] = reference.hot_minutes(lo, hi)
                except SourceError as exc:
                    log.warning("reference unknown for %.0f..%.0f: %s", lo, hi, exc)
    return ReportData(report, buckets(state, per_bucket, pool_of, bounds), no_records)


def _reachable(reference: ReferenceSource, start: float, end: float) -> Callable[[float, float], dict[str, float]]:
    """The reference over the period, read now: Prometheus unreachable raises (the report would be
    question marks and zeros); any other failure is kept for the report to say the rate is unknown."""
    try:
        minutes = reference.hot_minutes(start, end)
    except MetricsUnavailable:
        raise
    except SourceError as exc:
        failure = exc

        def failed(_start: float, _end: float) -> dict[str, float]:
            raise failure

        return failed
    return lambda _start, _end: minutes


def _check_kept(state: EfficiencyState, kept: EfficiencySettings, start: float) -> None:
    """A ConfigError naming --period when the period starts before the oldest records the cycles keep (each
    write drops those older than the policy's horizon): what happened before would read as nothing."""
    if not state.cycles:
        return
    newest = max(c.at for c in state.cycles)  # each write adds its cycle
    horizon = kept.horizon.total_seconds()
    if start >= newest - horizon - 1:
        return
    raise ConfigError(
        "rebalancer report",
        [
            (
                "--period",
                f"the period starts at {rfc3339(start)}, before {rfc3339(newest - horizon)}: the cycles keep the records "
                f"{format_duration(kept.horizon)} (the longest of efficiency.period, bounceBackMemory and "
                "followUpWindow), so the hot nodes found and the reliefs before would count as none; report a "
                "shorter period or a later --until, or raise efficiency.period to keep records longer",
            )
        ],
    )


def _no_records(state: EfficiencyState, enabled: bool, where: str) -> str | None:
    if state.sightings or state.reliefs or state.bounce_backs or state.cycles:
        return None
    if not enabled:
        return f"no records: efficiency.enabled is false, so no cycle writes them ({where})"
    return f"no records yet in {where}: each cycle of serve or run --once adds to them"
