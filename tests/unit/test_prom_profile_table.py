"""Range answers placed into the profile table: each point lands in the time-of-day bucket of its bucket's
middle, in the history's time zone, on 23- and 25-hour days too; a point off the query's grid is placed the
same way; a pod answered twice, or twice in one bucket, keeps the higher value; no answer leaves NaN."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rebalancer.adapters.prom.matrix import PodMatrix, rows_of
from rebalancer.adapters.prom.profiles import ProfileTable, day_range
from rebalancer.planning.predict.days import DayWindow, last_days

AMS = "Europe/Amsterdam"
# 2024-03-31 has 23 hours in Amsterdam (02:00 -> 03:00), 2024-10-27 has 25 (03:00 -> 02:00)
SHORT = last_days(1711926000.0, 1, AMS)  # read on 2024-04-01 00:00 CEST: the day before is 2024-03-31
LONG = last_days(1730070000.0, 1, AMS)  # 2024-10-28 00:00 CET: the day before is 2024-10-27


def grid_answer(day: DayWindow, buckets: int, values: dict[tuple[str, str], list[float]]) -> PodMatrix:
    """One point per pod at every bucket end of the day's profile query (the grid Prometheus answers on)."""
    start, end, step = day_range(day, buckets)
    times = np.arange(start, end + 1, step)
    keys = tuple(values)
    return PodMatrix(
        keys,
        np.repeat(np.arange(len(keys)), len(times)),
        np.tile(times, len(keys)),
        np.concatenate([np.asarray(values[k], dtype=np.float64) for k in keys]),
    )


def test_a_23_hour_day_leaves_its_skipped_hour_missing() -> None:
    (day,) = SHORT
    assert day.seconds == 23 * 3600
    table = ProfileTable(SHORT, 24, AMS)
    table.add(0, grid_answer(day, 24, {("a", "x"): [h + 1 for h in range(23)]}))
    row = table.profiles().values[0, 0]
    # the UTC hours map to local 00, 01, 03, 04, ...: local 02:00-03:00 does not exist that day
    assert math.isnan(row[2])
    assert row[[0, 1, 3, 23]].tolist() == [1000.0, 2000.0, 3000.0, 23000.0]


def test_a_25_hour_day_keeps_the_higher_of_its_repeated_hour() -> None:
    (day,) = LONG
    assert day.seconds == 25 * 3600
    table = ProfileTable(LONG, 24, AMS)
    values = [0.1 * (h + 1) for h in range(25)]
    values[2], values[3] = 0.9, 0.4  # local 02:00-03:00 CEST, then 02:00-03:00 CET
    table.add(0, grid_answer(day, 24, {("a", "x"): values}))
    row = table.profiles().values[0, 0]
    assert row[2] == pytest.approx(900.0) and row[23] == pytest.approx(2500.0)
    assert not np.isnan(row).any()


def test_a_pod_in_two_answers_keeps_the_higher_value_per_bucket_and_unanswered_pods_stay_missing() -> None:
    days = last_days(1704412800.0, 2, "UTC")  # 2024-01-03 and 2024-01-04
    table = ProfileTable(days, 4, "UTC")
    table.add(1, grid_answer(days[1], 4, {("a", "x"): [1, 1, 1, 1], ("a", "y"): [2, 2, 2, 2]}))
    table.add(1, grid_answer(days[1], 4, {("a", "x"): [0.5, 3, 0.5, 3], ("a", "z"): [4, 4, 4, 4]}))
    profiles = table.profiles()
    assert profiles.keys == (("a", "x"), ("a", "y"), ("a", "z"))
    assert profiles.values[0, 1].tolist() == [1000.0, 3000.0, 1000.0, 3000.0]
    assert np.isnan(profiles.values[:, 0]).all()  # no answer for the first day: missing, never zero


@settings(max_examples=60, deadline=None)
@given(
    shift=st.sampled_from([0.0, -0.25, -0.5, -100.0]),
    points=st.lists(
        st.tuples(st.integers(0, 5), st.integers(1, 24), st.floats(0, 8)),
        min_size=1,
        max_size=40,
        unique_by=lambda point: (point[0], point[1]),  # a series has one point per time
    ),
)
def test_points_off_the_grid_are_placed_like_the_ones_on_it(shift: float, points: list[tuple[int, int, float]]) -> None:
    """The grid path and the general path agree: the same points, moved earlier by less than half a bucket
    (off the grid, still inside the day), land in the same buckets."""
    (day,) = last_days(1704412800.0, 1, "UTC")
    keys = tuple(("a", f"p{i}") for i in range(6))

    def placed(offset: float) -> np.ndarray:
        table = ProfileTable((day,), 24, "UTC")
        series = np.array([p for p, _, _ in points])
        times = np.array([day.start + h * 3600 + offset for _, h, _ in points])
        table.add(0, PodMatrix(keys, series, times, np.array([v for _, _, v in points])))
        out = np.full((len(keys), 24), np.nan, dtype=np.float32)
        for i, key in enumerate(keys):
            row = table.profiles().index(key)
            if row is not None:
                out[i] = table.profiles().values[row, 0]
        return out

    expected = np.full((len(keys), 24), np.nan)
    for p, h, v in points:
        expected[p, h - 1] = np.fmax(expected[p, h - 1], np.float32(v * 1000.0))
    on_grid = placed(0.0)
    np.testing.assert_array_equal(on_grid, expected.astype(np.float32))
    if shift:
        np.testing.assert_array_equal(placed(shift), on_grid)


def test_rows_of_numbers_new_keys_on_in_order_of_first_sight() -> None:
    index: dict[str, int] = {"a": 0}
    assert rows_of(index, ["b", "a", "c", "b"]).tolist() == [1, 0, 2, 1]
    assert index == {"a": 0, "b": 1, "c": 2}


def test_hourly_rule_samples_off_the_hour_land_by_their_windows_middle_on_a_25_hour_day() -> None:
    """Samples of an hourly rule at 23 minutes past each UTC hour: each is the mean of the hour before it,
    so it lands in the local hour its window's middle (7 minutes before the hour) falls in. The day's
    repeated local hour keeps the higher; the sample 23 minutes after the day's closing midnight is its
    last hour; the samples whose windows' middles fall outside the day are left out."""
    (day,) = LONG
    times = day.start + 23 * 60 + 3600 * np.arange(-1, 27)  # windows whose middles fall 1 h before to 1 h after
    values = np.arange(1, times.size + 1, dtype=np.float64) / 10
    values[4], values[5] = 0.9, 0.1  # middles at 02:53 CEST, then 02:53 CET
    table = ProfileTable(LONG, 24, AMS)
    table.add(0, PodMatrix((("a", "x"),), np.zeros(times.size, dtype=np.int64), times, values))
    row = table.profiles().values[0, 0]
    assert not np.isnan(row).any()
    assert row[0] == pytest.approx(300.0)  # the sample at 01:23: the one at 00:23 covers the day before
    assert row[2] == pytest.approx(900.0) and row[3] == pytest.approx(700.0)
    assert row[23] == pytest.approx(2700.0)  # the sample at 00:23 after the closing midnight; later ones left out
