"""Rolling back-test: predict each entity's peak on day d from days d-N..d-1, compare with what happened.

Vectorised: one grouped quantile gives every (entity, day) peak; a sliding window view gives every
(entity, target day) history at once, and each aggregation runs on the whole array. Days are calendar days
in the data's time zone; a day whose samples cover less than ``min_coverage`` of it is missing (NaN),
never zero, both as history and as an actual. An (entity, day) is evaluated when its actual is known and
its window holds at least ``minHistoryDays`` days, the same set for every aggregation.

Metrics are in percentage points of the entity's capacity: MAE and bias (predicted - actual), and the
detection of hot days (actual peak above the threshold): precision, recall, F1, and the recall on days
that turn hot after a known quiet day (the ones an average of past days misses).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta

import numpy as np
import numpy.typing as npt
import pandas as pd

from rebalancer.domain.settings.predictor import Aggregation, PredictorSettings
from rebalancer.offline.predict.usage import Progress, UsageData
from rebalancer.planning.predict.aggregate import FloatArray, aggregate

DAY = 86400


@dataclass(frozen=True, slots=True)
class DailyTable:
    """Peak (quantile) per entity and calendar day; days consecutive, missing days NaN."""

    entities: tuple[str, ...]
    first_day: np.datetime64  # datetime64[D]
    peaks: FloatArray  # (entities, days)

    @property
    def days(self) -> int:
        return int(self.peaks.shape[1])

    def day(self, index: int) -> str:
        return str(self.first_day + np.timedelta64(index, "D"))


def local_days(timestamps: npt.NDArray[np.int64], time_zone: str) -> npt.NDArray[np.int64]:
    """Calendar day number (days since 1970-01-01) of each epoch second in ``time_zone``."""
    local = pd.to_datetime(timestamps, unit="s", utc=True).tz_convert(time_zone).tz_localize(None)
    return np.asarray(local.to_numpy().astype("datetime64[D]").astype(np.int64))


def daily_table(data: UsageData, quantile: float = 0.95, min_coverage: float = 0.5) -> DailyTable:
    """Every (entity, day) peak in one grouped quantile. A day covered less than ``min_coverage`` (samples x
    the entity's median interval / 24 h) is missing."""
    frame = data.frame
    if frame.empty:
        return DailyTable((), np.datetime64(0, "D"), np.empty((0, 0)))
    days = local_days(frame["timestamp"].to_numpy(dtype=np.int64), data.time_zone)
    entity = pd.Categorical(frame["entity"], categories=pd.unique(frame["entity"]))
    codes = entity.codes.astype(np.int64)
    ts = frame["timestamp"].to_numpy(dtype=np.int64)
    same = codes[1:] == codes[:-1]
    gaps = pd.Series(np.diff(ts)[same]).groupby(codes[1:][same]).median()
    interval = np.full(len(entity.categories), np.nan)
    interval[gaps.index.to_numpy()] = gaps.to_numpy()
    grouped = pd.Series(frame["pct"].to_numpy()).groupby([codes, days])
    peaks, counts = grouped.quantile(quantile), grouped.size()
    e_idx = peaks.index.get_level_values(0).to_numpy()
    d_idx = peaks.index.get_level_values(1).to_numpy()
    first, last = int(d_idx.min()), int(d_idx.max())
    table = np.full((len(entity.categories), last - first + 1), np.nan)
    coverage = counts.to_numpy() * interval[e_idx] / DAY
    keep = coverage >= min_coverage  # NaN interval (a single sample) never covers a day
    table[e_idx[keep], d_idx[keep] - first] = peaks.to_numpy()[keep]
    return DailyTable(tuple(str(c) for c in entity.categories), np.datetime64(first, "D"), table)


def pooled_quantiles(data: UsageData, table: DailyTable, window: int, quantile: float = 0.95) -> FloatArray:
    """Per (entity, target day d): one quantile over all samples of days d-window..d-1 (NaN if none)."""
    out = np.full(table.peaks.shape, np.nan)
    frame = data.frame
    if frame.empty:
        return out
    days = local_days(frame["timestamp"].to_numpy(dtype=np.int64), data.time_zone) - int(
        table.first_day.astype(np.int64)
    )
    pct = frame["pct"].to_numpy()
    bounds = np.flatnonzero(np.r_[True, frame["entity"].to_numpy()[1:] != frame["entity"].to_numpy()[:-1], True])
    for e, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        d, v = days[lo:hi], pct[lo:hi]  # sorted by time, so by day
        starts = np.searchsorted(d, np.arange(table.days) - window, side="left")
        ends = np.searchsorted(d, np.arange(table.days), side="left")
        for target in np.flatnonzero(ends > starts):
            out[e, target] = np.quantile(v[starts[target] : ends[target]], quantile)
    return out


def windows(peaks: FloatArray, window: int) -> FloatArray:
    """(entities, days, window): for each target day d, the peaks of days d-window..d-1 (NaN before day 0)."""
    padded = np.concatenate([np.full((peaks.shape[0], window), np.nan), peaks], axis=1)
    return np.lib.stride_tricks.sliding_window_view(padded, window, axis=1)[:, : peaks.shape[1], :]


@dataclass(frozen=True, slots=True)
class BacktestRow:
    aggregation: Aggregation
    safety_margin: float
    evaluated: int
    mae: float
    bias: float
    precision: float | None  # None: nothing predicted hot
    recall: float | None  # None: no hot day
    f1: float | None
    turn_hot_days: int
    turn_hot_recall: float | None


@dataclass(frozen=True, slots=True)
class BacktestReport:
    rows: tuple[BacktestRow, ...]
    source: str
    time_zone: str
    entities: int
    skipped: tuple[str, ...]
    first_day: str
    last_day: str
    days: int
    min_history_days: int
    threshold: float
    evaluated: int
    hot_days: int
    # (aggregation, margin) -> (predicted, actual) at the evaluated points, for plots
    points: dict[tuple[str, float], tuple[FloatArray, FloatArray]] = field(repr=False, compare=False)


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


def score(
    aggregation: Aggregation,
    margin: float,
    predicted: FloatArray,
    actual: FloatArray,
    turned: npt.NDArray[np.bool_],
    threshold: float,
) -> BacktestRow:
    """Metrics of one aggregation; ``turned`` marks the points whose previous day was known and quiet."""
    error = predicted - actual
    hot, called = actual > threshold, predicted > threshold
    tp = int(np.count_nonzero(hot & called))
    precision, recall = _ratio(tp, int(np.count_nonzero(called))), _ratio(tp, int(np.count_nonzero(hot)))
    f1 = None
    if precision is not None and recall is not None:
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    turn_hot = hot & turned
    return BacktestRow(
        aggregation=aggregation,
        safety_margin=margin,
        evaluated=int(actual.size),
        mae=float(np.abs(error).mean()) if error.size else float("nan"),
        bias=float(error.mean()) if error.size else float("nan"),
        precision=precision,
        recall=recall,
        f1=f1,
        turn_hot_days=int(np.count_nonzero(turn_hot)),
        turn_hot_recall=_ratio(int(np.count_nonzero(turn_hot & called)), int(np.count_nonzero(turn_hot))),
    )


def backtest(
    data: UsageData,
    settings: PredictorSettings,
    aggregations: Sequence[Aggregation],
    margins: Sequence[float] = (0.0,),
    *,
    threshold: float | None = None,
    min_coverage: float = 0.5,
    progress: Progress | None = None,
) -> BacktestReport:
    """Every aggregation at every margin over every (entity, day) with a known actual and enough history."""
    threshold = settings.hot_threshold if threshold is None else threshold
    steps, step = 2 + len(aggregations) * len(margins), 0

    def advance(what: str) -> None:
        nonlocal step
        step += 1
        if progress is not None:
            progress(step, steps, what)

    table = daily_table(data, settings.quantile, min_coverage)
    advance("daily peaks")
    pooled = pooled_quantiles(data, table, settings.days, settings.quantile)
    advance("pooled quantiles")
    history = windows(table.peaks, settings.days)
    actual = table.peaks
    previous = np.concatenate([np.full((actual.shape[0], 1), np.nan), actual[:, :-1]], axis=1)
    predictions = {
        (agg, margin): aggregate(
            history,
            pooled,
            agg,
            settings.day_weights(),
            same_weekday_factor=settings.same_weekday_factor,
            safety_margin=margin,
            half_life_days=settings.histogram_half_life / timedelta(days=1),
            quantile=settings.quantile,
        )
        for agg in aggregations
        for margin in margins
    }
    mask = ~np.isnan(actual) & (np.count_nonzero(~np.isnan(history), axis=2) >= settings.min_history_days)
    for predicted in predictions.values():
        mask &= ~np.isnan(predicted)
    turned = ~np.isnan(previous) & (previous <= threshold)
    rows: list[BacktestRow] = []
    points: dict[tuple[str, float], tuple[FloatArray, FloatArray]] = {}
    for (agg, margin), predicted in predictions.items():
        rows.append(score(agg, margin, predicted[mask], actual[mask], turned[mask], threshold))
        points[(agg, margin)] = (predicted[mask], actual[mask])
        advance(f"{agg} +{margin:g}")
    return BacktestReport(
        rows=tuple(rows),
        source=data.source,
        time_zone=data.time_zone,
        entities=len(table.entities),
        skipped=data.skipped,
        first_day=table.day(0) if table.days else "",
        last_day=table.day(table.days - 1) if table.days else "",
        days=settings.days,
        min_history_days=settings.min_history_days,
        threshold=threshold,
        evaluated=int(np.count_nonzero(mask)),
        hot_days=int(np.count_nonzero(mask & (actual > threshold))),
        points=points,
    )
