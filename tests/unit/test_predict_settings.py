"""The policy's predictor: section: defaults, validation naming the field, check-config, the demo command."""

from __future__ import annotations

from pathlib import Path

import pytest

from rebalancer.app.cli import main
from rebalancer.domain.errors import ConfigError
from rebalancer.policy import parse_policy

STRATEGY = "strategies:\n- {kind: HighNodeUtilization, thresholds: {cpu: 5}}\n"


def test_defaults() -> None:
    p = parse_policy(STRATEGY).predictor
    assert (p.days, p.aggregation, p.safety_margin, p.min_history_days, p.hot_threshold) == (
        8,
        "decaying_histogram",
        0.0,
        3,
        70,
    )


@pytest.mark.parametrize(
    ("section", "path", "message"),
    [
        ("{days: 3, weights: [1, 2]}", "predictor.weights", "needs one weight per day: 3 (days), got 2"),
        ("{days: 2, weights: [0, 0]}", "predictor.weights", "at least one weight must be above 0"),
        ("{days: 2, weights: [1, -1]}", "predictor.weights.1", "greater than or equal to 0"),
        ("{days: 2, weights: [.nan, 1]}", "predictor.weights.0", "finite number"),
        ("{minHistoryDays: 9}", "predictor.minHistoryDays", "must not be above days (8)"),
        ("{aggregation: median}", "predictor.aggregation", "'weighted_mean', 'max_daily'"),
        ("{safetyMargin: -0.1}", "predictor.safetyMargin", "greater than or equal to 0"),
        ("{hotThreshold: 101}", "predictor.hotThreshold", "less than or equal to 100"),
        ("{typo: 1}", "predictor.typo", "Extra inputs are not permitted"),
    ],
)
def test_problems_name_the_field(section: str, path: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_policy(f"predictor: {section}\n{STRATEGY}")
    assert any(p == path and message in m for p, m in info.value.problems), info.value.problems


def test_check_config_exits_2_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"predictor: {{days: 4, weights: [1, 1, 1]}}\n{STRATEGY}")
    assert main(["check-config", str(bad)]) == 2
    assert f"{bad}: predictor.weights: needs one weight per day: 4 (days), got 3" in capsys.readouterr().err


def test_live_predict_needs_a_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict"]) == 2
    assert "--policy FILE is required (or --demo, or --backtest DATA)" in capsys.readouterr().err
