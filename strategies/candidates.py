"""Which pods on a node a strategy may move, and the disruption budgets a plan has used up."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import msgspec

from rebalancer.domain.model import DisruptionBudget, Pod
from rebalancer.planning.plan import PodDecision
from rebalancer.planning.protections import Protections
from rebalancer.planning.snapshot import ClusterSnapshot


class BudgetLedger:
    """PodDisruptionBudgets with the disruptions this plan already spent.

    Planning with them avoids evictions the Eviction API would refuse; the API stays the authority.
    """

    def __init__(self, budgets: Iterable[DisruptionBudget]) -> None:
        self._by_namespace: dict[str, list[DisruptionBudget]] = defaultdict(list)
        for budget in budgets:
            self._by_namespace[budget.namespace].append(budget)
        self._spent: dict[tuple[str, str], int] = defaultdict(int)  # disruptions planned
        self._healthy_gone: dict[tuple[str, str], int] = defaultdict(int)  # of them, ready pods
        self._journal: list[tuple[tuple[str, str], bool]] = []

    def _matching(self, pod: Pod) -> list[DisruptionBudget]:
        return [b for b in self._by_namespace.get(pod.namespace, ()) if b.selects(pod)]

    def blocker(self, pod: Pod) -> str | None:
        matching = self._matching(pod)
        if len(matching) > 1:
            names = ", ".join(sorted(b.name for b in matching))
            return f"matched by {len(matching)} PodDisruptionBudgets ({names}); the Eviction API refuses that"
        if not matching:
            return None
        budget = matching[0]
        key = (budget.namespace, budget.name)
        if budget.lets_go(pod, self._healthy_gone[key]):
            return None  # evicting an unready pod while the budget is met makes nothing more unavailable
        spent = self._spent[key]
        if budget.disruptions_allowed - spent <= 0:
            return (
                f"PodDisruptionBudget {budget.namespace}/{budget.name} allows no more disruptions "
                f"(disruptionsAllowed {budget.disruptions_allowed}, {spent} already planned)"
            )
        return None

    def take(self, pod: Pod) -> None:
        for budget in self._matching(pod):
            key = (budget.namespace, budget.name)
            if budget.lets_go(pod, self._healthy_gone[key]):
                continue
            self._spent[key] += 1
            self._healthy_gone[key] += pod.ready
            self._journal.append((key, pod.ready))

    def checkpoint(self) -> int:
        return len(self._journal)

    def rollback(self, checkpoint: int) -> None:
        while len(self._journal) > checkpoint:
            key, ready = self._journal.pop()
            self._spent[key] -= 1
            self._healthy_gone[key] -= ready


class Candidate(msgspec.Struct, frozen=True, eq=False, gc=False):
    """One movable pod of a node; compared by identity (a node's candidates are distinct pods), so that
    taking one out of a node's list compares no pods. Made by :meth:`of`.

    ``preference``: lower sorts first: lower priority, not ready, lower deletion cost, more restarts.
    Computed once (a plan sorts a node's candidates again after each pick)."""

    pod: Pod
    usage_m: int
    preference: tuple[int, bool, int, int]

    @classmethod
    def of(cls, pod: Pod, usage_m: int) -> Candidate:
        return cls(pod, usage_m, (pod.priority, pod.ready, pod.deletion_cost, -pod.restarts))


def screen(
    strategy: str,
    node: str,
    snapshot: ClusterSnapshot,
    protections: Protections,
    ledger: BudgetLedger,
    *,
    need_usage: bool = True,
) -> tuple[list[Candidate], list[PodDecision], list[tuple[Pod, str]]]:
    """Split a node's pods into movable candidates and pods passed over (with the reason).

    Returns (candidates, passed-over decisions, blocking pods): blocking pods are the protected pods that
    would stay on the node (DaemonSet and mirror pods excepted, as a cluster autoscaler ignores them).
    """
    candidates: list[Candidate] = []
    passed: list[PodDecision] = []
    blocking: list[tuple[Pod, str]] = []
    for pod in snapshot.pods_on(node):
        usage = snapshot.usage_of(pod)
        why = protections.reason(pod)
        if why is None:
            why = snapshot.moved.get(pod.key)
        if why is None and usage is None:
            why = "usage unknown (missing is never read as zero)"
        if why is None and need_usage and usage == 0:
            why = "no measurable usage: moving it would not cool the node"
        if why is None:
            why = ledger.blocker(pod)
        if why is None and usage is not None:
            candidates.append(Candidate.of(pod, usage))
            continue
        passed.append(PodDecision(strategy, pod.namespace, pod.name, node, False, why or "", usage))
        if pod.owner_kind != "DaemonSet" and not pod.mirror and pod.owner_kind != "Node":
            blocking.append((pod, why or ""))
    return candidates, passed, blocking
