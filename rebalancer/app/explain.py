"""`rebalancer explain-scale-down`: which pods a scale-down would delete now, and after steering (pure).

The ReplicaSet controller's order (:mod:`rebalancer.planning.scale_down`) is applied to the workload's pods as
they are, then with the pod-deletion-costs the DeletionCostSteering strategy would set this cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from rebalancer.domain.text_table import text_table
from rebalancer.planning.scale_down import Ranked, RankedPod, deletion_order

KIND = "ScaleDownExplanation"  # of its machine-readable document


@dataclass(frozen=True, slots=True)
class ScaleDownExplanation:
    workload: str  # Deployment/namespace/name
    count: int
    replica_set: str  # the ReplicaSet whose pods are ranked
    at: float
    now: tuple[Ranked, ...]
    after: tuple[Ranked, ...] | None  # None: no steering to compare with (``after_note`` says why)
    pools: Mapping[str, str]  # node -> pool
    notes: tuple[str, ...] = ()
    after_note: str = ""


def explain(
    workload: str,
    replica_sets: tuple[tuple[str, int], ...],
    pods: Mapping[str, tuple[RankedPod, ...]],
    count: int,
    at: float,
    steered_costs: Mapping[str, int] | None,
    pools: Mapping[str, str],
    after_note: str = "",
) -> ScaleDownExplanation:
    """``pods``: per ReplicaSet; ``steered_costs``: pod name -> the cost steering would set (None: no steering)."""
    related = [p for members in pods.values() for p in members]
    active = {name: [p for p in members if p.active] for name, members in pods.items()}
    with_pods = [name for name, members in active.items() if members]
    notes = []
    if not with_pods:
        return ScaleDownExplanation(workload, count, "", at, (), None, pools, ("no active pods",), after_note)
    chosen = max(with_pods, key=lambda n: (len(active[n]), n))
    if len(with_pods) > 1:
        notes.append(
            f"{len(with_pods)} ReplicaSets have pods (a rollout): the Deployment controller splits a scale-down "
            f"between them; shown is the order within {chosen}, the largest"
        )
    members = pods[chosen]
    if count > len(active[chosen]):
        notes.append(f"{count} is more than the {len(active[chosen])} active pods: all of them go")
    now_order = tuple(deletion_order(members, related, at))
    after = None
    if steered_costs is not None:

        def steered(pod: RankedPod) -> RankedPod:
            cost = steered_costs.get(pod.name)
            return pod if cost is None else replace(pod, deletion_cost_text=str(cost))

        after = tuple(deletion_order([steered(p) for p in members], [steered(p) for p in related], at))
    return ScaleDownExplanation(workload, count, chosen, at, now_order, after, pools, tuple(notes), after_note)


def explanation_table(e: ScaleDownExplanation) -> str:
    when = datetime.fromtimestamp(e.at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    lines = [f"Scale-down of {e.workload} by {e.count} at {when} (ReplicaSet {e.replica_set or '-'})"]
    lines += [f"note: {n}" for n in e.notes]
    lines += ["", "-- now", *_rows(e.now, e.count, e.pools)]
    if e.after is None:
        lines += ["", f"-- after steering: not shown ({e.after_note or 'no DeletionCostSteering strategy'})"]
    else:
        lines += [
            "",
            "-- after steering" + (f" ({e.after_note})" if e.after_note else ""),
            *_rows(e.after, e.count, e.pools),
        ]
    return "\n".join(lines) + "\n"


def _rows(order: tuple[Ranked, ...], count: int, pools: Mapping[str, str]) -> list[str]:
    rows = [
        [
            str(r.rank),
            "delete" if r.rank <= count else "keep",
            r.pod.name,
            r.pod.node_name or "-",
            pools.get(r.pod.node_name, "-"),
            "-" if r.pod.deletion_cost_text is None else r.pod.deletion_cost_text,
            r.reason,
        ]
        for r in order
    ]
    return text_table(["RANK", "OUTCOME", "POD", "NODE", "POOL", "COST", "WHY THIS RANK"], rows, frozenset({0}))


def explanation_record(e: ScaleDownExplanation) -> dict[str, Any]:
    def ranks(order: tuple[Ranked, ...]) -> list[dict[str, Any]]:
        return [
            {
                "rank": r.rank,
                "deleted": r.rank <= e.count,
                "pod": r.pod.name,
                "node": r.pod.node_name,
                "pool": e.pools.get(r.pod.node_name),
                "deletionCost": r.pod.deletion_cost,
                "deletionCostText": r.pod.deletion_cost_text,
                "podsOfWorkloadOnNode": r.pods_on_node,
                "rule": r.rule.name if r.rule is not None else None,
                "reason": r.reason,
            }
            for r in order
        ]

    return {
        "workload": e.workload,
        "count": e.count,
        "replicaSet": e.replica_set,
        "at": datetime.fromtimestamp(e.at, UTC).isoformat(),
        "notes": list(e.notes),
        "now": ranks(e.now),
        "afterSteering": None if e.after is None else ranks(e.after),
        "afterSteeringNote": e.after_note,
    }
