"""`rebalancer predict --demo`: the predictor on the embedded demo's pods and their real daily peaks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rebalancer.app.cli import main

STRATEGY = "strategies:\n- {kind: HighNodeUtilization, thresholds: {cpu: 5}}\n"


def test_demo_prediction_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--demo", "--output", "json"]) == 0
    record = json.loads(capsys.readouterr().out)
    nodes = {n["node"]: n for n in record["nodes"]}
    assert record["aggregation"] == "decaying_histogram"
    hot = {name for name, n in nodes.items() if n["utilizationPct"] is not None and n["utilizationPct"] > 70}
    assert set(record["hotNodes"]) == hot and hot
    sources = {p["source"] for p in record["pods"]}
    assert {"history", "workload", "request", "partial"} <= sources  # the demo's young pods and coredns
    for n in nodes.values():
        assert n["cpuM"] == pytest.approx(n["podsCpuM"] + n["systemCpuM"])
        assert n["utilizationPct"] == pytest.approx(100 * n["cpuM"] / n["allocatableCpuM"])
    assert set(record["actualUtilizationPct"]) == set(nodes)


def test_demo_table_and_policy_override(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(f"predictor: {{aggregation: weighted_mean, safetyMargin: 0.5}}\n{STRATEGY}")
    assert main(["predict", "--demo", "--policy", str(policy)]) == 0
    out = capsys.readouterr().out
    assert "weighted_mean of 8 day(s), safety margin 0.5, hot above 70%" in out
    assert "actual %" in out and "Predicted hot:" in out


def test_plan_demo_with_a_predictive_strategy_classifies_by_the_demo_prediction(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`plan --demo` with classifyBy predicted: the nodes it calls hot are the ones `predict --demo` predicts
    above the same percentage, and every planned eviction comes from one of them."""
    assert main(["predict", "--demo", "--output", "json"]) == 0
    predicted_hot = set(json.loads(capsys.readouterr().out)["hotNodes"])
    policy = tmp_path / "p.yaml"
    policy.write_text(
        "pools: {label: node-pool}\nstrategies:\n"
        "- {kind: LowNodeUtilization, thresholds: {cpu: 50}, targetThresholds: {cpu: 70}, classifyBy: predicted,"
        " predictPlacement: false}\n"
    )  # with prediction on, every candidate's replacement is predicted to land back or on a node not cold
    assert main(["plan", "--demo", "--policy", str(policy), "--output", "json"]) == 0
    record = json.loads(capsys.readouterr().out)
    nodes = record["strategies"][0]["nodes"]
    hot = {n["node"] for n in nodes if n["nodeClass"] == "hot"}
    assert hot == predicted_hot and hot
    assert all(n["reason"].startswith("predicted peak usage") for n in nodes if n["nodeClass"] != "unknown")
    assert record["evictions"] and {e["node"] for e in record["evictions"]} <= hot
