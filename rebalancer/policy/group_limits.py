"""Node limits that stop HighNodeUtilization for good: it empties a node in one go (every movable pod of the
node, or none), so a node limit below the node's pod count blocks that node's group in every cycle."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rebalancer.domain.settings.shared import format_duration

if TYPE_CHECKING:
    from rebalancer.policy import Policy

EMPTIES = "HighNodeUtilization"


def group_limit_warnings(policy: Policy) -> list[str]:
    """One warning per node limit that keeps an enabled HighNodeUtilization from emptying nodes of more pods."""
    if not any(s.enabled and s.kind == EMPTIES for s in policy.strategies):
        return []
    node = policy.limits.node
    found: list[tuple[str, int, str]] = []  # (field, the most pods a node may have to be emptied, the limit)
    if node.cooldown is not None:
        found.append(("limits.node.cooldown", 1, f"one eviction a node per {format_duration(node.cooldown)}"))
    if node.max_per_cycle is not None:
        found.append(("limits.node.maxPerCycle", node.max_per_cycle, f"{node.max_per_cycle} a node per cycle"))
    for i, cap in enumerate(node.max_per_period):
        found.append(
            (f"limits.node.maxPerPeriod[{i}]", cap.count, f"{cap.count} a node per {format_duration(cap.period)}")
        )
    return [
        f"{field}: {EMPTIES} evicts all of a node's movable pods together or none, and this limit allows {what}: "
        f"a node with more than {most} movable pod{'s' if most > 1 else ''} is never emptied (its group is "
        "blocked in every cycle)"
        for field, most, what in found
    ]
