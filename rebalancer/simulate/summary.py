"""Several seeds (other Deployments, traces, placement and scheduler tie-breaks) summarised per policy:
the mean and the range of each figure, since one run's differences between policies can be noise (pure)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from statistics import mean
from typing import Any

from rebalancer.simulate.result import VariantResult

Runs = Sequence[Sequence[VariantResult]]  # one tuple of results per seed, policies in the same order


def _figure(
    results: Sequence[VariantResult], get: Callable[[VariantResult], float | None]
) -> tuple[float, float, float] | None:
    return _spread([get(r) for r in results])


def _spread(values: Sequence[float | None]) -> tuple[float, float, float] | None:
    known = [v for v in values if v is not None]
    return (mean(known), min(known), max(known)) if known else None


def _versus_none(result: VariantResult, none: VariantResult | None) -> float | None:
    if none is None or not none.hot_node_minutes:
        return None
    return result.hot_node_minutes / none.hot_node_minutes - 1


def figures(runs: Runs) -> list[dict[str, Any]]:
    """Per policy: (mean, min, max) of each figure over the seeds (None where never measured)."""
    out = []
    for i, first in enumerate(runs[0]):
        per_seed = [run[i] for run in runs]
        nones = [next((r for r in run if r.name == "none"), None) for run in runs]
        versus = [_versus_none(r, n) for r, n in zip(per_seed, nones, strict=True)] if first.name != "none" else []
        out.append(
            {
                "name": first.name,
                "hotNodeMinutes": _figure(per_seed, lambda r: r.hot_node_minutes),
                "versusNone": _spread(versus),
                "evictions": _figure(per_seed, lambda r: float(r.evictions)),
                "landedBackShare": _figure(per_seed, lambda r: r.landed_back_share),
                "effective": _figure(per_seed, lambda r: None if r.rates is None else r.rates.effective),
            }
        )
    return out


def _cell(value: tuple[float, float, float] | None, percent: bool = False, signed: bool = False) -> str:
    if value is None:
        return "-"
    scale = 100 if percent else 1
    sign = "+" if signed else ""
    low, high = value[1] * scale, value[2] * scale
    return f"{value[0] * scale:{sign}.0f}{'%' if percent else ''} [{low:{sign}.0f}, {high:{sign}.0f}]"


def summary_table(runs: Runs, seeds: Sequence[int], header: str) -> str:
    headers = ["policy", "hot-node-min", "vs none", "evictions", "landed back", "effective"]
    rows = [headers]
    for f in figures(runs):
        rows.append(
            [
                f["name"],
                _cell(f["hotNodeMinutes"]),
                _cell(f["versusNone"], percent=True, signed=True),
                _cell(f["evictions"]),
                _cell(f["landedBackShare"], percent=True),
                _cell(f["effective"], percent=True),
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(headers))]
    lines = [header, f"mean [min, max] over seeds {', '.join(map(str, seeds))}", ""]
    for row in rows:
        lines.append(
            "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
        )
    return "\n".join(lines) + "\n"
