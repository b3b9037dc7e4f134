"""Daily profiles: per entity (a pod, a VM) its CPU quantile per time-of-day bucket on each day (pure).

A day is split into ``buckets`` equal time-of-day buckets in the history's time zone (24 hourly, 48
half-hourly, ...). ``values[e, d, b]`` is the quantile of entity ``e`` over bucket ``b`` of day ``d``
(oldest day first), in millicores, float32 to keep 150,000 pods x 8 days x 48 buckets near 230 MB; NaN is a
bucket without data, never zero. :func:`aggregate_profiles` folds the days into one predicted profile per
entity with the same aggregations (and day weights) as the daily peaks, bucket by bucket.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

from rebalancer.predict.aggregate import aggregate
from rebalancer.predict.settings import PredictorSettings

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


def aggregate_profiles(values: Float32Array, settings: PredictorSettings) -> Float32Array:
    """(entities, days, buckets) -> (entities, buckets): each bucket's days aggregated as ``settings`` says
    (``pooled_p95``, which needs every sample, reads as ``weighted_mean`` here), times 1 + safetyMargin.
    A bucket without any day of data stays NaN."""
    aggregation = "weighted_mean" if settings.aggregation == "pooled_p95" else settings.aggregation
    by_bucket = np.moveaxis(values, 1, 2).astype(np.float64)  # (entities, buckets, days)
    out = aggregate(
        by_bucket,
        None,
        aggregation,
        settings.day_weights(),
        same_weekday_factor=settings.same_weekday_factor,
        safety_margin=settings.safety_margin,
        half_life_days=settings.histogram_half_life_hours / 24.0,
        quantile=settings.quantile,
    )
    return out.astype(np.float32)


def filled(profile: Float32Array, level: float) -> Float32Array:
    """A profile whose buckets without data read as ``level`` (the pod's own predicted peak: never zero)."""
    return np.where(np.isnan(profile), np.float32(level), profile).astype(np.float32)


def flat(level: float, buckets: int) -> Float32Array:
    """A pod without its own profile: its predicted peak in every bucket (the conservative shape)."""
    return np.full(buckets, level, dtype=np.float32)


def scaled(shape: Float32Array, level: float) -> Float32Array:
    """``shape`` rescaled so that its highest bucket is ``level`` (a sibling's profile at this pod's level)."""
    top = float(np.nanmax(shape)) if np.isfinite(shape).any() else 0.0
    if top <= 0:
        return flat(level, shape.shape[0])
    return filled((shape * np.float32(level / top)).astype(np.float32), level)


def summed(profiles: Iterable[Float32Array], buckets: int) -> FloatArray:
    """The element-wise sum of profiles, in float64 (an empty node sums to zeros)."""
    total = np.zeros(buckets, dtype=np.float64)
    for p in profiles:
        total += p
    return total


def coincident_peak(total: FloatArray, system_cpu_m: float) -> tuple[float, int]:
    """(predicted peak, its bucket): the highest bucket of the summed profiles plus the system usage."""
    bucket = int(np.argmax(total))
    return float(total[bucket]) + system_cpu_m, bucket
