"""Efficiency records, follow-up, bounce-back memory and rates: pure cases over plain builders."""

from __future__ import annotations

import msgspec
import pytest

from rebalancer.actions.evictor import EvictionResult, EvictorReport, Outcome
from rebalancer.app.efficiency import MAX_RECORDS_BYTES, bounded
from rebalancer.domain.efficiency_records import (
    COOLED,
    LANDED_BACK,
    NEW_PODS,
    NODE_GONE,
    OTHERS_GREW,
    TOO_LITTLE_MOVED,
    UNKNOWN,
    EvictedPod,
    Relief,
    Sighting,
)
from rebalancer.domain.model import ClusterFacts, Pod, UsageReport
from rebalancer.planning.plan import EvictionPlan, Unrelieved
from rebalancer.planning.snapshot import ClusterSnapshot
from rebalancer.policy.cycle import plan_cycle
from rebalancer.records import (
    CLUSTER,
    EfficiencySettings,
    EfficiencyState,
    RecordsCorrupt,
    compute_rates,
    judge_followups,
    observe_cycle,
    recently_moved,
)
from tests.builders import node, pod, policy, usage

T0 = 1_700_000_000.0
LNU = """
kind: LowNodeUtilization
thresholds: {cpu: 20}
targetThresholds: {cpu: 70}
"""
SETTINGS = EfficiencySettings(follow_up_window="15m", bounce_back_memory="6h", period="24h")


def plan_at(nodes, pods, report: UsageReport, at: float, moved=None) -> tuple[ClusterSnapshot, EvictionPlan]:
    return plan_cycle(ClusterFacts(tuple(nodes), tuple(pods)), report, policy(LNU), at, moved=moved)


def evict_all(plan: EvictionPlan) -> EvictorReport:
    return EvictorReport(tuple(EvictionResult(e, Outcome.EVICTED, "evicted") for e in plan.evictions))


def aged(p: Pod, created: float) -> Pod:
    return msgspec.structs.replace(p, created=created)


def scene():
    """hot (90%) with a 2500m pod of web and three small pods; cold (10%); stuck (90%, only a bare pod)."""
    nodes = [node("hot"), node("cold"), node("stuck")]
    pods = [
        pod("big", "hot", workload="web"),
        pod("a", "hot", workload="api"),
        pod("b", "hot", workload="api"),
        pod("bare", "stuck", workload=None, cpu_request_m=2000),  # stuck is the more requested: cold receives
    ]
    report = usage({"hot": 9000, "cold": 1000, "stuck": 9000}, {"big": 2500, "a": 800, "b": 800, "bare": 8000})
    return nodes, pods, report


def observed(state=None, at=T0):
    nodes, pods, report = scene()
    snap, plan = plan_at(nodes, pods, report, at)
    state = observe_cycle(state or EfficiencyState(), snap, plan, evict_all(plan), "schedule", SETTINGS)
    return state, nodes, pods


def test_observe_records_found_nodes_the_relief_and_why_others_were_not_acted_on():
    state, _, _ = observed()
    by_node = {s.node: s for s in state.sightings}
    assert set(by_node) == {"hot", "stuck"}
    assert by_node["hot"].acted and not by_node["hot"].reasons
    assert not by_node["stuck"].acted
    assert by_node["stuck"].reasons == {Unrelieved.NO_EVICTABLE_POD.value: 1}
    (relief,) = state.reliefs
    assert (relief.node, relief.target_pct, relief.usage_pct) == ("hot", 70.0, 90.0)
    assert [e.name for e in relief.evicted] == ["big"] and relief.evicted[0].workload == "Deployment/default/web"
    assert relief.deadline == T0 + 900 and relief.result is None
    assert sorted(relief.remaining.values()) == [800, 800]  # the pods that stayed, by uid
    assert state.cycles[0].found == {"default": 2} and state.cycles[0].evicted == {"default": 1}


def test_limiter_and_dry_run_outcomes_become_the_reason():
    nodes, pods, report = scene()
    snap, plan = plan_at(nodes, pods, report, T0)
    blocked = EvictorReport(
        tuple(EvictionResult(e, Outcome.BLOCKED, "cap", "global.maxPerRun") for e in plan.evictions)
    )
    state = observe_cycle(EfficiencyState(), snap, plan, blocked, "schedule", SETTINGS)
    hot = next(s for s in state.sightings if s.node == "hot")
    assert hot.reasons == {"limiter:global.maxPerRun": 1} and not hot.acted and not state.reliefs
    assert state.cycles[0].blocked == {"global.maxPerRun": 1}
    dry = EvictorReport(tuple(EvictionResult(e, Outcome.DRY_RUN, "dry") for e in plan.evictions))
    state = observe_cycle(EfficiencyState(), snap, plan, dry, "schedule", SETTINGS)
    assert next(s for s in state.sightings if s.node == "hot").reasons == {"dry-run": 1}


def test_no_cold_node_in_the_pool_is_the_reason():
    nodes = [node("hot", pool="a"), node("normal", pool="a"), node("cold", pool="b")]
    pods = [pod("x", "hot")]
    snap, plan = plan_at(nodes, pods, usage({"hot": 9000, "normal": 5000, "cold": 100}, {"x": 3000}), T0)
    assert plan.results[0].unrelieved == {"hot": Unrelieved.NO_COLD_NODE}
    state = observe_cycle(EfficiencyState(), snap, plan, evict_all(plan), "schedule", SETTINGS)
    assert state.sightings[0].reasons == {"no-cold-node": 1}


def test_no_room_is_the_reason_when_candidates_fit_nowhere():
    nodes = [node("hot"), node("cold")]
    pods = [pod("x", "hot", cpu_request_m=20_000)]  # requests more than any node has
    _, plan = plan_at(nodes, pods, usage({"hot": 9000, "cold": 100}, {"x": 3000}), T0)
    assert plan.results[0].unrelieved == {"hot": Unrelieved.NO_ROOM}


def test_a_hot_episode_continues_within_the_gap_and_a_new_one_starts_after():
    state, _, _ = observed()
    state, _, _ = observed(state, T0 + 300)
    stuck = [s for s in state.sightings if s.node == "stuck"]
    assert len(stuck) == 1 and stuck[0].cycles == 2 and stuck[0].reasons == {"no-evictable-pod": 2}
    state, _, _ = observed(state, T0 + 300 + 901)
    assert len([s for s in state.sightings if s.node == "stuck"]) == 2


def follow_up(state, pods, node_usage: dict[str, int], pod_usage: dict[str, int], at: float, nodes=None):
    nodes = nodes if nodes is not None else [node("hot"), node("cold"), node("stuck")]
    snap, _ = plan_at(nodes, pods, usage(node_usage, pod_usage), at)
    return judge_followups(state, snap).reliefs[0]


def remaining_pods(pods):
    return [p for p in pods if p.name != "big"]


def test_cooled_as_soon_as_a_snapshot_in_the_window_shows_the_node_under_target():
    state, _, pods = observed()
    left = remaining_pods(pods)
    relief = follow_up(state, left, {"hot": 6500, "cold": 3500, "stuck": 9000}, {"a": 800, "b": 800}, T0 + 300)
    assert relief.result == COOLED and relief.usage_pct_after == 65.0 and relief.remaining is None


def test_pending_until_the_window_closes_then_judged_with_a_reason():
    state, _, pods = observed()
    left = remaining_pods(pods)
    hot_still = {"hot": 7500, "cold": 3500, "stuck": 9000}
    assert follow_up(state, left, hot_still, {"a": 800, "b": 800}, T0 + 300).result is None
    relief = follow_up(state, left, hot_still, {"a": 800, "b": 800}, T0 + 900)
    assert relief.result == TOO_LITTLE_MOVED


def test_landed_back_when_the_evicted_workload_returns_to_the_node():
    state, _, pods = observed()
    back = aged(pod("big-2", "hot", workload="web"), T0 + 30)
    pods_now = [*remaining_pods(pods), back]
    relief = follow_up(
        state, pods_now, {"hot": 9000, "cold": 1000, "stuck": 9000}, {"a": 800, "b": 800, "big-2": 2400}, T0 + 900
    )
    assert relief.result == LANDED_BACK and "default/big-2" in relief.detail


def test_an_evicted_pod_still_terminating_on_the_node_is_not_its_own_return():
    nodes, pods, report = scene()
    pods = [aged(p, T0 - 0.5) if p.name == "big" else p for p in pods]  # created just before the relief
    snap, plan = plan_at(nodes, pods, report, T0)
    state = observe_cycle(EfficiencyState(), snap, plan, evict_all(plan), "schedule", SETTINGS)
    lingering = [msgspec.structs.replace(p, terminating=True) if p.name == "big" else p for p in pods]
    relief = follow_up(
        state, lingering, {"hot": 9000, "cold": 1000, "stuck": 9000}, {"a": 800, "b": 800, "big": 2500}, T0 + 900
    )
    assert relief.result == TOO_LITTLE_MOVED, relief.detail


def test_new_pods_versus_others_grew():
    state, _, pods = observed()
    stranger = aged(pod("new", "hot", workload="batch"), T0 + 60)
    relief = follow_up(
        state, [*remaining_pods(pods), stranger], {"hot": 8000, "cold": 3500, "stuck": 9000},
        {"a": 900, "b": 800, "new": 2000}, T0 + 901,
    )  # fmt: skip
    assert relief.result == NEW_PODS
    relief = follow_up(
        state, remaining_pods(pods), {"hot": 8000, "cold": 3500, "stuck": 9000}, {"a": 2500, "b": 2500}, T0 + 901
    )
    assert relief.result == OTHERS_GREW


def test_unknown_usage_or_a_gone_node_is_never_judged_cooled_or_failed():
    state, _, pods = observed()
    left = remaining_pods(pods)
    relief = follow_up(state, left, {"cold": 3500, "stuck": 9000}, {"a": 800, "b": 800}, T0 + 901)
    assert relief.result == UNKNOWN
    relief = follow_up(state, [], {"cold": 3500}, {}, T0 + 901, nodes=[node("cold")])
    assert relief.result == NODE_GONE
    # before the window closes a missing node is not judged yet
    assert follow_up(state, [], {"cold": 3500}, {}, T0 + 60, nodes=[node("cold")]).result is None


def test_rates_per_pool_with_reasons():
    state, _, pods = observed()
    left = remaining_pods(pods)
    snap, _ = plan_at([node("hot"), node("cold"), node("stuck")], left,
                      usage({"hot": 6000, "cold": 3500, "stuck": 9000}, {"a": 800, "b": 800}), T0 + 600)  # fmt: skip
    state = judge_followups(state, snap)
    reference = {"hot": 30.0, "stuck": 45.0, "other": 10.0}  # "other": hot by the reference, never found
    report = compute_rates(
        state, reference, {"hot": "default", "stuck": "default", "other": "default"}, T0 - 1, T0 + 3600
    )
    c = report.cluster
    assert report.pools[0] is c and c.pool == CLUSTER
    assert (c.reference, c.found, c.found_and_reference) == (3, 2, 2)
    assert c.discovery == pytest.approx(2 / 3) and c.missed_nodes == ("other",)
    assert (
        c.eviction == 0.5 and c.unacted == {"no-evictable-pod": 1} and c.unacted_nodes == {"stuck": "no-evictable-pod"}
    )
    assert (c.judged, c.cooled, c.effective) == (1, 1, 1.0)
    assert c.evictions == 1 and c.reference_minutes == 85.0
    assert report.pool("default").effective == 1.0


def test_a_node_emptied_while_not_hot_is_no_found_hot_node_acted_on():
    # "stuck" was found hot with nothing to evict; hours later, nearly idle, HighNodeUtilization emptied it:
    # the eviction rate counts the found hot nodes acted on while hot, so it stays unacted
    sighting = Sighting("stuck", "default", T0, T0 + 600, 3, False, {"no-evictable-pod": 3})
    pods = (EvictedPod("default", "a", None, 100),)
    emptied = Relief("stuck", "default", "HighNodeUtilization", T0 + 7200, 100.0, 5.0, pods, T0 + 8100)
    state = EfficiencyState(sightings=(sighting,), reliefs=(emptied,))
    c = compute_rates(state, None, {}, T0, T0 + 86_400).cluster
    assert (c.found, c.acted, c.eviction, c.reliefs, c.evictions) == (1, 0, 0.0, 1, 1)
    assert c.unacted_nodes == {"stuck": "no-evictable-pod"}


def test_rates_without_reference_or_outside_the_period_are_none_not_zero():
    state, _, _ = observed()
    report = compute_rates(state, None, {}, T0 - 1, T0 + 60, reference_problem="Prometheus down")
    assert report.cluster.discovery is None and report.reference_problem == "Prometheus down"
    assert report.cluster.effective is None  # pending only: nothing judged yet
    assert report.cluster.pending == 1
    empty = compute_rates(state, {}, {}, T0 + 10_000, T0 + 20_000)
    assert empty.cluster.discovery is None and empty.cluster.eviction is None and empty.cluster.found == 0


def test_guard_keeps_the_replacement_in_place_and_counts_a_bounce_when_off():
    state, _, pods = observed()
    # big-2 requests a core: while it terminates, its node holds more requests than hot (as the scheduler counts)
    replacement = aged(pod("big-2", "cold", workload="web", cpu_request_m=1000), T0 + 20)
    old_replica = aged(pod("big-0", "cold", workload="web"), T0 - 3600)
    facts = ClusterFacts((node("hot"), node("cold"), node("stuck")), (*remaining_pods(pods), replacement, old_replica))
    moved = recently_moved(state, facts, T0 + 600, SETTINGS)
    assert set(moved) == {("default", "big-2")} and "bounce-back guard" in moved[("default", "big-2")]
    assert recently_moved(state, facts, T0 + 6 * 3600 + 1, SETTINGS) == {}  # memory over
    off = EfficiencySettings(bounce_back_guard=False)
    assert recently_moved(state, facts, T0 + 600, off) == {}

    # cold is now the hot one; with the guard its only big pod stays, without it the move bounces
    now_usage = usage({"hot": 4000, "cold": 9000, "stuck": 1000}, {"a": 800, "b": 800, "big-2": 2600, "big-0": 100})
    nodes = [node("hot"), node("cold"), node("stuck")]
    snap, plan = plan_at(nodes, facts.pods, now_usage, T0 + 600, moved=moved)
    assert [e.name for e in plan.evictions] == ["big-0"]  # the old replica may go, the replacement stays
    without_old = [p for p in facts.pods if p.name != "big-0"]
    _, plan = plan_at(nodes, without_old, now_usage, T0 + 600, moved=moved)
    assert plan.evictions == () and plan.results[0].unrelieved == {"cold": Unrelieved.RECENTLY_MOVED}
    snap, plan = plan_at(nodes, facts.pods, now_usage, T0 + 600)
    assert [e.name for e in plan.evictions] == ["big-2"]
    after = observe_cycle(state, snap, plan, evict_all(plan), "schedule", SETTINGS)
    (bounce,) = after.bounce_backs
    assert (bounce.workload, bounce.node, bounce.previous_node) == ("Deployment/default/web", "cold", "hot")
    assert compute_rates(after, None, {}, T0 - 1, T0 + 3600).cluster.bounce_backs == 1


def test_records_round_trip_and_reject_corruption():
    state, _, _ = observed()
    text = state.to_json()
    assert EfficiencyState.from_json(text, T0) == state
    with pytest.raises(RecordsCorrupt, match="foreign schema"):
        EfficiencyState.from_json(text.replace("efficiency-records", "other"), T0)
    with pytest.raises(RecordsCorrupt, match="after now"):
        EfficiencyState.from_json(text, T0 - 7200)
    with pytest.raises(RecordsCorrupt, match="result"):
        EfficiencyState.from_json(text.replace('"result":null', '"result":"great"'), T0)
    with pytest.raises(RecordsCorrupt, match="not JSON"):
        EfficiencyState.from_json("{", T0)


def test_prune_drops_old_records_and_keeps_pending_follow_ups():
    state, _, _ = observed()
    kept = state.prune(T0 + 600, 3600, 100)
    assert kept == state
    gone = state.prune(T0 + 2 * 86400, 86400, 100)
    assert gone.sightings == () and gone.reliefs == () and gone.cycles == ()
    many = EfficiencyState(cycles=state.cycles * 50)
    assert len(many.prune(T0 + 1, 3600, 10).cycles) == 10


def test_an_alerts_cycle_leaves_the_other_nodes_closed_reliefs_to_a_full_cycle():
    """An alert's cycle reads the pods' usage of its nodes only: a relief of another node that did not cool
    is not judged on it (every pod's usage unknown would read as nothing having come or grown)."""
    state, nodes, pods = observed()
    stranger = aged(pod("new", "hot", workload="batch"), T0 + 60)
    node_usage = {"hot": 8000, "cold": 3500, "stuck": 9000}
    facts = ClusterFacts(tuple(nodes), (*remaining_pods(pods), stranger))
    alert, _ = plan_cycle(facts, usage(node_usage, {"bare": 8000}), policy(LNU), T0 + 901, frozenset({"stuck"}))
    assert judge_followups(state, alert).reliefs[0].result is None
    full, _ = plan_cycle(
        facts, usage(node_usage, {"a": 800, "b": 800, "new": 2000, "bare": 8000}), policy(LNU), T0 + 960
    )
    assert judge_followups(state, full).reliefs[0].result == NEW_PODS


def test_new_pods_too_young_for_their_usage_to_be_read_are_not_taken_for_none():
    """A pod that came after the relief, younger than the usage window, has no usage yet: the relief did
    not cool because pods came, not because the evictions took too little off."""
    state, _, pods = observed()
    young = aged(pod("young", "hot", workload="batch"), T0 + 600)
    relief = follow_up(
        state, [*remaining_pods(pods), young], {"hot": 8000, "cold": 3500, "stuck": 9000}, {"a": 800, "b": 800},
        T0 + 901,
    )  # fmt: skip
    assert relief.result == NEW_PODS
    assert "1 pod(s) scheduled onto it since use 0.000 cores, 1 of them not measured yet" in relief.detail


def test_pending_reliefs_too_large_for_the_configmap_close_oldest_first_as_unknown() -> None:
    """400 pending reliefs, each listing the usage of the 110 pods that stayed on its node, make records of
    about 2 MB: the judged records cannot shrink them, so the oldest reliefs are closed as unknown until the
    records fit the ConfigMap; none vanishes, the newest stay pending, their evictions stay for the in-flight
    correction."""
    settings = EfficiencySettings()
    pods = (EvictedPod("default", "moved", "Deployment/default/web", 300),)
    stayed = {f"00000000-0000-4000-8000-{n:012d}": 250 for n in range(110)}
    reliefs = tuple(
        Relief(f"node-{i:03d}", "default", "LowNodeUtilization", T0 + i, 70.0, 90.0, pods, T0 + 900 + i, stayed)
        for i in range(400)
    )
    state = EfficiencyState(reliefs=reliefs)
    assert len(state.to_json()) > 2 * MAX_RECORDS_BYTES

    kept = bounded(state, settings, T0 + 600)

    assert len(kept.to_json()) <= MAX_RECORDS_BYTES
    assert [(r.node, r.at, r.evicted) for r in kept.reliefs] == [(r.node, r.at, r.evicted) for r in reliefs]
    closed = [r for r in kept.reliefs if r.result is not None]
    assert closed and {r.result for r in closed} == {UNKNOWN} and all(r.remaining is None for r in closed)
    assert closed[0].detail.startswith("left unjudged: 400 reliefs pending made the records larger than")
    assert [r.node for r in closed] == [r.node for r in kept.reliefs[: len(closed)]]  # the oldest first
    assert kept.reliefs[-1].result is None and kept.reliefs[-1].remaining == stayed
    small = EfficiencyState(reliefs=reliefs[:10])
    assert bounded(small, settings, T0 + 600) == small  # within the limit: nothing closed


def test_reliefs_too_large_by_their_evictions_alone_keep_the_newest_and_fit() -> None:
    """150 pending reliefs of whole nodes emptied (110 evicted pods each, about 3 MB): closing them as unknown
    leaves their evictions, still too large, so the oldest of them go like any judged record, and the records
    fit the ConfigMap (otherwise no cycle could write them)."""
    pods = tuple(EvictedPod("default", f"web-5d4f8b7c9-{n:05d}", "Deployment/default/web", 300) for n in range(110))
    reliefs = tuple(
        Relief(f"node-{i:03d}", "default", "HighNodeUtilization", T0 + i, 70.0, 90.0, pods, T0 + 900 + i, {})
        for i in range(150)
    )
    kept = bounded(EfficiencyState(reliefs=reliefs), EfficiencySettings(), T0 + 600)

    assert len(kept.to_json()) <= MAX_RECORDS_BYTES
    assert kept.reliefs and [r.node for r in kept.reliefs] == [r.node for r in reliefs[-len(kept.reliefs) :]]
