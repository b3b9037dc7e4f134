"""`rebalancer report` as a table and as a record (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from rebalancer.domain.output import plain
from rebalancer.records.rates import EfficiencyReport, PoolRates
from rebalancer.records.series import Bucket

KIND = "EfficiencyReport"  # of its machine-readable document

_COLUMNS = (
    ("pool", 12),
    ("hot(ref)", 8),
    ("found", 6),
    ("found&ref", 9),
    ("discovery", 9),
    ("acted", 6),
    ("eviction", 8),
    ("reliefs", 7),
    ("judged", 6),
    ("cooled", 6),
    ("effective", 9),
    ("pending", 7),
    ("overshoot", 9),
    ("evictions", 9),
    ("bounces", 7),
    ("landed", 6),
    ("back", 5),
    ("hit", 5),
)


def _when(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M UTC")


def percent(value: float | None) -> str:
    """A rate as a whole percentage; ``-`` when there is nothing to measure (never 0)."""
    return "-" if value is None else f"{100 * value:.0f}%"


def _num(value: int | None) -> str:
    return "?" if value is None else str(value)


def _row(p: PoolRates) -> tuple[str, ...]:
    return (
        "cluster" if p.pool == "*" else p.pool,
        _num(p.reference),
        str(p.found),
        _num(p.found_and_reference),
        percent(p.discovery),
        str(p.acted),
        percent(p.eviction),
        str(p.reliefs),
        str(p.judged),
        str(p.cooled),
        percent(p.effective),
        str(p.pending),
        f"{p.overshoot} {percent(p.overshoot_rate)}" if p.reliefs else "-",
        str(p.evictions),
        str(p.bounce_backs),
        str(p.landed),
        percent(p.landed_back_rate),
        percent(p.landing_hit_rate),
    )


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{reason} {n}" for reason, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def report_table(report: EfficiencyReport, timeline: Iterable[Bucket] = ()) -> str:
    hours = (report.end - report.start) / 3600
    lines = [f"Efficiency from {_when(report.start)} to {_when(report.end)} ({hours:g} h)", ""]
    lines.append("  ".join(name.rjust(width) if i else name.ljust(width) for i, (name, width) in enumerate(_COLUMNS)))
    for p in report.pools:
        cells = _row(p)
        lines.append(
            "  ".join(
                c.rjust(w) if i else c.ljust(w) for i, (c, (_, w)) in enumerate(zip(cells, _COLUMNS, strict=True))
            )
        )
    c = report.cluster
    lines.append("")
    lines.append("discovery = found & hot by the reference / hot by the reference; eviction = acted / found;")
    lines.append("effective = cooled / judged (pending, unknown usage and gone nodes are not judged);")
    lines.append("landed = replacements seen scheduled; back = of those, on the node they were evicted from;")
    lines.append("hit = predicted landings seen on the predicted node; overshoot = reliefs beyond need (below the")
    lines.append("cold threshold, or again while an earlier relief of the node was pending) and their share.")
    if report.reference_definition:
        lines.append(f"reference: {report.reference_definition}")
    if report.reference_problem:
        lines.append(f"reference: {report.reference_problem}")
    sections = (
        ("Found hot nodes not acted on", dict(c.unacted_nodes)),
        ("Hot by the reference, never found", dict.fromkeys(c.missed_nodes, "")),
    )
    for title, nodes in sections:
        if nodes:
            lines.append(f"{title}:")
            lines.extend(f"  {node}{': ' + why if why else ''}" for node, why in nodes.items())
    if c.evictions:
        per = c.evictions_per_100_saved
        lines.append(
            f"Price: {'-' if per is None else f'{per:.1f}'} evictions per 100 hot-node-minutes saved (saved: each "
            f"cooled relief's follow-up window, an upper bound); {c.hot_again} of {c.evictions} evictions "
            f"({percent(c.hot_again_share)}) from a node found hot again within the hour"
        )
    for title, counts in (
        ("Reliefs that did not cool", c.uncooled),
        ("Reliefs not judged", c.unjudged),
        ("Reliefs beyond need", _beyond(c)),
        ("Evictions blocked, by limiter", c.blocked),
        ("Bounce-backs avoided (candidates passed over, per cycle)", _avoided(c)),
    ):
        if counts:
            lines.append(f"{title}: {_counts(counts)}")
    rows = list(timeline)
    if rows:
        lines += [
            "",
            "Over time (cluster):",
            "  bucket ending            hot(ref)  found  acted  evictions  discovery  eviction  effective",
        ]
        for b in rows:
            p = b.report.cluster
            lines.append(
                f"  {_when(b.end):<22} {_num(p.reference):>9} {p.found:>6} {p.acted:>6} {p.evictions:>10} "
                f"{percent(p.discovery):>10} {percent(p.eviction):>9} {percent(p.effective):>10}"
            )
    return "\n".join(lines) + "\n"


def _pool_record(p: PoolRates) -> dict[str, Any]:
    data: dict[str, Any] = plain(p)
    data.update(discovery=p.discovery, eviction=p.eviction, effective=p.effective)
    data.update(landedBackRate=p.landed_back_rate, landingHitRate=p.landing_hit_rate)
    data.update(overshootRate=p.overshoot_rate)
    data.update(evictionsPer100HotMinutesSaved=p.evictions_per_100_saved, hotAgainShare=p.hot_again_share)
    return data


def report_record(report: EfficiencyReport, timeline: Iterable[Bucket] = ()) -> dict[str, Any]:
    return {
        "start": report.start,
        "end": report.end,
        "referenceProblem": report.reference_problem,
        "referenceDefinition": report.reference_definition,
        "pools": [_pool_record(p) for p in report.pools],
        "timeline": [{"start": b.start, "end": b.end, "cluster": _pool_record(b.report.cluster)} for b in timeline],
    }


def _avoided(p: PoolRates) -> dict[str, int]:
    counts = {"lands back (placement prediction)": p.passed_lands_back}
    counts["just moved (bounce-back memory)"] = p.passed_recently_moved
    return {why: n for why, n in counts.items() if n}


def _beyond(p: PoolRates) -> dict[str, int]:
    counts = {"below the cold threshold": p.overshoot_below_cold, "again while pending": p.overshoot_repeat}
    return {why: n for why, n in counts.items() if n}
