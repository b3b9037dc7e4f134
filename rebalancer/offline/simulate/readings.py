"""What the simulated Prometheus answers (pure): the usage report each variant is fed, and the pods'
daily peaks the predictor reads.

The node samples are the sum of the usage the pods bound to the node got at each step (their demand,
throttled where the node's pods ask more than its allocatable: :mod:`cpu_share`) plus the system usage; a
pod's samples are its slot's served usage (a replacement continues its evicted pod's trace, so a pod bound
within the window is read over the whole window: a small approximation).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from rebalancer.domain.model import PodKey, UsageReport
from rebalancer.offline.simulate.cluster import Cluster
from rebalancer.offline.simulate.variants import UsageMode
from rebalancer.offline.simulate.world import World
from rebalancer.planning.predict.history import DailyPeaks
from rebalancer.planning.predict.profile import DailyProfiles


class NodeSamples:
    """The last ``window`` node usage samples of one world (a ring). With ``rate_steps`` above 1 a sample is
    the mean of the last ``rate_steps`` steps' usage, as ``rate()`` over a counter reads it (a 5-minute
    rate sampled every minute); :attr:`last` is the last step's own usage either way."""

    def __init__(self, nodes: int, window: int, rate_steps: int = 1) -> None:
        self.window, self.rate_steps = window, rate_steps
        self._ring = np.zeros((nodes, window))
        self._raw = np.zeros((nodes, rate_steps))
        self._filled = self._raw_filled = 0
        self.last: npt.NDArray[np.float64] = np.zeros(nodes)

    @property
    def span(self) -> int:
        """Steps of usage one reading spans: the window of samples, each a rate over ``rate_steps``."""
        return self.window + self.rate_steps - 1

    def add(self, node_usage: npt.NDArray[np.float64]) -> None:
        self._raw[:, self._raw_filled % self.rate_steps] = node_usage
        self._raw_filled += 1
        rate: npt.NDArray[np.float64] = self._raw[:, : min(self._raw_filled, self.rate_steps)].mean(axis=1)
        self._ring[:, self._filled % self.window] = rate
        self._filled += 1
        self.last = node_usage

    def mean(self) -> npt.NDArray[np.float64]:
        filled = min(self._filled, self.window)
        out: npt.NDArray[np.float64] = self._ring[:, :filled].mean(axis=1)
        return out

    def quantile(self, q: float) -> npt.NDArray[np.float64]:
        filled = min(self._filled, self.window)
        out: npt.NDArray[np.float64] = np.quantile(self._ring[:, :filled], q, axis=1)
        return out


def node_usage(world: World, step: int) -> npt.NDArray[np.float64]:
    """Real CPU of every node at ``step``: what its bound pods got plus the system's."""
    usage = world.served[:, step].astype(np.float64)
    bound = world.node_of_slot >= 0
    sums = np.bincount(world.node_of_slot[bound], weights=usage[bound], minlength=len(world.node_names))
    out: npt.NDArray[np.float64] = sums.astype(np.float64) + world.cluster.config.system_cpu_m
    return out


def usage_report(mode: UsageMode, world: World, step: int, samples: NodeSamples, quantile: float) -> UsageReport:
    names = world.node_names
    bound = [(p, int(world.node_of_slot[slot])) for slot, p in enumerate(world.pods) if world.node_of_slot[slot] >= 0]
    if mode == "requests":
        requested = np.zeros(len(names))
        for pod, node in bound:
            requested[node] += pod.cpu_request_m
        return UsageReport(
            node_cpu_m={n: int(requested[i]) for i, n in enumerate(names)},
            pod_cpu_m={p.key: p.cpu_request_m for p, _ in bound},
            description="CPU requests (descheduler semantics)",
        )
    if mode == "instant":
        instant = samples.last
        requested = np.zeros(len(names))
        for pod, node in bound:
            requested[node] += pod.cpu_request_m
        return UsageReport(
            node_cpu_m={n: int(instant[i]) for i, n in enumerate(names)},
            pod_cpu_m={
                p.key: int(instant[node] * p.cpu_request_m / requested[node]) if requested[node] else 0
                for p, node in bound
            },
            description="instant node value, pods credited by requests (descheduler Prometheus mode)",
        )
    window = samples.window
    start = max(0, step - window + 1)
    per_slot = np.quantile(trailing_means(world.served, start, step, samples.rate_steps), quantile, axis=1)
    per_node = samples.quantile(quantile)
    return UsageReport(
        node_cpu_m={n: int(per_node[i]) for i, n in enumerate(names)},
        pod_cpu_m={p.key: int(per_slot[world.slot_of(p)]) for p, _ in bound},
        description=f"P{quantile * 100:g} over the last {window} samples",
    )


def trailing_means(served: npt.NDArray[np.float32], start: int, end: int, steps: int) -> npt.NDArray[np.float64]:
    """(slots, end - start + 1): at each step from ``start`` to ``end``, each slot's mean usage over the last
    ``steps`` steps (fewer at the trace's start): its ``rate()`` over that many steps."""
    low = max(0, start - steps + 1)
    sums = np.zeros((len(served), end + 2 - low))
    np.cumsum(served[:, low : end + 1], axis=1, dtype=np.float64, out=sums[:, 1:])
    ends = np.arange(start, end + 1)
    begins = np.maximum(ends - steps + 1, low)
    out: npt.NDArray[np.float64] = (sums[:, ends + 1 - low] - sums[:, begins - low]) / (ends - begins + 1)
    return out


def daily_table(
    cluster: Cluster, quantile: float, usage: npt.NDArray[np.float32] | None = None
) -> npt.NDArray[np.float64]:
    """(slots, days): each slot's quantile over each whole day of the span, of ``usage`` (default: as
    served under the initial placement)."""
    usage = cluster.served_at_start() if usage is None else usage
    per_day = cluster.config.steps_per_day
    days = usage.shape[1] // per_day
    shaped = usage[:, : days * per_day].reshape(len(usage), days, per_day)
    table: npt.NDArray[np.float64] = np.quantile(shaped, quantile, axis=2)
    return table


def refresh_day(
    table: npt.NDArray[np.float64], profiles: npt.NDArray[np.float32] | None, world: World, day: int, quantile: float
) -> None:
    """Day ``day`` of the tables (:func:`daily_table`, :func:`profile_table`) from what ``world``'s pods got
    that day."""  # fmt: skip
    per_day = world.cluster.config.steps_per_day
    usage = world.served[:, day * per_day : (day + 1) * per_day]
    table[:, day] = np.quantile(usage, quantile, axis=1)
    if profiles is not None:
        buckets = profiles.shape[2]
        profiles[:, day] = usage.reshape(len(usage), buckets, per_day // buckets).mean(axis=2, dtype=np.float64)


def pod_history(
    world: World, table: npt.NDArray[np.float64], today: int, days: int, quantile: float
) -> DailyPeaks[PodKey]:
    """The current pods' peaks of days ``today - days .. today - 1`` (a day before a pod existed is missing;
    the day it was created counts from then on, as Prometheus would have it)."""
    cluster = world.cluster
    per_day, step = cluster.config.steps_per_day, cluster.config.step_seconds
    first = today - days
    keys = tuple(p.key for p in world.pods)
    values = np.full((len(keys), days), np.nan)
    for slot, pod in enumerate(world.pods):
        created_step = max(0, math.ceil((pod.created - cluster.start) / step))
        for d in range(max(first, 0), today):
            begin, end = d * per_day, (d + 1) * per_day
            if created_step <= begin:
                values[slot, d - first] = table[slot, d]
            elif created_step < end:
                values[slot, d - first] = float(np.quantile(world.served[slot, created_step:end], quantile))
    return DailyPeaks(keys, values)


def profile_table(
    cluster: Cluster, buckets: int, usage: npt.NDArray[np.float32] | None = None
) -> npt.NDArray[np.float32]:
    """(slots, days, buckets): each slot's mean over each time-of-day bucket of each whole day of the span, of
    ``usage`` (default: as served under the initial placement)."""
    usage = cluster.served_at_start() if usage is None else usage
    per_day = cluster.config.steps_per_day
    if per_day % buckets:
        raise ValueError(f"{buckets} buckets do not divide a day of {per_day} steps")
    days = usage.shape[1] // per_day
    shaped = usage[:, : days * per_day].reshape(len(usage), days, buckets, per_day // buckets)
    table: npt.NDArray[np.float32] = shaped.mean(axis=3, dtype=np.float64).astype(np.float32)
    return table


def pod_profiles(world: World, table: npt.NDArray[np.float32], today: int, days: int) -> DailyProfiles[PodKey]:
    """The current pods' profiles of days ``today - days .. today - 1``: a bucket before a pod existed is
    missing; the bucket it was created in counts from then on, as Prometheus would have it."""
    cluster = world.cluster
    per_day, step = cluster.config.steps_per_day, cluster.config.step_seconds
    buckets = table.shape[2]
    per_bucket = per_day // buckets
    first = today - days
    keys = tuple(p.key for p in world.pods)
    values = np.full((len(keys), days, buckets), np.nan, dtype=np.float32)
    for slot, pod in enumerate(world.pods):
        created_step = max(0, math.ceil((pod.created - cluster.start) / step))
        for d in range(max(first, 0), today):
            begin = d * per_day
            if created_step <= begin:
                values[slot, d - first] = table[slot, d]
                continue
            for b in range(buckets):
                start, end = begin + b * per_bucket, begin + (b + 1) * per_bucket
                if created_step <= start:
                    values[slot, d - first, b] = table[slot, d, b]
                elif created_step < end:
                    values[slot, d - first, b] = float(world.served[slot, created_step:end].mean())
    return DailyProfiles(keys, values)
