"""A node's coincident peak: its pods' daily profiles summed, each day's highest bucket, aggregated over the
days (pure; :mod:`rebalancer.planning.predict.profile`).

Each pod's (days, buckets) profile is resolved from its prediction's source (:func:`pod_profile`): its own
(gaps filled, never zero), its workload's shape scaled to its level, or flat at its predicted peak (request,
too little history). A :class:`PeakBook` holds those profiles and every node's sum, so that a planner can ask
what a node's peak would be with some pods added or removed (:meth:`PeakBook.peak_with`) and move pods
(:meth:`PeakBook.move`) without reading history again.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Protocol

import msgspec
import numpy as np

from rebalancer.domain.model import PodKey
from rebalancer.domain.settings.predictor import PredictorSettings
from rebalancer.planning.predict.profile import (
    DailyProfiles,
    Float32Array,
    FloatArray,
    bucket_label,
    flat,
    over_days,
    own_profiles,
    predicted_peak,
    scaled,
)


class PredictedPod(Protocol):
    """What the book reads of a pod's prediction (the predictor's ``PodPrediction``)."""

    @property
    def key(self) -> PodKey: ...
    @property
    def node(self) -> str: ...
    @property
    def workload(self) -> str | None: ...
    @property
    def cpu_m(self) -> float | None: ...
    @property
    def source(self) -> str: ...


TOP_PODS = 5  # pods named as making a node's peak


class PeakPod(msgspec.Struct, frozen=True, gc=False):
    namespace: str
    name: str
    cpu_m: float  # its mean usage in the node's peak bucket, aggregated over the days


class NodePeak(msgspec.Struct, frozen=True, gc=False):
    cpu_m: float  # the node's predicted coincident peak, its system usage included
    bucket: int  # index of the time-of-day bucket it comes in (the highest, each bucket aggregated over the days)
    at: str  # that bucket's local time of day, "14:00-15:00"
    pods: tuple[PeakPod, ...]  # the pods that make it, largest share first (at most TOP_PODS)


def pod_profile(
    source: str,
    cpu_m: float | None,
    own: Float32Array | None,
    workload_shape: Float32Array | None,
    days: int,
    buckets: int,
    observed: Float32Array | None = None,
) -> Float32Array | None:
    """The (days, buckets) profile a pod is predicted with; None when its prediction is unknown. A pod that
    borrows its workload's shape runs at its own level where it has run (``observed``: its profile with
    gaps, too short for a history of its own), else at its predicted peak."""
    if cpu_m is None:
        return None
    if source in ("history", "partial") and own is not None:
        return own
    if source == "workload" and workload_shape is not None:
        at_level = at_own_level(workload_shape, observed) if observed is not None else None
        return at_level if at_level is not None else scaled(workload_shape, cpu_m)
    return flat(cpu_m, days, buckets)


def at_own_level(shape: Float32Array, observed: Float32Array) -> Float32Array | None:
    """``shape`` scaled so that, over the cells the pod has data in, it averages what the pod did there:
    the siblings' profile at the level this pod runs at, not their level. None without a usable cell."""
    seen = np.isfinite(observed)
    if not seen.any():
        return None
    base = float(shape[seen].mean())
    if base <= 0:
        return None
    return (shape * np.float32(float(observed[seen].mean()) / base)).astype(np.float32)


def workload_shapes(
    own: Mapping[PodKey, Float32Array], workload_of: Mapping[PodKey, str | None]
) -> dict[str, Float32Array]:
    """Per workload, the mean of its pods' profiles each scaled to a highest cell of 1: the shape, to be
    scaled to one pod's level (siblings at different levels give the shape, not their sum or maximum)."""
    sums: dict[str, FloatArray] = {}
    counts: dict[str, int] = defaultdict(int)
    for key, profile in own.items():
        workload = workload_of.get(key)
        top = float(profile.max()) if profile.size else 0.0
        if workload is None or top <= 0:
            continue
        scaled_down = profile.astype(np.float64) / top
        sums[workload] = sums[workload] + scaled_down if workload in sums else scaled_down
        counts[workload] += 1
    return {w: (total / counts[w]).astype(np.float32) for w, total in sums.items()}


class PeakBook:
    """Resolved pod profiles and each node's summed profile (mutable: a planner's working copy)."""

    def __init__(self, settings: PredictorSettings, buckets: int, system_cpu_m: Mapping[str, float]) -> None:
        self.settings = settings
        self.shape = (settings.days, buckets)
        self._system = dict(system_cpu_m)
        self._profile: dict[PodKey, Float32Array] = {}
        self._node_of: dict[PodKey, str] = {}
        self._pods: dict[str, set[PodKey]] = defaultdict(set)
        self._total: dict[str, FloatArray] = {}
        self._unknown: dict[str, set[PodKey]] = defaultdict(set)

    @property
    def buckets(self) -> int:
        return self.shape[1]

    def add(self, key: PodKey, node: str, profile: Float32Array | None) -> None:
        """Place a pod (None: its prediction is unknown, and so is its node's peak while it is there)."""
        if key in self._node_of:
            raise ValueError(f"pod {key[0]}/{key[1]} is already on {self._node_of[key]}")
        if profile is not None:
            if profile.shape != self.shape or not (profile >= 0).all() or not np.isfinite(profile.sum()):
                raise ValueError(
                    f"pod {key[0]}/{key[1]}: a profile needs {self.shape[0]} days x {self.shape[1]} buckets, "
                    "finite and not negative"
                )
            self._profile[key] = profile
        self._node_of[key] = node
        self._place(key, node)

    def _place(self, key: PodKey, node: str) -> None:
        self._pods[node].add(key)
        profile = self._profile.get(key)
        if profile is None:
            self._unknown[node].add(key)
        else:
            self._total.setdefault(node, np.zeros(self.shape, dtype=np.float64))
            self._total[node] += profile

    def _take(self, key: PodKey, node: str) -> None:
        self._pods[node].discard(key)
        profile = self._profile.get(key)
        if profile is None:
            self._unknown[node].discard(key)
        else:
            self._total[node] -= profile

    def _node_total(self, node: str) -> FloatArray:
        return self._total.get(node, np.zeros(self.shape, dtype=np.float64))

    def node_of(self, key: PodKey) -> str | None:
        return self._node_of.get(key)

    def profile(self, key: PodKey) -> Float32Array | None:
        return self._profile.get(key)

    def system_cpu_m(self, node: str) -> float:
        return self._system.get(node, 0.0)

    def move(self, key: PodKey, destination: str | None) -> None:
        """The pod leaves its node and lands on ``destination`` (None: nowhere, it is gone)."""
        source = self._node_of.pop(key)
        self._take(key, source)
        if destination is not None:
            self._node_of[key] = destination
            self._place(key, destination)

    def peak(self, node: str) -> tuple[float, int] | None:
        """(predicted peak with the system usage, the bucket it typically comes in); None when a pod on it is
        unknown."""
        return self.peak_with(node)

    def peak_with(
        self, node: str, add: Iterable[PodKey] = (), remove: Iterable[PodKey] = (), plus: FloatArray | None = None
    ) -> tuple[float, int] | None:
        """The node's peak were ``add`` (pods elsewhere) on it, ``remove`` (pods on it) gone from it and
        ``plus`` (a summed (days, buckets) profile of pods the book does not hold) added; None when a pod
        would be unknown."""
        total = self.total_with(node, add, remove, plus)
        return None if total is None else predicted_peak(total, self._system.get(node, 0.0), self.settings)

    def total_with(
        self, node: str, add: Iterable[PodKey] = (), remove: Iterable[PodKey] = (), plus: FloatArray | None = None
    ) -> FloatArray | None:
        """The summed (days, buckets) profile of the node's pods (its system usage not included) with the
        changes :meth:`peak_with` takes; None when a pod would be unknown."""
        add, remove = list(add), set(remove)
        unknown = (self._unknown.get(node, set()) - remove) | {k for k in add if k not in self._profile}
        if unknown:
            return None
        total = self._node_total(node).copy()
        if plus is not None:
            total += plus
        for key in add:
            total += self._profile[key]
        for key in remove & self._pods.get(node, set()):
            if key in self._profile:
                total -= self._profile[key]
        return total

    def node_peak(self, node: str, top: int = TOP_PODS) -> NodePeak | None:
        """The node's peak, when it comes and the pods that make it; None when a pod on it is unknown."""
        found = self.peak(node)
        if found is None:
            return None
        cpu_m, bucket = found
        keys = sorted(self._pods.get(node, ()))
        values = np.empty(0)
        if keys:  # a node without pods peaks at its system usage, made by no pod
            values = over_days(np.array([self._profile[k][:, bucket] for k in keys], dtype=np.float64), self.settings)
        shares = sorted(zip((float(v) for v in values), keys, strict=True), key=lambda item: (-item[0], item[1]))
        pods = tuple(PeakPod(ns, name, share) for share, (ns, name) in shares[:top])
        return NodePeak(cpu_m, bucket, bucket_label(bucket, self.buckets), pods)


def build_book(
    predictions: Iterable[PredictedPod],
    profiles: DailyProfiles[PodKey],
    settings: PredictorSettings,
    system_cpu_m: Mapping[str, float],
) -> PeakBook:
    """Every predicted pod on its node, with the profile its prediction's source gives it."""
    predictions = list(predictions)
    if profiles.days != settings.days:
        raise ValueError(f"profiles hold {profiles.days} days, the predictor reads {settings.days}")
    rows = {p.key: i for p in predictions if (i := profiles.index(p.key)) is not None}
    filled, has = own_profiles(profiles.values, list(rows.values()))
    own = {key: filled[n] for n, key in enumerate(rows) if has[n]}
    with_history = {p.key: own[p.key] for p in predictions if p.source == "history" and p.key in own}
    shapes = workload_shapes(with_history, {p.key: p.workload for p in predictions})
    book = PeakBook(settings, profiles.buckets, system_cpu_m)
    for p in predictions:
        shape = shapes.get(p.workload) if p.workload is not None else None
        i = profiles.index(p.key)
        observed = profiles.values[i] if i is not None and p.source == "workload" else None
        days, buckets = profiles.days, profiles.buckets
        book.add(p.key, p.node, pod_profile(p.source, p.cpu_m, own.get(p.key), shape, days, buckets, observed))
    return book
