"""Pods' daily profiles from Prometheus: per day and batch of nodes, one query whose points are the pods'
mean CPU over each time-of-day bucket, computed server-side:

    avg_over_time(<recordingRule>{node=~"..."}[3599s])       # range query, a point at every bucket's end (1 h)
    avg_over_time((<podQuery>)[3599s:5m])                    # or a subquery over the pod query
    <profileRule>{node=~"..."}[86401s]                       # or the samples of an hourly rule, as recorded

The range query runs from the day's first bucket end to its midnight, so every sample is read once and
Prometheus returns one number per pod and bucket. An hourly rule (``history.profileRule``: the mean over
the hour before each sample, recorded every hour) already holds those numbers: its raw samples are read
with their own timestamps (a rule group evaluates at a fixed offset into the hour, not on it). Either way
a point is placed by the local time of its window's middle (a 23-hour day leaves its skipped bucket
missing; a 25-hour day's repeated hour keeps the higher value). The table grows as answers arrive and
holds float32 only: 150,000 pods x 8 days x 24 buckets take 115 MB.
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

HOUR = 3600
HOURLY_SAMPLES_AFTER = HOUR // 2  # the hourly rule's samples of a day are taken up to this long after its end


def bucket_seconds(buckets: int) -> int:
    return DAY_SECONDS // buckets


def day_range(day: DayWindow, buckets: int) -> tuple[float, float, float]:
    """(start, end, step) of a day's profile query: one point at the end of each bucket."""
    width = bucket_seconds(buckets)
    return day.start + width, day.end, float(width)


def hourly_samples(day: DayWindow) -> tuple[float, int]:
    """(evaluation time, range seconds) of an instant query for the raw samples of an hourly rule whose
    window's middle falls in the day: those taken from half an hour after its opening midnight to half an
    hour after its closing one, a second wider (so that both ends are in under closed or left-open ranges;
    the samples outside the day are dropped by their window's middle)."""
    return day.end + HOURLY_SAMPLES_AFTER, day.seconds + 1


class ProfileTable:
    """(pods, days, buckets) float32 millicores, NaN where no answer placed a value."""

    def __init__(self, days: tuple[DayWindow, ...], buckets: int, time_zone: str, expected_pods: int = 0) -> None:
        self._days, self._buckets, self._zone = days, buckets, ZoneInfo(time_zone)
        self._index: dict[PodKey, int] = {}
        self._values = np.full((max(expected_pods, 16), len(days), buckets), np.nan, dtype=np.float32)

    def _bucket_of_times(self, day: DayWindow, answer: PodMatrix) -> tuple[npt.NDArray[np.int64], bool]:
        """Each point's bucket by its window's middle (-1 outside the day), and whether a series has two points
        in one bucket. A 24-hour day's buckets are whole widths after its midnight (no clock change in it),
        computed at once; a daylight-saving day's are placed by local time, once per distinct time."""
        width = bucket_seconds(self._buckets)
        middles = answer.times - width / 2
        if day.seconds == DAY_SECONDS:
            buckets = np.floor((middles - day.start) / width).astype(np.int64)
            buckets[(buckets < 0) | (buckets >= self._buckets)] = -1
        else:
            distinct, of_distinct = np.unique(middles, return_inverse=True)
            buckets = self._place_middles(day, distinct)[of_distinct]
        kept = buckets >= 0
        cells = answer.series[kept] * self._buckets + buckets[kept]
        # Prometheus answers series by series in time order: cells strictly rise unless one repeats
        ordered = bool(np.all(cells[1:] > cells[:-1]))
        return buckets, not ordered and bool(np.unique(cells).size < cells.size)

    def _place_middles(self, day: DayWindow, middles: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
        """The bucket of each of a few distinct window middles (by local time), -1 outside the day."""
        midnight = datetime.combine(day.day, datetime.min.time(), self._zone)
        into_day = [(datetime.fromtimestamp(t, self._zone) - midnight).total_seconds() for t in middles]
        buckets: npt.NDArray[np.int64] = bucket_of(into_day, self._buckets)
        return np.where((middles < day.start) | (middles >= day.end), -1, buckets)

    def add(self, day: int, answer: PodMatrix) -> None:
        rows_of_series = rows_of(self._index, answer.keys)
        if len(self._index) > self._values.shape[0]:
            grown = np.full(
                (max(len(self._index), self._values.shape[0] * 5 // 4), *self._values.shape[1:]), np.nan, np.float32
            )
            grown[: self._values.shape[0]] = self._values
            self._values = grown
        buckets, repeated = self._bucket_of_times(self._days[day], answer)
        # a pod with two series in one answer (rescheduled between two nodes of the batch) shares a row
        repeated = repeated or len(set(answer.keys)) < len(answer.keys)
        keep = buckets >= 0
        cell = (rows_of_series[answer.series[keep]], buckets[keep])
        values = (answer.values[keep] * 1000.0).astype(np.float32)
        cells = self._values[:, day, :]
        if repeated:  # a 25-hour day's repeated hour, or a pod twice: two points in a bucket
            np.fmax.at(cells, cell, values)
        else:  # one point per pod and bucket
            cells[cell] = np.fmax(cells[cell], values)  # a pod in two batches (rescheduled): the higher value

    def profiles(self) -> DailyProfiles[PodKey]:
        return DailyProfiles(tuple(self._index), self._values[: len(self._index)])
