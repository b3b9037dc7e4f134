"""What a cycle works with, built once by a composition root (``run --once``, ``plan``, ``serve``) and handed
down: the policy, the Kubernetes client, the usage source, the clock, the state kept between cycles, and
whether to act. Functions take it plus what varies per call (an alert's nodes, the trigger)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rebalancer.actions.evictor import DryRun
from rebalancer.actions.steerer import TokenBucket
from rebalancer.adapters.kube import ApiClient
from rebalancer.adapters.prom import PrometheusUsageSource
from rebalancer.app.prediction import HistoryCache
from rebalancer.app.state_access import StateAccess
from rebalancer.domain.model import ClusterFacts
from rebalancer.policy import Policy

Clock = Callable[[], float]


def host_requester() -> str:
    return f"rebalancer/{socket.gethostname()}"


def always() -> bool:
    return True


@dataclass(frozen=True, slots=True)
class Runtime:
    """``requester``: the evictions' requester and the landing guard marks' owner. ``may_act``: asked before
    every eviction, patch and mark (serve: "still the leader"). ``usage``: a usage source kept open between
    cycles, else one is opened per cycle. ``watched``: the watch cache's facts (nothing is listed), else the
    cluster is listed. ``history``: the predictor's daily peaks, read once a day. ``state_access``: the
    state check, asked again only when the policy changes what it covers. ``steering_buckets``: the
    steerer's patch rate, holding across the cycles of one runtime."""

    policy: Policy
    api: ApiClient
    clock: Clock = time.time
    dry_run: DryRun = DryRun.OFF
    requester: str = field(default_factory=host_requester)
    may_act: Callable[[], bool] = always
    usage: PrometheusUsageSource | None = None
    watched: Callable[[], ClusterFacts] | None = None
    history: HistoryCache = field(default_factory=HistoryCache)
    state_access: StateAccess | None = None
    steering_buckets: dict[str, TokenBucket] = field(default_factory=dict)

    def access(self) -> StateAccess:
        return self.state_access if self.state_access is not None else StateAccess(self.api, dry_run=self.dry_run)


@dataclass(frozen=True, slots=True)
class Focus:
    """An alert's nodes: only they are relieved, and listed afresh when ``known`` (recent facts) gives the
    rest of the cluster."""

    nodes: frozenset[str]
    known: ClusterFacts | None = None
