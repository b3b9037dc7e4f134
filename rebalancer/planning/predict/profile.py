"""Daily profiles: per entity (a pod, a VM) its mean CPU per time-of-day bucket on each day (pure).

A day is split into ``buckets`` equal time-of-day buckets in the history's time zone (24 hourly, 48
half-hourly, ...). ``values[e, d, b]`` is the mean of entity ``e`` over bucket ``b`` of day ``d`` (oldest day
first), in millicores, float32 so that 150,000 pods x 8 days x 24 buckets take 115 MB; NaN is a bucket
without data, never zero. Means add up: the sum of pods' profiles is exactly their node's mean profile, as if
they had run together on all the days, and a day's highest hourly mean is close to its P95 (the top hour is
the top 4 % of the day). A node's predicted peak is those daily peaks aggregated over the days like any
entity's daily peaks (:func:`predicted_peak`).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

from rebalancer.domain.settings.predictor import PredictorSettings
from rebalancer.planning.predict.aggregate import aggregate

K = TypeVar("K", bound=Hashable)
Float32Array = npt.NDArray[np.float32]
FloatArray = npt.NDArray[np.float64]

DAY_SECONDS = 86_400


@dataclass(frozen=True, slots=True)
class DailyProfiles(Generic[K]):
    keys: tuple[K, ...]
    values: Float32Array  # (entities, days, buckets), millicores, NaN = no data
    _index: dict[K, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.values.ndim != 3 or self.values.shape[0] != len(self.keys):
            raise ValueError(
                f"values must be (entities, days, buckets) = ({len(self.keys)}, days, buckets), got {self.values.shape}"
            )
        if np.isinf(self.values).any() or (self.values < 0).any():
            raise ValueError("values: profile quantiles must be finite and not negative (NaN marks no data)")
        index = {k: i for i, k in enumerate(self.keys)}
        if len(index) != len(self.keys):
            raise ValueError("keys must be unique")
        object.__setattr__(self, "_index", index)

    @property
    def days(self) -> int:
        return int(self.values.shape[1])

    @property
    def buckets(self) -> int:
        return int(self.values.shape[2])

    def index(self, key: K) -> int | None:
        return self._index.get(key)


def bucket_of(seconds_into_day: npt.ArrayLike, buckets: int, day_seconds: float = DAY_SECONDS) -> npt.NDArray[np.int64]:
    """The time-of-day bucket of a moment ``seconds_into_day`` after local midnight (a 25-hour day's last
    hour folds into the last bucket)."""
    width = DAY_SECONDS / buckets
    index = np.floor(np.asarray(seconds_into_day, dtype=np.float64) / width).astype(np.int64)
    return np.clip(index, 0, buckets - 1)


def bucket_label(bucket: int, buckets: int) -> str:
    """``"14:00-15:00"``: the local time-of-day span of a bucket."""
    width = DAY_SECONDS // buckets

    def hhmm(seconds: int) -> str:
        return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}"

    return f"{hhmm(bucket * width)}-{hhmm((bucket + 1) * width)}"


def node_daily_peaks(total: FloatArray, system_cpu_m: float) -> FloatArray:
    """(days, buckets) summed profile -> each day's peak: its highest bucket, plus the system usage."""
    peaks: FloatArray = total.max(axis=-1) + system_cpu_m
    return peaks


def over_days(daily: FloatArray, settings: PredictorSettings) -> FloatArray:
    """``daily`` (..., days, oldest first) aggregated over the days as the policy says (``pooled_p95``, which
    needs every sample, reads as ``weighted_mean``)."""
    aggregation = "weighted_mean" if settings.aggregation == "pooled_p95" else settings.aggregation
    return aggregate(
        daily,
        None,
        aggregation,
        settings.day_weights(),
        same_weekday_factor=settings.same_weekday_factor,
        safety_margin=settings.safety_margin,
        half_life_days=settings.histogram_half_life / timedelta(days=1),
        quantile=settings.quantile,
    )


def by_bucket(profile: npt.NDArray[np.floating], settings: PredictorSettings) -> FloatArray:
    """A (days, buckets) profile's buckets, each aggregated over the days."""
    return over_days(np.asarray(profile, dtype=np.float64).T, settings)


def predicted_peak(total: FloatArray, system_cpu_m: float, settings: PredictorSettings) -> tuple[float, int]:
    """(predicted peak, the bucket it comes in) of a node whose pods sum to ``total`` (days, buckets): its
    daily peaks aggregated over the days; the bucket is the highest of the buckets aggregated over the days."""
    peak = over_days(node_daily_peaks(total, system_cpu_m), settings)
    return float(peak), int(np.argmax(by_bucket(total, settings)))


OWN_PROFILES_CHUNK = 4096  # pods filled at a time: the temporaries of a whole table would take a few times its size


def own_profiles(
    values: Float32Array, rows: Sequence[int] | None = None, chunk: int = OWN_PROFILES_CHUNK
) -> tuple[Float32Array, npt.NDArray[np.bool_]]:
    """Pods' (pods, days, buckets) profiles with their gaps filled, and which pods have any data: a cell
    without data takes the bucket's mean over the pod's days with data, a bucket never seen the pod's
    highest known level (never zero). A pod without any data stays all NaN. ``rows``: those pods only, in
    that order (default: all). Filled ``chunk`` pods at a time, so that a 150,000-pod table needs little
    more than the result beside it."""
    picked = np.arange(values.shape[0]) if rows is None else np.asarray(rows, dtype=np.int64)
    filled = np.empty((picked.size, *values.shape[1:]), dtype=np.float32)
    has = np.empty(picked.size, dtype=np.bool_)
    for start in range(0, picked.size, chunk):
        part = slice(start, start + chunk)
        filled[part], has[part] = _own_profiles(values[picked[part]])
    return filled, has


def _own_profiles(values: Float32Array) -> tuple[Float32Array, npt.NDArray[np.bool_]]:
    seen = ~np.isnan(values)
    counts = seen.sum(axis=1)  # (pods, buckets)
    sums = np.where(seen, values, np.float32(0)).sum(axis=1, dtype=np.float64)
    has = counts.sum(axis=1) > 0
    top = np.where(seen, values, -np.inf).max(axis=(1, 2))
    by_bucket = np.where(counts > 0, sums / np.maximum(counts, 1), top[:, None]).astype(np.float32)
    filled: Float32Array = np.where(seen, values, by_bucket[:, None, :])
    filled[~has] = np.nan
    return filled, has


def own_profile(values: Float32Array) -> Float32Array | None:
    """:func:`own_profiles` of one pod's (days, buckets) profile; None when it has no data."""
    filled, has = own_profiles(values[None])
    return filled[0] if has[0] else None


def flat(level: float, days: int, buckets: int) -> Float32Array:
    """A pod without a profile of its own: its predicted peak in every bucket of every day (conservative)."""
    return np.full((days, buckets), level, dtype=np.float32)


def scaled(shape: Float32Array, level: float) -> Float32Array:
    """``shape`` (days, buckets, no gaps) rescaled so that its highest cell is ``level``."""
    top = float(shape.max()) if shape.size else 0.0
    if top <= 0:
        return flat(level, *shape.shape)
    return (shape * np.float32(level / top)).astype(np.float32)
