"""Composition root: the one place that builds real clients and hands them to the pure core."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from rebalancer.cycle import plan_cycle
from rebalancer.demo import load_demo
from rebalancer.errors import SourceError
from rebalancer.kube import KubeSource, connect
from rebalancer.model import ClusterFacts, UsageReport
from rebalancer.plan import EvictionPlan
from rebalancer.policy import Policy
from rebalancer.prom import PrometheusUsageSource
from rebalancer.protections import Protections
from rebalancer.snapshot import ClusterSnapshot

log = logging.getLogger(__name__)
Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class PlanOutcome:
    snapshot: ClusterSnapshot
    plan: EvictionPlan
    source: str


@dataclass(frozen=True, slots=True)
class ClusterConnection:
    kubeconfig: str | None = None
    context: str | None = None


def plan_live(policy: Policy, connection: ClusterConnection, clock: Clock = time.time) -> PlanOutcome:
    """Read the cluster and Prometheus, then plan. A failed usage read blocks evictions, not the plan."""
    now = clock()
    api = connect(connection.kubeconfig, connection.context)
    kube = KubeSource(api, Protections.from_settings(policy.protections).annotations_read())
    facts = kube.read_facts()
    with PrometheusUsageSource(policy.prometheus) as prometheus:
        usage = read_usage(prometheus.read, now)
    snapshot, plan = plan_cycle(facts, usage, policy, now)
    return PlanOutcome(snapshot, plan, f"cluster, usage from {policy.prometheus.url}")


def read_usage(read: Callable[[float], UsageReport], now: float) -> UsageReport:
    try:
        return read(now)
    except SourceError as exc:
        log.warning("usage source failed: %s", exc)
        return UsageReport.failed(f"{type(exc).__name__}: {exc}")


def plan_demo(policy: Policy) -> PlanOutcome:
    """Plan on the embedded demo snapshot (no cluster, no Prometheus)."""
    demo = load_demo()
    facts: ClusterFacts = demo.facts
    snapshot, plan = plan_cycle(facts, demo.usage(), policy, demo.taken_at)
    return PlanOutcome(snapshot, plan, f"embedded demo: {demo.description}")
