"""The one line `serve` logs per cycle: what the cycle found, planned and did, how long it took, and why
it did nothing when it did nothing."""

from __future__ import annotations

from collections import Counter

from rebalancer.actions.evictor import EvictorReport, Outcome
from rebalancer.planning.plan import EvictionPlan, NodeClass

NAMED = 3  # nodes and notes named in the line before "+N more"


def cycle_line(
    kind: str, focus: frozenset[str] | None, plan: EvictionPlan, report: EvictorReport | None, seconds: float
) -> str:
    """``schedule cycle: 2 hot node(s), 3 planned, 2 evicted, 1 blocked (maxPerCycle); 0.52 s``."""
    hot = _nodes_of(plan, NodeClass.HOT)
    unknown = _nodes_of(plan, NodeClass.UNKNOWN) - hot
    found = f"{len(hot)} hot node(s)" + (f", {len(unknown)} of unknown usage" if unknown else "")
    parts = [found, f"{len(plan.evictions)} planned"]
    if not plan.evictions:
        parts.append("nothing done: " + why_idle(plan, len(hot)))
    elif report is None:
        parts.append("nothing done: no evictor ran")
    if report is not None:
        parts += [text for text in (_outcomes(report), report.aborted and f"aborted: {report.aborted}") if text]
        parts += [f"problem: {p}" for p in report.problems]
    where = f" for {', '.join(sorted(focus))}" if focus else ""
    return f"{kind} cycle{where}: {', '.join(parts)}; {seconds:.2f} s"


def why_idle(plan: EvictionPlan, hot: int) -> str:
    """Why a plan has no eviction: blocked, hot nodes it could not relieve, no hot node, or the notes."""
    if plan.blocked:
        return f"plan blocked: {plan.blocked}"
    unrelieved: dict[str, list[str]] = {}
    for result in plan.results:
        for node, reason in sorted(result.unrelieved.items()):
            unrelieved.setdefault(reason.value, []).append(node)
    if unrelieved:
        return "not relieved: " + ", ".join(f"{reason} ({_named(nodes)})" for reason, nodes in unrelieved.items())
    notes = [n for r in plan.results for n in r.notes if not n.endswith(": no hot node")]
    reasons = ([] if hot else ["no hot node"]) + list(dict.fromkeys(notes))
    return _named(reasons, "; ") or "no pod to move"


def _outcomes(report: EvictorReport) -> str:
    """``2 evicted, 1 blocked (maxPerCycle)``: what became of the planned evictions."""
    counts = Counter(r.outcome for r in report.results)
    limiters = ", ".join(sorted({r.limiter for r in report.results if r.limiter}))
    return ", ".join(
        f"{counts[o]} {o.value}" + (f" ({limiters})" if o is Outcome.BLOCKED and limiters else "")
        for o in Outcome
        if counts[o]
    )


def _nodes_of(plan: EvictionPlan, node_class: NodeClass) -> set[str]:
    return {d.node for r in plan.results for d in r.node_decisions if d.node_class is node_class}


def _named(items: list[str], separator: str = ", ") -> str:
    return separator.join(items[:NAMED] + ([f"+{len(items) - NAMED} more"] if len(items) > NAMED else []))
