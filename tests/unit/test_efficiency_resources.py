"""The follow-up of a relief per resource: a node relieved because memory (or pod count) was over its target
is judged on that resource; every resource over target when relieved must be under its target to count
cooled; unknown memory is unknown, never cooled and never zero; records without the resources still load
and are judged on CPU."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rebalancer.actions.evictor import EvictionResult, EvictorReport, Outcome
from rebalancer.app.cli import main
from rebalancer.app.efficiency import EfficiencyRecorder, rates_over_period
from rebalancer.domain.efficiency_records import (
    COOLED,
    NEW_PODS,
    OTHERS_GREW,
    TOO_LITTLE_MOVED,
    UNKNOWN,
    EvictedPod,
    Relief,
    ResourceAtRelief,
)
from rebalancer.domain.model import ClusterFacts, Pod, UsageReport
from rebalancer.planning.snapshot import ClusterSnapshot
from rebalancer.policy.cycle import plan_cycle
from rebalancer.records import (
    EfficiencySettings,
    EfficiencyState,
    RecordsCorrupt,
    ReferenceSettings,
    judge_followups,
    observe_cycle,
)
from rebalancer.records.render import report_record, report_table
from tests.builders import node, pod, policy
from tests.unit.eviction_doubles import MemoryStore
from tests.unit.test_memory_thresholds import report

GI = 2**30
T0 = 1_700_000_000.0
SETTINGS = EfficiencySettings(follow_up_window="15m", bounce_back_memory="6h", period="24h")
LNU = (
    "kind: LowNodeUtilization\nthresholds: {cpu: 30, memory: 40}\ntargetThresholds: {cpu: 70, memory: 80}\n"
    "predictPlacement: false\n"
)
NODES = [node("a", 10_000, memory=10 * GI), node("b", 10_000, memory=10 * GI)]
# a: CPU 50% (cool), memory 90% (hot); b cold
PODS = [pod("heavy", "a", workload="cache"), pod("light", "a", workload="api"), pod("idle", "b", workload="web")]


def snapshot_at(nodes, pods, usage: UsageReport, at: float) -> ClusterSnapshot:
    return plan_cycle(ClusterFacts(tuple(nodes), tuple(pods)), usage, policy(LNU), at)[0]


def relieved() -> tuple[EfficiencyState, list[Pod]]:
    usage = report(
        {"a": (5_000, 9 * GI), "b": (1_000, 2 * GI)},
        {"heavy": (500, 3 * GI), "light": (4_000, GI // 2), "idle": (900, GI)},
    )
    snap, plan = plan_cycle(ClusterFacts(tuple(NODES), tuple(PODS)), usage, policy(LNU), T0)
    assert [e.name for e in plan.evictions] == ["heavy"]
    done = EvictorReport(tuple(EvictionResult(e, Outcome.EVICTED, "evicted") for e in plan.evictions))
    return observe_cycle(EfficiencyState(), snap, plan, done, "schedule", SETTINGS), [PODS[1], PODS[2]]


def judged(state: EfficiencyState, pods, nodes: dict[str, tuple[int, int | None]], pod_usage, at: float) -> Relief:
    return judge_followups(state, snapshot_at(NODES, pods, report(nodes, pod_usage), at)).reliefs[0]


def test_a_memory_relief_records_memory_and_is_judged_on_it() -> None:
    state, left = relieved()
    (relief,) = state.reliefs
    assert relief.others == (ResourceAtRelief("memory", 90.0, 80.0),)
    assert relief.judged_on == (("memory", 80.0),)  # CPU was under its target: not judged on it
    assert sorted(relief.remaining_memory.values()) == [GI // 2]
    # CPU would read cooled (40% < 70%): memory still at 85% is not
    still = judged(
        state, left, {"a": (4_000, 8 * GI + GI // 2), "b": (1_500, 5 * GI)}, {"light": (4_000, GI // 2)}, T0 + 300
    )
    assert still.result is None
    cooled = judged(state, left, {"a": (4_000, 6 * GI), "b": (1_500, 5 * GI)}, {"light": (4_000, GI // 2)}, T0 + 300)
    assert cooled.result == COOLED and cooled.detail == "memory 60.0% < target 80.0%"
    assert cooled.remaining is None and cooled.remaining_memory is None


def test_a_memory_relief_not_cooled_names_memory_and_why() -> None:
    state, left = relieved()
    grown = judged(
        state,
        left,
        {"a": (4_000, 9 * GI + GI // 10), "b": (1_500, 5 * GI)},
        {"light": (4_000, GI // 2 + 3 * GI)},
        T0 + 900,
    )
    assert grown.result == OTHERS_GREW
    assert grown.detail.startswith("memory 91.0% >= target 80.0%: the pods that stayed grew 3.00 GiB")
    stranger = msgspec.structs.replace(pod("new", "a", workload="batch"), created=T0 + 60)
    new = judged(
        state, [*left, stranger], {"a": (4_000, 9 * GI), "b": (1_500, 5 * GI)},
        {"light": (4_000, GI // 2), "new": (100, 3 * GI)}, T0 + 900,
    )  # fmt: skip
    assert new.result == NEW_PODS and "use 3.00 GiB" in new.detail
    same = judged(state, left, {"a": (4_000, 9 * GI), "b": (1_500, 5 * GI)}, {"light": (4_000, GI // 2)}, T0 + 900)
    assert same.result == TOO_LITTLE_MOVED


def test_unknown_memory_is_never_cooled_and_is_judged_unknown_at_the_close() -> None:
    state, left = relieved()
    missing = {"a": (2_000, None), "b": (1_500, 5 * GI)}
    assert judged(state, left, missing, {"light": (2_000, GI // 2)}, T0 + 300).result is None
    closed = judged(state, left, missing, {"light": (2_000, GI // 2)}, T0 + 900)
    assert closed.result == UNKNOWN
    assert closed.detail == "usage unknown when the window closed: memory: no memory usage data for this node"
    assert closed.usage_pct_after == 20.0  # CPU as read; memory stays unknown, not zero


def test_every_resource_over_target_must_fall_under_it() -> None:
    relief = _relief(
        usage_pct=90.0, others=(ResourceAtRelief("memory", 95.0, 80.0), ResourceAtRelief("pods", 10.0, 80.0))
    )
    assert relief.judged_on == (("cpu", 70.0), ("memory", 80.0))  # pods was under its target
    state = EfficiencyState(reliefs=(relief,))
    cpu_only = judge_followups(state, _snap(cpu_m=5_000, memory=9 * GI, at=T0 + 900)).reliefs[0]
    assert cpu_only.result == TOO_LITTLE_MOVED and cpu_only.detail.startswith("memory 90.0% >= target 80.0%:")
    both = judge_followups(state, _snap(cpu_m=5_000, memory=5 * GI, at=T0 + 300)).reliefs[0]
    assert both.result == COOLED and both.detail == "CPU 50.0% < target 70.0%; memory 50.0% < target 80.0%"
    neither = judge_followups(state, _snap(cpu_m=8_000, memory=9 * GI, at=T0 + 900)).reliefs[0]
    assert neither.detail.startswith("CPU 80.0% >= target 70.0%, memory 90.0% >= target 80.0%:")


def test_pod_count_relief_is_judged_on_the_pods_bound() -> None:
    relief = _relief(usage_pct=50.0, others=(ResourceAtRelief("pods", 90.0, 80.0),), max_pods=10)
    state = EfficiencyState(reliefs=(relief,))
    full = [pod(f"p{i}", "a") for i in range(9)]
    still = judge_followups(state, _snap(cpu_m=1_000, memory=GI, at=T0 + 900, pods=full, max_pods=10)).reliefs[0]
    assert still.result == NEW_PODS and still.detail.startswith("pods 90.0% >= target 80.0%: 9 pod(s)")
    fewer = judge_followups(state, _snap(cpu_m=1_000, memory=GI, at=T0 + 300, pods=full[:7], max_pods=10)).reliefs[0]
    assert fewer.result == COOLED and fewer.detail == "pods 70.0% < target 80.0%"


def test_old_records_without_the_resources_load_and_are_judged_on_cpu() -> None:
    old = {
        "schema": "rebalancer.io/efficiency-records", "version": 1, "sightings": [], "bounceBacks": [], "cycles": [],
        "reliefs": [{
            "node": "a", "pool": "default", "strategy": "LowNodeUtilization", "at": T0, "targetPct": 70.0,
            "usagePct": 90.0, "deadline": T0 + 900, "remaining": {}, "result": None, "judgedAt": None,
            "usagePctAfter": None, "detail": "", "measuredM": 9000, "coldPct": 30.0, "repeat": False,
            "evicted": [{"namespace": "default", "name": "x", "workload": None, "usageM": 2000, "created": 0.0,
                         "predicted": None, "landed": None, "replacement": None}],
        }],
    }  # fmt: skip
    state = EfficiencyState.from_json(json.dumps(old), T0)
    (relief,) = state.reliefs
    assert relief.others == () and relief.remaining_memory is None and relief.judged_on == (("cpu", 70.0),)
    # memory over target now does not matter: the relief was made (and is judged) on CPU
    cooled = judge_followups(state, _snap(cpu_m=5_000, memory=None, at=T0 + 300)).reliefs[0]
    assert cooled.result == COOLED and cooled.detail == "CPU 50.0% < target 70.0%"
    assert EfficiencyState.from_json(state.to_json(), T0) == state


def test_a_corrupt_resource_is_refused_naming_it() -> None:
    state = EfficiencyState(reliefs=(_relief(90.0, (ResourceAtRelief("gpu", 90.0, 80.0),)),))
    with pytest.raises(RecordsCorrupt, match=r"reliefs\[0\]\.others\[0\]\.resource: 'gpu'"):
        EfficiencyState.from_json(state.to_json(), T0)


@settings(max_examples=200, deadline=None)
@given(
    cpu=st.tuples(st.floats(0, 100), st.floats(1, 99), st.one_of(st.none(), st.floats(0, 100))),
    memory=st.tuples(st.floats(0, 100), st.floats(1, 99), st.one_of(st.none(), st.floats(0, 100))),
    pods=st.tuples(st.floats(0, 100), st.floats(1, 99), st.integers(0, 20)),
    closed=st.booleans(),
)
def test_never_cooled_while_a_resource_over_target_is_still_over_or_unknown(cpu, memory, pods, closed) -> None:
    (cpu_at, cpu_target, cpu_after), (mem_at, mem_target, mem_after), (pods_at, pods_target, count) = cpu, memory, pods
    others = (ResourceAtRelief("memory", mem_at, mem_target), ResourceAtRelief("pods", pods_at, pods_target))
    relief = _relief(cpu_at, others, target=cpu_target, max_pods=20)
    memory_bytes = None if mem_after is None else int(mem_after / 100 * 10 * GI)
    cpu_m = None if cpu_after is None else int(cpu_after * 100)
    snap = _snap(cpu_m=cpu_m, memory=memory_bytes, at=T0 + (900 if closed else 300), pods=[pod(f"p{i}", "a") for i in range(count)], max_pods=20)  # fmt: skip
    after = judge_followups(EfficiencyState(reliefs=(relief,)), snap).reliefs[0]
    now = {
        "cpu": None if cpu_m is None else 100.0 * cpu_m / 10_000,
        "memory": None if memory_bytes is None else 100.0 * memory_bytes / (10 * GI),
        "pods": 100.0 * count / 20,
    }
    if cpu_m is None:
        now["memory"] = None  # the memory reading goes with the CPU one
    judged_on = relief.judged_on
    assert judged_on, "every relief is judged on some resource"
    for resource, _ in judged_on:
        assert resource == "cpu" or next(o for o in others if o.resource == resource).over
    if all(now[r] is not None and now[r] < t for r, t in judged_on):
        assert after.result == COOLED
    else:
        assert after.result != COOLED
        assert (after.result is None) is not closed


def _relief(
    usage_pct: float, others: tuple[ResourceAtRelief, ...], *, target: float = 70.0, max_pods: int = 110
) -> Relief:
    return Relief(
        node="a", pool="default", strategy="LowNodeUtilization", at=T0, target_pct=target, usage_pct=usage_pct,
        evicted=(EvictedPod("default", "x", None, 1000),), deadline=T0 + 900, remaining={}, others=others,
    )  # fmt: skip


def _snap(*, cpu_m: int | None, memory: int | None, at: float, pods=(), max_pods: int = 110) -> ClusterSnapshot:
    nodes = [node("a", 10_000, memory=10 * GI, max_pods=max_pods)]
    usage = UsageReport(
        node_cpu_m={} if cpu_m is None else {"a": cpu_m},
        pod_cpu_m={("default", p.name): 10 for p in pods},
        node_memory={} if memory is None else {"a": memory},
        pod_memory={("default", p.name): 1 for p in pods},
    )
    return snapshot_at(nodes, list(pods), usage, at)


# -- which reference the discovery rate is measured against --------------------------------------------


def test_check_config_and_report_say_which_reference_is_in_use(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    memory = tmp_path / "memory.yaml"
    memory.write_text(f"strategies:\n- {LNU.replace(chr(10), chr(10) + '  ').strip()}\n")
    cpu = tmp_path / "cpu.yaml"
    cpu.write_text("strategies:\n- {kind: LowNodeUtilization, thresholds: {cpu: 30}, targetThresholds: {cpu: 70}}\n")
    assert main(["check-config", str(memory), str(cpu)]) == 0
    out = capsys.readouterr().out
    assert (
        f"{memory}: ok (LowNodeUtilization)\n  efficiency reference: efficiency.reference.query or memoryQuery" in out
    )
    assert (
        f"{cpu}: ok (LowNodeUtilization)\n  efficiency reference: efficiency.reference.query alone (memoryQuery unused"
        in out
    )
    assert main(["check-config", "-o", "json", str(memory)]) == 0
    (checked,) = json.loads(capsys.readouterr().out)["files"]
    assert checked["reference"].startswith("efficiency.reference.query or memoryQuery: hot by either")

    described = policy(LNU).efficiency.reference.describe(memory=policy(LNU).reads_memory)
    report = rates_over_period(EfficiencyState(), SETTINGS, {}, T0, lambda _s, _e: {}, described)
    assert f"reference: {described}\n" in report_table(report)
    assert report_record(report)["referenceDefinition"] == described
    off = ReferenceSettings(query=None).describe(memory=True)
    assert off == "none: efficiency.reference.query is null"


# -- a follow-up judged late (CronJob) ----------------------------------------------------------------


def test_a_late_follow_up_of_a_memory_relief_reads_the_working_set_at_its_close() -> None:
    state, left = relieved()
    (relief,) = state.reliefs
    store = MemoryStore(state.to_json())
    recorder = EfficiencyRecorder(store, SETTINGS, policy(LNU).pools)
    asked: list[tuple[float, frozenset[str], bool]] = []

    def usage_at(at: float, nodes: frozenset[str], *, memory: bool = False) -> UsageReport:
        asked.append((at, nodes, memory))
        cool = {"a": (4_000, 6 * GI if memory else None), "b": (1_500, 5 * GI)}  # memory only when asked
        return report(cool, {"light": (4_000, GI // 2)})

    later = relief.deadline + 3600  # nothing ran at the window's close
    hot_again = report({"a": (4_000, 9 * GI), "b": (1_500, 5 * GI)}, {"light": (4_000, GI // 2)})
    facts = ClusterFacts(tuple(NODES), tuple(left))
    snap, plan = plan_cycle(facts, hot_again, policy(LNU), later)
    recorded = recorder.record(snap, plan, EvictorReport(()), "schedule", facts, usage_at)

    assert asked == [(relief.deadline, frozenset({"a"}), True)]
    (judged_late,) = recorded.judged
    assert judged_late.result == COOLED and judged_late.judged_at == relief.deadline
    assert judged_late.detail == "memory 60.0% < target 80.0%"


def test_a_dry_run_decides_no_follow_up_it_does_not_record() -> None:
    state, left = relieved()
    cooled = report({"a": (4_000, 6 * GI), "b": (1_500, 5 * GI)}, {"light": (4_000, GI // 2)})
    facts = ClusterFacts(tuple(NODES), tuple(left))
    store = MemoryStore(state.to_json())
    dry = EfficiencyRecorder(store, SETTINGS, policy(LNU).pools, write=False)
    for minutes in (5, 10):  # the records stay as they were: each dry cycle judges the same relief again
        snap, plan = plan_cycle(facts, cooled, policy(LNU), T0 + 60 * minutes)
        recorded = dry.record(snap, plan, EvictorReport(()), "schedule", facts, None)
        assert recorded.state is not None and recorded.state.reliefs[0].result == COOLED  # what it would record
        assert recorded.judged == ()  # not counted as decided, so serve's follow-up counters count it once
    assert store.saves == 0
    wet = EfficiencyRecorder(store, SETTINGS, policy(LNU).pools)
    snap, plan = plan_cycle(facts, cooled, policy(LNU), T0 + 15 * 60)
    (judged_once,) = wet.record(snap, plan, EvictorReport(()), "schedule", facts, None).judged
    assert judged_once.result == COOLED and store.saves == 1
