"""The node-level back-test for people (a text table) and machines (a record)."""

from __future__ import annotations

import math
from typing import Any

from rebalancer.render import text_table
from rebalancer.simulate.node_backtest import NodeBacktestReport


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None or math.isnan(value) else format(value, spec)


def node_backtest_table(report: NodeBacktestReport) -> str:
    lines = [
        f"Node peaks: {report.description}; pods stay where the scheduler model placed them.",
        f"A node's daily P95 on each of {report.target_days} day(s) predicted from the days before; "
        f"{report.evaluated} node-days, {report.hot} hot (above {report.threshold:g}%). MAE and bias in points "
        "of allocatable CPU.",
        f"sum: the pods' predicted peaks summed; coincident: each day's highest of {report.buckets} time-of-day "
        "buckets of the pods' summed mean profiles, aggregated over the days.",
        "",
    ]
    header = ["aggregation", "node peak", "MAE", "bias", "precision", "recall", "F1"]
    rows = [
        [
            r.row.aggregation,
            r.node_peak,
            _fmt(r.row.mae, ".2f"),
            _fmt(r.row.bias, "+.2f"),
            _fmt(r.row.precision, ".3f"),
            _fmt(r.row.recall, ".3f"),
            _fmt(r.row.f1, ".3f"),
        ]
        for r in report.rows
    ]
    lines += text_table(header, rows, right=frozenset({2, 3, 4, 5, 6}))
    return "\n".join(lines) + "\n"


def node_backtest_record(report: NodeBacktestReport) -> dict[str, Any]:
    return {
        "description": report.description,
        "nodes": report.nodes,
        "pods": report.pods,
        "targetDays": report.target_days,
        "evaluated": report.evaluated,
        "hot": report.hot,
        "threshold": report.threshold,
        "buckets": report.buckets,
        "rows": [
            {
                "aggregation": r.row.aggregation,
                "nodePeak": r.node_peak,
                "mae": r.row.mae,
                "bias": r.row.bias,
                "precision": r.row.precision,
                "recall": r.row.recall,
                "f1": r.row.f1,
            }
            for r in report.rows
        ],
    }
