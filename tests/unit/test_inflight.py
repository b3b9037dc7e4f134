"""The in-flight correction: a node's usage less what the planner's recent evictions moved off it, plus what
landed on it, until the usage window has caught up (pure function, planner, landing guard, plan output)."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rebalancer.actions.evictor import EvictionResult, EvictorReport, Outcome
from rebalancer.actions.guard.decide import guarded_nodes
from rebalancer.app.render import plan_record, plan_table
from rebalancer.domain.efficiency_records import EvictedPod, Relief
from rebalancer.domain.model import ClusterFacts, UsageReport
from rebalancer.planning.inflight import EarlierReliefs, Flight, Lag, Reading, corrected, in_flight, reading_lag
from rebalancer.planning.plan import EvictionPlan, NodeClass
from rebalancer.planning.snapshot import ClusterSnapshot
from rebalancer.policy.cycle import plan_cycle
from rebalancer.records import EfficiencySettings, EfficiencyState, judge_followups, observe_cycle
from tests.builders import node, pod, policy, usage

T0 = 1_700_000_000.0
LAG = Lag(gone=840.0, landed=360.0)  # the defaults: P95 over 10m of 1m samples of rate[5m]
READING = Reading(600, 0.95, 300, 60)
CAUGHT_UP = T0 + LAG.gone + 40  # T0 is 20 s past a minute: the subquery's newest sample is on a minute
LNU = """
kind: LowNodeUtilization
thresholds: {cpu: 20}
targetThresholds: {cpu: 70}
"""
SETTINGS = EfficiencySettings(follow_up_window="15m")


def relief(node_name: str, at: float, *pods: EvictedPod, measured_m: int | None = 9000) -> Relief:
    return Relief(node_name, "default", "LowNodeUtilization", at, 70.0, 90.0, pods, at + 900, measured_m=measured_m)


def evicted(name: str, usage_m: int, landed: str | None = None, replacement: str | None = None) -> EvictedPod:
    return EvictedPod("default", name, "Deployment/default/web", usage_m, landed=landed, replacement=replacement)


# -- the pure correction ---------------------------------------------------------------------------


def test_the_lag_is_where_the_quantile_reads_in_the_window_after_the_rate_window() -> None:
    assert reading_lag(600, 0.95, 300, 60) == Lag(840, 360)  # a fall shows once 9 of 10 samples are after it
    assert reading_lag(600, 1.0, 60, 60) == Lag(600, 60)  # the max: the whole window, and the first sample
    assert reading_lag(600, 0.5, 300, 60) == Lag(600, 600)  # the median: half the window either way
    assert reading_lag(600, 0.95, 60, 300) == Lag(360, 360)  # two samples
    assert reading_lag(60, 0.95, 60, 60) == Lag(60, 60)  # one sample: the next one shows it
    with pytest.raises(ValueError, match="quantile 0"):
        reading_lag(600, 0, 300, 60)


@given(
    samples=st.integers(1, 120),
    step=st.sampled_from([15, 30, 60, 300]),
    rate_window=st.sampled_from([60, 120, 300, 600]),
    low=st.floats(0.01, 1.0),
    high=st.floats(0.01, 1.0),
)
def test_a_higher_quantile_shows_a_fall_later_and_a_rise_sooner(samples, step, rate_window, low, high) -> None:
    low, high = min(low, high), max(low, high)
    a, b = reading_lag(samples * step, low, rate_window, step), reading_lag(samples * step, high, rate_window, step)
    for lag in (a, b):  # a change shows within the rate window and the whole window after it
        assert rate_window <= lag.gone <= rate_window + samples * step
        assert rate_window <= lag.landed <= rate_window + samples * step
    assert a.gone <= b.gone and a.landed >= b.landed


def test_what_left_is_subtracted_and_what_landed_is_added_as_far_as_the_reading_does_not_show_it() -> None:
    reliefs = [relief("hot", T0, evicted("big", 2500, landed="cold", replacement="default/big-2"))]
    flights = in_flight(reliefs, T0 + 30, READING, {"default/big-2": T0 + 2})  # the newest sample is before it
    assert flights["hot"].left_m == flights["hot"].left_held_m == 2500 and flights["hot"].relieved_at == T0
    assert flights["cold"].landed_m == flights["cold"].landed_unread_m == 2500  # no sample holds it yet
    assert flights["cold"].relieved_at is None and flights["hot"].until == CAUGHT_UP
    assert flights["cold"].until == T0 + LAG.landed + 40
    assert corrected(9000, flights["hot"]) == 6500
    assert corrected(1000, flights["cold"]) == 3500
    later = in_flight(reliefs, T0 + 300, READING, {"default/big-2": T0 + 2})  # 4 samples hold a share of it
    assert 0 < later["cold"].landed_unread_m < 2500
    assert in_flight(reliefs, CAUGHT_UP, READING, {"default/big-2": T0 + 2}) == {}  # the reading shows all of it


def test_a_landing_counts_only_until_the_destination_reads_it() -> None:
    reliefs = [relief("hot", T0, evicted("big", 2500, landed="cold", replacement="default/big-2"))]
    flights = in_flight(reliefs, T0 + LAG.landed + 40, READING, {"default/big-2": T0 + 2})
    assert set(flights) == {"hot"} and flights["hot"].left_m == 2500  # the hot node still reads it


def test_a_replacement_no_longer_on_its_node_adds_nothing_and_one_not_started_adds_all() -> None:
    reliefs = [relief("hot", T0, evicted("big", 2500, landed="cold", replacement="default/big-2"))]
    assert set(in_flight(reliefs, T0 + 300, READING, {})) == {"hot"}
    assert in_flight(reliefs, T0 + 300, READING, {"default/big-2": None})["cold"].landed_unread_m == 2500


def test_a_replacement_that_landed_back_moved_nothing() -> None:
    reliefs = [relief("hot", T0, evicted("big", 2500, landed="hot"), evicted("small", 800))]
    flights = in_flight(reliefs, T0 + 60, READING, {})
    assert set(flights) == {"hot"} and flights["hot"].left_m == 800 and flights["hot"].landed_m == 0


def test_a_fall_the_reading_already_shows_is_not_subtracted_twice() -> None:
    flight = in_flight([relief("hot", T0, evicted("big", 2500))], T0 + 600, READING, {})["hot"]
    assert flight.left_held_m == 1942 and flight.expected_fall_m == 558  # the quantile's samples begin to fall
    assert corrected(8442, flight) == 6500  # the fall the model expects
    assert corrected(8000, flight) == 6500  # 442m more out of the reading than expected: taken as part of it
    assert corrected(6000, flight) == 6000  # all of it out, and more
    unrecorded = in_flight([relief("hot", T0, evicted("big", 2500), measured_m=None)], T0 + 60, READING, {})["hot"]
    assert corrected(8000, unrecorded) == 5500  # no reading recorded: the model alone


def test_reliefs_add_up_and_the_first_reading_is_the_baseline() -> None:
    reliefs = [relief("hot", T0, evicted("a", 1000)), relief("hot", T0 + 120, evicted("b", 1500), measured_m=8500)]
    flight = in_flight(reliefs, T0 + 180, READING, {})["hot"]
    assert (flight.left_m, flight.baseline_m, flight.relieved_at) == (2500, 9000, T0 + 120)
    assert flight.until == T0 + 120 + LAG.gone + 40
    assert corrected(8500, flight) == 6500


pods_st = st.builds(
    evicted,
    st.sampled_from(["a", "b", "c"]),
    st.integers(0, 20_000),
    st.one_of(st.none(), st.sampled_from(["n0", "n1", "n2"])),
    st.one_of(st.none(), st.sampled_from(["default/a", "default/b"])),
)
reliefs_st = st.lists(
    st.builds(
        relief,
        st.sampled_from(["n0", "n1", "n2"]),
        st.floats(T0 - 3000, T0 + 100),
        pods_st,
        measured_m=st.one_of(st.none(), st.integers(0, 40_000)),
    ),
    max_size=6,
)


@given(reliefs=reliefs_st, measured=st.one_of(st.none(), st.integers(0, 40_000)))
def test_the_correction_never_invents_data(reliefs: list[Relief], measured: int | None) -> None:
    now = T0
    started = {"default/a": T0 - 100, "default/b": None}
    flights = in_flight(reliefs, now, READING, started)
    for name, flight in flights.items():
        covered = [r for r in reliefs if r.at <= now]
        assert covered, "a correction without a relief"
        assert flight.until > now and flight.last_at <= now
        assert (
            flight.left_held_m <= flight.left_m <= sum(p.usage_m for r in covered if r.node == name for p in r.evicted)
        )
        assert flight.landed_unread_m <= flight.landed_m
        assert flight.landed_m <= sum(p.usage_m for r in covered for p in r.evicted if p.landed == name)
        value = corrected(measured, flight)
        if measured is None:
            assert value is None  # unknown stays unknown
        else:
            assert value is not None and 0 <= value <= measured + flight.landed_unread_m
            assert value >= measured - flight.left_held_m
    later = in_flight(reliefs, max((r.at for r in reliefs), default=now) + LAG.gone + 60, READING, started)
    assert all(f.left_m == 0 for f in later.values())  # a fall expires once the window no longer covers it


@given(st.integers(0, 40_000))
def test_nothing_moved_corrects_nothing(measured: int) -> None:
    assert corrected(measured, Flight("n", 0, 0, None, None, T0, T0 + LAG.gone)) == measured


# -- the planner -----------------------------------------------------------------------------------


def scene(hot_m: int = 9000):
    nodes = [node("hot"), node("cold")]
    pods = [pod("big", "hot"), pod("a", "hot", workload="api"), pod("b", "hot", workload="api")]
    report = usage({"hot": hot_m, "cold": 1000}, {"big": 2500, "a": 300, "b": 300})
    return nodes, pods, report


def cycle(
    pods, report: UsageReport, at: float, state: EfficiencyState, extra: str = ""
) -> tuple[ClusterSnapshot, EvictionPlan, EfficiencyState]:
    nodes = [node("hot"), node("cold")]
    facts = ClusterFacts(tuple(nodes), tuple(pods))
    snap, plan = plan_cycle(facts, report, policy(LNU, extra), at, reliefs=EarlierReliefs(state.reliefs))
    done = EvictorReport(tuple(EvictionResult(e, Outcome.EVICTED, "evicted") for e in plan.evictions))
    state = judge_followups(state, snap)
    return snap, plan, observe_cycle(state, snap, plan, done, "schedule", SETTINGS)


def test_a_second_cycle_right_after_a_relief_leaves_the_node_alone_while_expected_under_target() -> None:
    _, pods, report = scene()
    _, first, state = cycle(pods, report, T0, EfficiencyState())
    assert [e.name for e in first.evictions] == ["big"]
    assert state.reliefs[0].measured_m == 9000 and state.reliefs[0].cold_pct == 20.0
    left = [p for p in pods if p.name != "big"]  # the reading still says 90%: the window lags
    snap, second, state = cycle(left, usage({"hot": 9000, "cold": 1000}, {"a": 300, "b": 300}),
                                T0 + 86, state)  # fmt: skip
    assert second.evictions == ()
    hot = next(d for d in second.results[0].node_decisions if d.node == "hot")
    assert hot.node_class is NodeClass.NORMAL and hot.usage_m == 6500
    assert snap.measured_usage("hot") == 9000 and snap.load["hot"].usage_m == 6500
    (correction,) = second.in_flight
    assert correction.note.startswith("relieved 86 s ago: 2.5 cores moved; reads 90.0%, expected 65.0%")
    assert "relieved 86 s ago" in plan_table(second, "test")
    assert plan_record(second, "test")["inFlight"][0]["correctedM"] == 6500
    assert [s.node for s in state.sightings if s.last == T0 + 86] == []  # not found hot again
    assert len(state.reliefs) == 1


def test_a_replacement_seen_back_on_its_node_before_the_records_know_it_left_nothing() -> None:
    _, pods, report = scene()
    _, _, state = cycle(pods, report, T0, EfficiencyState())
    assert state.reliefs[0].evicted[0].landed is None  # the records learn landings after a cycle
    back = msgspec.structs.replace(pod("big-2", "hot"), created=T0 + 5)  # its own usage not known yet
    left = [p for p in pods if p.name != "big"] + [back]
    snap, second, _ = cycle(left, usage({"hot": 9000, "cold": 1000}, {"a": 300, "b": 300}), T0 + 86, state)
    assert second.in_flight == () and snap.load["hot"].usage_m == 9000
    hot = next(d for d in second.results[0].node_decisions if d.node == "hot")
    assert hot.node_class is NodeClass.HOT  # still hot: relieved again


def test_a_node_still_hot_after_the_correction_is_relieved_again_and_counted_as_a_repeat() -> None:
    _, pods, report = scene()
    _, _, state = cycle(pods, report, T0, EfficiencyState())
    left = [p for p in pods if p.name != "big"]
    grown = usage({"hot": 9900, "cold": 1000}, {"a": 3000, "b": 300})  # 99% - 25% = 74%: still hot
    _, second, state = cycle(left, grown, T0 + 86, state)
    assert [e.name for e in second.evictions] == ["a"]
    assert [(r.at, r.repeat) for r in state.reliefs] == [(T0, False), (T0 + 86, True)]
    assert state.reliefs[1].overshoot


def test_the_correction_expires_with_the_window() -> None:
    _, pods, report = scene()
    _, _, state = cycle(pods, report, T0, EfficiencyState())
    left = [p for p in pods if p.name != "big"]
    still = usage({"hot": 9000, "cold": 1000}, {"a": 300, "b": 300})
    _, plan, _ = cycle(left, still, CAUGHT_UP, state)
    assert plan.in_flight == () and [e.name for e in plan.evictions] == ["a"]  # the reading is true again


def test_the_destination_counts_what_landed_on_it() -> None:
    _, pods, report = scene()
    _, _, state = cycle(pods, report, T0, EfficiencyState())
    landed = msgspec.structs.replace(state.reliefs[0].evicted[0], landed="cold", replacement="default/big-2")
    state = msgspec.structs.replace(state, reliefs=(msgspec.structs.replace(state.reliefs[0], evicted=(landed,)),))
    moved = [p for p in pods if p.name != "big"] + [pod("big-2", "cold")]
    snap, _, _ = cycle(moved, usage({"hot": 9000, "cold": 1000}, {"a": 300, "b": 300}), T0 + 30, state)
    assert snap.load["cold"].usage_m == 3500 and snap.measured_usage("cold") == 1000  # no sample holds it yet
    gone = [p for p in moved if p.name != "big-2"]  # the replacement left the node since: nothing landed there
    snap, _, _ = cycle(gone, usage({"hot": 9000, "cold": 1000}, {"a": 300, "b": 300}), T0 + 30, state)
    assert snap.load["cold"].usage_m == 1000


def test_unknown_usage_stays_unknown() -> None:
    _, pods, report = scene()
    _, _, state = cycle(pods, report, T0, EfficiencyState())
    left = [p for p in pods if p.name != "big"]
    snap, plan, _ = cycle(left, usage({"cold": 1000}, {"a": 300, "b": 300}), T0 + 60, state)
    assert snap.load["hot"].usage_m is None and plan.in_flight == ()


def test_usage_summed_from_pods_is_not_corrected_twice() -> None:
    _, pods, report = scene()
    _, _, state = cycle(pods, report, T0, EfficiencyState())
    left = [p for p in pods if p.name != "big"]
    summed = UsageReport(pod_cpu_m={("default", "a"): 300, ("default", "b"): 300}, node_from_pods=True)
    snap, plan, _ = cycle(left, summed, T0 + 60, state)
    assert snap.load["hot"].usage_m == 600 and plan.in_flight == ()


def test_without_records_the_plan_says_the_correction_is_off() -> None:
    nodes, pods, report = scene()
    facts = ClusterFacts(tuple(nodes), tuple(pods))
    off = EarlierReliefs(missing="efficiency.enabled is false")
    _, plan = plan_cycle(facts, report, policy(LNU), T0, reliefs=off)
    assert plan.in_flight_off == "efficiency.enabled is false"
    assert "in-flight correction off: efficiency.enabled is false" in plan_table(plan, "test")
    assert plan_record(plan, "test")["inFlightOff"] == "efficiency.enabled is false"


def test_the_landing_guard_sees_the_corrected_usage() -> None:
    _, pods, report = scene()
    _, _, state = cycle(pods, report, T0, EfficiencyState())
    left = [p for p in pods if p.name != "big"]
    snap, plan, _ = cycle(left, usage({"hot": 9000, "cold": 1000}, {"a": 300, "b": 300}), T0 + 60, state)
    guarded = {g.name: g for g in guarded_nodes(snap, plan, frozenset(), every_node=True)}
    assert guarded["hot"].node_class is NodeClass.NORMAL and guarded["hot"].usage_pct == 65.0


def test_a_follow_up_judges_the_reading_not_the_correction() -> None:
    _, pods, report = scene()
    _, _, state = cycle(pods, report, T0, EfficiencyState())
    left = [p for p in pods if p.name != "big"]
    _, _, state = cycle(left, usage({"hot": 9000, "cold": 1000}, {"a": 300, "b": 300}), T0 + 60, state)
    assert state.reliefs[0].result is None  # expected 65%, but the reading has not shown it yet
