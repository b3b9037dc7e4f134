"""Serve mode's efficiency figures: follow-up counters after every cycle, the rates over the period after
each scheduled one (an alert's cycle does not wait for the reference read)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from rebalancer.adapters.prom.reference import ReferenceSource
from rebalancer.app.efficiency import CachedReference, rates_over_period
from rebalancer.app.root import RunOutcome
from rebalancer.domain.settings.shared import PrometheusSettings
from rebalancer.policy import Policy
from rebalancer.records import ReferenceSettings
from rebalancer.service.metrics import Metrics

log = logging.getLogger(__name__)


class EfficiencyPublisher:
    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self._key: tuple[PrometheusSettings, ReferenceSettings, bool] | None = None
        self._source: ReferenceSource | None = None
        self._cached: CachedReference | None = None
        self._published = False

    def after(self, policy: Policy, trigger: str, outcome: RunOutcome) -> None:
        recorded = outcome.efficiency
        if recorded.state is None:
            return
        self._metrics.observe_followups(
            ((r.pool, r.result) for r in recorded.judged if r.result is not None), (b.pool for b in recorded.bounced)
        )
        if trigger == "alert" and self._published:
            return
        snapshot = outcome.planned.snapshot
        report = rates_over_period(
            recorded.state,
            policy.efficiency,
            snapshot.pool_of,
            snapshot.taken_at,
            self._reference(policy),
            policy.efficiency.reference.describe(memory=policy.reads_memory),
        )
        self._metrics.observe_efficiency(report)
        self._published = True

    def _reference(self, policy: Policy) -> Callable[[float, float], dict[str, float]] | None:
        reference = policy.efficiency.reference
        if reference.query is None:
            return None
        key = (policy.prometheus, reference, policy.reads_memory)
        if key != self._key or self._cached is None:
            self.close()
            self._source = ReferenceSource(policy.prometheus, reference, memory=policy.reads_memory)
            self._cached = CachedReference(self._source.hot_minutes, reference.refresh_interval.total_seconds())
            self._key = key
        return self._cached

    def close(self) -> None:
        if self._source is not None:
            self._source.close()
            self._source = None
            self._cached = None
