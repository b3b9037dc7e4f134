"""Serve mode's cached efficiency reference: read at most once per refresh interval, failures included,
never a stale value after a failure, and one warning per failed read (not one per cycle)."""

from __future__ import annotations

import logging

import pytest

from rebalancer.app.efficiency import CachedReference, StillUnknown, rates_over_period
from rebalancer.domain.errors import MetricsUnavailable
from rebalancer.records import EfficiencyState
from tests.unit.test_efficiency import SETTINGS


class Reference:
    """A reference read whose answer the test sets: a mapping, or an error to raise."""

    def __init__(self) -> None:
        self.answer: dict[str, float] | Exception = {"node-a": 5.0}
        self.reads = 0

    def __call__(self, start: float, end: float) -> dict[str, float]:
        self.reads += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        return dict(self.answer)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_failed_read_is_kept_for_the_interval_and_warned_once(caplog: pytest.LogCaptureFixture) -> None:
    read, clock = Reference(), Clock()
    read.answer = MetricsUnavailable("no kube-state-metrics series")
    cached = CachedReference(read, 600.0, clock)
    caplog.set_level(logging.WARNING)
    reports = []
    for _ in range(5):  # five cycles within the interval
        reports.append(rates_over_period(EfficiencyState(), SETTINGS, {}, 2000.0, cached))
        clock.now += 60
    assert read.reads == 1
    assert [r.message for r in caplog.records].count(
        "efficiency reference unknown: MetricsUnavailable: no kube-state-metrics series"
    ) == 1
    assert {r.reference_problem for r in reports} == {"MetricsUnavailable: no kube-state-metrics series"}
    assert all(r.cluster.discovery is None for r in reports)

    clock.now += 600  # the interval over: read again, and this time it answers
    read.answer = {"node-b": 3.0}
    assert cached(0.0, 1.0) == {"node-b": 3.0}
    assert read.reads == 2


def test_a_value_is_kept_for_the_interval_and_a_later_failure_leaves_nothing_stale() -> None:
    read, clock = Reference(), Clock()
    cached = CachedReference(read, 600.0, clock)
    assert cached(0.0, 1.0) == {"node-a": 5.0}
    clock.now += 599
    assert cached(0.0, 1.0) == {"node-a": 5.0}
    assert read.reads == 1
    clock.now += 1
    read.answer = MetricsUnavailable("down")
    with pytest.raises(MetricsUnavailable):
        cached(0.0, 1.0)
    clock.now += 10
    with pytest.raises(StillUnknown, match="MetricsUnavailable: down"):  # the failure, not the older value
        cached(0.0, 1.0)
    assert read.reads == 2
