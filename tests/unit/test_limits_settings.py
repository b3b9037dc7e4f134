"""The limits: section: the example loads, every field is described, every problem names its field."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from rebalancer.domain.settings.limits import WorkloadLimits
from rebalancer.domain.settings.shared import parse_duration
from rebalancer.planning.limits import LimitSettings
from rebalancer.policy import validation_problems
from tests.unit.limits_builders import DAY, HOUR, limits

EXAMPLE = Path(__file__).parent / "data" / "limits-example.yaml"


def test_example_loads_and_round_trips() -> None:
    settings = LimitSettings.model_validate(yaml.safe_load(EXAMPLE.read_text())["limits"])
    assert settings.cluster.max_per_period[1].period == timedelta(days=1)
    assert settings.windows.zone_of("gpu") == "Asia/Tokyo"
    assert settings.windows.zone_of("general") == "Europe/Amsterdam"
    assert settings.horizon_seconds == DAY
    assert set(settings.bucket_scopes()) == {"global", "pool/gpu"}
    dumped = settings.model_dump(by_alias=True, exclude_defaults=True)
    assert "global" in dumped and "serviceLevel" in dumped
    assert LimitSettings.model_validate(dumped) == settings


def test_defaults_limit_nothing() -> None:
    settings = LimitSettings()
    assert settings.horizon_seconds == 0
    assert settings.bucket_scopes() == {}
    assert settings.windows.time_zone == "UTC"


def _properties(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    out = []
    for model_name, model in {"LimitSettings": schema, **schema.get("$defs", {})}.items():
        for field_name, field in model.get("properties", {}).items():
            out.append((model_name, field_name, field))
    return out


def test_every_field_is_described() -> None:
    undescribed = [
        f"{model}.{name}"
        for model, name, field in _properties(LimitSettings.model_json_schema(by_alias=True))
        if not field.get("description") and model not in ("LabelSelectorSpec", "SelectorRequirementSpec")
    ]
    assert undescribed == []


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30), ("5m", 300), ("1h", HOUR), ("1d", DAY), ("90m", 5400)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("value", "desired", "pods"),
    [(1, 10, 1), (3, 2, 3), ("25%", 3, 0), ("25%", 4, 1), ("25%", 7, 1), ("50%", 5, 2), ("100%", 3, 3)],
)
def test_max_unavailable_percent_rounds_down(value: int | str, desired: int, pods: int) -> None:
    assert WorkloadLimits(max_unavailable=value).unavailable_allowed(desired) == pods


BAD = [
    ("global: {maxPerCycle: 0}", "global.maxPerCycle", "greater than or equal to 1"),
    ("global: {maxPerPeriod: [{count: 0, period: 1h}]}", "global.maxPerPeriod.0.count", "greater than or equal to 1"),
    ("global: {maxPerPeriod: [{count: 2, period: 1 hour}]}", "global.maxPerPeriod.0.period", "not a duration"),
    ("global: {maxPerPeriod: [{count: 2, period: 0h}]}", "global.maxPerPeriod.0.period", "not a duration"),
    (
        "global: {maxPerPeriod: [{count: 5, period: 1h}, {count: 9, period: 60m}]}",
        "global.maxPerPeriod.1.period",
        "1h repeats the period of maxPerPeriod.0",
    ),
    ("global: {rate: {perMinute: 2, burst: 0}}", "global.rate.burst", "greater than or equal to 1"),
    ("global: {rate: {perMinute: 0, burst: 3}}", "global.rate.perMinute", "greater than or equal to 0.001"),
    ("global: {rate: {burst: 3}}", "global.rate.perMinute", "Field required"),
    ("global: {pools: {gpu: {maxPerCycle: 0}}}", "global.pools.gpu.maxPerCycle", "greater than or equal to 1"),
    ("global: {pools: {gpu: {pools: {}}}}", "global.pools.gpu.pools", "Extra inputs are not permitted"),
    ("global: {pools: {GPU Pool: {}}}", "global.pools.GPU Pool.[key]", "should match pattern"),
    (
        "node: {cooldown: 10}",
        "node.cooldown",
        "10 is not a duration such as 30s, 5m, 1h30m, 1d: a number needs its unit",
    ),
    (
        "node: {maxPerPeriod: [{count: 1, period: 1d}, {count: 2, period: 24h}]}",
        "node.maxPerPeriod.1.period",
        "repeats",
    ),
    ("workload: {maxUnavailable: 0}", "workload.maxUnavailable", "neither a whole number >= 1 nor a percentage"),
    ("workload: {maxUnavailable: 150%}", "workload.maxUnavailable", "percentage from 1% to 100%"),
    ("workload: {maxUnavailable: '3'}", "workload.maxUnavailable", "percentage"),
    ("workload: {minInterval: soon}", "workload.minInterval", "'soon' is not a duration such as 30s, 5m, 1h30m, 1d"),
    ("windows: {timeZone: Europe/Amstrdam}", "windows.timeZone", "unknown time zone 'Europe/Amstrdam'"),
    ("windows: {pools: {gpu: {timeZone: Mars/Base}}}", "windows.pools.gpu.timeZone", "unknown time zone"),
    ("windows: {allowed: [{start: '9:00', end: '17:00'}]}", "windows.allowed.0.start", "not a time of day HH:MM"),
    ("windows: {allowed: [{start: '09:00', end: '17:60'}]}", "windows.allowed.0.end", "not a time of day HH:MM"),
    ("windows: {allowed: [{start: '24:00', end: '02:00'}]}", "windows.allowed.0.start", "00:00 and 23:59"),
    ("windows: {blackout: [{start: '10:00', end: '10:00'}]}", "windows.blackout.0.end", "equals start 10:00"),
    ("windows: {allowed: [{days: [], start: '01:00', end: '02:00'}]}", "windows.allowed.0.days", "at least 1 item"),
    (
        "windows: {allowed: [{days: [Mon, Mon], start: '01:00', end: '02:00'}]}",
        "windows.allowed.0.days",
        "repeated: Mon",
    ),
    ("windows: {allowed: [{days: [Monday], start: '01:00', end: '02:00'}]}", "windows.allowed.0.days.0", "'Mon'"),
    ("windows: {allowed: [{start: '01:00'}]}", "windows.allowed.0.end", "Field required"),
    ("lists: {namespaces: {black: kube-system}}", "lists.namespaces.black", "valid tuple"),
    ("lists: {workloads: {black: [{kind: Deployment, name: web}]}}", "lists.workloads.black.0.namespace", "required"),
    (
        "lists: {nodes: {whiteSelectors: [{matchExpressions: [{key: a, operator: Exists, values: [b]}]}]}}",
        "lists.nodes.whiteSelectors.0.matchExpressions.0",
        "takes no values",
    ),
    ("lists: {pods: {}}", "lists.pods", "Extra inputs are not permitted"),
    ("serviceLevel: {tiers: {gold: {rule: never}}}", "serviceLevel.tierLabel", "name the pod label"),
    ("serviceLevel: {tierLabel: t, tiers: {gold: {rule: sometimes}}}", "serviceLevel.tiers.gold.rule", "'never'"),
    (
        "serviceLevel: {tierLabel: t, tiers: {s: {rule: windows}}}",
        "serviceLevel.tiers.s.windows",
        "at least one window",
    ),
    (
        "serviceLevel: {tierLabel: t, tiers: {g: {rule: never, windows: [{start: '01:00', end: '02:00'}]}}}",
        "serviceLevel.tiers.g.windows",
        "rule never takes no windows",
    ),
    ("globals: {}", "globals", "Extra inputs are not permitted"),
]


@pytest.mark.parametrize(("text", "path", "message"), BAD)
def test_problems_name_the_field(text: str, path: str, message: str) -> None:
    with pytest.raises(ValidationError) as info:
        limits(text)
    problems = validation_problems(info.value)
    assert any(p == path and message in m for p, m in problems), problems


def test_several_problems_are_reported_together() -> None:
    with pytest.raises(ValidationError) as info:
        limits("global: {maxPerCycle: 0, rate: {perMinute: 1, burst: 0}}\nnode: {cooldown: x}")
    paths = {p for p, _ in validation_problems(info.value)}
    assert paths == {"global.maxPerCycle", "global.rate.burst", "node.cooldown"}
