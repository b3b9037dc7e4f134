"""The refusal log: one line per client address per period, the unlogged ones summed into the next line,
and a bounded memory of addresses."""

from __future__ import annotations

import logging

import pytest

from rebalancer.service import RefusalLog

LOGGER = "tests.refusal_log"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    found = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    caplog.clear()
    return found


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_one_line_per_client_per_period_and_the_next_says_how_many_were_not_logged(
    caplog: pytest.LogCaptureFixture, clock: Clock
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    refusals = RefusalLog(logging.getLogger(LOGGER), period=60, clock=clock)
    for _ in range(50):
        refusals.refused("10.0.0.1", 401, "the bearer token is wrong")
        clock.now += 1  # 50 s: all within the period of the first line
    refusals.refused("10.0.0.2", 415, "Content-Type must be application/json, got none")
    assert lines(caplog) == [
        "alertmanager webhook from 10.0.0.1 refused (401): the bearer token is wrong",
        "alertmanager webhook from 10.0.0.2 refused (415): Content-Type must be application/json, got none",
    ]
    clock.now += 10  # 60 s after the first line of 10.0.0.1
    refusals.refused("10.0.0.1", 401, "a bearer token is required")
    refusals.refused("10.0.0.1", 401, "a bearer token is required")
    assert lines(caplog) == [
        "alertmanager webhook from 10.0.0.1 refused (401): a bearer token is required "
        "(49 more refusal(s) of this client since its last line)"
    ]
    clock.now += 60
    refusals.refused("10.0.0.1", 401, "a bearer token is required")
    assert lines(caplog) == [
        "alertmanager webhook from 10.0.0.1 refused (401): a bearer token is required "
        "(1 more refusal(s) of this client since its last line)"
    ]


def test_a_crowd_of_addresses_gets_one_line_and_memory_stays_bounded(
    caplog: pytest.LogCaptureFixture, clock: Clock
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    refusals = RefusalLog(logging.getLogger(LOGGER), period=60, max_clients=10, clock=clock)
    for i in range(1000):
        refusals.refused(f"fd00::{i:x}", 401, "a bearer token is required")
    found = lines(caplog)
    assert len(found) == 11
    assert refusals.remembered == 10
    assert found[-1].startswith("webhook requests refused from more than 10 client addresses within 60 s")
    clock.now += 30
    refusals.refused("fd00::ffff", 401, "a bearer token is required")
    assert lines(caplog) == []  # still crowded, already said
    clock.now += 30  # the first ten addresses' period is over: room again
    refusals.refused("fd00::ffff", 401, "a bearer token is required")
    assert lines(caplog) == ["alertmanager webhook from fd00::ffff refused (401): a bearer token is required"]
    assert refusals.remembered == 1  # the ten expired ones are forgotten
