"""Safety invariants of the evictor (hypothesis): over random clusters, policies and limiter settings,
no protected pod is evicted, no cap is exceeded in any cycle or window, no disruption budget is
violated, and evictions only come from hot (LowNodeUtilization) or emptied (HighNodeUtilization) nodes.

The cluster behind the evictor is an in-memory double of the Eviction API's contract (budgets computed
from the pods present, as the API server does); the evictor, limiters and planners are the production code.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rebalancer.actions.evictor import DryRun, Evictor, Outcome
from rebalancer.domain.errors import EvictionError, EvictionRejected, StateConflict
from rebalancer.domain.model import ClusterFacts, DisruptionBudget, Pod, UsageReport
from rebalancer.planning.limits import LimiterState
from rebalancer.planning.plan import EvictionPlan, NodeClass, PlannedEviction, StrategyResult
from rebalancer.planning.protections import Protections
from rebalancer.policy import Policy
from rebalancer.policy.cycle import plan_cycle
from tests.builders import node, policy, usage
from tests.builders import pod as make_pod
from tests.unit.test_planner_properties import clusters

EXAMPLES = 1500
HOUR = 3600.0


class MemoryCluster:
    """Pods and budgets in memory, with the Eviction API's budget rules."""

    def __init__(self, pods: tuple[Pod, ...], budgets: tuple[DisruptionBudget, ...]) -> None:
        self.pods = {p.key: p for p in pods}
        self.budgets = budgets
        self.evicted: list[Pod] = []
        # the controller's replica count: it does not shrink when a pod is evicted
        self.expected = {b.name: sum(1 for p in pods if b.selects(p)) for b in budgets}

    def get_pod(self, namespace: str, name: str, annotations: frozenset[str]) -> Pod | None:
        return self.pods.get((namespace, name))

    def evict(self, namespace: str, name: str, uid: str, *, dry_run: bool, annotations: Mapping[str, str]) -> None:
        pod = self.pods[(namespace, name)]
        matching = [b for b in self.budgets if b.selects(pod)]
        if len(matching) > 1:
            raise EvictionError("This pod has more than one PodDisruptionBudget", status=500)
        if matching and pod.ready and pod.phase == "Running" and self.allowed(matching[0]) <= 0:
            raise EvictionRejected("Cannot evict pod as it would violate the pod's disruption budget.", None)
        if not dry_run:
            del self.pods[(namespace, name)]
            self.evicted.append(pod)

    def allowed(self, budget: DisruptionBudget) -> int:
        selected = [p for p in self.pods.values() if budget.selects(p)]
        healthy = sum(1 for p in selected if p.ready and p.phase == "Running")
        expected = self.expected[budget.name]
        if budget.max_unavailable is not None:
            desired = expected - _value(budget.max_unavailable, expected)
        else:
            desired = _value(budget.min_available or 0, expected)
        return healthy - desired

    def record_event(self, pod: Pod, *, reason: str, message: str, action: str) -> bool:
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

    def load(self) -> tuple[str | None, str | None]:
        return self.text, self.version

    def save(self, text: str, resource_version: str | None) -> str:
        if self.conflicts and self.text is not None:
            self.conflicts -= 1
            self.version = str(int(self.version or 0) + 1)  # another instance rewrote the same state
        if resource_version != self.version:
            raise StateConflict("stale resourceVersion")
        self.text, self.version = text, str(int(self.version or 0) + 1)
        return self.version


@st.composite
def limited_policies(draw: st.DrawFn) -> Policy:
    low = draw(st.integers(5, 40))
    high = draw(st.integers(low, 80))
    kind = draw(st.sampled_from(["LowNodeUtilization", "LowNodeUtilization", "HighNodeUtilization"]))
    caps = [f"maxPerCycle: {draw(st.integers(1, 4))}"] if draw(st.booleans()) else []
    if draw(st.booleans()):
        caps.append(f"maxPerPeriod: [{{count: {draw(st.integers(1, 6))}, period: 1h}}]")
    node = f"node: {{maxPerCycle: {draw(st.integers(1, 2))}}}" if draw(st.booleans()) else ""
    unavailable = draw(st.sampled_from(["1", "2", "'25%'", "'50%'"]))
    workload = f"workload: {{maxUnavailable: {unavailable}}}" if draw(st.booleans()) else ""
    lists = "lists: {pools: {black: [b]}}" if draw(st.booleans()) else ""
    parts = [f"global: {{{', '.join(caps)}}}" if caps else "", node, workload, lists]
    limits = "limits: {" + ", ".join(p for p in parts if p) + "}\n"
    return policy(f"kind: {kind}\nthresholds: {{cpu: {low}}}\ntargetThresholds: {{cpu: {high}}}\n", limits)


def arbitrary_plan(plan: EvictionPlan, pods: tuple[Pod, ...], picks: list[int]) -> EvictionPlan:
    """A plan naming any pods at all (protected ones included), as a faulty strategy might: the evictor
    must hold every rule whatever produced the plan."""
    bound = [p for p in pods if p.node_name is not None]
    chosen = {bound[i % len(bound)].key: bound[i % len(bound)] for i in picks} if bound else {}
    evictions = tuple(
        PlannedEviction("Arbitrary", p.namespace, p.name, p.uid, p.node_name or "", "a", p.workload, 100, "test", "")
        for p in chosen.values()
    )
    return EvictionPlan(plan.taken_at, (StrategyResult("Arbitrary", evictions, (), ()),))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    clusters(),
    limited_policies(),
    st.integers(0, 5),
    st.one_of(st.none(), st.lists(st.integers(0, 99), max_size=12)),
    st.integers(0, 3),
)
def test_evictions_are_safe(
    cluster: tuple[ClusterFacts, UsageReport], pol: Policy, earlier: int, picks: list[int] | None, conflicts: int
) -> None:
    facts, report = cluster
    now = 1_700_000_000.0
    snapshot, plan = plan_cycle(facts, report, pol, now)
    if picks is not None and not plan.blocked:
        plan = arbitrary_plan(plan, facts.pods, picks)
    memory = MemoryCluster(facts.pods, facts.budgets)
    # evictions earlier in the hour, recorded by another run, count against the caps
    state = LimiterState()
    from rebalancer.planning.limits import EvictionRequest, reserve

    for i in range(earlier):
        request = EvictionRequest("default", f"earlier-{i}", "elsewhere", "a", None)
        state = reserve(request, state, pol.limits, now - 60 * (i + 1))
    store = MemoryStore(state.to_json(), conflicts=conflicts)
    protections = Protections.from_settings(pol.protections)
    evictor = Evictor(memory, store, MemoryStore(), pol.limits, protections, DryRun.OFF, clock=lambda: now)
    result = evictor.apply(plan, snapshot)

    evicted = memory.evicted
    assert len(evicted) == result.count(Outcome.EVICTED)
    classes = {d.node: d.node_class for d in plan.results[0].node_decisions}
    source_class = NodeClass.COLD if pol.strategies[0].kind == "HighNodeUtilization" else NodeClass.HOT
    for pod in evicted:
        assert protections.reason(pod) is None
        assert pod.node_name is not None
        if picks is None:  # the planner's own plan: only from hot (or emptied) nodes
            assert classes[pod.node_name] is source_class

    limits = pol.limits
    if limits.lists.pools.black:  # the evictor takes each node's pool from the snapshot, never from the plan
        assert all(snapshot.pool_of[p.node_name or ""] not in limits.lists.pools.black for p in evicted)
    if pol.strategies[0].kind == "HighNodeUtilization" and picks is None:  # a node is emptied whole or not at all
        for node in {r.eviction.node for r in result.results}:
            outcomes = {r.outcome for r in result.results if r.eviction.node == node}
            assert not (Outcome.BLOCKED in outcomes and Outcome.EVICTED in outcomes), outcomes
    if limits.cluster.max_per_cycle is not None:
        assert len(evicted) <= limits.cluster.max_per_cycle
    for cap in limits.cluster.max_per_period:
        assert earlier_in_window(earlier) + len(evicted) <= max(cap.count, earlier_in_window(earlier))
    if limits.node.max_per_cycle is not None:
        assert max(Counter(p.node_name for p in evicted).values(), default=0) <= limits.node.max_per_cycle
    if limits.workload.max_unavailable is not None:
        allowance = limits.workload.max_unavailable
        for workload, count in Counter(p.workload for p in evicted if p.workload and p.ready).items():
            # every non-terminal pod of the workload, scheduled or not; unscheduled ones are unavailable
            pods = [p for p in facts.pods if p.workload == workload and p.phase not in ("Succeeded", "Failed")]
            unavailable = sum(1 for p in pods if not (p.ready and p.node_name and not p.terminating))
            allowed = (
                int(allowance) if not str(allowance).endswith("%") else len(pods) * int(str(allowance)[:-1]) // 100
            )
            assert unavailable + count <= allowed

    initial = MemoryCluster(facts.pods, facts.budgets)
    for budget in facts.budgets:
        taken = sum(1 for p in evicted if budget.selects(p) and p.ready and p.phase == "Running")
        assert taken <= max(initial.allowed(budget), 0)

    # a token stays taken for every eviction that happened or may have (no clear answer); those the API
    # server refused, or found gone or replaced, gave theirs back
    stored = LimiterState.from_json(store.text or "", now)
    kept = sum(result.count(o) for o in (Outcome.EVICTED, Outcome.FAILED))
    assert sum(1 for r in stored.reservations if r.at == now) == kept


def earlier_in_window(earlier: int) -> int:
    return earlier  # every earlier reservation lies within the last hour


class CountedReads(MemoryCluster):
    def __init__(self, pods: tuple[Pod, ...], budgets: tuple[DisruptionBudget, ...]) -> None:
        super().__init__(pods, budgets)
        self.reads: list[str] = []

    def get_pod(self, namespace: str, name: str, annotations: frozenset[str]) -> Pod | None:
        self.reads.append(name)
        return super().get_pod(namespace, name, annotations)


def test_pods_the_limiters_refuse_are_not_read_again() -> None:
    """Once the cycle's cap is reached the rest of the plan is refused on the snapshot's pods: the API
    server is asked only for the pods that may still be evicted."""
    now = 1_700_000_000.0
    nodes = (node("hot"), node("cold-1"), node("cold-2"))
    pods = tuple(make_pod(f"web-{i}", "hot", workload=f"w{i}", cpu_request_m=100) for i in range(6))
    report = usage({"hot": 9_500, "cold-1": 500, "cold-2": 500}, {p.name: 1_200 for p in pods})
    pol = policy(
        "kind: LowNodeUtilization\nthresholds: {cpu: 20}\ntargetThresholds: {cpu: 50}\n",
        "limits: {global: {maxPerCycle: 2}}\n",
    )
    snapshot, plan = plan_cycle(ClusterFacts(nodes, pods, ()), report, pol, now)
    planned = [e.name for e in plan.evictions]
    assert len(planned) > 2  # more than the cap: the test is about the rest
    cluster = CountedReads(pods, ())
    protections = Protections.from_settings(pol.protections)
    result = Evictor(
        cluster, MemoryStore(), MemoryStore(), pol.limits, protections, DryRun.OFF, clock=lambda: now
    ).apply(plan, snapshot)
    assert result.count(Outcome.EVICTED) == 2
    assert result.count(Outcome.BLOCKED) == len(planned) - 2
    assert cluster.reads == planned[:2]  # the blocked ones were never read again
