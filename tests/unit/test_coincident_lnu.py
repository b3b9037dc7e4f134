"""Predictive LowNodeUtilization on coincident peaks: the pods that make a node's predicted peak leave it,
destinations stay under their predicted target with the pod, and a reactive strategy after it in the same
cycle never takes a node it keeps under target past that target."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from types import MappingProxyType
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rebalancer.actions.guard.decide import guarded_nodes
from rebalancer.domain.model import ClusterFacts, Node, Pod, PodKey, UsageReport
from rebalancer.domain.settings.predictor import HistorySettings, PredictorSettings
from rebalancer.planning.plan import EvictionPlan, NodeClass
from rebalancer.planning.predict.node_peak import PeakBook
from rebalancer.planning.predicted import PredictedLoad, Successors
from rebalancer.planning.snapshot import ClusterSnapshot
from rebalancer.policy import parse_policy
from rebalancer.policy.cycle import plan_cycle
from tests.builders import budget, node, pod, usage

DAYS, BUCKETS = 8, 24
PREDICTOR = PredictorSettings(days=DAYS, aggregation="max_daily", profile_buckets=BUCKETS)
NOW = 1_700_000_000.0


def hours(level: float, at: range, base: float = 0.0) -> np.ndarray:
    """A (days, buckets) profile: ``level`` in the hours ``at`` every day, ``base`` otherwise."""
    day = np.full(BUCKETS, base, dtype=np.float32)
    day[list(at)] = level
    return np.tile(day, (DAYS, 1)).astype(np.float32)


def load(
    nodes: list[Node], pods: dict[PodKey, tuple[str, np.ndarray]], successor: dict[str, float] | None = None
) -> PredictedLoad:
    """The predicted load a coincident prediction gives: each node's peak from the book, each pod's own.
    Each pod's workload has one more pod with history elsewhere, at ``successor[name]`` (default: the pod's
    own peak): what the pod's replacement is predicted at."""
    book = PeakBook(PREDICTOR, BUCKETS, {n.name: 0.0 for n in nodes})
    for key, (where, profile) in pods.items():
        book.add(key, where, profile)
    peaks = {n.name: round(found[0]) for n in nodes if (found := book.peak(n.name)) is not None}
    own = {key: round(float(profile.max())) for key, (_, profile) in pods.items()}
    levels = {f"w-{key[1]}": {("other", key[1]): (successor or {}).get(key[1], float(own[key]))} for key in pods}
    successors = Successors(MappingProxyType({key: f"w-{key[1]}" for key in pods}), MappingProxyType(levels), 0.75)
    return PredictedLoad(
        MappingProxyType(peaks), MappingProxyType({}), MappingProxyType(own), None, "test", book, successors=successors
    )


STRATEGY = """
  - kind: LowNodeUtilization
    thresholds: {{cpu: 20}}
    targetThresholds: {{cpu: 70}}
    classifyBy: predicted
    predicted: {{thresholds: {{cpu: 50}}, targetThresholds: {{cpu: 70}}}}
    predictPlacement: {placement}
    maxNoOfPodsToEvictPerNode: {cap}{extra}
"""
REACTIVE = """
  - kind: LowNodeUtilization
    thresholds: {cpu: 30}
    targetThresholds: {cpu: 60}
    predictPlacement: false
"""


def run(*args: Any, **kwargs: Any) -> EvictionPlan:
    """:func:`cycle`'s plan."""
    return cycle(*args, **kwargs)[1]


def cycle(
    nodes: list[Node],
    pods: list[Pod],
    report: UsageReport,
    predicted: PredictedLoad,
    *,
    reactive: bool = False,
    placement: bool = False,
    cap: int = 3,
    budgets: tuple = (),
    before_peak: str | None = None,
    at: float = NOW,
) -> tuple[ClusterSnapshot, EvictionPlan]:
    extra = f"\n    beforePeak: {before_peak}" if before_peak else ""
    strategy = STRATEGY.format(placement=str(placement).lower(), cap=cap, extra=extra)
    text = "strategies:" + strategy + (REACTIVE if reactive else "")
    facts = ClusterFacts(tuple(nodes), tuple(pods), tuple(budgets))
    return plan_cycle(facts, report, parse_policy(text), at, None, predicted)


def final_peaks(predicted: PredictedLoad, plan: EvictionPlan) -> PredictedLoad:
    after = predicted
    for e in plan.evictions:
        after = after.moved(e.key, e.node, e.room_on)
    return after


DAYTIME, NIGHT = range(8, 18), range(0, 7)


def test_the_pods_that_make_the_peak_leave_and_the_others_stay() -> None:
    # busy peaks at 80% in the day (two 4000m day pods); the night pod's 5000m never meets them
    nodes = [node("busy"), node("a-day-node"), node("z-night-node")]
    pods = [pod("day1", "busy"), pod("day2", "busy"), pod("night", "busy"), pod("office", "a-day-node"),
            pod("owl", "z-night-node")]  # fmt: skip
    profiles = {
        ("default", "day1"): ("busy", hours(4000, DAYTIME)),
        ("default", "day2"): ("busy", hours(4000, DAYTIME)),
        ("default", "night"): ("busy", hours(5000, NIGHT)),
        ("default", "office"): ("a-day-node", hours(3200, DAYTIME)),
        ("default", "owl"): ("z-night-node", hours(2500, NIGHT)),
    }
    predicted = load(nodes, profiles)
    assert predicted.node_cpu_m["busy"] == 8000
    report = usage({"busy": 3000, "a-day-node": 1000, "z-night-node": 1000},
                   {"day1": 1000, "day2": 1000, "night": 1000, "office": 500, "owl": 500})  # fmt: skip
    plan = run(nodes, pods, report, predicted)
    [eviction] = plan.evictions
    assert eviction.name in ("day1", "day2")
    # a-day-node lacks the room for its 4000m peak (3800m); on z-night-node it peaks at 4000m
    assert eviction.room_on == "z-night-node"
    night = next(d for d in plan.results[0].pod_decisions if d.name == "night")
    assert not night.chosen and "does not make the node's predicted peak" in night.reason
    after = final_peaks(predicted, plan)
    assert after.node_cpu_m["busy"] == 5000 and after.node_cpu_m["z-night-node"] == 4000


def test_a_reactive_strategy_after_it_keeps_the_relieved_nodes_under_their_predicted_target() -> None:
    # hot-now is hot by its current usage only; its day pod would take day-node's predicted peak to 80%
    nodes = [node("hot-now"), node("day-node")]
    pods = [pod("sunny", "hot-now"), pod("office", "day-node")]
    profiles = {
        ("default", "sunny"): ("hot-now", hours(4000, DAYTIME)),
        ("default", "office"): ("day-node", hours(4000, DAYTIME)),
    }
    report = usage({"hot-now": 8000, "day-node": 1000}, {"sunny": 4000, "office": 1000})
    alone = plan_cycle(
        ClusterFacts(tuple(nodes), tuple(pods), ()),
        report,
        parse_policy("strategies:" + REACTIVE),
        NOW,
        None,
        load(nodes, profiles),
    )[1]
    assert [e.name for e in alone.evictions] == ["sunny"]  # without a predictive strategy it would move
    plan = run(nodes, pods, report, load(nodes, profiles), reactive=True)
    assert not plan.evictions
    assert "predicted peak would reach 8.000 cores" in next(d.reason for d in plan.results[1].pod_decisions)


def test_a_destination_is_judged_with_what_the_pods_replacement_will_be_predicted_at() -> None:
    # the day pods' own hourly means peak at 4000m, but their workload's other pod is predicted at 5000m, and
    # so will a replacement be: on a-day-node (2500m by day) it makes 7500m, over the 7000m target, and the
    # next prediction would move it again; z-night-node (6500m at night) has no room for either
    nodes = [node("busy"), node("a-day-node"), node("z-night-node")]
    pods = [pod("day1", "busy"), pod("day2", "busy"), pod("office", "a-day-node"), pod("owl", "z-night-node")]
    profiles = {
        ("default", "day1"): ("busy", hours(4000, DAYTIME)),
        ("default", "day2"): ("busy", hours(4000, DAYTIME)),
        ("default", "office"): ("a-day-node", hours(2500, DAYTIME)),
        ("default", "owl"): ("z-night-node", hours(6500, NIGHT)),
    }
    report = usage({"busy": 3000, "a-day-node": 1000, "z-night-node": 1000},
                   {"day1": 1000, "day2": 1000, "office": 500, "owl": 500})  # fmt: skip
    # with the pods' own profiles a-day-node would take either day pod (2500m + 4000m = 6500m)
    assert [e.room_on for e in run(nodes, pods, report, load(nodes, profiles)).evictions] == ["a-day-node"]
    predicted = load(nodes, profiles, successor={"day1": 5000, "day2": 5000})
    plan = run(nodes, pods, report, predicted)
    assert not plan.evictions
    reasons = {d.reason for d in plan.results[0].pod_decisions}
    assert "a-day-node's predicted peak would reach 7.500 cores with it > 7.000 cores (kept under target)" in reasons


def test_a_pod_whose_replacement_would_be_predicted_from_its_request_stays() -> None:
    nodes = [node("busy"), node("idle")]
    pods = [pod("day1", "busy"), pod("day2", "busy")]
    profiles = {
        ("default", "day1"): ("busy", hours(4000, DAYTIME)),
        ("default", "day2"): ("busy", hours(4000, DAYTIME)),
    }
    predicted = load(nodes, profiles)
    predicted = replace(predicted, successors=Successors(MappingProxyType({}), MappingProxyType({}), 0.75))
    plan = run(nodes, pods, usage({"busy": 3000, "idle": 0}, {"day1": 1000, "day2": 1000}), predicted)
    assert not plan.evictions
    assert all("predicted from its request" in d.reason for d in plan.results[0].pod_decisions)


SEVEN_AM = NOW - NOW % 86_400 + 7 * 3600  # the day pods' peak begins at 08:00 UTC


def test_before_peak_relieves_a_node_only_ahead_of_its_peak_and_nothing_marks_it_hot_before() -> None:
    nodes = [node("busy"), node("idle")]
    pods = [pod("day1", "busy"), pod("day2", "busy")]
    profiles = {
        ("default", "day1"): ("busy", hours(4000, DAYTIME)),
        ("default", "day2"): ("busy", hours(4000, DAYTIME)),
    }
    report = usage({"busy": 3000, "idle": 0}, {"day1": 1000, "day2": 1000})
    for at in (SEVEN_AM - 3 * 3600, SEVEN_AM + 11 * 3600):  # 04:00, 18:00 (after the 08:00-18:00 peak)
        snapshot, plan = cycle(nodes, pods, report, load(nodes, profiles), before_peak="2h", at=at)
        assert not plan.evictions
        [busy] = [d for d in plan.results[0].node_decisions if d.node == "busy"]
        assert busy.node_class is NodeClass.NORMAL and "relieved from beforePeak 2h00m ahead" in busy.reason
        assert not [g for g in guarded_nodes(snapshot, plan, ()) if g.node_class is NodeClass.HOT]
    for at in (SEVEN_AM, SEVEN_AM + 5400):  # within 2 hours of its peak hour (08:00-09:00), and during it
        [eviction] = run(nodes, pods, report, load(nodes, profiles), before_peak="2h", at=at).evictions
        assert eviction.room_on == "idle"
    assert run(nodes, pods, report, load(nodes, profiles)).evictions  # without beforePeak: whenever predicted


@pytest.mark.parametrize(
    ("day", "hours_until"),
    [("2026-03-28", 3.0), ("2026-03-29", 2.0), ("2026-10-25", 4.0)],  # plain, 23-hour and 25-hour days
)
def test_the_time_until_a_peak_counts_the_clock_change_between(day: str, hours_until: float) -> None:
    """At 01:00 in Amsterdam, a peak at 04:00 local is 3 hours away, 2 on the night the clocks go forward
    and 4 on the night they go back: beforePeak counts real time."""
    predictor = PREDICTOR.model_copy(update={"history": HistorySettings(time_zone="Europe/Amsterdam")})
    book = PeakBook(predictor, BUCKETS, {"n": 0.0})
    book.add(("default", "p"), "n", hours(1000, range(4, 5), base=100))
    at = datetime.fromisoformat(f"{day}T01:00").replace(tzinfo=ZoneInfo("Europe/Amsterdam")).timestamp()
    assert PredictedLoad(book=book).until_peak("n", at) == hours_until * 3600


def profile_strategy() -> st.SearchStrategy[np.ndarray]:
    return st.tuples(st.integers(0, 4000), st.integers(0, BUCKETS - 1), st.integers(1, 12), st.integers(0, 800)).map(
        lambda t: hours(t[0], range(t[1], min(BUCKETS, t[1] + t[2])), t[3])
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    layout=st.lists(st.tuples(st.integers(0, 5), profile_strategy(), st.booleans()), min_size=2, max_size=24),
    placement=st.booleans(),
    cap=st.integers(1, 3),
    allowed=st.integers(0, 3),
)
def test_a_plan_keeps_destinations_under_target_protected_pods_and_budgets(
    layout: list[tuple[int, np.ndarray, bool]], placement: bool, cap: int, allowed: int
) -> None:
    nodes = [node(f"n{i}") for i in range(6)]
    pods, profiles, pod_usage = [], {}, {}
    for i, (where, profile, daemon) in enumerate(layout):
        name = f"p{i}"
        owner = {"owner_kind": "DaemonSet", "kind": "DaemonSet"} if daemon else {}
        pods.append(pod(name, f"n{where}", workload=f"w{i % 4}", labels={"app": f"w{i % 4}"}, **owner))
        profiles[("default", name)] = (f"n{where}", profile)
        pod_usage[name] = max(1, round(float(profile.max()) / 2))
    node_usage = {n.name: sum(u for p, u in pod_usage.items() if profiles[("default", p)][0] == n.name) for n in nodes}
    predicted = load(nodes, profiles)
    pdb = budget("w0", {"app": "w0"}, allowed)
    plan = run(nodes, pods, usage(node_usage, pod_usage), predicted, placement=placement, cap=cap, budgets=(pdb,))
    after = final_peaks(predicted, plan)
    for e in plan.evictions:
        assert e.room_on is not None
        assert after.node_cpu_m[e.room_on] <= 7000, (e.room_on, after.node_cpu_m[e.room_on])
    daemons = {f"p{i}" for i, (_, _, daemon) in enumerate(layout) if daemon}
    assert not daemons & {e.name for e in plan.evictions}
    per_node: dict[str, int] = {}
    for e in plan.evictions:
        per_node[e.node] = per_node.get(e.node, 0) + 1
    assert all(count <= cap for count in per_node.values())
    assert sum(1 for e in plan.evictions if e.workload is not None and e.name in pdb_pods(pods)) <= allowed


def pdb_pods(pods: list[Pod]) -> set[str]:
    return {p.name for p in pods if p.labels.get("app") == "w0"}
