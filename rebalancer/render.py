"""Plans for people (a text table) and for machines (the whole decision record as JSON)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec

from rebalancer.plan import EvictionPlan, NodeClass, NodeDecision, StrategyResult
from rebalancer.quantity import format_millis

_CLASS_ORDER = {NodeClass.HOT: 0, NodeClass.UNKNOWN: 1, NodeClass.NORMAL: 2, NodeClass.COLD: 3}


def plan_record(plan: EvictionPlan, source: str) -> dict[str, Any]:
    """Everything the plan decided and why, as plain data."""
    return {
        "takenAt": datetime.fromtimestamp(plan.taken_at, UTC).isoformat(),
        "source": source,
        "blocked": plan.blocked,
        "evictions": [msgspec.to_builtins(e) for e in plan.evictions],
        "strategies": [
            {
                "strategy": r.strategy,
                "notes": list(r.notes),
                "nodes": [msgspec.to_builtins(d) for d in r.node_decisions],
                "pods": [msgspec.to_builtins(d) for d in r.pod_decisions],
                "evictions": [msgspec.to_builtins(e) for e in r.evictions],
            }
            for r in plan.results
        ],
    }


def plan_json(plan: EvictionPlan, source: str) -> bytes:
    return msgspec.json.format(msgspec.json.encode(plan_record(plan, source)), indent=2) + b"\n"


def plan_table(plan: EvictionPlan, source: str) -> str:
    when = datetime.fromtimestamp(plan.taken_at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    lines = [f"Plan at {when} from {source}"]
    if plan.blocked:
        lines.append(f"BLOCKED: {plan.blocked}")
    for result in plan.results:
        lines += ["", *_strategy_section(result)]
    evictions = plan.evictions
    lines += ["", f"Planned evictions: {len(evictions)}" + (" (dry run: nothing is evicted)" if evictions else "")]
    return "\n".join(lines) + "\n"


def _strategy_section(result: StrategyResult) -> list[str]:
    nodes = sorted(result.node_decisions, key=lambda d: (_CLASS_ORDER[d.node_class], -(d.usage_pct or 0), d.node))
    counts = {c: sum(1 for d in nodes if d.node_class is c) for c in NodeClass}
    summary = ", ".join(f"{counts[c]} {c.value}" for c in NodeClass)
    out = [f"== {result.strategy}: {len(nodes)} nodes ({summary})"]
    out += _table(["NODE", "POOL", "USAGE", "ALLOC", "USE%", "CLASS", "WHY"], [_node_row(d) for d in nodes])
    if result.evictions:
        out += ["", f"-- {result.strategy}: {len(result.evictions)} planned eviction(s)"]
        rows = [
            [f"{e.namespace}/{e.name}", e.node, format_millis(e.usage_m), e.room_on, str(e.workload or "-")]
            for e in result.evictions
        ]
        out += _table(["POD", "FROM", "USAGE", "ROOM ON", "WORKLOAD"], rows)
    passed = [d for d in result.pod_decisions if not d.chosen]
    if passed:
        out += ["", f"-- {result.strategy}: pods passed over on the nodes it acted on"]
        out += _table(["POD", "NODE", "WHY NOT"], [[f"{d.namespace}/{d.name}", d.node, d.reason] for d in passed])
    out += [f"note: {n}" for n in result.notes]
    return out


def _node_row(d: NodeDecision) -> list[str]:
    usage = "?" if d.usage_m is None else format_millis(d.usage_m)
    pct = "?" if d.usage_pct is None else f"{d.usage_pct:.1f}"
    return [d.node, d.pool, usage, format_millis(d.allocatable_m), pct, d.node_class.value, d.reason]


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) if rows else len(header[i]) for i in range(len(header))]
    widths[-1] = 0  # the last column is free text

    def fmt(row: list[str]) -> str:
        return "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()

    return [fmt(header), *(fmt(r) for r in rows)]
