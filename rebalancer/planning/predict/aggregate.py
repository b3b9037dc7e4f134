"""Aggregations of daily peaks into one predicted peak, vectorised over any leading axes.

``daily`` has the days on its last axis, oldest first (the last is yesterday); NaN marks a missing day.
Weights are yesterday first (as in the policy). A missing day's weight is dropped and the rest renormalised,
so a gap never reads as zero; an entity without any usable day predicts NaN (unknown).
"""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import numpy.typing as npt

from rebalancer.domain.settings.predictor import Aggregation, PredictorSettings

FloatArray = npt.NDArray[np.float64]


def weighted_mean(daily: FloatArray, weights: FloatArray) -> FloatArray:
    """Weighted mean over the present days; ``weights`` yesterday first, one per day."""
    days = daily.shape[-1]
    if weights.shape != (days,):
        raise ValueError(f"{weights.shape[0]} weights for {days} days")
    present = ~np.isnan(daily)
    w = np.where(present, weights[::-1], 0.0)
    total = w.sum(axis=-1)
    num = (np.where(present, daily, 0.0) * w).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, num / np.where(total > 0, total, 1.0), np.nan)


def max_daily(daily: FloatArray) -> FloatArray:
    """The highest present daily peak."""
    present = ~np.isnan(daily)
    best = np.where(present, daily, -np.inf).max(axis=-1, initial=-np.inf)
    return np.where(present.any(axis=-1), best, np.nan)


HISTOGRAM_RATIO = 1.05  # VPA's: each histogram bucket 5 % wider than the one before


def decaying_histogram(
    samples: FloatArray, ages_days: FloatArray, half_life_days: float, quantile: float = 0.95
) -> FloatArray:
    """VPA-style: the ``quantile`` of a histogram of the samples (last axis; NaN = none) whose weights halve
    every ``half_life_days`` of age, read at the end of its bucket (buckets grow by 5 %: 1, 1.05, 1.1025, ...
    in the samples' unit, so small values read at most 5 % high). No sample: NaN."""
    if ages_days.shape != (samples.shape[-1],):
        raise ValueError(f"{ages_days.shape[0]} ages for {samples.shape[-1]} samples")
    weights = np.broadcast_to(np.power(0.5, ages_days / half_life_days), samples.shape)
    present = ~np.isnan(samples)
    order = np.argsort(np.where(present, samples, np.inf), axis=-1)
    ordered = np.take_along_axis(samples, order, axis=-1)
    cumulative = np.cumsum(np.take_along_axis(np.where(present, weights, 0.0), order, axis=-1), axis=-1)
    total = cumulative[..., -1:]
    first = np.argmax(cumulative >= quantile * total, axis=-1)[..., None]
    value = np.take_along_axis(ordered, first, axis=-1)[..., 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        steps = np.ceil(np.log(np.maximum(value, 1e-12)) / np.log(HISTOGRAM_RATIO) - 1e-9)
        rounded = np.where(value > 0, np.power(HISTOGRAM_RATIO, steps), 0.0)
    return np.where(total[..., 0] > 0, np.maximum(rounded, value), np.nan)


def day_ages(days: int) -> FloatArray:
    """Age in days of each day's middle, oldest first, from the end of the window."""
    return np.arange(days, 0, -1, dtype=np.float64) - 0.5


def same_weekday_weights(weights: FloatArray, factor: float) -> FloatArray:
    """``weights`` (yesterday first) with the days 7, 14, ... before the predicted day ``factor`` times heavier."""
    days_ago = np.arange(1, weights.shape[0] + 1)
    return weights * np.where(days_ago % 7 == 0, factor, 1.0)


def aggregate(
    daily: FloatArray,
    pooled: FloatArray | None,
    aggregation: Aggregation,
    weights: FloatArray,
    *,
    same_weekday_factor: float = 3.0,
    safety_margin: float = 0.0,
    half_life_days: float = 1.0,
    quantile: float = 0.95,
) -> FloatArray:
    """Predicted peak per entity, times ``1 + safety_margin``. ``pooled`` (one quantile over the window
    per entity, same leading shape) is required by ``pooled_p95`` and ignored otherwise."""
    if aggregation == "weighted_mean":
        raw = weighted_mean(daily, weights)
    elif aggregation == "max_daily":
        raw = max_daily(daily)
    elif aggregation == "same_weekday":
        raw = weighted_mean(daily, same_weekday_weights(weights, same_weekday_factor))
    elif aggregation == "pooled_p95":
        if pooled is None:
            raise ValueError("pooled_p95 needs the quantile over the whole window (pooled), which is missing")
        raw = np.asarray(pooled, dtype=np.float64)
    elif aggregation == "decaying_histogram":
        raw = decaying_histogram(daily, day_ages(daily.shape[-1]), half_life_days, quantile)
    else:  # pragma: no cover - Literal exhausted
        raise ValueError(f"unknown aggregation {aggregation!r}")
    return raw * (1.0 + safety_margin)


def aggregate_with(daily: FloatArray, pooled: FloatArray | None, settings: PredictorSettings) -> FloatArray:
    """:func:`aggregate` as the policy's ``predictor:`` section says."""
    return aggregate(
        daily,
        pooled,
        settings.aggregation,
        settings.day_weights(),
        same_weekday_factor=settings.same_weekday_factor,
        safety_margin=settings.safety_margin,
        half_life_days=settings.histogram_half_life / timedelta(days=1),
        quantile=settings.quantile,
    )
