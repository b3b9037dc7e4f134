"""Safety invariants of the evictor (hypothesis): over random clusters, policies and limiter settings,
with pods changing between the plan and the eviction, no protected pod (as re-read) is evicted, nor any
pod other than the one planned; no cap is exceeded in any cycle, window, cooldown or rate; no disruption
budget falls below what its spec allows; evictions only come from hot (LowNodeUtilization) or emptied
(HighNodeUtilization) nodes; and a dry run changes nothing.

The cluster behind the evictor is an in-memory double of the Eviction API's contract
(:mod:`tests.unit.eviction_doubles`); the evictor, limiters and planners are the production code. What
the double records is judged by the test's own arithmetic (:mod:`tests.unit.eviction_limits`, the
budget's spec), never by the double's or the limiters' own checks.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rebalancer.actions.evictor import DryRun, Evictor, EvictorReport, Outcome
from rebalancer.domain.labels import LabelSelector
from rebalancer.domain.model import ClusterFacts, DisruptionBudget, Pod, PodKey, UsageReport
from rebalancer.planning.limits import CycleCounts, EvictionRequest, LimiterState, LimitSettings, check, reserve
from rebalancer.planning.plan import EvictionPlan, NodeClass, PlannedEviction, StrategyResult
from rebalancer.planning.protections import MIRROR_ANNOTATION, Protections
from rebalancer.policy import Policy
from rebalancer.policy.cycle import plan_cycle
from tests.builders import node, policy, usage
from tests.builders import pod as make_pod
from tests.kubeapi.disruption import scaled
from tests.unit.eviction_doubles import MemoryCluster, MemoryStore, TickingClock, healthy
from tests.unit.eviction_limits import Done, assert_caps_hold, limited_policies
from tests.unit.test_planner_properties import clusters

EXAMPLES = 1200
NOW = 1_700_000_000.0
ANSWERS = {404: Outcome.GONE, 409: Outcome.REPLACED, 429: Outcome.REJECTED, 500: Outcome.FAILED}
Changes = dict[PodKey, Pod | None]  # pod -> what it became (None: deleted)


def arbitrary_plan(plan: EvictionPlan, pods: list[Pod], picks: list[int]) -> EvictionPlan:
    """A plan naming any of ``pods`` (protected ones too, when given), as a faulty strategy might: the
    evictor must hold every rule whatever produced the plan."""
    chosen = {pods[i % len(pods)].key: pods[i % len(pods)] for i in picks} if pods else {}
    evictions = tuple(
        PlannedEviction("Arbitrary", p.namespace, p.name, p.uid, p.node_name or "", "a", p.workload, 100, "test", "")
        for p in chosen.values()
    )
    return EvictionPlan(plan.taken_at, (StrategyResult("Arbitrary", evictions, (), ()),))


BUDGET_SPECS: list[tuple[int | str | None, int | str | None]] = [
    (0, None), (1, None), (2, None), ("50%", None), ("80%", None), ("100%", None),
    (None, 1), (None, 2), (None, "25%"), (None, "50%"),
]  # fmt: skip


@st.composite
def budgets(draw: st.DrawFn) -> tuple[DisruptionBudget, ...]:
    """Budgets over the test clusters' apps by minAvailable or maxUnavailable, whole or percentage; the
    status planners read is as stale as a lagging disruption controller's."""
    out = []
    for app in ("web", "db"):
        if draw(st.booleans()):
            least, most = draw(st.sampled_from(BUDGET_SPECS))
            selector = LabelSelector((("app", app),))
            out.append(
                DisruptionBudget("default", f"pdb-{app}", selector, least, most, draw(st.integers(0, 2)), 0, 0, 0)
            )
    return tuple(out)


PROTECTING: dict[str, Callable[[Pod, str], dict[str, Any]]] = {
    "opted out": lambda p, annotation: {"annotations": {**p.annotations, annotation: "false"}},
    "terminating": lambda p, _: {"terminating": True},
    "mirror": lambda p, _: {"annotations": {**p.annotations, MIRROR_ANNOTATION: "x"}},
    "DaemonSet": lambda p, _: {"owner_kind": "DaemonSet"},
    "finished": lambda p, _: {"phase": "Succeeded", "ready": False},
    "system-critical": lambda p, _: {"priority": 2_000_000_000},
}


@st.composite
def changes(draw: st.DrawFn, plan: EvictionPlan, facts: ClusterFacts, annotation: str) -> tuple[Changes, Changes]:
    """What becomes of planned pods before the evictor re-reads them, and between its re-read and its
    eviction: deleted, replaced by a new pod of the same name (another uid, ready or not), or (before the
    re-read only: after it only the API server's rules hold) protected or no longer ready."""
    pods = {p.key: p for p in facts.pods}
    planned = [pods[e.key] for e in plan.evictions if e.key in pods]
    before: Changes = {}
    after: Changes = {}
    kinds = st.sampled_from(["deleted", "replaced", "replaced", "protected", "protected", "unready"])
    for index, kind, late in draw(st.lists(st.tuples(st.integers(0, 99), kinds, st.booleans()),
                                           max_size=4 if planned else 0)):  # fmt: skip
        pod = planned[index % len(planned)]
        new: Pod | None = None
        if kind == "replaced":
            new = msgspec.structs.replace(pod, uid=f"{pod.uid}-new", ready=draw(st.booleans()))
        elif kind == "protected":
            protect = PROTECTING[draw(st.sampled_from(sorted(PROTECTING)))]
            new = msgspec.structs.replace(pod, **protect(pod, annotation))
        elif kind == "unready":
            new = msgspec.structs.replace(pod, ready=False)
        (after if late and kind not in ("protected", "unready") else before)[pod.key] = new
    return before, after


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    clusters(),
    budgets(),
    limited_policies(),
    st.lists(st.tuples(st.integers(0, 99), st.integers(1, 3600)), max_size=3),
    st.sampled_from(["planner", "any pods", "evictable pods"]),
    st.lists(st.integers(0, 99), min_size=2, max_size=12),
    st.integers(0, 3),
    st.sampled_from([DryRun.OFF, DryRun.OFF, DryRun.OFF, DryRun.CLIENT, DryRun.SERVER]),
    st.lists(st.sampled_from([0.0, 1.0, 20.0, 60.0, 300.0]), min_size=1, max_size=4),
    st.data(),
)
def test_evictions_are_safe(
    cluster: tuple[ClusterFacts, UsageReport],
    pdbs: tuple[DisruptionBudget, ...],
    pol: Policy,
    earlier_picks: list[tuple[int, int]],
    source: str,
    picks: list[int],
    conflicts: int,
    dry_run: DryRun,
    ticks: list[float],
    data: st.DataObject,
) -> None:
    facts, report = cluster
    facts = msgspec.structs.replace(facts, budgets=pdbs)
    snapshot, plan = plan_cycle(facts, report, pol, NOW)
    protections = Protections.from_settings(pol.protections)
    planned = plan.blocked is not None or (bool(plan.evictions) and source == "planner")
    if not planned:  # a plan of arbitrary pods, also whenever the planner found nothing to do
        bound = [p for p in facts.pods if p.node_name is not None]
        if source == "evictable pods":  # more evictions to judge
            bound = [p for p in bound if protections.reason(p) is None]
        plan = arbitrary_plan(plan, bound, picks)
    before, after = data.draw(changes(plan, facts, protections.settings.opt_out_annotation))
    clock = TickingClock(NOW, ticks)
    memory = MemoryCluster(facts.pods, facts.budgets, clock)
    for key, pod in before.items():
        memory.change(key, pod)
    memory.after_read = dict(after)
    # evictions earlier in the day, recorded by another run, count against the caps
    # (as far as the token buckets had tokens: another run takes none from an empty bucket)
    earlier, state, rates = [], LimiterState(), rates_only(pol.limits)
    for done, pod in earlier_evictions(facts, snapshot.pool_of, earlier_picks):
        request = EvictionRequest(pod.namespace, pod.name, done.node, done.pool, pod.workload)
        if check(request, state, CycleCounts(), rates, done.at).allowed:
            state = reserve(request, state, pol.limits, done.at)
            earlier.append((done, pod))
    store, backoff = MemoryStore(state.to_json(), conflicts=conflicts), MemoryStore()
    pods_then = dict(memory.pods)
    evictor = Evictor(memory, store, backoff, pol.limits, protections, dry_run, clock=clock)
    result = evictor.apply(plan, snapshot)

    evicted = memory.evicted
    assert len(evicted) == result.count(Outcome.EVICTED)
    if dry_run is not DryRun.OFF:  # a dry run writes nothing: no eviction, no Event, no state
        assert_nothing_written(memory, store, backoff, pods_then, dry_run, after)
    assert_reread_before_evicting(plan, result, memory, protections, before)
    assert_budgets_hold(memory)

    if planned:
        assert_from_source_nodes(plan, result, evicted, pol)
    limits = pol.limits
    if limits.lists.pools.black:  # the evictor takes each node's pool from the snapshot, never from the plan
        assert all(snapshot.pool_of[p.node_name or ""] not in limits.lists.pools.black for p in evicted)
    cycle = [done_of(e.pod, e.at, snapshot.pool_of) for e in memory.evictions]
    assert_caps_hold(limits, [done for done, _ in earlier], cycle)
    if limits.workload.max_unavailable is not None:
        allowance = limits.workload.max_unavailable
        # an evicted pod counts when it was ready then or when the snapshot counted it ready (it turned
        # unready since: the snapshot's count below does not see it unavailable)
        ready_then = {p.key for p in facts.pods if p.ready and p.node_name and not p.terminating}
        made_unavailable = [p for p in evicted if p.workload and (p.ready or p.key in ready_then)]
        for workload, count in Counter(p.workload for p in made_unavailable).items():
            # every non-terminal pod of the workload, scheduled or not; unscheduled ones are unavailable
            pods = [p for p in facts.pods if p.workload == workload and p.phase not in ("Succeeded", "Failed")]
            unavailable = sum(1 for p in pods if not (p.ready and p.node_name and not p.terminating))
            allowed = (
                int(allowance) if not str(allowance).endswith("%") else len(pods) * int(str(allowance)[:-1]) // 100
            )
            assert unavailable + count <= allowed

    if dry_run is DryRun.OFF:
        # a token stays taken for every eviction that happened or may have (no clear answer); those the
        # API server refused, or found gone or replaced, gave theirs back
        stored = LimiterState.from_json(store.text or "", clock.now)
        kept = sum(result.count(o) for o in (Outcome.EVICTED, Outcome.FAILED))
        assert sum(1 for r in stored.reservations if r.at >= NOW) == kept


def assert_from_source_nodes(plan: EvictionPlan, report: EvictorReport, evicted: list[Pod], pol: Policy) -> None:
    """The planner's own plan evicts only from hot (LowNodeUtilization) or emptied (HighNodeUtilization)
    nodes, and a node is emptied whole or not at all."""
    classes = {d.node: d.node_class for d in plan.results[0].node_decisions}
    source_class = NodeClass.COLD if pol.strategies[0].kind == "HighNodeUtilization" else NodeClass.HOT
    for pod in evicted:
        assert pod.node_name is not None and classes[pod.node_name] is source_class
    if pol.strategies[0].kind == "HighNodeUtilization":
        for name in {r.eviction.node for r in report.results}:
            outcomes = {r.outcome for r in report.results if r.eviction.node == name}
            assert not (Outcome.BLOCKED in outcomes and Outcome.EVICTED in outcomes), outcomes


def rates_only(limits: LimitSettings) -> LimitSettings:
    """The token buckets of ``limits`` alone."""
    scope = limits.model_dump(by_alias=True, mode="json")["global"]
    pools = {name: {"rate": pool["rate"]} for name, pool in scope["pools"].items()}
    return LimitSettings.model_validate({"global": {"rate": scope["rate"], "pools": pools}})


def done_of(pod: Pod, at: float, pool_of: Mapping[str, str]) -> Done:
    node_name = pod.node_name or ""
    return Done(at, node_name, pool_of[node_name], pod.namespace, str(pod.workload) if pod.workload else None)


def earlier_evictions(
    facts: ClusterFacts, pool_of: Mapping[str, str], picks: list[tuple[int, int]]
) -> list[tuple[Done, Pod]]:
    """Evictions of the cluster's pods some seconds before this cycle, oldest first."""
    bound = [p for p in facts.pods if p.node_name is not None]
    ordered = sorted(picks, key=lambda pick: -pick[1])
    return [(done_of(bound[i % len(bound)], NOW - ago, pool_of), bound[i % len(bound)]) for i, ago in ordered if bound]


def assert_nothing_written(
    memory: MemoryCluster, store: MemoryStore, backoff: MemoryStore, pods: dict[PodKey, Pod], dry_run: DryRun,
    after: Changes,
) -> None:  # fmt: skip
    assert memory.evicted == [] and memory.events == []
    assert store.saves == 0 and backoff.saves == 0
    if dry_run is DryRun.CLIENT:
        assert memory.requests == [] and memory.read_as == {}
    else:
        assert all(r.dry_run for r in memory.requests), memory.requests
    expected = dict(pods)
    for key in set(after) - set(memory.after_read):  # the pods that changed after their re-read
        now = after[key]
        if now is None:
            expected.pop(key, None)
        else:
            expected[key] = now
    assert memory.pods == expected


def assert_reread_before_evicting(
    plan: EvictionPlan, report: EvictorReport, memory: MemoryCluster, protections: Protections, before: Changes
) -> None:
    """Every eviction request names the planned pod's uid, and follows a re-read that found that very pod
    unprotected; the evictor reports each answer, and each change its re-read saw, as documented."""
    planned = {e.key: e for e in plan.evictions}
    results = {r.eviction.key: r for r in report.results}
    assert len(results) == len(report.results) == len(planned)
    assert len({r.key for r in memory.requests}) == len(memory.requests)  # one request per pod at most
    for request in memory.requests:
        uid = planned[request.key].uid
        assert request.uid == uid
        assert request.key in memory.read_as, f"{request} sent without re-reading the pod"
        read = memory.read_as[request.key]
        assert read is not None and read.uid == uid, read
        assert protections.reason(read) is None, (read, protections.reason(read))
        outcome = results[request.key].outcome
        if request.status == 201:
            assert outcome is (Outcome.SERVER_DRY_RUN if request.dry_run else Outcome.EVICTED)
        else:
            assert outcome is ANSWERS[request.status], (request, results[request.key])
    for pod in memory.evicted:
        assert pod.uid == planned[pod.key].uid
    for key, now in before.items():
        if key not in memory.read_as:
            continue  # refused on the snapshot's pod, or never reached
        result = results[key]
        if now is None:
            assert result.outcome is Outcome.GONE, result
        elif now.uid != planned[key].uid:
            assert result.outcome is Outcome.REPLACED, result
        else:
            why = protections.reason(now)
            if why is None:  # it only turned unready: judged as any pod is
                assert not now.ready
                continue
            assert (result.outcome, result.detail) == (Outcome.SKIPPED, f"protected now: {why}")


def assert_budgets_hold(memory: MemoryCluster) -> None:
    """At every eviction carried out, each budget selecting the pod keeps as many healthy pods as its spec
    requires: minAvailable (a percentage of the expected pods, rounded up), or the expected pods less
    maxUnavailable (likewise); a pod that was not healthy leaves the count as it was."""
    for eviction in memory.evictions:
        for count in eviction.budgets:
            spec, expected = count.budget, count.expected
            if not healthy(eviction.pod):
                assert count.after == count.before
                continue
            assert count.after == count.before - 1
            if spec.max_unavailable is not None:
                assert expected - count.after <= scaled(spec.max_unavailable, expected, "maxUnavailable"), count
            else:
                assert count.after >= scaled(spec.min_available or 0, expected, "minAvailable"), count


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
    cluster = MemoryCluster(pods, ())
    protections = Protections.from_settings(pol.protections)
    result = Evictor(
        cluster, MemoryStore(), MemoryStore(), pol.limits, protections, DryRun.OFF, clock=lambda: now
    ).apply(plan, snapshot)
    assert result.count(Outcome.EVICTED) == 2
    assert result.count(Outcome.BLOCKED) == len(planned) - 2
    assert [name for _, name in cluster.read_as] == planned[:2]  # the blocked ones were never read again
