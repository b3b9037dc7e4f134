"""The in-flight correction of memory: a node's working-set reading less the memory of the pods the planner just
evicted from it, plus what landed on it, until the gauge's window has caught up; unknown memory stays unknown,
and records written before the pods' memory was kept correct CPU only."""

from __future__ import annotations

import json
from dataclasses import replace

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rebalancer.actions.evictor import EvictionResult, EvictorReport, Outcome
from rebalancer.app.render import plan_record, plan_table
from rebalancer.domain.efficiency_records import EvictedPod, Relief
from rebalancer.domain.model import ClusterFacts, Pod, UsageReport
from rebalancer.planning.inflight import (
    EarlierReliefs,
    Lag,
    Reading,
    corrected_memory,
    in_flight,
    memory_in_flight,
    reading_lag,
)
from rebalancer.planning.plan import EvictionPlan, NodeClass
from rebalancer.planning.snapshot import ClusterSnapshot
from rebalancer.policy.cycle import plan_cycle, usage_reading
from rebalancer.records import EfficiencySettings, EfficiencyState, RecordsCorrupt, judge_followups, observe_cycle
from tests.builders import node, pod, policy
from tests.unit.test_memory_thresholds import report

GI = 2**30
T0 = 1_700_000_000.0
LNU = (
    "kind: LowNodeUtilization\nthresholds: {cpu: 30, memory: 40}\ntargetThresholds: {cpu: 70, memory: 80}\n"
    "predictPlacement: false\n"
)
SETTINGS = EfficiencySettings(follow_up_window="15m")
MEMORY_LAG = Lag(gone=540.0, landed=60.0)  # the defaults: P95 over 10m of 1m samples of a gauge
MEMORY = Reading(600, 0.95, 0, 60)
CPU = Reading(600, 0.95, 300, 60)
NODES = [node("a", 10_000, memory=10 * GI), node("b", 10_000, memory=10 * GI)]
# a: CPU 50% (cool), memory 90% (hot, 1 GiB over target); b cold
PODS = [pod("heavy", "a", workload="cache"), pod("light", "a", workload="api"), pod("idle", "b", workload="web")]
FIRST = {"heavy": (500, 3 * GI), "light": (4_000, GI // 2), "idle": (900, GI)}
AFTER = {"light": (4_000, GI // 2), "idle": (900, GI)}  # heavy is gone; its replacement not scheduled yet


def relief(node_name: str, at: float, *pods: EvictedPod, memory: int | None = 9 * GI) -> Relief:
    return Relief(
        node_name, "default", "LowNodeUtilization", at, 80.0, 90.0, pods, at + 900, measured_m=5000,
        measured_memory=memory,
    )  # fmt: skip


def evicted(name: str, memory: int | None, landed: str | None = None, replacement: str | None = None) -> EvictedPod:
    return EvictedPod("default", name, "Deployment/default/web", 500, memory=memory, landed=landed,
                      replacement=replacement)  # fmt: skip


# -- the pure correction ---------------------------------------------------------------------------


def test_the_memory_lag_is_the_gauges_without_a_rate_window() -> None:
    lnu = policy(LNU)
    assert usage_reading(lnu, gauge=True) == MEMORY and MEMORY.lag == reading_lag(600, 0.95, 0, 60) == MEMORY_LAG
    assert usage_reading(lnu) == CPU and CPU.lag == Lag(840.0, 360.0)  # CPU's rate adds its rateWindow to both


def test_memory_that_left_is_subtracted_and_memory_that_landed_is_added() -> None:
    reliefs = [relief("a", T0, evicted("heavy", 3 * GI, landed="b", replacement="default/heavy-2"))]
    moves = memory_in_flight(reliefs, T0 + 30, MEMORY, {"default/heavy-2": T0 + 2})
    assert moves["a"].left == 3 * GI and moves["a"].relieved_at == T0 and moves["a"].until == T0 + 580
    assert moves["b"].landed == moves["b"].landed_unread == 3 * GI  # no sample since it started
    assert moves["b"].relieved_at is None and moves["b"].until == T0 + 100
    assert corrected_memory(9 * GI, moves["a"]) == 6 * GI
    assert corrected_memory(2 * GI, moves["b"]) == 5 * GI
    later = memory_in_flight(reliefs, T0 + 100, MEMORY, {"default/heavy-2": T0 + 2})
    assert set(later) == {"a"}  # the destination's reading holds it two samples after it landed
    assert memory_in_flight(reliefs, T0 + 580, MEMORY, {"default/heavy-2": T0 + 2}) == {}


def test_a_memory_fall_the_reading_already_shows_is_not_subtracted_twice() -> None:
    (moves,) = memory_in_flight([relief("a", T0, evicted("heavy", 3 * GI))], T0 + 300, MEMORY, {}).values()
    assert corrected_memory(8 * GI, moves) == 6 * GI
    assert corrected_memory(5 * GI, moves) == 5 * GI


def test_a_replacement_back_on_its_node_moved_no_memory() -> None:
    reliefs = [relief("a", T0, evicted("heavy", 3 * GI, landed="a"), evicted("light", GI // 2))]
    assert memory_in_flight(reliefs, T0 + 30, MEMORY, {})["a"].left == GI // 2


def test_a_pod_of_unknown_memory_leaves_its_nodes_memory_unknown() -> None:
    reliefs = [
        relief("a", T0, evicted("heavy", -1, landed="b", replacement="default/heavy-2"), evicted("light", GI // 2))
    ]
    moves = memory_in_flight(reliefs, T0 + 30, MEMORY, {"default/heavy-2": T0 + 2})
    assert moves["a"].left is None and moves["a"].unknown == "default/heavy"
    assert moves["b"].landed is None and corrected_memory(2 * GI, moves["b"]) is None
    assert corrected_memory(9 * GI, moves["a"]) is None  # never a number


def test_a_relief_recorded_before_the_pods_memory_was_kept_corrects_cpu_only() -> None:
    old = [relief("a", T0, evicted("heavy", None, landed="b"), memory=None)]
    assert memory_in_flight(old, T0 + 30, MEMORY, {}) == {}
    assert in_flight(old, T0 + 30, CPU, {})["a"].left_m == 500


@given(
    pods=st.lists(
        st.builds(
            evicted,
            st.sampled_from(["x", "y"]),
            st.one_of(st.none(), st.just(-1), st.integers(0, 20 * GI)),
            st.one_of(st.none(), st.sampled_from(["a", "b"])),
            st.one_of(st.none(), st.just("default/x")),
        ),
        min_size=1,
        max_size=4,
    ),
    at=st.floats(T0 - 1000, T0),
    baseline=st.one_of(st.none(), st.integers(0, 40 * GI)),
    measured=st.one_of(st.none(), st.integers(0, 40 * GI)),
    shown=st.integers(0, 20 * GI),
)
def test_corrected_memory_is_never_negative_and_never_known_where_unknown(
    pods: list[EvictedPod], at: float, baseline: int | None, measured: int | None, shown: int
) -> None:
    reliefs = [relief("a", at, *pods, memory=baseline)]
    started = {"default/x": T0 - shown % 600}
    for moves in memory_in_flight(reliefs, T0, MEMORY, started).values():
        value = corrected_memory(measured, moves)
        unknown = measured is None or moves.left is None or moves.landed is None
        assert (value is None) == unknown
        if moves.left is None or moves.landed is None:
            assert moves.unknown in {"default/x", "default/y"}
        if value is not None:
            assert measured is not None and moves.landed is not None and moves.left is not None
            assert moves.landed_unread is not None and moves.left_held is not None
            assert 0 <= value <= measured + moves.landed_unread and value >= measured - moves.left_held


# -- the planner -----------------------------------------------------------------------------------


def cycle(
    pods: list[Pod], usage: UsageReport, at: float, state: EfficiencyState
) -> tuple[ClusterSnapshot, EvictionPlan, EfficiencyState]:
    facts = ClusterFacts(tuple(NODES), tuple(pods))
    snap, plan = plan_cycle(facts, usage, policy(LNU), at, reliefs=EarlierReliefs(state.reliefs))
    done = EvictorReport(tuple(EvictionResult(e, Outcome.EVICTED, "evicted") for e in plan.evictions))
    state = judge_followups(state, snap)
    return snap, plan, observe_cycle(state, snap, plan, done, "schedule", SETTINGS)


def relieved() -> tuple[EfficiencyState, list[Pod]]:
    usage = report({"a": (5_000, 9 * GI), "b": (1_000, 2 * GI)}, FIRST)
    _, first, state = cycle(PODS, usage, T0, EfficiencyState())
    assert [e.name for e in first.evictions] == ["heavy"]
    return state, [p for p in PODS if p.name != "heavy"]


def node_class(plan: EvictionPlan, name: str) -> NodeClass:
    return next(d.node_class for d in plan.results[0].node_decisions if d.node == name)


def test_the_pods_memory_and_the_nodes_reading_are_recorded_and_round_trip() -> None:
    state, _ = relieved()
    (relief,) = state.reliefs
    assert relief.measured_memory == 9 * GI and [p.memory for p in relief.evicted] == [3 * GI]
    assert EfficiencyState.from_json(state.to_json(), T0) == state
    bad = msgspec.structs.replace(relief, evicted=(msgspec.structs.replace(relief.evicted[0], memory=-2),))
    with pytest.raises(RecordsCorrupt, match=r"reliefs\[0\]\.evicted\[0\]\.memory: -2"):
        EfficiencyState.from_json(msgspec.structs.replace(state, reliefs=(bad,)).to_json(), T0)


def test_a_memory_hot_node_relieved_last_cycle_is_left_alone_while_its_reading_covers_the_pod() -> None:
    state, left = relieved()
    still = report({"a": (5_000, 9 * GI), "b": (1_000, 2 * GI)}, AFTER)  # the window still holds heavy
    snap, second, state = cycle(left, still, T0 + 86, state)
    assert second.evictions == () and node_class(second, "a") is NodeClass.NORMAL
    assert snap.load["a"].memory_usage == 6 * GI and snap.measured_memory("a") == 9 * GI
    (correction,) = second.in_flight
    assert correction.memory is not None and correction.memory.corrected == 6 * GI
    assert correction.note == (
        "relieved 86 s ago: 0.5 cores moved; reads 50.0%, expected 45.0%; "
        "memory: 3.00 GiB moved, reads 90.0%, expected 60.0% until the usage window has caught up"
    )
    assert "memory: 3.00 GiB moved" in plan_table(second, "test")
    assert plan_record(second, "test")["inFlight"][0]["memory"]["corrected"] == 6 * GI
    assert len(state.reliefs) == 1 and state.reliefs[0].result is None  # judged on the reading, not cooled yet


def test_once_the_gauge_has_caught_up_a_node_still_hot_is_relieved_again() -> None:
    state, left = relieved()
    still = report({"a": (5_000, 9 * GI), "b": (1_000, 2 * GI)}, AFTER)
    _, plan, _ = cycle(left, still, T0 + 580, state)  # 540 s after the newest sample on a minute
    assert node_class(plan, "a") is NodeClass.HOT  # the CPU correction runs on; memory reads true again
    assert [c.memory for c in plan.in_flight] == [None]


def test_the_destination_counts_the_memory_that_landed_on_it() -> None:
    state, left = relieved()
    (relief,) = state.reliefs
    landed = msgspec.structs.replace(relief.evicted[0], landed="b", replacement="default/heavy-2")
    state = msgspec.structs.replace(state, reliefs=(msgspec.structs.replace(relief, evicted=(landed,)),))
    moved = [*left, pod("heavy-2", "b", workload="cache")]
    snap, plan, _ = cycle(moved, report({"a": (5_000, 9 * GI), "b": (1_000, 2 * GI)}, AFTER), T0 + 30, state)
    assert snap.load["b"].memory_usage == 5 * GI and snap.measured_memory("b") == 2 * GI
    note = next(c.note for c in plan.in_flight if c.node == "b")
    assert "memory: 3.00 GiB landed (3.00 GiB not in the reading yet), reads 20.0%, expected 50.0%" in note


def test_an_evicted_pod_is_recorded_with_unknown_memory_when_its_node_was_read_but_it_was_not() -> None:
    usage = report({"a": (5_000, 9 * GI), "b": (1_000, 2 * GI)}, FIRST)
    snap, plan = plan_cycle(ClusterFacts(tuple(NODES), tuple(PODS)), usage, policy(LNU), T0)
    done = EvictorReport(tuple(EvictionResult(e, Outcome.EVICTED, "evicted") for e in plan.evictions))
    unread = replace(snap, pod_memory={})  # a strategy that does not weigh memory evicted it
    (relief,) = observe_cycle(EfficiencyState(), unread, plan, done, "schedule", SETTINGS).reliefs
    assert [p.memory for p in relief.evicted] == [-1]
    not_read = replace(unread, load={n: replace(load, memory_usage=None) for n, load in snap.load.items()})
    (relief,) = observe_cycle(EfficiencyState(), not_read, plan, done, "schedule", SETTINGS).reliefs
    assert [p.memory for p in relief.evicted] == [None] and relief.measured_memory is None  # memory not read


def test_an_evicted_pod_of_unknown_memory_leaves_its_nodes_memory_unknown() -> None:
    state, left = relieved()
    unknown = msgspec.structs.replace(state.reliefs[0].evicted[0], memory=-1)
    state = msgspec.structs.replace(state, reliefs=(msgspec.structs.replace(state.reliefs[0], evicted=(unknown,)),))
    snap, plan, _ = cycle(left, report({"a": (5_000, 9 * GI), "b": (1_000, 2 * GI)}, AFTER), T0 + 86, state)
    assert snap.load["a"].memory_usage is None and node_class(plan, "a") is NodeClass.UNKNOWN
    assert snap.load["a"].memory_unknown_reason == (
        "the memory of moved pod default/heavy is unknown: the reading cannot be corrected until it shows the move"
    )
    assert plan.evictions == ()
    assert "the memory of moved pod default/heavy is unknown, reads 90.0%, expected unknown" in plan.in_flight[0].note


def test_an_unknown_memory_reading_stays_unknown() -> None:
    state, left = relieved()
    snap, plan, _ = cycle(left, report({"a": (5_000, None), "b": (1_000, 2 * GI)}, AFTER), T0 + 86, state)
    assert snap.load["a"].memory_usage is None and all(c.memory is None for c in plan.in_flight)


def test_records_written_before_the_pods_memory_was_kept_correct_cpu_only() -> None:
    state, left = relieved()
    document = json.loads(state.to_json())
    for r in document["reliefs"]:
        del r["measuredMemory"]
        for p in r["evicted"]:
            del p["memory"]
    old = EfficiencyState.from_json(json.dumps(document), T0)
    _, plan, _ = cycle(left, report({"a": (5_000, 9 * GI), "b": (1_000, 2 * GI)}, AFTER), T0 + 86, old)
    (correction,) = plan.in_flight
    assert correction.memory is None and correction.corrected_m == 4_500
    assert node_class(plan, "a") is NodeClass.HOT  # memory still read as it is


def test_memory_is_corrected_when_cpu_is_summed_from_the_pods() -> None:
    state, left = relieved()
    summed = msgspec.structs.replace(
        report({"a": (5_000, 9 * GI), "b": (1_000, 2 * GI)}, AFTER), node_cpu_m={}, node_from_pods=True
    )
    snap, plan, _ = cycle(left, summed, T0 + 86, state)
    (correction,) = plan.in_flight
    assert correction.flight is None and correction.measured_m == correction.corrected_m == 4_000
    assert correction.memory is not None and snap.load["a"].memory_usage == 6 * GI
    assert correction.note.startswith("relieved 86 s ago: memory: 3.00 GiB moved, reads 90.0%, expected 60.0%")
    assert plan_record(plan, "test")["inFlight"][0]["leftM"] is None
