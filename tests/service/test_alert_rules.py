"""The shipped Prometheus rules (config/prometheus/) under the real promtool: `check rules` on each file,
`test rules` on its unit tests (tests/rules/), and proof that those unit tests can fail: a copy with one
wrong expectation must make promtool exit non-zero, or a passing run would mean nothing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from rebalancer.policy import WebhookSettings
from rebalancer.service import WebhookPayload, node_alerts
from tests.adapters.prom_fixture import run_promtool

ROOT = Path(__file__).resolve().parents[2]
RULE_FILES = sorted((ROOT / "config" / "prometheus").glob("*.yaml"))
RULE_TESTS = sorted((ROOT / "tests" / "rules").glob("*.test.yaml"))
ALERT = "RebalancerNodeCPUHot"

Doc = dict[str, Any]


def load(test_file: Path) -> Doc:
    doc: Doc = yaml.safe_load(test_file.read_text())
    return doc


def rule_files_of(test_file: Path) -> list[Path]:
    """The rule files a promtool test file loads (promtool resolves them against the test file's folder)."""
    return [(test_file.parent / name).resolve() for name in load(test_file)["rule_files"]]


def alert_test(doc: Doc, eval_time: str) -> Doc:
    found: list[Doc] = [t for t in doc["tests"][0]["alert_rule_test"] if t["eval_time"] == eval_time]
    assert len(found) == 1, f"one alert test at {eval_time} expected"
    return found[0]


def run_copy(test_file: Path, tmp_path: Path, change: Callable[[Doc], None]) -> str:
    """Run promtool on a changed copy of ``test_file`` (rule files by absolute path); its output, or ""
    when it passed."""
    doc = load(test_file)
    doc["rule_files"] = [str(path) for path in rule_files_of(test_file)]
    change(doc)
    copy = tmp_path / test_file.name
    copy.write_text(yaml.safe_dump(doc, sort_keys=False))
    out = run_promtool("test", "rules", str(copy))
    return "" if out.returncode == 0 else out.stdout + out.stderr


def test_every_shipped_rule_file_has_unit_tests() -> None:
    assert RULE_FILES, "no rule files in config/prometheus"
    tested = {path for test_file in RULE_TESTS for path in rule_files_of(test_file)}
    assert tested == set(RULE_FILES)


@pytest.mark.parametrize("rules", RULE_FILES, ids=lambda p: p.name)
def test_promtool_check_rules_accepts_the_shipped_rules(rules: Path) -> None:
    out = run_promtool("check", "rules", str(rules))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 3 rules found" in out.stdout  # the recording rule, the alert, the hourly profile rule


@pytest.mark.parametrize("test_file", RULE_TESTS, ids=lambda p: p.name)
def test_promtool_unit_tests_of_the_rules_pass(test_file: Path) -> None:
    out = run_promtool("test", "rules", str(test_file))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


@pytest.mark.parametrize("test_file", RULE_TESTS, ids=lambda p: p.name)
def test_an_unchanged_copy_passes(test_file: Path, tmp_path: Path) -> None:
    """The copying below (absolute rule paths, YAML dumped again) keeps a good test file good."""
    assert run_copy(test_file, tmp_path, lambda doc: None) == ""


def _wrong_severity(doc: Doc) -> None:
    alert_test(doc, "10m")["exp_alerts"][0]["exp_labels"]["severity"] = "critical"


def _wrong_node(doc: Doc) -> None:
    alert_test(doc, "10m")["exp_alerts"][0]["exp_labels"]["node"] = "node-other"


def _wrong_summary(doc: Doc) -> None:
    alert_test(doc, "10m")["exp_alerts"][0]["exp_annotations"]["summary"] = "Node node-hot is fine"


def _firing_before_for_elapsed(doc: Doc) -> None:
    alert_test(doc, "9m")["exp_alerts"] = alert_test(doc, "10m")["exp_alerts"]


def _still_firing_after_cooling(doc: Doc) -> None:
    alert_test(doc, "16m")["exp_alerts"].append(alert_test(doc, "10m")["exp_alerts"][1])


def _wrong_recorded_value(doc: Doc) -> None:
    doc["tests"][0]["promql_expr_test"][0]["exp_samples"][0]["value"] = 0.85


@pytest.mark.parametrize(
    "change",
    [
        _wrong_severity,
        _wrong_node,
        _wrong_summary,
        _firing_before_for_elapsed,
        _still_firing_after_cooling,
        _wrong_recorded_value,
    ],
    ids=lambda change: change.__name__.strip("_"),
)
@pytest.mark.parametrize("test_file", RULE_TESTS, ids=lambda p: p.name)
def test_a_wrong_expectation_fails(test_file: Path, tmp_path: Path, change: Callable[[Doc], None]) -> None:
    output = run_copy(test_file, tmp_path, change)
    assert "FAILED" in output, "promtool accepted a wrong expectation: it did not evaluate the rules"


@pytest.mark.parametrize("test_file", RULE_TESTS, ids=lambda p: p.name)
def test_the_firing_alerts_name_their_node_for_the_webhook(test_file: Path) -> None:
    """The labels promtool proves the alert carries are enough for the webhook's default node labels."""
    expected = [
        alert["exp_labels"] for check in load(test_file)["tests"][0]["alert_rule_test"] for alert in check["exp_alerts"]
    ]
    assert expected
    payload = WebhookPayload.model_validate(
        {
            "version": "4",
            "receiver": "rebalancer",
            "status": "firing",
            "groupKey": "{}:{}",
            "alerts": [
                {
                    "status": "firing",
                    "labels": {"alertname": ALERT, **labels},
                    "startsAt": "2026-01-01T00:00:00Z",
                    "fingerprint": f"f{i}",
                }
                for i, labels in enumerate(expected)
            ],
        }
    )
    nodes = {labels["node"] for labels in expected}
    resolved = node_alerts(payload, known_nodes=nodes, node_labels=WebhookSettings().node_labels)
    assert [a.node for a in resolved] == [labels["node"] for labels in expected]
