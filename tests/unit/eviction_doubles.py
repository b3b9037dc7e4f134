"""In-memory doubles behind the evictor in its property tests: a cluster keeping the Eviction API's
contract, a state store with a ConfigMap's optimistic concurrency, and a clock that moves at every read.

The cluster answers an eviction as the API server does (pkg/registry/core/pod/storage/eviction.go, in its
order): 404 when no pod has the name; 500 when several budgets select the pod; 429 when the pod is healthy
and its budget allows no disruption (a pod that is not healthy goes whatever the budget: the
unhealthyPodEvictionPolicy AlwaysAllow); 409 when the uid precondition names another pod (one that
replaced the planned pod); under a dry run nothing changes. Budgets are computed from the pods present,
as a disruption controller that never lags would. It records every request, its answer and, for each
eviction carried out, each budget's healthy pods before and after, for the tests to judge independently.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from rebalancer.domain.errors import EvictionConflict, EvictionError, EvictionRejected, PodGone, StateConflict
from rebalancer.domain.model import DisruptionBudget, Pod, PodKey

MULTIPLE_BUDGETS = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
VIOLATION = "Cannot evict pod as it would violate the pod's disruption budget."
THROTTLED = "Too many requests, please try again later."


class TickingClock:
    """Every read moves time on by the next of ``steps`` seconds (in turn); ``now`` is the last time read."""

    def __init__(self, start: float, steps: Iterable[float] = (0.0,)) -> None:
        self.now = start
        self._steps = itertools.cycle(tuple(steps) or (0.0,))

    def __call__(self) -> float:
        self.now += next(self._steps)
        return self.now


@dataclass(frozen=True, slots=True)
class BudgetCount:
    """A budget's healthy pods just before and just after one eviction; ``expected``: its controller's replicas."""

    budget: DisruptionBudget
    before: int
    after: int
    expected: int


@dataclass(frozen=True, slots=True)
class EvictionRequest:
    """One eviction as the cluster received it, and its answer (201 when accepted)."""

    namespace: str
    name: str
    uid: str
    dry_run: bool
    status: int = 201

    @property
    def key(self) -> PodKey:
        return (self.namespace, self.name)


@dataclass(frozen=True, slots=True)
class Eviction:
    """An eviction the cluster carried out: the pod it removed, when, and what it did to the budgets."""

    pod: Pod
    at: float
    budgets: tuple[BudgetCount, ...]


def healthy(pod: Pod) -> bool:
    """As the disruption controller counts: Ready, running and not being deleted."""
    return pod.ready and pod.phase == "Running" and not pod.terminating


class MemoryCluster:
    """Pods and budgets in memory, with the Eviction API's rules (see the module).

    ``after_read``: pod key -> what the pod becomes (None: deleted) just after its first re-read answers,
    as if it changed between the evictor's re-read and its eviction. ``throttled`` (a Retry-After in
    seconds): the API server's flow control refuses every eviction with a 429 that names no budget."""

    def __init__(
        self, pods: tuple[Pod, ...], budgets: tuple[DisruptionBudget, ...], clock: TickingClock | None = None
    ) -> None:
        self.pods = {p.key: p for p in pods}
        self.budgets = budgets
        self.clock = clock
        self.evicted: list[Pod] = []
        self.evictions: list[Eviction] = []
        self.requests: list[EvictionRequest] = []
        self.read_as: dict[PodKey, Pod | None] = {}  # each pod as its last re-read answered
        self.events: list[Pod] = []
        self.after_read: dict[PodKey, Pod | None] = {}
        self.throttled: float | None = None
        # the controller's replica count: it does not shrink when a pod is evicted
        self.expected = {b.name: sum(1 for p in pods if b.selects(p)) for b in budgets}

    def change(self, key: PodKey, pod: Pod | None) -> None:
        """The world moves on: ``key`` becomes ``pod`` (None: deleted)."""
        if pod is None:
            self.pods.pop(key, None)
        else:
            self.pods[key] = pod

    def get_pod(self, namespace: str, name: str, annotations: frozenset[str]) -> Pod | None:
        key = (namespace, name)
        pod = self.read_as[key] = self.pods.get(key)
        if key in self.after_read:
            self.change(key, self.after_read.pop(key))
        return pod

    def evict(self, namespace: str, name: str, uid: str, *, dry_run: bool, annotations: Mapping[str, str]) -> None:
        request = EvictionRequest(namespace, name, uid, dry_run)
        try:
            self._evict(request)
        except EvictionError as exc:
            self.requests.append(replace(request, status=exc.status or 0))
            raise
        self.requests.append(request)

    def _evict(self, request: EvictionRequest) -> None:
        if self.throttled is not None:
            raise EvictionRejected(THROTTLED, self.throttled, budget=False)
        name = request.name
        pod = self.pods.get(request.key)
        if pod is None:
            raise PodGone(f'pods "{name}" not found', status=404, reason="NotFound")
        matching = [b for b in self.budgets if b.selects(pod)]
        if len(matching) > 1:
            raise EvictionError(MULTIPLE_BUDGETS, status=500, reason="MultipleBudgets")
        if matching and healthy(pod) and self.allowed(matching[0]) <= 0:
            raise EvictionRejected(VIOLATION, None)
        if request.uid and request.uid != pod.uid:
            raise EvictionConflict(
                f'Operation cannot be fulfilled on Pod "{name}": the UID in the precondition ({request.uid}) does '
                f"not match the UID in record ({pod.uid}). The object might have been deleted and then recreated",
                status=409,
                reason="Conflict",
            )
        if request.dry_run:
            return
        before = [self.healthy(b) for b in matching]
        del self.pods[request.key]
        self.evicted.append(pod)
        counts = tuple(
            BudgetCount(b, n, self.healthy(b), self.expected[b.name]) for b, n in zip(matching, before, strict=True)
        )
        self.evictions.append(Eviction(pod, self.clock.now if self.clock else 0.0, counts))

    def healthy(self, budget: DisruptionBudget) -> int:
        return sum(1 for p in self.pods.values() if budget.selects(p) and healthy(p))

    def allowed(self, budget: DisruptionBudget) -> int:
        """disruptionsAllowed as the disruption controller computes it now."""
        expected = self.expected[budget.name]
        if budget.max_unavailable is not None:
            desired = expected - _value(budget.max_unavailable, expected)
        else:
            desired = _value(budget.min_available or 0, expected)
        return self.healthy(budget) - desired

    def record_event(self, pod: Pod, *, reason: str, message: str, action: str) -> bool:
        self.events.append(pod)
        return True


def _value(value: int | str, total: int) -> int:
    if isinstance(value, str):
        return math.ceil(total * int(value.rstrip("%")) / 100)
    return value


class MemoryStore:
    """A ConfigMap's optimistic concurrency; ``conflicts`` saves lose to another writer first."""

    where = "the test's state"

    def __init__(self, text: str | None = None, conflicts: int = 0) -> None:
        self.text, self.version = text, (None if text is None else "1")
        self.conflicts = conflicts
        self.saves = 0  # writes that were stored

    def load(self) -> tuple[str | None, str | None]:
        return self.text, self.version

    def save(self, text: str, resource_version: str | None) -> str:
        if self.conflicts and self.text is not None:
            self.conflicts -= 1
            self.version = str(int(self.version or 0) + 1)  # another instance rewrote the same state
        if resource_version != self.version:
            raise StateConflict("stale resourceVersion")
        self.text, self.version = text, str(int(self.version or 0) + 1)
        self.saves += 1
        return self.version
