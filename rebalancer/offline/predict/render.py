"""Predictions and back-tests for people (text tables, CPU in cores) and machines (records), and a progress bar."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TextIO

from rebalancer.domain.output import plain
from rebalancer.domain.quantity import format_cores
from rebalancer.domain.text_table import text_table
from rebalancer.offline.predict.backtest import BacktestReport, BacktestRow
from rebalancer.planning.predict.predictor import NodePrediction, Prediction

PREDICTION_KIND, BACKTEST_KIND = "Prediction", "Backtest"  # of their machine-readable documents


def format_value(value: float | None, spec: str = ".1f") -> str:
    """A number as ``spec`` says, "-" for unknown (None or NaN)."""
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def _cores(millis: float | None) -> str:
    return "-" if millis is None or math.isnan(millis) else format_cores(millis)


_SHORT = {"memory": "mem"}
ACTUAL, CURRENT = "actual", "current"  # the real peak (the demo knows it), or the usage now (a live cluster)


Others = Mapping[str, Mapping[str, float]]
"""Resource besides CPU (memory, pods) -> node -> its ``compared`` utilization % (a policy's thresholds name it)."""


def prediction_record(
    prediction: Prediction,
    source: str,
    actual_pct: Mapping[str, float] | None = None,
    compared: str = ACTUAL,
    others: Others | None = None,
) -> dict[str, Any]:
    """The whole prediction as plain data; ``actual_pct``: node -> the ``compared`` utilization %."""
    record: dict[str, Any] = plain(prediction)
    record["source"] = source
    record["hotNodes"] = list(prediction.hot_nodes())
    if actual_pct is not None:
        record[f"{compared}UtilizationPct"] = dict(sorted(actual_pct.items()))
    for resource, pcts in sorted((others or {}).items()):
        record[f"{compared}{resource.capitalize()}UtilizationPct"] = dict(sorted(pcts.items()))
    return record


def prediction_table(
    prediction: Prediction,
    source: str,
    actual_pct: Mapping[str, float] | None = None,
    compared: str = ACTUAL,
    others: Others | None = None,
) -> str:
    coincident = any(n.peak is not None for n in prediction.nodes)
    basis = (
        "a node's peak is the highest hour of its pods' summed daily profiles (sum %: its pods' peaks summed)"
        if coincident
        else "a node's peak is the sum of its pods' peaks"
    )
    lines = [
        f"Predicted next peak from {source}: {prediction.aggregation} of {prediction.days} day(s), "
        f"safety margin {prediction.safety_margin:g}, hot above {prediction.hot_threshold:g}%; CPU in cores",
        f"({basis}).",
        "",
    ]
    rows = []
    extra = sorted((others or {}).items())
    if extra:
        lines[1] = lines[1][:-1] + "; the other resources' columns: their use now, not predicted)."
    for n in sorted(prediction.nodes, key=lambda n: (-(n.utilization_pct or -1.0), n.node)):
        state = "unknown" if n.hot is None else ("HOT" if n.hot else "")
        sources = ", ".join(f"{count} {name}" for name, count in n.sources.items())
        actual = [] if actual_pct is None else [format_value(actual_pct.get(n.node))]
        actual += [format_value(pcts.get(n.node)) for _, pcts in extra]
        rows.append(
            [
                n.node,
                format_value(n.utilization_pct),
                *actual,
                *([format_value(_sum_pct(n)), n.peak.at if n.peak is not None else "-"] if coincident else []),
                _cores(n.cpu_m),
                format_cores(n.allocatable_cpu_m),
                f"{format_cores(n.system_cpu_m)} ({n.system_source.value})",
                state,
                sources or "no pods",
            ]
        )
    header = ["node", "pred %", *([] if actual_pct is None else [f"{compared} %"])]
    header += [f"{compared} {_SHORT.get(resource, resource)} %" for resource, _ in extra]
    header += [*(["sum %", "peak at"] if coincident else []), "pred", "alloc", "system", "class", "pods by source"]
    peak_at = header.index("peak at") if coincident else -1
    lines += text_table(header, rows, right=frozenset(range(1, len(header) - 3)) - {peak_at})
    if coincident:
        lines += ["", "Pods that make each node's peak (their CPU in that hour):"]
        for n in sorted(prediction.nodes, key=lambda n: (-(n.utilization_pct or -1.0), n.node)):
            if n.peak is not None and n.peak.pods:
                makers = ", ".join(f"{p.namespace}/{p.name} {format_cores(p.cpu_m)}" for p in n.peak.pods)
                more = len(n.pods) - len(n.peak.pods)
                lines.append(f"  {n.node} {n.peak.at}: {makers}" + (f" (+{more} more)" if more > 0 else ""))
    hot = prediction.hot_nodes()
    lines += ["", f"Predicted hot: {len(hot)} node(s)" + (f": {', '.join(hot)}" if hot else "")]
    unknown = [n for n in prediction.nodes if n.hot is None]
    for n in unknown:
        pods = ", ".join(f"{ns}/{name}" for ns, name in n.unknown_pods) or "no allocatable CPU"
        lines.append(f"Unknown: {n.node} ({pods})")
    if prediction.dropped_history:
        lines.append(f"History of {prediction.dropped_history} pod(s) no longer in the cluster was dropped.")
    return "\n".join(lines) + "\n"


def _sum_pct(n: NodePrediction) -> float | None:
    """The node's predicted peak read as the sum of its pods' peaks."""
    if n.pods_cpu_m is None or n.allocatable_cpu_m <= 0:
        return None
    return 100.0 * (n.pods_cpu_m + n.system_cpu_m) / n.allocatable_cpu_m


def _row_cells(row: BacktestRow) -> list[str]:
    return [
        row.aggregation,
        f"{row.safety_margin:g}",
        str(row.evaluated),
        format_value(row.mae, ".2f"),
        format_value(row.bias, "+.2f"),
        format_value(row.precision, ".3f"),
        format_value(row.recall, ".3f"),
        format_value(row.f1, ".3f"),
        f"{format_value(row.turn_hot_recall, '.3f')} ({row.turn_hot_days})",
    ]


def backtest_table(report: BacktestReport) -> str:
    lines = [
        f"Back-test on {report.source}: {report.entities} entities"
        + (f" ({len(report.skipped)} skipped: never provisioned)" if report.skipped else "")
        + f", days {report.first_day} .. {report.last_day} ({report.time_zone})",
        f"Day d predicted from days d-{report.days}..d-1 (at least {report.min_history_days} known); "
        f"{report.evaluated} entity-days evaluated, {report.hot_days} hot (peak above {report.threshold:g}%).",
        "MAE and bias in percentage points of capacity; bias = predicted - actual.",
        "",
    ]
    header = ["aggregation", "margin", "n", "MAE", "bias", "precision", "recall", "F1", "recall after quiet day (n)"]
    lines += text_table(header, [_row_cells(r) for r in report.rows], right=frozenset({1, 2, 3, 4, 5, 6, 7}))
    return "\n".join(lines) + "\n"


def backtest_record(report: BacktestReport) -> dict[str, Any]:
    return {
        "source": report.source,
        "timeZone": report.time_zone,
        "entities": report.entities,
        "skipped": list(report.skipped),
        "firstDay": report.first_day,
        "lastDay": report.last_day,
        "days": report.days,
        "minHistoryDays": report.min_history_days,
        "threshold": report.threshold,
        "evaluated": report.evaluated,
        "hotDays": report.hot_days,
        "rows": [
            {**row_record(r), "turnHotDays": r.turn_hot_days, "turnHotRecall": r.turn_hot_recall} for r in report.rows
        ],
    }


def row_record(row: BacktestRow) -> dict[str, Any]:
    """One aggregation's scores as plain data."""
    return {
        "aggregation": row.aggregation,
        "safetyMargin": row.safety_margin,
        "evaluated": row.evaluated,
        "mae": row.mae,
        "bias": row.bias,
        "precision": row.precision,
        "recall": row.recall,
        "f1": row.f1,
    }


class ProgressBar:
    """A one-line bar on a stream (stderr), redrawn in place; ``close`` ends the line."""

    def __init__(self, stream: TextIO, width: int = 30) -> None:
        self.stream, self.width, self.drawn = stream, width, False

    def __call__(self, done: int, total: int, what: str) -> None:
        filled = self.width * done // total if total else self.width
        self.stream.write(f"\r[{'#' * filled}{'.' * (self.width - filled)}] {done}/{total} {what[:40]:<40}")
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False
