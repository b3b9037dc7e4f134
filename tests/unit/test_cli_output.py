"""The command line's habits: one -o/--output on every printing command, one document schema with
camelCase keys, help with defaults, shell completion, -v, and CPU in cores in every table."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from rebalancer.actions.evictor import EvictionResult, EvictorReport, Outcome
from rebalancer.app.cli import _parser, log_level, main
from rebalancer.app.explain import explain, explanation_record
from rebalancer.app.render import plan_record, run_record, run_table
from rebalancer.domain.efficiency_records import EfficiencyState
from rebalancer.domain.output import API_VERSION, encode
from rebalancer.planning.plan import EvictionPlan, PlannedEviction, StrategyResult
from rebalancer.planning.scale_down import RankedPod
from rebalancer.records.rates import compute_rates
from rebalancer.records.render import report_record
from tests.unit.test_efficiency import T0, plan_at, scene

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "config" / "low-node-utilization.yaml"
SMALL_SIMULATION = ["simulate", "--nodes", "3", "--pods-per-node", "4", "--days", "1", "--variant", "none"]
PRINTING = {
    "plan": ["plan", "--demo"],
    "predict": ["predict", "--demo"],
    "check-config": ["check-config", str(POLICY)],
    "simulate": SMALL_SIMULATION,
}
DATA_KEYS = {"sources", "uncooled", "unacted", "unjudged", "blocked", "unactedNodes", "actualUtilizationPct",
             "currentUtilizationPct", "changes", "blockedByLimiter"}  # fmt: skip  # mappings keyed by data


def keys(data: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """Every field name with where it is; the keys of mappings whose keys are data are not field names."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield path, key
            if key not in DATA_KEYS:
                yield from keys(value, f"{path}.{key}")
    elif isinstance(data, list):
        for item in data:
            yield from keys(item, f"{path}[]")


def assert_camel_case(data: Any) -> None:
    bad = [f"{path}.{key}" for path, key in keys(data) if not re.fullmatch(r"[a-z][a-zA-Z0-9]*", key)]
    assert not bad, bad


def printed(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", list(PRINTING))
def test_each_printing_command_prints_table_json_and_the_same_data_as_yaml(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = PRINTING[command]
    as_json = json.loads(printed([*argv, "-o", "json"], capsys))
    as_yaml = yaml.safe_load(printed([*argv, "--output", "yaml"], capsys))
    assert as_yaml == as_json
    assert as_json["apiVersion"] == API_VERSION and re.fullmatch(r"[A-Z][A-Za-z]+", as_json["kind"])
    assert_camel_case(as_json)
    table = printed([*argv, "-o", "table"], capsys)
    assert table == printed(argv, capsys)  # table is the default
    assert "apiVersion" not in table


def test_records_of_commands_that_need_a_cluster_have_camel_case_keys() -> None:
    eviction = PlannedEviction(
        "LowNodeUtilization", "ns", "web-1", "uid-1", "hot", "general", None, 4000, "why", "cold"
    )
    plan = EvictionPlan(1.0e9, (StrategyResult("LowNodeUtilization", (eviction,), (), ()),))
    report = EvictorReport((EvictionResult(eviction, Outcome.BLOCKED, "limit", "maxNoOfPodsToEvictPerNode", 2.0e9),))
    run = run_record(plan, report, "test")
    assert run["outcomes"][0]["retryAt"] == 2.0e9 and run["evictions"][0]["roomOn"] == "cold"
    efficiency = report_record(compute_rates(EfficiencyState(), None, {}, 0.0, 3600.0))
    pod = RankedPod("web-1", "uid-1", "n1", "Running", True, 0.0, None, 0, 1.0)
    explained = explanation_record(explain("Deployment/ns/web", (("rs", 1),), {"rs": (pod,)}, 1, 10.0, None, {}))
    for kind, record in (("Run", run), ("EfficiencyReport", efficiency), ("ScaleDownExplanation", explained)):
        document = json.loads(encode("json", kind, record))
        assert document["kind"] == kind and yaml.safe_load(encode("yaml", kind, record)) == document
        assert_camel_case(document)


def test_run_table_shows_each_outcome_and_its_limiter() -> None:
    eviction = PlannedEviction(
        "LowNodeUtilization", "ns", "web-1", "uid-1", "hot", "general", None, 4000, "why", "cold"
    )
    report = EvictorReport((EvictionResult(eviction, Outcome.BLOCKED, "limit", "maxNoOfPodsToEvictPerNode"),))
    table = run_table(report).splitlines()
    assert table[0] == "Evictions: 1"
    assert table[2].split()[:4] == ["ns/web-1", "hot", "LowNodeUtilization", "blocked"]
    assert "(maxNoOfPodsToEvictPerNode)" in table[2]


def test_run_takes_once_but_does_not_need_it() -> None:
    assert _parser().parse_args(["run", "--policy", "p.yaml"]).command == "run"
    assert _parser().parse_args(["run", "--once", "--policy", "p.yaml", "-o", "yaml"]).output == "yaml"


def commands() -> dict[str, argparse.ArgumentParser]:
    subparsers = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(subparsers.choices)


def test_every_printing_command_takes_the_same_output_option() -> None:
    for name, command in commands().items():
        (option,) = [a for a in command._actions if a.dest == "output"] or [None]
        if name in {"serve", "completion", "import-policy"}:  # a service logs; the others print a script or a policy
            assert option is None
            continue
        assert option is not None, name
        assert option.option_strings == ["-o", "--output"] and option.choices == ("table", "json", "yaml")


def test_every_option_has_help_and_every_value_option_its_default(capsys: pytest.CaptureFixture[str]) -> None:
    for name, command in {"": _parser(), **commands()}.items():
        for action in command._actions:
            assert action.help, (name, action.dest)
            if not action.option_strings or action.nargs == 0 or action.required:
                continue
            assert "default:" in (command._get_formatter()._expand_help(action)), (name, action.option_strings)
        with pytest.raises(SystemExit):
            _parser().parse_args([name, "--help"] if name else ["--help"])
        shown = capsys.readouterr().out
        assert "composition root" not in shown


@pytest.mark.parametrize(
    ("argv", "level"),
    [
        (["plan", "--demo", "-v"], "INFO"),
        (["-vv", "plan", "--demo"], "DEBUG"),
        (["plan", "--demo", "-vvv"], "DEBUG"),  # no level below DEBUG
        (["serve", "--policy", "p.yaml", "--verbose"], "DEBUG"),  # serve starts at INFO
        (["--log-level", "ERROR", "plan", "--demo", "-v"], "WARNING"),  # a step below the level asked for
    ],
)
def test_verbose_lowers_the_level_a_step_at_a_time(argv: list[str], level: str) -> None:
    assert log_level(_parser().parse_args(argv)) == level


def complete(script: str, *words: str) -> list[str]:
    """What bash offers after ``words`` (the last one is the word being completed)."""
    line = " ".join(f"'{w}'" for w in words)
    program = (
        f'{script}\nCOMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; _rebalancer; printf "%s\\n" "${{COMPREPLY[@]}}"'
    )
    out = subprocess.run(["bash", "-c", program], capture_output=True, text=True, check=True).stdout
    return out.split()


def test_completion_scripts_name_every_command_and_complete_in_bash(capsys: pytest.CaptureFixture[str]) -> None:
    bash = printed(["completion", "bash"], capsys)
    zsh = printed(["completion", "zsh"], capsys)
    for name in commands():
        assert name in bash and name in zsh
    assert "bashcompinit" in zsh and bash in zsh
    assert complete(bash, "rebalancer", "") == list(commands())
    assert complete(bash, "rebalancer", "pl") == ["plan"]
    assert complete(bash, "rebalancer", "plan", "-o", "") == ["table", "json", "yaml"]
    assert complete(bash, "rebalancer", "--log-level", "INFO", "plan", "--de") == ["--demo"]
    assert complete(bash, "rebalancer", "run", "--dry-run", "") == ["off", "client", "server"]
    assert complete(bash, "rebalancer", "completion", "") == ["bash", "zsh"]
    assert complete(bash, "rebalancer", "plan", "--policy", "") == []  # left to file name completion


def test_demo_tables_show_cpu_in_cores_said_once(capsys: pytest.CaptureFixture[str]) -> None:
    plan = printed(["plan", "--demo"], capsys).splitlines()
    assert plan[1] == "CPU in cores."
    header = next(i for i, line in enumerate(plan) if line.startswith("NODE "))
    hot = plan[header + 1].split()
    assert hot[:5] == ["general-08", "general", "7.324", "8.000", "91.5"]  # usage and allocatable alike
    eviction = next(line for line in plan if line.startswith("shop/catalog-3")).split()
    assert eviction[2] == "4.000"
    predict = printed(["predict", "--demo"], capsys).splitlines()
    assert predict[0].endswith("; CPU in cores")
    row = next(line for line in predict if line.startswith("general-06")).split()
    # allocatable and system (300 m read at the end of its decaying-histogram bucket), the prediction's unit
    assert row[4:6] == ["8.000", "0.301"]
    every_cpu_cell = [cell for line in plan + predict for cell in line.split() if re.fullmatch(r"\d+m", cell)]
    assert every_cpu_cell == []  # no millicores beside cores


def test_plan_record_says_why_each_hot_node_got_no_eviction() -> None:
    _, plan = plan_at(*scene(), T0)
    (strategy,) = plan_record(plan, "test")["strategies"]
    assert strategy["unrelieved"] == {"stuck": "no-evictable-pod"}  # the code serve logs and the records count
    assert strategy["emptied"] == []
    document = json.loads(encode("json", "Plan", plan_record(plan, "test")))
    assert document["strategies"][0]["unrelieved"] == {"stuck": "no-evictable-pod"}
