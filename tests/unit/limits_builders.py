"""Plain builders for the limiter tests: settings from YAML, requests, and a fake clock."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import yaml

from rebalancer.domain.model import WorkloadRef
from rebalancer.planning.limits import (
    CycleCounts,
    EvictionRequest,
    LimiterState,
    LimitSettings,
    ReplicaCounts,
    Verdict,
    admit,
)

T0 = datetime(2024, 1, 1, tzinfo=ZoneInfo("UTC")).timestamp()  # a Monday, 00:00 UTC
HOUR = 3600.0
DAY = 86400.0


def limits(text: str = "{}") -> LimitSettings:
    """The ``limits:`` section from YAML, validated exactly as the policy loader will."""
    return LimitSettings.model_validate(yaml.safe_load(text))


def at(local: str, zone: str = "UTC", *, fold: int = 0) -> float:
    """Epoch seconds of a local wall-clock time ``YYYY-MM-DD HH:MM[:SS]`` in ``zone``."""
    return datetime.fromisoformat(local).replace(tzinfo=ZoneInfo(zone), fold=fold).timestamp()


def request(
    pod: str = "p1",
    *,
    node: str = "n1",
    pool: str = "general",
    namespace: str = "default",
    workload: str | None = "web",
    kind: str = "Deployment",
    labels: Mapping[str, str] | None = None,
    node_labels: Mapping[str, str] | None = None,
    priority_class: str = "",
    replicas: tuple[int, int, int] | None = None,
    ready: bool = True,
) -> EvictionRequest:
    """``replicas`` is (desired, ready, unavailable)."""
    return EvictionRequest(
        namespace=namespace,
        pod=pod,
        node=node,
        pool=pool,
        workload=WorkloadRef(kind, namespace, workload) if workload is not None else None,
        pod_labels=dict(labels or {}),
        node_labels=dict(node_labels or {}),
        priority_class=priority_class,
        replicas=ReplicaCounts(*replicas) if replicas is not None else None,
        pod_ready=ready,
    )


@dataclass
class Limiter:
    """The engine driven like the evictor drives it, with a fake clock: ``now`` only moves when told."""

    settings: LimitSettings
    now: float = T0
    state: LimiterState = field(default_factory=LimiterState)
    cycle: CycleCounts = field(default_factory=CycleCounts)

    def admit(self, req: EvictionRequest | None = None) -> Verdict:
        verdict, self.state, self.cycle = admit(req or request(), self.state, self.cycle, self.settings, self.now)
        return verdict

    def admit_many(self, n: int, **kwargs: Any) -> list[Verdict]:
        """``n`` requests for distinct pods (keyword arguments as for :func:`request`)."""
        return [self.admit(request(f"p{self.cycle.total}-{i}", **kwargs)) for i in range(n)]

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def new_cycle(self) -> None:
        self.cycle = CycleCounts()
