"""The chart's PrometheusRule carries the repository's alert rule files as they are: the chart's copies
under files/ are byte for byte config/prometheus/, the rendered groups are those files' groups, and
promtool accepts them. (The rules' own promtool unit tests are tests/rules/, run by tests/service.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.adapters.prom_fixture import run_promtool
from tests.packaging.chart import CHART, ROOT, render

RULES = {
    "node-exporter": ROOT / "config" / "prometheus" / "rebalancer-rules.yaml",
    "cadvisor": ROOT / "config" / "prometheus" / "rebalancer-rules-cadvisor.yaml",
}


def test_the_charts_copies_are_the_repositorys_rule_files() -> None:
    copies = sorted(p.name for p in (CHART / "files").glob("*.yaml"))
    assert copies == sorted(p.name for p in RULES.values())
    for source in RULES.values():
        assert (CHART / "files" / source.name).read_bytes() == source.read_bytes(), (
            f"cp {source.relative_to(ROOT)} charts/rebalancer/files/"
        )


@pytest.mark.parametrize("choice", list(RULES))
def test_the_rendered_rule_is_the_rule_file(choice: str, tmp_path: Path) -> None:
    values = {"prometheusRule": {"enabled": True, "rules": choice, "labels": {"release": "kube-prometheus-stack"}}}
    rule = render(values).one("PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    groups = rule["spec"]["groups"]
    assert groups == yaml.safe_load(RULES[choice].read_text(encoding="utf-8"))["groups"]
    alerts = [r for g in groups for r in g["rules"] if "alert" in r]
    assert [a["alert"] for a in alerts] == ["RebalancerNodeCPUHot"]
    assert "{{ $labels.node }}" in alerts[0]["annotations"]["summary"]  # Prometheus' template, not Helm's
    path = tmp_path / "rendered.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}))
    result = run_promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_rule_unless_asked() -> None:
    assert render().of_kind("PrometheusRule") == []
