"""The landing-control before/after (pure): rebalancer without placement prediction and landing guard, with each,
and with both, over the same seeds: landed-back share, effective rate, hot-node-minutes against ``none``
and ``requests-lnu``, evictions, evictions per cooled relief, the guard's marks. Each figure is the mean
and range over the seeds (one seed: the three are equal)."""

from __future__ import annotations

from typing import Any

from rebalancer.offline.simulate.render import GOAL_BASELINE, GOAL_EFFECTIVE, GOAL_LANDED_BACK
from rebalancer.offline.simulate.result import VariantResult
from rebalancer.offline.simulate.summary import Runs, Spread, aligned, cell, figure, spread
from rebalancer.offline.simulate.variants import AFTER, BEFORE

ROWS = (BEFORE, "current-predicted", "current-guard", AFTER)
HEADERS = ("policy", "landed back", "effective", "hot vs none", f"hot vs {GOAL_BASELINE}", "evictions",
           "ev/cooled", "marks set", "marks cleared", "on marked")  # fmt: skip


def _versus(runs: Runs, name: str, reference: str) -> Spread | None:
    values = []
    for run in runs:
        by_name = {r.name: r for r in run}
        ref = by_name.get(reference)
        values.append(
            by_name[name].hot_node_minutes / ref.hot_node_minutes - 1
            if ref is not None and ref.hot_node_minutes
            else None
        )
    return spread(values)


def _marks(action: str) -> Any:
    return lambda r: None if r.guard is None else float(r.guard.count(action))


def before_after(runs: Runs) -> dict[str, Any] | None:
    """The rows present (None: neither the before nor the after variant ran) and the verdict on the landing-control goal."""
    names = [r.name for r in runs[0]]
    if BEFORE not in names or AFTER not in names:
        return None
    rows: list[dict[str, Any]] = []
    for name in (n for n in ROWS if n in names):
        per_seed: list[VariantResult] = [next(r for r in run if r.name == name) for run in runs]
        rows.append(
            {
                "name": name,
                "landedBackShare": figure(per_seed, lambda r: r.landed_back_share),
                "effective": figure(per_seed, lambda r: None if r.rates is None else r.rates.effective),
                "versusNone": _versus(runs, name, "none"),
                "versusRequestsLnu": _versus(runs, name, GOAL_BASELINE),
                "evictions": figure(per_seed, lambda r: float(r.evictions)),
                "evictionsPerCooledNode": figure(per_seed, lambda r: r.evictions_per_cooled),
                "marksSet": figure(per_seed, _marks("set")),
                "marksCleared": figure(per_seed, _marks("clear")),
                "landedOnMarkedNode": figure(
                    per_seed, lambda r: None if r.guard is None else float(r.landed_on_marked)
                ),
            }
        )
    for row in rows:
        row["goalMet"] = _met(row) if row["name"] != BEFORE else None
    return {"before": BEFORE, "after": AFTER, "rows": rows}


def _met(row: dict[str, Any]) -> bool:
    """The landing-control goal, on the means over the seeds: effective at least 85 %, fewer than 5 % landed back."""
    effective, landed_back = row["effective"], row["landedBackShare"]
    return (
        effective is not None
        and landed_back is not None
        and effective[0] >= GOAL_EFFECTIVE
        and landed_back[0] < GOAL_LANDED_BACK
    )


def before_after_table(runs: Runs) -> str:
    data = before_after(runs)
    if data is None:
        return ""
    lines = [f"Before/after: {BEFORE} (no placement prediction, no landing guard) -> {AFTER}", ""]
    table = [list(HEADERS)]
    for row in data["rows"]:
        table.append(
            [
                row["name"],
                cell(row["landedBackShare"], percent=True),
                cell(row["effective"], percent=True),
                cell(row["versusNone"], percent=True, signed=True),
                cell(row["versusRequestsLnu"], percent=True, signed=True),
                cell(row["evictions"]),
                cell(row["evictionsPerCooledNode"], digits=2),
                cell(row["marksSet"]),
                cell(row["marksCleared"]),
                cell(row["landedOnMarkedNode"]),
            ]
        )
    lines.extend(aligned(table))
    lines += [
        "",
        "on marked: replacements bound on a node carrying the guard's taint (PreferNoSchedule: no other node fit)",
        f"landing-control goal, on the means: effective at least {GOAL_EFFECTIVE:.0%} and fewer than "
        f"{GOAL_LANDED_BACK:.0%} landed back (against {BEFORE}: effective "
        f"{cell(data['rows'][0]['effective'], percent=True)}, landed back "
        f"{cell(data['rows'][0]['landedBackShare'], percent=True)})",
    ]
    for row in data["rows"][1:]:
        lines.append(f"  {row['name']}: {'met' if row['goalMet'] else 'not met'}")
    return "\n".join(lines) + "\n"
