"""Aggregations of daily peaks into one predicted peak, vectorised over any leading axes.

``daily`` has the days on its last axis, oldest first (the last is yesterday); NaN marks a missing day.
Weights are yesterday first (as in the policy). A missing day's weight is dropped and the rest renormalised,
so a gap never reads as zero; an entity without any usable day predicts NaN (unknown).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from rebalancer.predict.settings import Aggregation, PredictorSettings

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
    )
