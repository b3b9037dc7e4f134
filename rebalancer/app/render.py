"""Plans for people (a text table, CPU in cores) and for machines (the whole decision record as a document)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from rebalancer.actions.evictor import DryRun, EvictorReport, Outcome
from rebalancer.actions.guard.applier import GuardReport
from rebalancer.actions.guard.decide import Action
from rebalancer.actions.steerer import SteeringReport, steering_summary
from rebalancer.domain.output import plain
from rebalancer.domain.quantity import format_cores
from rebalancer.domain.text_table import text_table
from rebalancer.domain.times import rfc3339
from rebalancer.planning.inflight import Correction
from rebalancer.planning.plan import EvictionPlan, NodeClass, NodeDecision, StrategyResult

_CLASS_ORDER = {NodeClass.HOT: 0, NodeClass.UNKNOWN: 1, NodeClass.NORMAL: 2, NodeClass.COLD: 3}
PLAN_KIND, RUN_KIND = "Plan", "Run"  # the ``kind`` of their machine-readable documents


def plan_record(plan: EvictionPlan, source: str, guard: GuardReport | None = None) -> dict[str, Any]:
    """Everything the plan decided and why, as plain data (with the landing guard's marks, when given)."""
    record = {
        "takenAt": datetime.fromtimestamp(plan.taken_at, UTC).isoformat(),
        "source": source,
        "blocked": plan.blocked,
        "inFlight": [_correction_record(c) for c in plan.in_flight],
        "inFlightOff": plan.in_flight_off,
        "evictions": plain(plan.evictions),
        "strategies": [
            {
                "strategy": r.strategy,
                "notes": list(r.notes),
                "nodes": plain(r.node_decisions),
                "pods": plain(r.pod_decisions),
                "evictions": plain(r.evictions),
                "costPatches": plain(r.cost_patches),
                "unrelieved": {node: why.value for node, why in sorted(r.unrelieved.items())},  # hot, nothing planned
                "emptied": sorted(r.emptied),  # emptied whole: later strategies sent nothing there
            }
            for r in plan.results
        ],
    }
    if guard is not None:
        record["landingGuard"] = guard_record(guard)
    return record


def _correction_record(c: Correction) -> dict[str, Any]:
    f, m = c.flight, c.memory
    return {
        "node": c.node,
        "measuredM": c.measured_m,
        "correctedM": c.corrected_m,
        "leftM": None if f is None else f.left_m,
        "landedM": None if f is None else f.landed_m,
        "relievedAt": None if f is None else f.relieved_at,
        "until": None if f is None else f.until,
        "memory": None
        if m is None
        else {
            "measured": m.measured,
            "corrected": m.corrected,
            "left": m.moves.left,
            "landed": m.moves.landed,
            "relievedAt": m.moves.relieved_at,
            "until": m.moves.until,
        },
        "why": c.note,
    }


def plan_table(plan: EvictionPlan, source: str, guard: GuardReport | None = None) -> str:
    when = datetime.fromtimestamp(plan.taken_at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    lines = [f"Plan at {when} from {source}", "CPU in cores."]
    if plan.blocked:
        lines.append(f"BLOCKED: {plan.blocked}")
    if plan.in_flight_off:
        lines.append(f"in-flight correction off: {plan.in_flight_off}")
    notes = {c.node: c.note for c in plan.in_flight}
    for result in plan.results:
        lines += ["", *_strategy_section(result, notes)]
    evictions = plan.evictions
    lines += ["", f"Planned evictions: {len(evictions)}" + (" (dry run: nothing is evicted)" if evictions else "")]
    if plan.cost_patches:
        lines.append(f"Planned pod-deletion-cost patches: {len(plan.cost_patches)} (dry run: nothing is patched)")
    if guard is not None:
        lines += ["", *_guard_section(guard)]
    return "\n".join(lines) + "\n"


def _guard_section(guard: GuardReport) -> list[str]:
    """The landing guard's marks set and cleared if the planned evictions happen (renewals left out)."""
    shown = [r.change for r in guard.results if r.change.action is not Action.REFRESH]
    out = [f"== landing guard: {len(shown)} mark(s) to set or clear (dry run: no node is patched)"]
    rows = [
        [c.node, c.pool, c.action.value, c.reason, rfc3339(c.mark.expires) if c.mark else "-",
         c.mark.effect if c.mark else "-"]
        for c in shown
    ]  # fmt: skip
    rows += [[n.node, n.pool, "-", n.why, "-", "-"] for n in guard.notes]
    if rows:
        out += text_table(["NODE", "POOL", "ACTION", "WHY", "UNTIL", "EFFECT"], rows)
    return out


def _strategy_section(result: StrategyResult, in_flight: Mapping[str, str]) -> list[str]:
    nodes = sorted(result.node_decisions, key=lambda d: (_CLASS_ORDER[d.node_class], -(d.usage_pct or 0), d.node))
    counts = {c: sum(1 for d in nodes if d.node_class is c) for c in NodeClass}
    summary = ", ".join(f"{counts[c]} {c.value}" for c in NodeClass)
    if nodes:
        out = [f"== {result.strategy}: {len(nodes)} nodes ({summary})"]
        others = _other_resources(nodes)
        extra = [column for resource in others for column in _OTHER_COLUMNS[resource]]
        out += text_table(
            ["NODE", "POOL", "USAGE", "ALLOC", "USE%", *extra, "SOURCE", "CLASS", "WHY"],
            [_node_row(d, in_flight.get(d.node), others) for d in nodes],
            frozenset(range(2, 5 + len(extra))),
        )
    else:  # deletion-cost steering classifies no node
        out = [f"== {result.strategy}"]
    if result.evictions:
        out += ["", f"-- {result.strategy}: {len(result.evictions)} planned eviction(s)"]
        rows = [
            [
                f"{e.namespace}/{e.name}",
                e.node,
                format_cores(e.usage_m),
                e.room_on,
                e.landing or "-",  # "-": not predicted (predictPlacement off)
                str(e.workload or "-"),
            ]
            for e in result.evictions
        ]
        out += text_table(["POD", "FROM", "USAGE", "ROOM ON", "PREDICTED LANDING", "WORKLOAD"], rows, frozenset({2}))
    if result.cost_patches:
        out += ["", f"-- {result.strategy}: {len(result.cost_patches)} planned pod-deletion-cost patch(es)"]
        rows = [
            [f"{p.namespace}/{p.name}", p.node, p.pool, "-" if p.current is None else p.current, str(p.cost), p.reason]
            for p in result.cost_patches
        ]
        out += text_table(["POD", "NODE", "POOL", "NOW", "COST", "WHY"], rows)
    passed = [d for d in result.pod_decisions if not d.chosen]
    if passed:
        where = "on the nodes it acted on" if nodes else "(their pod-deletion-cost stays as it is)"
        out += ["", f"-- {result.strategy}: pods passed over {where}"]
        out += text_table(["POD", "NODE", "WHY NOT"], [[f"{d.namespace}/{d.name}", d.node, d.reason] for d in passed])
    out += [f"note: {n}" for n in result.notes]
    return out


_OTHER_COLUMNS = {"memory": ("MEM GiB", "MEM%"), "pods": ("PODS", "PODS%")}


def _other_resources(nodes: Iterable[NodeDecision]) -> list[str]:
    """The resources beside CPU the thresholds name (memory, pods): only those get columns."""
    found = {use.resource for d in nodes for use in d.others}
    return [resource for resource in _OTHER_COLUMNS if resource in found]


def _node_row(d: NodeDecision, in_flight: str | None, others: Iterable[str] = ()) -> list[str]:
    usage = "?" if d.usage_m is None else format_cores(d.usage_m)
    pct = "?" if d.usage_pct is None else f"{d.usage_pct:.1f}"
    why = d.reason if in_flight is None else f"{d.reason} ({in_flight})"
    uses = {use.resource: use for use in d.others}
    extra = []
    for resource in others:
        use = uses.get(resource)
        if use is None or use.used is None or use.pct is None:
            extra += ["?", "?"]
        else:
            amount = f"{use.used / 2**30:.2f}" if resource == "memory" else str(use.used)
            extra += [amount, f"{use.pct:.1f}"]
    source = d.usage_source or "-"
    return [d.node, d.pool, usage, format_cores(d.allocatable_m), pct, *extra, source, d.node_class.value, why]


def run_record(
    plan: EvictionPlan,
    report: EvictorReport,
    source: str,
    steering: SteeringReport | None = None,
    guard: GuardReport | None = None,
) -> dict[str, Any]:
    """The plan's decision record plus what the evictor did with each planned eviction (and the steerer with
    each planned pod-deletion-cost)."""
    record = plan_record(plan, source)
    record["outcomes"] = [
        {
            "namespace": r.eviction.namespace,
            "name": r.eviction.name,
            "node": r.eviction.node,
            "strategy": r.eviction.strategy,
            "outcome": r.outcome.value,
            "detail": r.detail,
            "limiter": r.limiter,
            "retryAt": r.retry_at,
        }
        for r in report.results
    ]
    record["problems"] = list(report.problems)
    record["aborted"] = report.aborted
    if guard is not None and (guard.results or guard.notes):
        record["landingGuard"] = guard_record(guard)
    if steering is not None:
        record["steering"] = {
            "outcomes": [
                {
                    "namespace": r.patch.namespace,
                    "name": r.patch.name,
                    "node": r.patch.node,
                    "strategy": r.patch.strategy,
                    "cost": r.patch.cost,
                    "outcome": r.outcome.value,
                    "detail": r.detail,
                }
                for r in steering.results
            ],
            "problems": list(steering.problems),
            "aborted": steering.aborted,
        }
    return record


def guard_record(guard: GuardReport) -> dict[str, Any]:
    """The landing guard's changes (with what became of each) and the nodes it left alone on purpose."""
    return {
        "changes": [
            {
                "node": r.change.node,
                "pool": r.change.pool,
                "action": r.change.action.value,
                "reason": r.change.reason,
                "expires": rfc3339(r.change.mark.expires) if r.change.mark is not None else None,
                "outcome": r.outcome.value,
                "detail": r.detail,
            }
            for r in guard.results
        ],
        "notes": [{"node": n.node, "pool": n.pool, "why": n.why} for n in guard.notes],
    }


def run_table(report: EvictorReport, steering: SteeringReport | None = None) -> str:
    """What the evictor did with each planned eviction, and the steerer with each pod-deletion-cost."""
    lines = [f"Evictions: {len(report.results)}"]
    if report.results:
        rows = [
            [f"{r.eviction.namespace}/{r.eviction.name}", r.eviction.node, r.eviction.strategy,
             r.outcome.value + (f" ({r.limiter})" if r.limiter else ""), r.detail]
            for r in report.results
        ]  # fmt: skip
        lines += text_table(["POD", "NODE", "STRATEGY", "OUTCOME", "DETAIL"], rows)
    if steering is not None and steering.results:
        rows = [
            [f"{r.patch.namespace}/{r.patch.name}", r.patch.node, r.patch.strategy, str(r.patch.cost),
             r.outcome.value, r.detail]
            for r in steering.results
        ]  # fmt: skip
        lines += ["", f"Pod-deletion-cost patches: {len(steering.results)}"]
        lines += text_table(["POD", "NODE", "STRATEGY", "COST", "OUTCOME", "DETAIL"], rows)
    return "\n".join(lines) + "\n"


def run_summary(
    plan: EvictionPlan,
    report: EvictorReport,
    dry_run: DryRun,
    steering: SteeringReport | None = None,
    guard: GuardReport | None = None,
) -> str:
    """One line for a CronJob's log."""
    hot = sum(1 for r in plan.results for d in r.node_decisions if d.node_class is NodeClass.HOT)
    counts = ", ".join(f"{report.count(o)} {o.value}" for o in Outcome if report.count(o))
    limiters = sorted({r.limiter for r in report.results if r.limiter})
    parts = [f"rebalancer run: {hot} hot node(s), {len(plan.evictions)} planned", counts or "nothing to do"]
    if limiters:
        parts.append("blocked by " + ", ".join(limiters))
    if dry_run is not DryRun.OFF:
        parts.append(f"dry run ({dry_run.value})")
    if plan.blocked:
        parts.append(f"plan blocked: {plan.blocked}")
    if report.aborted:
        parts.append(f"aborted: {report.aborted}")
    if steering is not None and steering.results:
        parts.append(f"pod-deletion-cost: {steering_summary(steering)}")
        parts += [f"problem: {p}" for p in steering.problems]
    if guard is not None and guard.results:
        parts.append(f"landing guard: {guard.summary()}")
    parts += [f"problem: {p}" for p in report.problems]
    return "; ".join(parts)
