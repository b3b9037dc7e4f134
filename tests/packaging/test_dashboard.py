"""The Grafana dashboard the chart ships: every PromQL expression parses (the real promtool), reads only
metrics rebalancer really exports (from a live Metrics registry, not a list kept by hand), and every
exported metric has a panel."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from rebalancer.records import EfficiencyState, compute_rates
from rebalancer.service.metrics import Metrics
from tests.adapters.prom_fixture import run_promtool
from tests.packaging.chart import CHART, Rendered, render

DASHBOARD_FILE = CHART / "dashboards" / "rebalancer.json"
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__range": "6h", "$__interval": "1m", "$job": ".*", "$pool": ".*"}
PROMQL_WORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
                "group_right", "inf", "nan", "atan2"}  # fmt: skip
SAMPLE_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "gauge": ("",),
    "info": ("_info",),
}
NOT_ON_THE_DASHBOARD = {"rebalancer_watch_events_total"}  # relists and silence say more about a watch's health


@pytest.fixture(scope="module")
def rendered() -> Rendered:
    return render({"dashboard": {"enabled": True, "namespace": "monitoring"}})


@pytest.fixture(scope="module")
def dashboard(rendered: Rendered) -> dict[str, Any]:
    config_map = rendered.named("ConfigMap", "rebalancer-dashboard")
    parsed: dict[str, Any] = json.loads(config_map["data"]["rebalancer.json"])
    return parsed


def exported_samples() -> set[str]:
    """Sample names a running service exposes, from the families of a real Metrics registry."""
    metrics = Metrics()
    metrics.watch_cache(list)  # the watch cache's collector, as serve registers it
    metrics.observe_efficiency(compute_rates(EfficiencyState(), {}, {}, 0.0, 86_400.0))  # as after a cycle
    names: set[str] = set()
    for family in metrics.registry.collect():
        names.update(family.name + suffix for suffix in SAMPLE_SUFFIXES[family.type])
    return names


def expressions(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) of every panel target and every query variable."""
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield f"panel {panel['title']!r}", target["expr"]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            selector = re.fullmatch(r"label_values\((.+),\s*\w+\)", variable["definition"])
            assert selector is not None, variable["definition"]
            yield f"variable {variable['name']}", selector.group(1)


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (strings, label matchers, ranges, grouping lists and
    function names are not metrics)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w:.])[A-Za-z_:][\w:]*", text):  # not the h of 1h
        followed_by_call = re.match(r"\s*\(", text[match.end() :]) is not None
        if not followed_by_call and match.group() not in PROMQL_WORDS:
            names.add(match.group())
    return names


def test_the_configmap_carries_the_dashboard_for_the_grafana_sidecar(
    rendered: Rendered, dashboard: dict[str, Any]
) -> None:
    config_map = rendered.named("ConfigMap", "rebalancer-dashboard")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["namespace"] == "monitoring"
    assert dashboard == json.loads(DASHBOARD_FILE.read_text(encoding="utf-8"))
    assert dashboard["uid"] == "rebalancer"
    assert not render().of_kind("ConfigMap")[1:]  # off by default: only the policy


def test_the_metric_name_reader_reads_names() -> None:
    expr = 'histogram_quantile(0.95, sum by (le) (rate(a_bucket{x="b c"}[5m]))) / on (n) group_left b_total offset 1h'
    assert metric_names(expr) == {"a_bucket", "b_total"}


def test_every_metric_on_the_dashboard_is_exported(dashboard: dict[str, Any]) -> None:
    exported = exported_samples()
    assert "rebalancer_pods_evicted_total" in exported  # the registry was read
    unknown = {f"{where}: {name}" for where, expr in expressions(dashboard) for name in metric_names(expr) - exported}
    assert unknown == set()


def test_every_exported_metric_has_a_panel(dashboard: dict[str, Any]) -> None:
    used = {name for _, expr in expressions(dashboard) for name in metric_names(expr)}
    families = {re.sub(r"_(bucket|sum|count)$", "", n) for n in used}
    missing = {
        n for n in exported_samples() if n not in used and re.sub(r"_(bucket|sum|count)$", "", n) not in families
    }
    assert missing <= NOT_ON_THE_DASHBOARD, "add a panel for these (charts/rebalancer/dashboards/rebalancer.json)"


def test_the_dashboard_shows_what_the_issue_asks(dashboard: dict[str, Any]) -> None:
    used = {name for _, expr in expressions(dashboard) for name in metric_names(expr)}
    assert {
        "rebalancer_node_cpu_utilization_ratio",
        "rebalancer_nodes",
        "rebalancer_pods_evicted_total",
        "rebalancer_limiter_blocked_total",
    } <= used
    assert any("by (result)" in expr for _, expr in expressions(dashboard))


def test_promtool_parses_every_expression(dashboard: dict[str, Any], tmp_path: Path) -> None:
    rules = []
    for index, (_, expr) in enumerate(expressions(dashboard)):
        promql = expr
        for variable, value in GRAFANA_VARIABLES.items():
            promql = promql.replace(variable, value)
        assert "$" not in promql, f"a Grafana variable the test does not know: {expr}"
        rules.append({"record": f"dashboard:expression_{index}", "expr": promql})
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = run_promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        yaml.safe_dump({"groups": [{"name": "d", "rules": [{"record": "x:y", "expr": "sum by (a (b)"}]}]})
    )
    assert run_promtool("check", "rules", str(broken)).returncode != 0
