"""Several seeds (other Deployments, traces, placement and scheduler tie-breaks) summarised per policy:
the mean and the range of each figure, since one run's differences between policies can be noise (pure)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from statistics import mean
from typing import Any

from rebalancer.offline.simulate.result import VariantResult

Runs = Sequence[Sequence[VariantResult]]  # one tuple of results per seed, policies in the same order


Spread = tuple[float, float, float]  # mean, min, max


def figure(results: Sequence[VariantResult], get: Callable[[VariantResult], float | None]) -> Spread | None:
    return spread([get(r) for r in results])


def spread(values: Sequence[float | None]) -> Spread | None:
    """(mean, min, max) of the known values; None when none is known."""
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
                "hotNodeMinutes": figure(per_seed, lambda r: r.hot_node_minutes),
                "versusNone": spread(versus),
                "evictions": figure(per_seed, lambda r: float(r.evictions)),
                "evictionsPerPodPerDay": figure(per_seed, lambda r: r.evictions_per_pod_day),
                "overshoot": figure(per_seed, lambda r: r.overshoot_evictions),
                "overshootBelowCold": figure(
                    per_seed, lambda r: None if r.overshoot is None else r.overshoot.below_cold
                ),
                "overshootAgain": figure(per_seed, lambda r: None if r.overshoot is None else r.overshoot.again),
                "landedBackShare": figure(per_seed, lambda r: r.landed_back_share),
                "effective": figure(per_seed, lambda r: None if r.rates is None else r.rates.effective),
                "evictionsPer100HotMinutesSaved": spread(
                    [r.evictions_per_100_saved(n) for r, n in zip(per_seed, nones, strict=True)]
                ),
                "hotAgainShare": figure(per_seed, lambda r: r.hot_again_share),
                "unavoidableShare": figure(per_seed, lambda r: r.unavoidable_share),
                "unmetCoreMinutes": figure(per_seed, lambda r: r.unmet_core_minutes),
            }
        )
    return out


UNAVOIDABLE_WARNING = 0.25  # of the hot-node-minutes without rebalancing
PRICE = (
    "ev/100 saved: evictions per 100 hot-node-minutes fewer than none (no cut: they saved none); hot again: "
    "evictions whose node was hot again within the hour; unavoidable: hot-node-minutes no placement fixes "
    "(a pod alone, or the whole pool, above the hot threshold); unmet: demand beyond the nodes' CPU, throttled"
)


def unavoidable_warning(runs: Runs) -> str | None:
    """A warning when, without rebalancing (``none``, else the first policy), at least a quarter of the
    hot-node-minutes are out of any placement's reach (mean over the seeds)."""
    shares = [next((r for r in run if r.name == "none"), run[0]).unavoidable_share for run in runs if run]
    known = [s for s in shares if s is not None]
    if not known or mean(known) < UNAVOIDABLE_WARNING:
        return None
    return (f"{100 * mean(known):.0f}% of the hot-node-minutes are unavoidable (a pod alone or the whole pool above "
            f"the hot threshold): no placement fixes them, so a rebalancing policy can cut at most "
            f"{100 * (1 - mean(known)):.0f}%")  # fmt: skip


OVERSHOOT = (
    "overshoot: evictions beyond need on the real usage (below cold: reliefs that left their node under "
    "the cold threshold; again: evictions from a node relieved again within the usage window while not hot)"
)


def cell(value: Spread | None, percent: bool = False, signed: bool = False, digits: int = 0) -> str:
    if value is None:
        return "-"
    scale = 100 if percent else 1
    sign = "+" if signed else ""
    low, high = value[1] * scale, value[2] * scale
    f = f"{sign}.{digits}f"
    return f"{value[0] * scale:{f}}{'%' if percent else ''} [{low:{f}}, {high:{f}}]"


def summary_table(runs: Runs, seeds: Sequence[int], header: str) -> str:
    headers = ["policy", "hot-node-min", "vs none", "evictions", "ev/pod/day", "overshoot", "below cold", "again",
               "landed back", "effective", "ev/100 saved", "hot again", "unavoidable", "unmet core-min"]  # fmt: skip
    rows = [headers]
    for f in figures(runs):
        rows.append(
            [
                f["name"],
                cell(f["hotNodeMinutes"]),
                cell(f["versusNone"], percent=True, signed=True),
                cell(f["evictions"]),
                cell(f["evictionsPerPodPerDay"], digits=3),
                cell(f["overshoot"]),
                cell(f["overshootBelowCold"]),
                cell(f["overshootAgain"]),
                cell(f["landedBackShare"], percent=True),
                cell(f["effective"], percent=True),
                cell(f["evictionsPer100HotMinutesSaved"], digits=1),
                cell(f["hotAgainShare"], percent=True),
                cell(f["unavoidableShare"], percent=True),
                cell(f["unmetCoreMinutes"]),
            ]
        )
    lines = [header, f"mean [min, max] over seeds {', '.join(map(str, seeds))}", "", *aligned(rows), "", OVERSHOOT,
             PRICE + " (ev/100 saved: over the seeds with a cut)"]  # fmt: skip
    return "\n".join(lines) + "\n"


def aligned(rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows as text columns: the first left-aligned, the others right-aligned."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
        for row in rows
    ]
