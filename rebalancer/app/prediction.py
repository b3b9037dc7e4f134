"""Composition root, prediction part: history from Prometheus -> the pure predictor -> what a cycle or
`rebalancer predict` needs. Only this module and ``root`` build clients for the predictor.

A failed history read never becomes an eviction: a cycle gets :meth:`PredictedLoad.failed`, so strategies
that classify by prediction evict nothing while the others go on; `rebalancer predict` reports the error.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from rebalancer.adapters.kube import KubeSource, connect
from rebalancer.adapters.prom import PrometheusUsageSource
from rebalancer.adapters.prom.history import PodHistory, Progress, PrometheusHistorySource, read_days
from rebalancer.app import collector
from rebalancer.domain.errors import SourceError
from rebalancer.domain.model import ClusterFacts
from rebalancer.planning.predict.predictor import Prediction, predict, predict_with_book, scheduled_pods
from rebalancer.planning.predicted import PREDICTIVE, PredictedLoad
from rebalancer.planning.protections import Protections
from rebalancer.planning.snapshot import build_snapshot
from rebalancer.policy import Policy
from strategies.resources import node_amount

log = logging.getLogger(__name__)


class HistoryCache:
    """The daily peaks change once a day: serve mode keeps the last read for its days and settings, so a
    cycle that classifies by prediction reads Prometheus' history once a day, not every cycle."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: tuple[str, ...] | None = None
        self._history: PodHistory | None = None

    def get(self, key: tuple[str, ...]) -> PodHistory | None:
        with self._lock:
            return self._history if key == self._key else None

    def put(self, key: tuple[str, ...], history: PodHistory) -> None:
        with self._lock:
            self._key, self._history = key, history


def needs_prediction(policy: Policy) -> bool:
    """Some enabled strategy classifies nodes by their predicted peak."""
    return any(s.enabled and getattr(s, "classify_by", "current") in PREDICTIVE for s in policy.strategies)


def pods_per_node(facts: ClusterFacts) -> dict[str, int]:
    return {node: len(pods) for node, pods in scheduled_pods(facts).items()}


def read_history(
    policy: Policy,
    facts: ClusterFacts,
    now: float,
    progress: Progress | None = None,
    cache: HistoryCache | None = None,
) -> PodHistory:
    """The pods' daily peaks (raises a ``SourceError`` when Prometheus fails or answers nonsense)."""
    days = read_days(policy.predictor, now)  # the days the read covers: a new read when they change
    key = (str(days[-1].end), policy.prometheus.model_dump_json(), policy.predictor.model_dump_json())
    if cache is not None and (cached := cache.get(key)) is not None:
        return cached
    with PrometheusHistorySource(policy.prometheus, policy.predictor) as source:
        history = source.read(pods_per_node(facts), now, progress)
    if cache is not None:
        cache.put(key, history)
    return history


def predicted_load(policy: Policy, facts: ClusterFacts, now: float, cache: HistoryCache | None) -> PredictedLoad:
    """The next-peak load for a cycle; a failure is recorded in it, never raised."""
    with collector.paused():  # the answers' points and the profiles make no reference cycles
        try:
            history = read_history(policy, facts, now, cache=cache)
        except SourceError as exc:
            log.warning("predictor history failed: %s", exc)
            return PredictedLoad.failed(f"predictor history: {type(exc).__name__}: {exc}")
        settings = policy.predictor
        prediction, book = predict_with_book(facts, history.pods, settings, history.system, history.profiles)
    return PredictedLoad.from_prediction(prediction, history.description, book)


CurrentUsage = dict[str, dict[str, float]]
"""Resource (cpu, memory, pods) -> node -> its utilization in percent; a node of unknown usage is left out."""


@dataclass(frozen=True, slots=True)
class LivePrediction:
    prediction: Prediction
    description: str
    current: CurrentUsage | None  # resource -> node -> utilization % now, None when the usage read failed
    current_problem: str | None
    seconds: dict[str, float]  # wall time of each step


def predict_live(
    policy: Policy,
    kubeconfig: str | None,
    context: str | None,
    progress: Progress | None = None,
    clock: Callable[[], float] = time.time,
) -> LivePrediction:
    """`rebalancer predict` on a live cluster: list it, read the history, predict; the current usage beside."""
    now = clock()
    started = time.perf_counter()
    api = connect(kubeconfig, context)
    with collector.paused():
        annotations = Protections.from_settings(policy.protections).annotations_read()
        facts = KubeSource(
            api, annotations, list_mode=policy.kubernetes.list_mode, encoding=policy.kubernetes.encoding
        ).read_facts()
    listed = time.perf_counter()
    # the answers' millions of points and the profiles make no reference cycles: the collector only costs
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="current-usage") as pool, collector.paused():
        current = pool.submit(_current_pct, policy, facts, now)  # beside the history read: Prometheus has 2 cores
        history = read_history(policy, facts, now, progress)
        read = time.perf_counter()
        prediction = predict(facts, history.pods, policy.predictor, history.system, history.profiles)
        predicted = time.perf_counter()
        now_used, problem = current.result()
    return LivePrediction(
        prediction,
        history.description,
        now_used,
        problem,
        {
            "cluster": listed - started,
            "history": read - listed,
            "predict": predicted - read,
            "current usage wait": time.perf_counter() - predicted,  # read beside the history
        },
    )


def _current_pct(policy: Policy, facts: ClusterFacts, now: float) -> tuple[CurrentUsage | None, str | None]:
    """Each node's utilization now, as a cycle would see it, CPU and the other resources the thresholds name."""
    others = sorted(policy.other_resources)
    problem = None
    with PrometheusUsageSource(policy.prometheus) as source:
        try:
            usage = source.read(now, memory="memory" in others, pod_memory=False)
        except SourceError as exc:
            if "memory" not in others:
                return None, f"current usage unknown: {type(exc).__name__}: {exc}"
            problem = f"current memory unknown: {type(exc).__name__}: {exc}"
            others.remove("memory")
            try:  # CPU (and pods) without it
                usage = source.read(now)
            except SourceError as again:
                return None, f"current usage unknown: {type(again).__name__}: {again}"
    # the node usage a cycle would see (unknown stays unknown: not Ready, stale, a running pod without data)
    snapshot = build_snapshot(facts, usage, policy.pools, now)
    found: CurrentUsage = {"cpu": {}, **{resource: {} for resource in others}}
    for name, node in snapshot.nodes.items():
        if (usage_m := snapshot.load[name].usage_m) is not None:
            found["cpu"][name] = 100.0 * usage_m / node.allocatable_cpu_m
        for resource in others:
            used, allocatable, _ = node_amount(snapshot, name, resource)
            if used is not None and allocatable > 0:
                found[resource][name] = 100.0 * used / allocatable
    for resource in [r for r in others if not found[r] and snapshot.nodes]:
        del found[resource]  # unknown everywhere: not shown, never as 0
        problem = problem or f"current {resource} unknown: no node source answered it for any node"
    return found, problem
