"""Pods' daily CPU peaks from Prometheus, computed server-side (the predictor's input).

For each of the last N calendar days, one instant query per batch of nodes, evaluated at the day's end:

    quantile_over_time(0.95, (<podQuery>)[86399s:5m])      # a subquery over the per-pod rate
    max by (namespace, pod) (quantile_over_time(0.95, <recordingRule>{node=~"..."}[86399s]))   # or a recorded series

so Prometheus returns one number per pod and day, never the raw samples (8 days of raw samples for
30,000 pods exceed Prometheus' default 50M-sample limit). The range is one second shorter than the day:
Prometheus 2 ranges are closed at both ends, and the point at the opening midnight belongs to the day
before. Nodes are grouped into batches so that one query holds at most ``maxSamplesPerQuery`` samples.
``pooled_p95`` needs one more query per batch over the whole window; ``systemQuery`` one per day.
With ``nodePeak: coincident`` each day and batch also has one query for the pods' daily profiles (a range
query, or the raw samples of the hourly ``profileRule``: :mod:`rebalancer.adapters.prom.profiles`).

Missing stays missing: a pod without a value on a day has NaN there (never 0). Any failed or malformed
query fails the whole read with a ``SourceError`` (a prediction on part of the batches would be wrong
for the rest); an empty answer for a day is not an error (a new cluster, or pods created today).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import islice
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

from rebalancer.adapters.prom.client import PromClient, Vector, by_node, iso
from rebalancer.adapters.prom.matrix import PodMatrix, rows_of
from rebalancer.adapters.prom.profiles import (
    HOURLY_SAMPLES_AFTER,
    ProfileTable,
    bucket_seconds,
    day_range,
    hourly_samples,
)
from rebalancer.domain.model import PodKey
from rebalancer.domain.settings.predictor import PredictorSettings
from rebalancer.domain.settings.shared import PrometheusSettings, format_duration
from rebalancer.planning.predict.days import DayWindow, last_days
from rebalancer.planning.predict.history import DailyPeaks
from rebalancer.planning.predict.profile import DailyProfiles

Progress = Callable[[int, int, str], None]
K = TypeVar("K", bound=Hashable)


RECORDING_LAG_SECONDS = 300
"""How long after its time a sample is taken to be stored: a scrape's or a rule group's evaluation (one
minute apart by default), a few of them late, or a remote write."""


def read_days(predictor: PredictorSettings, at: float) -> tuple[DayWindow, ...]:
    """The days a read at ``at`` covers: the last ``days`` calendar days whose every sample its queries read
    is recorded by ``at``. Up to RECORDING_LAG_SECONDS after midnight (with ``nodePeak: coincident`` and the
    hourly ``profileRule``, half an hour more: the sample of the day's last hour is taken up to 00:30) the
    last of them is the day before yesterday, never yesterday without its last samples (serve mode keeps a
    read for the whole day)."""
    hourly = predictor.node_peak == "coincident" and predictor.history.profile_rule is not None
    latest = HOURLY_SAMPLES_AFTER if hourly else 0
    return last_days(at - latest - RECORDING_LAG_SECONDS, predictor.days, predictor.history.time_zone)


@dataclass(frozen=True, slots=True)
class PodHistory:
    """What the predictor reads: per pod (and per node's system usage) one peak per day, oldest first."""

    pods: DailyPeaks[PodKey]
    system: DailyPeaks[str] | None
    days: tuple[DayWindow, ...]
    queries: int
    batches: int
    description: str
    profiles: DailyProfiles[PodKey] | None = None  # per pod, day and time-of-day bucket (nodePeak: coincident)


@dataclass(frozen=True, slots=True)
class _Query:
    name: str
    promql: str
    at: float
    kind: str  # "pods", "pooled", "system" or "profile"
    day: int  # index into the days (pooled: -1)
    range: tuple[float, float, float] | None = None  # profile: (start, end, step) of the range query


def node_batches(pods_per_node: Mapping[str, int], max_pods: int) -> list[tuple[str, ...]]:
    """Nodes (sorted) packed greedily into batches of at most ``max_pods`` pods; a node with more pods than
    that is a batch of its own. Nodes without pods are left out: they have no history to read."""
    batches: list[tuple[str, ...]] = []
    current: list[str] = []
    held = 0
    for node in sorted(pods_per_node):
        count = pods_per_node[node]
        if count <= 0:
            continue
        if current and held + count > max_pods:
            batches.append(tuple(current))
            current, held = [], 0
        current.append(node)
        held += count
    if current:
        batches.append(tuple(current))
    return batches


class PrometheusHistorySource:
    def __init__(self, prometheus: PrometheusSettings, predictor: PredictorSettings) -> None:
        self._prometheus = prometheus
        self._predictor = predictor
        self._history = predictor.history
        self._client = PromClient(
            prometheus,
            timeout_seconds=predictor.history.timeout.total_seconds(),
            compressed=predictor.history.compressed_answers,
        )

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> PrometheusHistorySource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read(self, pods_per_node: Mapping[str, int], at: float, progress: Progress | None = None) -> PodHistory:
        """The daily peaks of the pods on ``pods_per_node``'s nodes for the days before ``at`` recorded by then
        (:func:`read_days`)."""
        days = read_days(self._predictor, at)
        pooled = self._predictor.aggregation == "pooled_p95"
        day_batches = self._batches(pods_per_node, 1)
        pooled_batches = self._batches(pods_per_node, len(days)) if pooled else []
        queries = [
            _Query(
                f"history day {day.day} batch {b + 1}/{len(day_batches)}",
                self._pods_promql(batch, day.seconds),
                day.end,
                "pods",
                i,
            )
            for i, day in enumerate(days)
            for b, batch in enumerate(day_batches)
        ]
        window = days[-1].end - days[0].start
        queries += [
            _Query(
                f"history pooled batch {b + 1}/{len(pooled_batches)}",
                self._pods_promql(batch, window),
                days[-1].end,
                "pooled",
                -1,
            )
            for b, batch in enumerate(pooled_batches)
        ]
        profiled = self._predictor.node_peak == "coincident"
        buckets = self._predictor.profile_buckets
        if profiled:
            queries += [
                self._profile_query(f"profile day {day.day} batch {b + 1}/{len(day_batches)}", batch, day, i)
                for i, day in enumerate(days)
                for b, batch in enumerate(day_batches)
            ]
        system = self._history.system_query
        if system is not None:
            queries += [
                _Query(f"history system day {day.day}", self._system_promql(system, day.seconds), day.end, "system", i)
                for i, day in enumerate(days)
            ]
        self._client.authorize()
        pod_days: _Table[PodKey] = _Table(len(days))
        pod_pooled: _Table[PodKey] = _Table(1)
        system_days: _Table[str] = _Table(len(days))
        expected = sum(pods_per_node.values())
        profile_table = ProfileTable(days, buckets, self._history.time_zone, expected if profiled else 0)
        for query, series in self._run(queries, progress):
            if isinstance(series, PodMatrix):
                profile_table.add(query.day, series)
            elif isinstance(series, list):
                system_days.add(query.day, by_node(query.name, series, self._prometheus.node_label))
            elif query.kind == "pooled":
                pod_pooled.add(0, series)
            else:
                # a pod name on two nodes (a StatefulSet pod rescheduled): each batch saw part of the day
                pod_days.add(query.day, series)
        return PodHistory(
            pods=pod_days.peaks(pod_pooled if pooled else None),
            system=system_days.peaks(None) if self._history.system_query is not None else None,
            days=days,
            queries=len(queries),
            batches=len(day_batches),
            description=self._describe(days, len(day_batches)),
            profiles=profile_table.profiles() if profiled else None,
        )

    # -- queries --------------------------------------------------------------------------------

    def _batches(self, pods_per_node: Mapping[str, int], days: int) -> list[tuple[str, ...] | None]:
        """None stands for "every node" (one batch, no filter)."""
        points = days * 86400 / self._history.resolution.total_seconds()
        max_pods = max(1, int(self._history.max_samples_per_query // points))
        batches = node_batches(pods_per_node, max_pods)
        if len(batches) <= 1 or not self._filterable():
            return [None]
        return list(batches)

    def _filterable(self) -> bool:
        return self._history.recording_rule is not None or "{pod_filter}" in self._history.pod_query

    def _pods_promql(self, nodes: Sequence[str] | None, seconds: float, *, mean: bool = False) -> str:
        """The pods' quantile (or ``mean``) over the ``seconds`` before the evaluation time."""
        over = "avg_over_time(" if mean else f"quantile_over_time({self._predictor.quantile:g}, "
        node_set = frozenset(nodes) if nodes is not None else None
        rule = self._history.recording_rule
        if rule is not None:  # a pod rescheduled under its name (a StatefulSet's) has a series per node:
            # the higher, an upper bound of the whole day's quantile (and of the hour's mean it moved in)
            matcher = self._prometheus.render("{pod_filter}", node_set).removeprefix(", ")
            return f"max by (namespace, pod) ({over}{rule}{{{matcher}}}[{_range(seconds)}]))"
        inner = self._prometheus.render(self._history.pod_query, node_set)
        return f"{over}({inner})[{_range(seconds)}:{format_duration(self._history.resolution)}])"

    def _profile_query(self, name: str, nodes: Sequence[str] | None, day: DayWindow, index: int) -> _Query:
        """The day's hourly means: the raw samples of ``profileRule`` if set, else a range query of means."""
        rule = self._history.profile_rule
        if rule is None:
            buckets = self._predictor.profile_buckets
            promql = self._pods_promql(nodes, bucket_seconds(buckets), mean=True)
            return _Query(name, promql, day.end, "profile", index, day_range(day, buckets))
        at, seconds = hourly_samples(day)
        matcher = self._prometheus.render("{pod_filter}", frozenset(nodes) if nodes is not None else None)
        return _Query(name, f"{rule}{{{matcher.removeprefix(', ')}}}[{seconds}s]", at, "profile", index)

    def _system_promql(self, template: str, seconds: float) -> str:
        inner = self._prometheus.render(template)
        return f"quantile_over_time({self._predictor.quantile:g}, ({inner})[{_range(seconds)}:{format_duration(self._history.resolution)}])"

    def _ask(self, query: _Query) -> Vector | PodMatrix | dict[PodKey, float]:
        """The answer, decoded in the worker thread: a pod query's values by pod, a profile's points."""
        if query.range is not None:
            return self._client.pod_matrix(query.name, query.promql, *query.range)
        if query.kind == "profile":
            return self._client.pod_samples(query.name, query.promql, query.at)
        if query.kind == "system":
            return self._client.large_vector(query.name, query.promql, query.at)
        return self._client.pod_values(query.name, query.promql, query.at)

    def _run(
        self, queries: Sequence[_Query], progress: Progress | None
    ) -> Iterator[tuple[_Query, Vector | PodMatrix | dict[PodKey, float]]]:
        """The answers in the queries' order, ``concurrency`` queries in flight ahead of the one consumed: an
        answer is held until it is consumed, never until the read ends (at 150,000 pods, 48 answers of tens
        of megabytes each)."""
        total, ahead = len(queries), self._history.concurrency
        with ThreadPoolExecutor(max_workers=ahead, thread_name_prefix="history") as pool:
            waiting = iter(queries)
            pending = deque((query, pool.submit(self._ask, query)) for query in islice(waiting, ahead + 1))
            try:
                for done in range(1, total + 1):
                    query, future = pending.popleft()
                    series = future.result()
                    del future  # the future holds its result: not after the answer is consumed
                    pending.extend((q, pool.submit(self._ask, q)) for q in islice(waiting, 1))
                    if progress is not None:
                        progress(done, total, query.name)
                    yield query, series
                    del series
            finally:
                for _, future in pending:
                    future.cancel()

    def _describe(self, days: tuple[DayWindow, ...], batches: int) -> str:
        h = self._history
        source = (
            f"recording rule {h.recording_rule}"
            if h.recording_rule
            else f"pod query at {format_duration(h.resolution)} resolution"
        )
        profile = ""
        if self._predictor.node_peak == "coincident":
            profile = f" and mean per time-of-day bucket ({self._predictor.profile_buckets} a day"
            profile += f", from the hourly rule {h.profile_rule})" if h.profile_rule else ")"
        return (
            f"Prometheus {self._client.shown_url}: daily {self._predictor.quantile:g} quantile{profile} of {source}, "
            f"{len(days)} day(s) {days[0].day}..{days[-1].day} ({h.time_zone}), {batches} batch(es) of nodes, "
            f"read at {iso(days[-1].end)}"
        )


def _range(seconds: float) -> str:
    return f"{max(1, round(seconds) - 1)}s"


class _Table(Generic[K]):
    """Values in cores per key and column, gathered answer by answer (a few numpy operations per answer,
    not one Python step per pod and day); a key answered twice for one column keeps its highest value."""

    def __init__(self, columns: int) -> None:
        self._columns = columns
        self._index: dict[K, int] = {}
        self._parts: list[tuple[npt.NDArray[np.int64], int, npt.NDArray[np.float64]]] = []

    def add(self, column: int, values: Mapping[K, float]) -> None:
        rows = rows_of(self._index, list(values))
        self._parts.append((rows, column, np.fromiter(values.values(), dtype=np.float64, count=len(values))))

    def millicores(self) -> tuple[tuple[K, ...], npt.NDArray[np.float64]]:
        """The keys in first-seen order and their (keys, columns) values in millicores, NaN where missing."""
        out = np.full((len(self._index), self._columns), np.nan)
        for rows, column, values in self._parts:
            out[rows, column] = np.fmax(out[rows, column], values * 1000.0)
        return tuple(self._index), out

    def peaks(self, pooled: _Table[K] | None) -> DailyPeaks[K]:
        keys, values = self.millicores()
        if pooled is None:
            return DailyPeaks(keys, values, None)
        pooled_keys, pooled_values = pooled.millicores()
        where = {key: i for i, key in enumerate(pooled_keys)}
        pooled_arr = np.array([pooled_values[where[k], 0] if k in where else math.nan for k in keys], dtype=np.float64)
        return DailyPeaks(keys, values, pooled_arr)
