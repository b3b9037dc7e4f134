"""The node-level back-test for people (a text table) and machines (a record)."""

from __future__ import annotations

from typing import Any

from rebalancer.domain.text_table import text_table
from rebalancer.offline.predict.node_backtest import NodeBacktestReport
from rebalancer.offline.predict.render import format_value, row_record


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
            format_value(r.row.mae, ".2f"),
            format_value(r.row.bias, "+.2f"),
            format_value(r.row.precision, ".3f"),
            format_value(r.row.recall, ".3f"),
            format_value(r.row.f1, ".3f"),
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
        "rows": [{**row_record(r.row), "nodePeak": r.node_peak} for r in report.rows],
    }
