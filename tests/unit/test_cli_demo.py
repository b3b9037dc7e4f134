"""`rebalancer plan --demo`: the real planner on the embedded snapshot, through the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rebalancer.app.cli import _parser, log_level, main


def test_demo_plan_json_has_hot_nodes_and_evictions_from_them(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--demo", "--output", "json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["blocked"] is None
    nodes = {n["node"]: n for n in record["strategies"][0]["nodes"]}
    hot = {name for name, n in nodes.items() if n["nodeClass"] == "hot"}
    assert hot
    assert record["evictions"]
    for eviction in record["evictions"]:
        assert eviction["node"] in hot
        assert nodes[eviction["roomOn"]]["nodeClass"] == "cold"
        assert eviction["reason"]
    passed = [p for p in record["strategies"][0]["pods"] if not p["chosen"]]
    assert any(p["reason"] == "DaemonSet pod" for p in passed)


def test_demo_table_through_the_console_entry_point() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rebalancer", "plan", "--demo"], capture_output=True, text=True, check=True
    ).stdout
    assert "== LowNodeUtilization" in out
    assert " hot " in out
    assert "planned eviction(s)" in out


def test_plan_without_policy_or_demo_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan"]) == 2
    assert "--policy FILE is required" in capsys.readouterr().err


def test_demo_plan_shows_the_landing_guard_marks_of_its_evictions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "guard.yaml"
    policy.write_text(
        "pools: {label: node-pool}\n"
        "strategies:\n- {kind: LowNodeUtilization, thresholds: {cpu: 30}, targetThresholds: {cpu: 70}}\n"
        "landingGuard: {pools: [{pool: general, maxMarkedFraction: 0.5}]}\n"
    )
    assert main(["plan", "--demo", "--policy", str(policy), "--output", "json"]) == 0
    record = json.loads(capsys.readouterr().out)
    relieved = {e["node"] for e in record["evictions"]}
    hot = {n["node"] for n in record["strategies"][0]["nodes"] if n["nodeClass"] == "hot" and n["pool"] == "general"}
    changes = record["landingGuard"]["changes"]
    assert relieved and {c["node"] for c in changes} == relieved | hot
    assert all(c["action"] == "set" and c["outcome"] == "dry-run" for c in changes)
    assert {c["reason"] for c in changes if c["node"] in relieved} == {"relieved"}
    assert main(["plan", "--demo", "--policy", str(policy)]) == 0
    assert "== landing guard: " in capsys.readouterr().out
    assert main(["plan", "--demo", "--output", "json"]) == 0
    assert "landingGuard" not in json.loads(capsys.readouterr().out)  # no guard, no mark: nothing shown


@pytest.mark.parametrize(
    ("argv", "level"),
    [
        (["serve", "--log-level", "DEBUG", "--policy", "p.yaml"], "DEBUG"),
        (["--log-level", "ERROR", "serve", "--policy", "p.yaml"], "ERROR"),
        (["--log-level", "ERROR", "plan", "--log-level", "DEBUG", "--demo"], "DEBUG"),  # the later one wins
        (["plan", "--demo", "--log-level", "INFO"], "INFO"),
        (["run", "--once", "--policy", "p.yaml", "--log-level", "ERROR"], "ERROR"),
        (["serve", "--policy", "p.yaml"], "INFO"),  # a service logs a line per cycle by default
        (["plan", "--demo"], "WARNING"),
    ],
)
def test_log_level_is_taken_before_and_after_the_command(argv: list[str], level: str) -> None:
    assert log_level(_parser().parse_args(argv)) == level


def test_every_commands_help_shows_the_global_options(capsys: pytest.CaptureFixture[str]) -> None:
    commands = ["check-config", "plan", "run", "serve", "explain-scale-down", "predict", "report", "simulate"]
    for command in commands:
        with pytest.raises(SystemExit):
            _parser().parse_args([command, "--help"])
        shown = capsys.readouterr().out
        assert "--log-level {DEBUG,INFO,WARNING,ERROR}" in shown and "--version" in shown, command


def test_plan_takes_the_log_level_after_the_command_end_to_end() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rebalancer", "plan", "--demo", "--log-level", "DEBUG"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "planned eviction(s)" in out.stdout
