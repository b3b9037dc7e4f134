"""Hostile policy files: every one is a ConfigError naming the file (and the field), exit 2, quickly; the
service's hot reload counts it as a failed reload; arbitrary bytes and YAML values never raise anything else."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from rebalancer.app.cli import main
from rebalancer.domain.errors import ConfigError
from rebalancer.domain.settings.cron import cron_trigger
from rebalancer.policy import MAX_POLICY_BYTES, MAX_PROBLEMS, Policy, load_policy, parse_policy
from rebalancer.service.metrics import Metrics
from rebalancer.service.runner import CycleResult, Service, Trigger
from strategies import REGISTRY

GOOD = "strategies:\n- {kind: LowNodeUtilization, thresholds: {cpu: 20}, targetThresholds: {cpu: 70}}\n"


def problems_of(path: Path) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as info:
        load_policy(path)
    assert info.value.source == str(path)
    return info.value.problems


def test_a_file_that_is_not_utf8_names_the_byte(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(GOOD.encode() + "# caf\xe9\n".encode("latin-1"))
    assert problems_of(path) == [("", "not UTF-8: byte 0xe9 at line 3, column 6")]


def test_a_file_over_the_limit_is_refused_unparsed_in_well_under_a_second(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    with path.open("wb") as file:
        file.write(GOOD.encode())
        for _ in range(50):  # 50 MB of keys: parsing it would take minutes
            file.write(b"".join(b"k%07d: v\n" % i for i in range(100_000)))
    started = time.perf_counter()
    assert problems_of(path) == [("", "larger than 1024 KiB: not a policy file")]
    assert time.perf_counter() - started < 5.0  # parsing would take minutes; 5 s for a loaded machine


def test_a_file_at_the_limit_is_read(tmp_path: Path) -> None:
    path = tmp_path / "padded.yaml"
    path.write_bytes(GOOD.encode().ljust(MAX_POLICY_BYTES, b" "))
    assert load_policy(path).strategies[0].kind == "LowNodeUtilization"


def test_every_error_of_a_cron_line_is_reported_each_under_its_field(tmp_path: Path) -> None:
    path = tmp_path / "cron.yaml"
    path.write_text(GOOD.replace("}}\n", "}, schedule: {cron: '61 24 0 13 8'}}\n"))
    found = problems_of(path)
    assert [p for p, _ in found] == ["strategies.0.schedule.cron"] * 5
    assert [m.split(":")[0] for _, m in found] == ["minute", "hour", "day of month", "month", "day of week"]
    assert "(61) is higher than the maximum value (59)" in found[0][1]
    assert "0 and 7 are Sunday" in found[4][1]


@pytest.mark.parametrize(
    "line",
    ["*/15 * * * *", "0 6 * * 1-5", "30 5 1,15 jan-jun sun", "0 0 * * 7", "0 0 last * *", "5-10/2 */3 * * 0-6"],
)
def test_cron_lines_the_scheduler_takes_pass(line: str) -> None:
    policy = parse_policy(GOOD.replace("}}\n", f"}}, schedule: {{cron: '{line}'}}}}\n"))
    assert policy.strategies[0].schedule.cron == line


@pytest.mark.parametrize(
    ("days", "weekdays"),
    [("0-6", {0, 1, 2, 3, 4, 5, 6}), ("*/2", {6, 1, 3, 5}), ("1-5", {0, 1, 2, 3, 4}), ("0,7", {6}), ("5/1", {4, 5, 6})],
)
def test_day_of_week_numbers_count_from_sunday_as_in_crontab(days: str, weekdays: set[int]) -> None:
    trigger = cron_trigger(f"0 12 * * {days}", ZoneInfo("UTC"))
    fire, seen = datetime(2024, 1, 1, tzinfo=ZoneInfo("UTC")), set()  # a Monday
    for _ in range(14):
        fire = trigger.get_next_fire_time(None, fire + timedelta(seconds=1))
        seen.add(fire.weekday())  # Python: Monday 0 ... Sunday 6
    assert seen == weekdays


def test_cron_line_of_the_wrong_length() -> None:
    with pytest.raises(ConfigError) as info:
        parse_policy(GOOD.replace("}}\n", "}, schedule: {cron: '0 6 * *'}}\n"))
    assert info.value.problems == [
        ("strategies.0.schedule.cron", "expected 5 fields (minute hour day-of-month month day-of-week), got 4")
    ]


def test_problems_are_capped_with_a_count_of_the_rest() -> None:
    text = GOOD.replace("}}\n", "}, " + ", ".join(f"k{i}: 1" for i in range(MAX_PROBLEMS + 7)) + "}\n")
    with pytest.raises(ConfigError) as info:
        parse_policy(text)
    assert len(info.value.problems) == MAX_PROBLEMS + 1
    assert info.value.problems[-1] == ("", "and 7 more problems")


@pytest.mark.parametrize(
    ("content", "line"),
    [
        (b"\xff\xfe\x00", "not UTF-8: byte 0xff at line 1, column 1"),
        (b"- a list\n", "the policy must be a YAML mapping, not a list"),
        (b"prometheus: {url: not a url}\n" + GOOD.encode(), "prometheus.url: 'not a url' is not an http(s) URL"),
        (GOOD.replace("cpu: 20", "cpu: 0").encode(), "strategies.0.thresholds.cpu: 0 makes no node cold"),
        (GOOD.replace("targetThresholds", "targetThreshold").encode(), "(did you mean 'targetThresholds'?)"),
    ],
)
def test_check_config_exits_2_with_file_field_and_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, line: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    started = time.perf_counter()
    assert main(["check-config", str(path)]) == 2
    assert time.perf_counter() - started < 5.0  # parsing would take minutes; 5 s for a loaded machine
    err = capsys.readouterr().err
    assert err.startswith(f"{path}: ")
    assert line in err
    assert "Traceback" not in err


def _metric(metrics: Metrics, name: str, **labels: str) -> float:
    body, _ = metrics.exposition()
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    raise AssertionError(f"{name} not exposed")


def _never(policy: Policy, trigger: Trigger) -> CycleResult:
    raise AssertionError("no cycle runs in this test")


@pytest.mark.parametrize(
    "content",
    [
        GOOD.encode() + b"# \xe9\n",
        GOOD.encode() + b"#" * MAX_POLICY_BYTES,
        GOOD.replace("}}\n", "}, schedule: {cron: '61 * * * *'}}\n").encode(),
        b"\x00\x01binary",
    ],
    ids=["not-utf8", "too-large", "bad-cron", "binary"],
)
def test_hot_reload_counts_a_bad_file_as_a_failed_reload(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "policy.yaml"
    servable = GOOD + "service: {webhook: {allowUnauthenticated: true}}\n"
    path.write_text(servable)
    metrics = Metrics()
    service = Service(path, _never, metrics, lambda: True)
    path.write_bytes(content)
    assert service.reload() is False
    assert _metric(metrics, "rebalancer_policy_valid") == 0
    assert _metric(metrics, "rebalancer_policy_reload_total", result="invalid") == 1
    assert service.policy.strategies[0].kind == "LowNodeUtilization"  # the last good policy stays
    path.write_text(servable)
    assert service.reload() is True
    assert _metric(metrics, "rebalancer_policy_valid") == 1


# -- arbitrary input ----------------------------------------------------------------------------------------


def _names(schema: Any) -> set[str]:
    """Every property name of the policy's schema, so that generated mappings reach the validators."""
    found: set[str] = set()
    if isinstance(schema, dict):
        found.update(schema.get("properties", {}))
        for value in schema.values():
            found |= _names(value)
    elif isinstance(schema, list):
        for value in schema:
            found |= _names(value)
    return found


NAMES = sorted(_names(Policy.model_json_schema(by_alias=True)))
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([*REGISTRY, "5m", "0 6 * * 1-5", "61 * * * *", "http://p:9090", "In", "Exists", ""])
    | st.text(max_size=20)
)
keys = st.sampled_from(NAMES) | st.text(max_size=12)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=6),
    max_leaves=40,
)
policies = st.dictionaries(keys, values, max_size=8) | st.fixed_dictionaries(
    {
        "strategies": st.lists(
            st.dictionaries(keys, values, max_size=8).map(lambda d: {"kind": "LowNodeUtilization", **d}), max_size=3
        )
    },
    optional=dict.fromkeys(("prometheus", "limits", "service", "protections", "pools", "predictor"), values),
)


def _only_config_errors(load: Any) -> None:
    """``load()`` returns a policy or raises a ConfigError with problems; anything else fails the test."""
    problems: list[tuple[str, str]] = [("", "loaded")]
    try:
        load()
    except ConfigError as exc:
        problems = exc.problems
    assert problems
    assert all(isinstance(p, str) and isinstance(m, str) and m for p, m in problems)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policies | values)
def test_any_yaml_value_is_a_policy_or_a_config_error(data: Any) -> None:
    _only_config_errors(lambda: parse_policy(yaml.safe_dump(data), "p.yaml"))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | st.binary(max_size=40).map(lambda b: GOOD.encode() + b))
def test_any_bytes_are_a_policy_or_a_config_error(tmp_path_factory: pytest.TempPathFactory, raw: bytes) -> None:
    path = tmp_path_factory.mktemp("bytes") / "p.yaml"
    path.write_bytes(raw)
    _only_config_errors(lambda: load_policy(path))


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from("{}[]:,-&*!|>'\"%@` \n\tab0#?"), max_size=60))
def test_any_yaml_syntax_is_a_policy_or_a_config_error(text: str) -> None:
    _only_config_errors(lambda: parse_policy(text, "p.yaml"))
