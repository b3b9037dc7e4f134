"""Aggregations on hand-checkable series, and their invariants over random ones (hypothesis)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rebalancer.domain.settings.predictor import PredictorSettings, decaying_weights
from rebalancer.planning.predict.aggregate import aggregate, max_daily, same_weekday_weights, weighted_mean

NAN = math.nan


def test_default_weights_decay_linearly_from_yesterday() -> None:
    w = PredictorSettings().day_weights()
    np.testing.assert_allclose(w, np.array([8, 7, 6, 5, 4, 3, 2, 1]) / 36)
    assert decaying_weights(2) == (2 / 3, 1 / 3)


def test_weighted_mean_by_hand_weights_listed_yesterday_first() -> None:
    daily = np.array([[100.0, 200.0, 400.0]])  # oldest .. yesterday
    w = np.array([0.5, 0.3, 0.2])  # yesterday 0.5, day before 0.3, oldest 0.2
    assert weighted_mean(daily, w)[0] == pytest.approx(0.5 * 400 + 0.3 * 200 + 0.2 * 100)


def test_missing_day_is_dropped_and_the_rest_renormalised_never_zero() -> None:
    w = np.array([0.5, 0.3, 0.2])
    daily = np.array([[100.0, NAN, 400.0]])
    # 0.5 * 400 + 0.2 * 100 over 0.7; reading the gap as zero would give 220
    assert weighted_mean(daily, w)[0] == pytest.approx((200 + 20) / 0.7)
    assert max_daily(np.array([[NAN, 50.0, NAN]]))[0] == 50.0


def test_no_usable_day_is_unknown() -> None:
    daily = np.array([[NAN, NAN, NAN], [NAN, NAN, 5.0]])
    w = np.array([1.0, 0.0, 0.0])  # only yesterday counts
    assert np.isnan(weighted_mean(daily, w)).tolist() == [True, False]
    assert np.isnan(weighted_mean(np.array([[5.0, 6.0, NAN]]), w))[0]  # present days all weigh 0
    assert np.isnan(max_daily(daily))[0]


def test_same_weekday_weighs_seven_days_ago() -> None:
    w = np.full(8, 1.0)
    np.testing.assert_allclose(same_weekday_weights(w, 3.0), [1, 1, 1, 1, 1, 1, 3, 1])
    daily = np.array([[0.0, 70.0, 0, 0, 0, 0, 0, 0]])  # 7 days ago (same weekday) was hot
    out = aggregate(daily, None, "same_weekday", w / 8, same_weekday_factor=3.0)
    assert out[0] == pytest.approx(70 * 3 / 10)


def test_pooled_p95_reads_the_pooled_value_and_needs_it() -> None:
    daily = np.array([[1.0, 2.0]])
    assert aggregate(daily, np.array([9.0]), "pooled_p95", np.array([0.5, 0.5]))[0] == 9.0
    with pytest.raises(ValueError, match="pooled"):
        aggregate(daily, None, "pooled_p95", np.array([0.5, 0.5]))


def test_margin_multiplies() -> None:
    daily = np.array([[10.0, 30.0]])
    assert aggregate(daily, None, "max_daily", np.array([1.0, 1.0]), safety_margin=0.2)[0] == pytest.approx(36.0)


def test_aggregations_run_over_leading_axes() -> None:
    daily = np.arange(24, dtype=float).reshape(2, 3, 4)
    out = aggregate(daily, None, "weighted_mean", np.full(4, 0.25))
    np.testing.assert_allclose(out, daily.mean(axis=-1))


DAYS = 8
peaks = hnp.arrays(
    np.float64,
    (5, DAYS),
    elements=st.one_of(st.just(NAN), st.floats(0, 1e5, allow_nan=False, allow_infinity=False)),
)
weight_vectors = hnp.arrays(np.float64, (DAYS,), elements=st.floats(0, 10)).filter(lambda w: w.sum() > 0)


@settings(max_examples=300, deadline=None)
@given(peaks, weight_vectors)
def test_max_daily_is_at_least_the_weighted_mean_and_it_stays_within_the_present_days(
    daily: np.ndarray, w: np.ndarray
) -> None:
    wm = weighted_mean(daily, w / w.sum())
    mx = max_daily(daily)
    known = ~np.isnan(wm)
    assert np.all(mx[known] >= wm[known] - 1e-9 * (1 + mx[known]))
    lowest = np.where(np.isnan(daily), np.inf, daily).min(axis=1)
    assert np.all(wm[known] >= lowest[known] - 1e-9 * (1 + lowest[known]))


@settings(max_examples=300, deadline=None)
@given(peaks, weight_vectors)
def test_missing_days_are_never_read_as_zero(daily: np.ndarray, w: np.ndarray) -> None:
    """Weighted mean with gaps == weighted mean over the present days alone, with their weights only."""
    out = weighted_mean(daily, w)
    for row, value in zip(daily, out, strict=True):
        present = ~np.isnan(row)
        weights = w[::-1][present]
        if weights.sum() == 0:
            assert np.isnan(value)
        else:
            assert value == pytest.approx(np.average(row[present], weights=weights), rel=1e-9, abs=1e-9)


@settings(max_examples=200, deadline=None)
@given(
    peaks,
    st.sampled_from(["weighted_mean", "max_daily", "same_weekday", "pooled_p95"]),
    st.floats(0, 5),
    st.floats(0, 5),
)
def test_margin_is_monotonic(daily: np.ndarray, aggregation: str, m1: float, m2: float) -> None:
    lo, hi = sorted((m1, m2))
    pooled = max_daily(daily)  # a stand-in for the pooled quantile (NaN where no day is known)
    w = PredictorSettings().day_weights()
    a = aggregate(daily, pooled, aggregation, w, safety_margin=lo)  # type: ignore[arg-type]
    b = aggregate(daily, pooled, aggregation, w, safety_margin=hi)  # type: ignore[arg-type]
    known = ~np.isnan(a)
    assert np.array_equal(known, ~np.isnan(b))
    assert np.all(b[known] >= a[known])
