"""Durations that were numbers of seconds: the former ``...Seconds`` keys of older policy files still read."""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from pydantic.alias_generators import to_snake

from rebalancer.app.cli import main
from rebalancer.domain.errors import ConfigError
from rebalancer.domain.settings.shared import format_duration
from rebalancer.policy import Policy, load_policy, parse_policy

STRATEGY = "strategies:\n- {kind: HighNodeUtilization, thresholds: {cpu: 5}}\n"

# (section path, former key, new key, seconds written, the value read)
FORMER: list[tuple[str, str, str, float, timedelta | None]] = [
    ("prometheus", "timeoutSeconds", "timeout", 30, timedelta(seconds=30)),
    ("prometheus", "maxDataAgeSeconds", "maxDataAge", 600, timedelta(minutes=10)),
    ("predictor.history", "timeoutSeconds", "timeout", 300.0, timedelta(minutes=5)),
    ("service.leaderElection", "leaseDurationSeconds", "leaseDuration", 20, timedelta(seconds=20)),
    ("service.leaderElection", "renewDeadlineSeconds", "renewDeadline", 12, timedelta(seconds=12)),
    ("service.leaderElection", "retryPeriodSeconds", "retryPeriod", 1, timedelta(seconds=1)),
    ("service.watchCache", "maxStaleSeconds", "maxStale", 90, timedelta(seconds=90)),
    ("service.watchCache", "watchSeconds", "watchTimeout", 600, timedelta(minutes=10)),
    ("service.watchCache", "relistIntervalSeconds", "relistInterval", 3600, timedelta(hours=1)),
    ("service", "alertFactsMaxAgeSeconds", "alertFactsMaxAge", 1200, timedelta(minutes=20)),
    ("service", "alertFactsMaxAgeSeconds", "alertFactsMaxAge", 0, None),  # 0 was "always list everything"
    ("service", "reloadIntervalSeconds", "reloadInterval", 5, timedelta(seconds=5)),
]


def nested(path: str, leaf: dict[str, Any]) -> dict[str, Any]:
    for part in reversed(path.split(".")):
        leaf = {part: leaf}
    return leaf


def policy_text(path: str, leaf: dict[str, Any]) -> str:
    return yaml.safe_dump(nested(path, leaf)) + STRATEGY


def value_at(policy: Policy, path: str, key: str) -> Any:
    value: Any = policy
    for part in [*path.split("."), key]:
        value = getattr(value, to_snake(part))
    return value


@pytest.mark.parametrize(("path", "old", "new", "seconds", "read"), FORMER, ids=[f"{f[1]}={f[3]}" for f in FORMER])
def test_a_former_key_reads_as_its_duration_and_warns_once_naming_it(
    path: str, old: str, new: str, seconds: float, read: timedelta | None, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="rebalancer.policy"):
        policy = parse_policy(policy_text(path, {old: seconds}), "old.yaml")
    assert value_at(policy, path, new) == read
    text = None if read is None else format_duration(read)
    assert [r.getMessage() for r in caplog.records] == [
        f"old.yaml: {path}.{old} is now {path}.{new}, a duration: read as `{new}: {text or 'null'}`; write it so"
    ]
    assert policy == parse_policy(policy_text(path, {new: text}), "new.yaml")


def test_a_policy_without_former_keys_warns_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        parse_policy("prometheus: {timeout: 30s, maxDataAge: 10m}\n" + STRATEGY, "new.yaml")
    assert caplog.records == []


@pytest.mark.parametrize(("path", "old", "new"), sorted({(p, o, n) for p, o, n, _, _ in FORMER}))
def test_both_keys_at_once_is_an_error_naming_both(path: str, old: str, new: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_policy(policy_text(path, {old: 30, new: "30s"}), "both.yaml")
    [(field, message)] = info.value.problems
    assert field == f"{path}.{old}"
    assert old in message and new in message


@pytest.mark.parametrize("seconds", [0.5, -30, "30s", True, None, float("nan")])
def test_a_former_key_takes_only_a_whole_number_of_seconds(seconds: Any) -> None:
    with pytest.raises(ConfigError) as info:
        parse_policy(policy_text("prometheus", {"timeoutSeconds": seconds}), "bad.yaml")
    [(field, message)] = info.value.problems
    assert field == "prometheus.timeoutSeconds"
    assert "number of seconds" in message and "write timeout as a duration such as 30s" in message


@pytest.mark.parametrize(
    ("path", "leaf", "named", "words"),
    [
        ("service.watchCache", {"watchSeconds": 5}, "service.watchCache.watchSeconds (read as watchTimeout)", "5s is shorter than 10s"),
        ("service.watchCache", {"relistIntervalSeconds": 86_401}, "service.watchCache.relistIntervalSeconds (read as relistInterval)", "is longer than 1d"),
        ("prometheus", {"timeoutSeconds": 301}, "prometheus.timeoutSeconds (read as timeout)", "301s is longer than 5m"),
        ("predictor.history", {"timeoutSeconds": 601}, "predictor.history.timeoutSeconds (read as timeout)", "is longer than 10m"),
        ("service.watchCache", {"watchTimeout": "2h"}, "service.watchCache.watchTimeout", "2h is longer than 1h"),
        ("prometheus", {"timeout": "6m"}, "prometheus.timeout", "6m is longer than 5m"),
    ],
)  # fmt: skip
def test_the_former_bounds_hold_and_name_the_key_as_written(
    path: str, leaf: dict[str, Any], named: str, words: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_policy(policy_text(path, leaf), "bounds.yaml")
    [(field, message)] = info.value.problems
    assert (field, words in message) == (named, True), message


@pytest.mark.parametrize(
    "leaf",
    [
        {"leaseDuration": "10s", "renewDeadline": "10s"},
        {"retryPeriod": "10s"},
        {"leaseDurationSeconds": 5},
    ],
)
def test_leader_election_timings_stay_in_order(leaf: dict[str, Any]) -> None:
    with pytest.raises(ConfigError) as info:
        parse_policy(policy_text("service.leaderElection", leaf), "lease.yaml")
    [(field, message)] = info.value.problems
    assert field == "service.leaderElection.renewDeadline"
    assert "need retryPeriod < renewDeadline < leaseDuration" in message


@given(st.integers(min_value=60, max_value=86_400))
def test_a_former_number_and_its_written_duration_read_the_same(seconds: int) -> None:
    old = parse_policy(policy_text("service.watchCache", {"relistIntervalSeconds": seconds}), "old.yaml")
    assert old.service.watch_cache.relist_interval == timedelta(seconds=seconds)
    dumped = old.model_dump(mode="json", by_alias=True)
    assert parse_policy(yaml.safe_dump(dumped), "again.yaml") == old


def test_check_config_accepts_a_former_key_and_shows_the_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "old.yaml"
    policy.write_text("prometheus: {maxDataAgeSeconds: 600}\n" + STRATEGY, encoding="utf-8")
    assert main(["check-config", str(policy)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{policy}: ok (HighNodeUtilization)"
    assert lines[1].startswith("  warning: prometheus.maxDataAgeSeconds is now prometheus.maxDataAge")
    assert main(["check-config", "-o", "json", str(policy)]) == 0
    [checked] = json.loads(capsys.readouterr().out)["files"]
    [warning] = checked["warnings"]
    assert warning.startswith("prometheus.maxDataAgeSeconds is now prometheus.maxDataAge")
    with caplog.at_level(logging.WARNING):  # the other commands log it
        load_policy(policy)
    [logged] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert logged == f"{policy}: {warning}"
