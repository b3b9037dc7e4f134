"""The days a history read covers: only days whose samples Prometheus has recorded by the read. Just
after midnight the hourly profile rule has not yet recorded yesterday's last hour (a sample's window's
middle is in 23:00-24:00 when it is taken up to 00:30), and the other queries need the samples up to
midnight stored: such a read covers the days up to the day before yesterday, never yesterday with a hole
(serve mode keeps a read for the whole day)."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from rebalancer.adapters.prom.history import RECORDING_LAG_SECONDS, read_days
from rebalancer.adapters.prom.profiles import hourly_samples
from rebalancer.domain.settings.predictor import PredictorSettings
from rebalancer.planning.predict.days import DayWindow, last_days

MIDNIGHT = datetime(2024, 1, 10, tzinfo=UTC).timestamp()
WITH_RULE = PredictorSettings.model_validate({"history": {"profileRule": "namespace_pod:cpu_usage:avg1h"}})
SUM_WITH_RULE = PredictorSettings.model_validate(
    {"nodePeak": "sum", "history": {"profileRule": "namespace_pod:cpu_usage:avg1h"}}
)
PLAIN = PredictorSettings()


def latest_query(settings: PredictorSettings, day: DayWindow) -> float:
    """The latest time a query of ``day`` is evaluated at."""
    hourly = settings.node_peak == "coincident" and settings.history.profile_rule is not None
    return hourly_samples(day)[0] if hourly else day.end


@pytest.mark.parametrize("settings", [WITH_RULE, SUM_WITH_RULE, PLAIN], ids=["profile rule", "sum", "plain"])
@pytest.mark.parametrize("minutes", [0, 1, 4, 10, 29, 34, 35, 36, 60, 23 * 60 + 59])
def test_a_read_asks_for_no_sample_not_yet_recorded(settings: PredictorSettings, minutes: int) -> None:
    at = MIDNIGHT + minutes * 60
    days = read_days(settings, at)
    assert len(days) == settings.days
    assert latest_query(settings, days[-1]) + RECORDING_LAG_SECONDS <= at
    # and yesterday is read as soon as it is recorded, not later
    (yesterday,) = last_days(MIDNIGHT, 1, "UTC")
    expected = date(2024, 1, 9) if at >= latest_query(settings, yesterday) + RECORDING_LAG_SECONDS else date(2024, 1, 8)
    assert days[-1].day == expected


def test_the_lag_is_short_of_the_cycle_it_delays() -> None:
    """Yesterday is read from 5 minutes after midnight (35 with the hourly rule), not an hour or a day late."""
    assert RECORDING_LAG_SECONDS == 300
    assert read_days(PLAIN, MIDNIGHT + 300)[-1].day == date(2024, 1, 9)
    assert read_days(PLAIN, MIDNIGHT + 299)[-1].day == date(2024, 1, 8)
    assert read_days(WITH_RULE, MIDNIGHT + 2100)[-1].day == date(2024, 1, 9)
    assert read_days(WITH_RULE, MIDNIGHT + 2099)[-1].day == date(2024, 1, 8)
