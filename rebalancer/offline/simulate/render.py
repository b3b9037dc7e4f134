"""The comparison table and its record (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rebalancer.offline.simulate.result import VariantResult
from rebalancer.offline.simulate.summary import OVERSHOOT, PRICE, aligned
from rebalancer.records.render import percent

HEADERS = (
    "policy",
    "hot-node-min",
    "early",
    "vs none",
    "evictions",
    "ev/cooled",
    "overshoot",
    "landed back",
    "landing hits",
    "discovery",
    "eviction",
    "effective",
    "bounces",
    "ev/100 saved",
    "hot again",
    "unavoidable",
    "unmet core-min",
)
KIND = "SimulationComparison"  # of its machine-readable document
GOAL_BASELINE, GOAL_HOT_CUT, GOAL_EFFECTIVE, GOAL_LANDED_BACK = "requests-lnu", 0.5, 0.85, 0.05


def _row(result: VariantResult, none: VariantResult | None) -> list[str]:
    r = result.rates
    versus = "-"
    if none is not None and none.hot_node_minutes and result is not none:
        versus = f"{100 * (result.hot_node_minutes / none.hot_node_minutes - 1):+.0f}%"
    per_cooled = result.evictions_per_cooled
    return [
        result.name,
        f"{result.hot_node_minutes:.0f}",
        f"{result.early_minutes:.0f}",
        versus,
        str(result.evictions),
        "-" if per_cooled is None else f"{per_cooled:.2f}",
        "-" if (o := result.overshoot) is None else f"{o.evictions} ({o.below_cold} cold, {o.again} again)",
        "-" if r is None else f"{result.landed_back} ({percent(result.landed_back_share)})",
        "-" if r is None else percent(r.landing_hit_rate),
        "-" if r is None else percent(r.discovery),
        "-" if r is None else percent(r.eviction),
        "-" if r is None else percent(r.effective),
        "-" if r is None else str(r.bounce_backs),
        price(result, none),
        percent(result.hot_again_share),
        percent(result.unavoidable_share),
        f"{result.unmet_core_minutes:.0f}",
    ]


def price(result: VariantResult, none: VariantResult | None) -> str:
    """Evictions per 100 hot-node-minutes saved against ``none``: "-" without evictions, "no cut" when they
    saved none."""
    if not result.evictions or none is None:
        return "-"
    per = result.evictions_per_100_saved(none)
    return "no cut" if per is None else f"{per:.1f}"


def comparison_table(results: Sequence[VariantResult], header: str) -> str:
    none = next((r for r in results if r.name == "none"), None)
    rows = [list(HEADERS), *(_row(r, none) for r in results)]
    lines = [header, "", *aligned(rows), ""]
    if results:
        lags = {r.lag_minutes for r in results}
        first = f"first {lags.pop():g} minutes" if len(lags) == 1 else "usage window plus the variant's cycle interval"
        lines.append(f"early: hot-node-minutes within the {first} of their node's hot episode "
                     "(the usage window plus one cycle: before a reactive cycle can see them)")  # fmt: skip
        lines.extend([OVERSHOOT, PRICE, ""])
        focused = [f"{r.name} {r.focused_cycles} of {r.cycles} ({r.notifications} notifications)"
                   for r in results if r.notifications]  # fmt: skip
        if focused:
            lines.extend(["alert-driven cycles: " + ", ".join(focused), ""])
    lines.extend(_why_not_cooled(results))
    lines.extend(goal_lines(results))
    return "\n".join(lines) + "\n"


def _why_not_cooled(results: Sequence[VariantResult]) -> list[str]:
    out = []
    for result in results:
        r = result.rates
        if r is None or not (r.uncooled or r.unacted or result.blocked):
            continue
        parts = []
        if r.uncooled:
            parts.append("not cooled: " + ", ".join(f"{k} {v}" for k, v in sorted(r.uncooled.items())))
        if r.unacted:
            parts.append("found, not acted on: " + ", ".join(f"{k} {v}" for k, v in sorted(r.unacted.items())))
        if result.blocked:
            parts.append("blocked: " + ", ".join(f"{k} {v}" for k, v in result.blocked.items()))
        out.append(f"{result.name}: " + "; ".join(parts))
    return [*out, ""] if out else []


def goal_lines(results: Sequence[VariantResult]) -> list[str]:
    """Each rebalancer variant against the hot-node goal (against requests-lnu) and the landing-control goal."""
    by_name = {r.name: r for r in results}
    base = by_name.get(GOAL_BASELINE)
    out = []
    for result in results:
        if result.rates is None or result.name in {GOAL_BASELINE, "instant-lnu"}:
            continue
        checks = []
        if base is not None and base.hot_node_minutes:
            cut = 1 - result.hot_node_minutes / base.hot_node_minutes
            where = f"{100 * cut:.0f}% below" if cut >= 0 else f"{-100 * cut:.0f}% above"
            checks.append(f"hot-node-minutes {where} {GOAL_BASELINE} (goal 50% below: "
                          f"{'met' if cut >= GOAL_HOT_CUT else 'not met'})")  # fmt: skip
            more = result.evictions - base.evictions
            checks.append(f"evictions {more:+d} against it ({'met' if more <= 0 else 'not met'})")
        effective = result.rates.effective
        checks.append(f"effective {percent(effective)} (goal 85%: "
                      f"{'met' if effective is not None and effective >= GOAL_EFFECTIVE else 'not met'})")  # fmt: skip
        share = result.landed_back_share
        checks.append(f"landed back {percent(share)} (goal < 5%: "
                      f"{'met' if share is not None and share < GOAL_LANDED_BACK else 'not met'})")  # fmt: skip
        out.append(f"{result.name}: " + "; ".join(checks))
    return out


def priced_records(results: Sequence[VariantResult]) -> list[dict[str, Any]]:
    """Each policy's record with its price against the seed's ``none`` (None where it has no price)."""
    none = next((r for r in results if r.name == "none"), None)
    return [{**r.record(), "evictionsPer100HotMinutesSaved": r.evictions_per_100_saved(none)} for r in results]


def comparison_record(results: Sequence[VariantResult], meta: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """The first seed's policies, and with several seeds each seed's and the summary (``extra``)."""
    return {"simulation": meta, "policies": priced_records(results), **extra}
