"""The policy's one duration type: a timedelta in the model, "5m" in YAML, one grammar."""

from __future__ import annotations

from datetime import timedelta

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from rebalancer.domain.errors import ConfigError
from rebalancer.domain.settings.shared import DURATION_PATTERN, PrometheusSettings, format_duration, parse_duration
from rebalancer.policy import parse_policy

STRATEGY = "strategies:\n- {kind: HighNodeUtilization, thresholds: {cpu: 5}}\n"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("5m", 300), ("1h30m", 5400), ("1d", 86_400), ("2d3h4m5s", 183_845), ("1h1s", 3601)],
)
def test_whole_numbers_with_units_largest_first(text: str, seconds: int) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "0s", "5", "5x", "1m1h", "1h1h", "05m", "1.5h", " 5m", "5m ", "-5m", "1w"])
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration such as 30s, 5m, 1h30m, 1d"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"), [(90, "90s"), (300, "5m"), (5400, "90m"), (86_400, "1d"), (3601, "3601s")]
)
def test_written_in_its_largest_whole_unit(seconds: int, text: str) -> None:
    assert format_duration(timedelta(seconds=seconds)) == text


@pytest.mark.parametrize("value", [timedelta(0), timedelta(seconds=-60), timedelta(milliseconds=1500)])
def test_whole_seconds_only(value: timedelta) -> None:
    with pytest.raises(ValueError, match="not a positive whole number of seconds"):
        format_duration(value)


@given(st.integers(min_value=1, max_value=400 * 86_400))
def test_written_text_reads_back_and_matches_the_schema_pattern(seconds: int) -> None:
    import re

    text = format_duration(timedelta(seconds=seconds))
    assert re.match(DURATION_PATTERN, text)
    assert parse_duration(text) == timedelta(seconds=seconds)


def test_yaml_reads_a_timedelta_and_writes_the_text_back() -> None:
    policy = parse_policy(f"prometheus: {{window: 90s, step: 30s, rateWindow: 1h30m}}\n{STRATEGY}", "p.yaml")
    assert policy.prometheus.window == timedelta(seconds=90)
    assert policy.prometheus.rate_window == timedelta(minutes=90)
    dumped = policy.prometheus.model_dump(mode="json", by_alias=True)
    assert (dumped["window"], dumped["step"], dumped["rateWindow"]) == ("90s", "30s", "90m")
    assert parse_policy(yaml.safe_dump({"prometheus": dumped}) + STRATEGY, "again.yaml") == policy


def test_promql_gets_the_written_form() -> None:
    settings = PrometheusSettings(
        window=timedelta(minutes=10), step=timedelta(minutes=1), rate_window=timedelta(minutes=5)
    )
    query = settings.render("{window} {step} {rate_window} {data_span}")
    assert query == "10m 1m 5m 360s"


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("efficiency: {followUpWindow: 15 minutes}\n", "efficiency.followUpWindow"),
        ("service: {webhook: {alertNodeCooldown: 300}}\n", "service.webhook.alertNodeCooldown"),
        ("limits: {node: {cooldown: 1h0m}}\n", "limits.node.cooldown"),
    ],
)
def test_a_bad_duration_names_its_field(text: str, path: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_policy(text + STRATEGY, "p.yaml")
    assert [(p, "is not a duration" in m) for p, m in info.value.problems] == [(path, True)]
