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

from rebalancer.adapters.prom.matrix import PodMatrix, rows_of
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

    def _bucket_of_times(self, day: DayWindow, times: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.int64], bool]:
        """Each point's bucket (-1 outside the day), and whether two of the times share a bucket. A range
        answer's points sit on the query's grid (bucket ends): each grid time is placed once and its points
        take its bucket, without sorting the points."""
        width = bucket_seconds(self._buckets)
        slots = np.rint((times - day.start) / width).astype(np.int64)
        on_grid = times.size > 0 and slots.min() >= 0 and slots.max() <= 2 * self._buckets
        if on_grid and np.array_equal(day.start + slots * width, times):
            distinct = day.start + np.arange(int(slots.max()) + 1, dtype=np.float64) * width
            of_distinct = slots
        else:  # off the grid: place each distinct time
            distinct, of_distinct = np.unique(times, return_inverse=True)
        placed = self._place_times(day, distinct)
        present = np.zeros(distinct.size, dtype=bool)
        present[of_distinct] = True
        used = placed[present & (placed >= 0)]
        return placed[of_distinct], bool(np.unique(used).size < used.size)

    def _place_times(self, day: DayWindow, times: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
        """The bucket of each of a few distinct bucket-end times (by the local time of the bucket's middle)."""
        width = bucket_seconds(self._buckets)
        midnight = datetime.combine(day.day, datetime.min.time(), self._zone)
        into_day = [(datetime.fromtimestamp(t - width / 2, self._zone) - midnight).total_seconds() for t in times]
        buckets: npt.NDArray[np.int64] = bucket_of(into_day, self._buckets)
        return np.where((times <= day.start) | (times > day.end), -1, buckets)

    def add(self, day: int, answer: PodMatrix) -> None:
        rows_of_series = rows_of(self._index, answer.keys)
        if len(self._index) > self._values.shape[0]:
            grown = np.full(
                (max(len(self._index), 2 * self._values.shape[0]), *self._values.shape[1:]), np.nan, np.float32
            )
            grown[: self._values.shape[0]] = self._values
            self._values = grown
        buckets, repeated = self._bucket_of_times(self._days[day], answer.times)
        keep = buckets >= 0
        cell = (rows_of_series[answer.series[keep]], buckets[keep])
        values = (answer.values[keep] * 1000.0).astype(np.float32)
        cells = self._values[:, day, :]
        if repeated:  # a 25-hour day's repeated hour: one series has two points in a bucket
            np.fmax.at(cells, cell, values)
        else:  # one point per pod and bucket (a pod answers once per query)
            cells[cell] = np.fmax(cells[cell], values)  # a pod in two batches (rescheduled): the higher value

    def profiles(self) -> DailyProfiles[PodKey]:
        return DailyProfiles(tuple(self._index), self._values[: len(self._index)])
