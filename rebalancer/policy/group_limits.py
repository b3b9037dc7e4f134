"""Limits that stop HighNodeUtilization for good: it empties a node in one go (every movable pod of the
node, or none), so a limit that lets fewer pods through at once than a node holds blocks that node's group in
every cycle. That holds for the node limits, and for every cap that counts evictions at once: the global and
pool caps and token-bucket bursts (a pool's for that pool's nodes only), the namespace cap and the workload
caps (pods of one namespace, or of one workload, on the node), and the workload's maxUnavailable (its ready
pods on the node)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rebalancer.domain.settings.limits import ScopeLimits
from rebalancer.domain.settings.shared import format_duration

if TYPE_CHECKING:
    from rebalancer.policy import Policy

EMPTIES = "HighNodeUtilization"

# (field, the most pods the limit lets through at once, what it allows, which nodes it holds back (a pool's
# caps only its own), which of a node's pods it counts)
_Found = tuple[str, int, str, str, str]
_NODE, _NAMESPACE, _WORKLOAD = "movable pod{s}", "movable pod{s} of one namespace", "movable pod{s} of one workload"
_READY = "ready pod{s} of one workload (fewer while some of its replicas are unavailable)"
_ANY = "a node"


def group_limit_warnings(policy: Policy) -> list[str]:
    """One warning per limit that keeps an enabled HighNodeUtilization from emptying nodes of more pods."""
    if not any(s.enabled and s.kind == EMPTIES for s in policy.strategies):
        return []
    limits = policy.limits
    found = _node_limits(policy) + _scope_limits("limits.global", "in the cluster", _ANY, limits.cluster)
    for pool, caps in sorted(limits.cluster.pools.items()):
        found += _scope_limits(f"limits.global.pools.{pool}", f"from pool {pool}", f"a node of pool {pool}", caps)
    if limits.namespace.max_per_cycle is not None:
        cap = limits.namespace.max_per_cycle
        found.append(("limits.namespace.maxPerCycle", cap, f"{cap} a namespace per cycle", _ANY, _NAMESPACE))
    workload = limits.workload
    if workload.min_interval is not None:
        interval = format_duration(workload.min_interval)
        found.append(("limits.workload.minInterval", 1, f"one eviction a workload per {interval}", _ANY, _WORKLOAD))
    if workload.max_per_cycle is not None:
        cap = workload.max_per_cycle
        found.append(("limits.workload.maxPerCycle", cap, f"{cap} a workload per cycle", _ANY, _WORKLOAD))
    found += [
        (
            f"limits.workload.maxPerPeriod[{i}]",
            c.count,
            f"{c.count} a workload per {format_duration(c.period)}",
            _ANY,
            _WORKLOAD,
        )
        for i, c in enumerate(workload.max_per_period)
    ]
    unavailable = workload.max_unavailable
    if isinstance(unavailable, int):
        found.append(
            (
                "limits.workload.maxUnavailable",
                unavailable,
                f"{unavailable} of a workload's replicas unavailable",
                _ANY,
                _READY,
            )
        )
    warnings = [
        f"{field}: {EMPTIES} evicts all of a node's movable pods together or none, and this limit allows {what}: "
        f"{node} with more than {most} {counted.format(s='s' if most > 1 else '')} is never emptied (its group is "
        "blocked in every cycle)"
        for field, most, what, node, counted in found
    ]
    if isinstance(unavailable, str):  # a percentage of each workload's desired replicas
        warnings.append(
            f"limits.workload.maxUnavailable: {EMPTIES} evicts all of a node's movable pods together or none, and "
            f"this limit allows {unavailable} of a workload's replicas unavailable (rounded down): a node with more "
            "of one workload's ready pods than that (fewer while some of its replicas are unavailable) is never "
            "emptied (its group is blocked in every cycle)"
        )
    return warnings


def _node_limits(policy: Policy) -> list[_Found]:
    node = policy.limits.node
    found: list[_Found] = []
    if node.cooldown is not None:
        found.append(
            ("limits.node.cooldown", 1, f"one eviction a node per {format_duration(node.cooldown)}", _ANY, _NODE)
        )
    if node.max_per_cycle is not None:
        found.append(
            ("limits.node.maxPerCycle", node.max_per_cycle, f"{node.max_per_cycle} a node per cycle", _ANY, _NODE)
        )
    found += [
        (f"limits.node.maxPerPeriod[{i}]", c.count, f"{c.count} a node per {format_duration(c.period)}", _ANY, _NODE)
        for i, c in enumerate(node.max_per_period)
    ]
    return found


def _scope_limits(field: str, where: str, nodes: str, caps: ScopeLimits) -> list[_Found]:
    found: list[_Found] = []
    if caps.max_per_cycle is not None:
        cap = caps.max_per_cycle
        found.append((f"{field}.maxPerCycle", cap, f"{cap} {where} per cycle", nodes, _NODE))
    found += [
        (f"{field}.maxPerPeriod[{i}]", c.count, f"{c.count} {where} per {format_duration(c.period)}", nodes, _NODE)
        for i, c in enumerate(caps.max_per_period)
    ]
    if caps.rate is not None:
        found.append((f"{field}.rate.burst", caps.rate.burst, f"bursts of {caps.rate.burst} {where}", nodes, _NODE))
    return found
