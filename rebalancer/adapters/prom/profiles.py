"""Pods' daily profiles from Prometheus: per day and batch of nodes, one range query whose points are the
pods' mean CPU over each time-of-day bucket, computed server-side:

    avg_over_time(<recordingRule>{node=~"..."}[3599s])       # evaluated at every bucket's end (1 h)
    avg_over_time((<podQuery>)[3599s:5m])                    # or a subquery over the pod query

from the day's first bucket end to its midnight, so every sample is read once and Prometheus returns one
number per pod and bucket. Points are placed by the local time of their bucket's middle (a 23-hour day
leaves its skipped bucket missing; a 25-hour day's repeated hour keeps the higher value). The table grows
as answers arrive and holds float32 only: 150,000 pods x 8 days x 24 buckets take 115 MB.
"""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import numpy as np
import numpy.typing as npt

from rebalancer.adapters.prom.matrix import PodMatrix
from rebalancer.domain.model import PodKey
from rebalancer.planning.predict.days import DayWindow
from rebalancer.planning.predict.profile import DAY_SECONDS, DailyProfiles, bucket_of


def bucket_seconds(buckets: int) -> int:
    return DAY_SECONDS // buckets


def day_range(day: DayWindow, buckets: int) -> tuple[float, float, float]:
    """(start, end, step) of a day's profile query: one point at the end of each bucket."""
    width = bucket_seconds(buckets)
    return day.start + width, day.end, float(width)


class ProfileTable:
    """(pods, days, buckets) float32 millicores, NaN where no answer placed a value."""

    def __init__(self, days: tuple[DayWindow, ...], buckets: int, time_zone: str, expected_pods: int = 0) -> None:
        self._days, self._buckets, self._zone = days, buckets, ZoneInfo(time_zone)
        self._index: dict[PodKey, int] = {}
        self._values = np.full((max(expected_pods, 16), len(days), buckets), np.nan, dtype=np.float32)

    def _bucket_of_times(self, day: DayWindow, times: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
        width = bucket_seconds(self._buckets)
        unique, inverse = np.unique(times, return_inverse=True)
        into_day = [
            (
                datetime.fromtimestamp(t - width / 2, self._zone)
                - datetime.combine(day.day, datetime.min.time(), self._zone)
            ).total_seconds()
            for t in unique
        ]
        buckets: npt.NDArray[np.int64] = bucket_of(into_day, self._buckets)[inverse]
        outside = (unique[inverse] <= day.start) | (unique[inverse] > day.end)
        return np.where(outside, -1, buckets)

    def add(self, day: int, answer: PodMatrix) -> None:
        index = self._index
        rows_of_series = np.fromiter(
            (index.setdefault(key, len(index)) for key in answer.keys), dtype=np.int64, count=len(answer.keys)
        )
        if len(index) > self._values.shape[0]:
            grown = np.full((max(len(index), 2 * self._values.shape[0]), *self._values.shape[1:]), np.nan, np.float32)
            grown[: self._values.shape[0]] = self._values
            self._values = grown
        buckets = self._bucket_of_times(self._days[day], answer.times)
        keep = buckets >= 0
        rows = rows_of_series[answer.series[keep]]
        cells = self._values[:, day, :]
        # a pod in two batches (rescheduled), or a 25-hour day's repeated hour: the higher value
        np.fmax.at(cells, (rows, buckets[keep]), (answer.values[keep] * 1000.0).astype(np.float32))

    def profiles(self) -> DailyProfiles[PodKey]:
        return DailyProfiles(tuple(self._index), self._values[: len(self._index)])
