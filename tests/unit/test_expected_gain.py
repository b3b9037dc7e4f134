"""The expected gain of a planned eviction (strategies/expected_gain.py) and LowNodeUtilization's
minExpectedGain: the arithmetic on the current reading and on daily profiles, the refusals whatever the
threshold, and what the plan says of a pod not worth moving."""

from __future__ import annotations

from types import MappingProxyType

import numpy as np
import pytest

from rebalancer.app.render import plan_table
from rebalancer.domain.errors import ConfigError
from rebalancer.domain.model import ClusterFacts, Node, Pod, UsageReport
from rebalancer.planning.plan import EvictionPlan, Unrelieved
from rebalancer.planning.predicted import PredictedLoad
from rebalancer.policy import parse_policy
from rebalancer.policy.cycle import plan_cycle
from strategies.expected_gain import (
    RELIEF_MINUTES,
    CurrentMove,
    ProfileMove,
    current_gain,
    horizon,
    hot_minutes,
    profile_gain,
)
from tests.builders import node, pod, usage
from tests.unit.test_coincident_lnu import DAYTIME, hours, load

NOW = 1_700_000_000.0


def test_a_pod_covering_the_excess_saves_the_whole_relief() -> None:
    gain = current_gain(CurrentMove(2500, 9000, 7000, 1000, 7000))
    assert (gain.saved, gain.added, gain.net) == (RELIEF_MINUTES, 0.0, RELIEF_MINUTES)


def test_a_pod_covering_part_of_the_excess_saves_its_share() -> None:
    gain = current_gain(CurrentMove(1000, 10_000, 7000, 1000, 7000))
    assert gain.saved == pytest.approx(RELIEF_MINUTES / 3)


def test_the_share_is_of_the_excess_down_to_the_relief_level() -> None:
    # 8500m on a 7000m target relieved down to 6000m: the 1000m pod covers 1000 of the 2500m excess
    assert current_gain(CurrentMove(1000, 8500, 7000, 1000, 7000, source_relief_m=6000)).saved == pytest.approx(12.0)
    assert current_gain(CurrentMove(1000, 8500, 7000, 1000, 7000)).saved == pytest.approx(20.0)  # to target
    # what cannot leave keeps it over the target, not over the relief level: 6500m saves its share still
    floor = CurrentMove(1000, 8500, 7000, 1000, 7000, source_floor_m=6500, source_relief_m=6000)
    assert current_gain(floor).saved == pytest.approx(12.0)


def test_a_destination_its_predicted_peak_takes_over_target_costs_the_relief() -> None:
    # 1000m now fits the destination (6500m of a 7000m target), its 2000m predicted peak does not
    assert current_gain(CurrentMove(1000, 8000, 7000, 5500, 7000)).added == 0.0
    gain = current_gain(CurrentMove(1000, 8000, 7000, 5500, 7000, pod_peak_m=2000))
    assert gain.added == RELIEF_MINUTES and gain.net == 0.0
    assert current_gain(CurrentMove(1000, 8000, 7000, None, 7000)).added == RELIEF_MINUTES  # unknown: no credit


def test_hot_minutes_count_each_bucket_by_the_share_of_days_over_target() -> None:
    total = np.zeros((4, 24))
    total[:, 10] = 8000  # every day
    total[:2, 11] = 8000  # half the days
    assert hot_minutes(total, 7000, (10, 11, 12), 60.0) == 60.0 + 30.0
    assert hot_minutes(total, 7000, (), 60.0) == 0.0


def test_the_horizon_wraps_past_midnight() -> None:
    assert horizon(22, 24, hours=4) == (22, 23, 0, 1)
    assert horizon(10, 48, hours=2) == (10, 11, 12, 13)


def day(levels: dict[int, float], days: int = 4) -> np.ndarray:
    profile = np.zeros((days, 24))
    for hour, level in levels.items():
        profile[:, hour] = level
    return profile


def test_profile_gain_counts_only_the_hours_the_move_changes_on_both_nodes() -> None:
    # the source is hot 10:00-12:00; without the pod only at 11:00 (another pod keeps it hot then anyway)
    source = day({10: 8000, 11: 9500})
    moved = day({10: 2000, 11: 2000})
    # the destination turns hot at 11:00 with the pod
    destination = day({10: 3000, 11: 5500})
    move = ProfileMove(source, moved, destination, moved, 7000, 7000)
    gain = profile_gain(move, start=9)
    assert (gain.saved, gain.added) == (60.0, 60.0)
    assert gain.net == 0.0
    assert profile_gain(move, start=12).saved == 0.0  # the peak hours are behind, beyond the 6-hour horizon


POLICY = """
strategies:
  - kind: LowNodeUtilization
    thresholds: {{cpu: 20}}
    targetThresholds: {{cpu: 70}}
    predictPlacement: false{extra}
"""


def plan(
    nodes: list[Node], pods: list[Pod], report: UsageReport, extra: str = "", predicted: PredictedLoad | None = None
) -> EvictionPlan:
    facts = ClusterFacts(tuple(nodes), tuple(pods), ())
    policy = parse_policy(POLICY.format(extra=extra))
    return plan_cycle(facts, report, policy, NOW, None, predicted)[1]


def reasons(result: EvictionPlan) -> dict[str, str]:
    return {d.name: d.reason for d in result.results[0].pod_decisions if not d.chosen}


def gain_of(minimum: float) -> str:
    return f"\n    minExpectedGain: {minimum:g}"


def test_a_pod_taking_a_small_share_of_the_excess_is_not_worth_moving() -> None:
    # 3000m over target; the only candidates are 1000m pods: each saves a third of the relief (10 min)
    nodes = [node("hot"), node("cold")]
    pods = [pod(f"p{i}", "hot", cpu_request_m=1000) for i in range(10)]
    report = usage({"hot": 10_000, "cold": 1000}, {f"p{i}": 1000 for i in range(10)})
    assert len(plan(nodes, pods, report).evictions) == 3
    assert len(plan(nodes, pods, report, gain_of(10)).evictions) == 3  # the last one covers the rest: 30 min
    refused = plan(nodes, pods, report, gain_of(15))
    assert refused.evictions == ()
    assert reasons(refused)["p0"].startswith(
        "not worth moving: expected gain 10.0 min (10.0 saved on the source, 0.0 added on the destination; "
        "current usage, relief assumed to last 30 min) < minExpectedGain 15 min"
    )
    assert refused.results[0].unrelieved == {"hot": Unrelieved.NOT_WORTH}
    shown = plan_table(refused, "test")  # what `rebalancer plan` prints
    assert "pods passed over" in shown and "not worth moving: expected gain 10.0 min" in shown


def test_a_pod_whose_burst_is_the_node_excess_is_not_moved_whatever_the_threshold() -> None:
    # bursty runs 2500m over its 500m request; without that burst the node (9000m, target 7000m) is under target
    nodes = [node("hot"), node("cold")]
    pods = [pod("bursty", "hot", cpu_request_m=500), pod("steady", "hot", cpu_request_m=1500)]
    report = usage({"hot": 9000, "cold": 1000}, {"bursty": 3000, "steady": 1500})
    assert [e.name for e in plan(nodes, pods, report).evictions] == ["bursty"]
    refused = plan(nodes, pods, report, gain_of(0))
    assert "bursty" not in [e.name for e in refused.evictions]
    assert reasons(refused)["bursty"].startswith("not worth moving: its burst follows it: usage 3.000 cores is 2.500")
    # a burst smaller than the excess leaves the node hot without it: the pod may go
    calmer = [pod("bursty", "hot", cpu_request_m=1500), pod("steady", "hot", cpu_request_m=1500)]
    assert [e.name for e in plan(nodes, calmer, report, gain_of(0)).evictions] == ["bursty"]


def test_a_pod_hot_by_itself_on_every_receiver_is_not_moved() -> None:
    # its current 2500m fits cold, but its predicted peak (8000m) is over every receiver's 7000m target
    nodes = [node("hot"), node("cold")]
    pods = [pod("giant", "hot", cpu_request_m=2500)]
    report = usage({"hot": 9000, "cold": 1000}, {"giant": 2500})
    predicted = PredictedLoad(pod_cpu_m=MappingProxyType({("default", "giant"): 8000}))
    assert [e.name for e in plan(nodes, pods, report, predicted=predicted).evictions] == ["giant"]
    refused = plan(nodes, pods, report, gain_of(0), predicted)
    assert refused.evictions == ()
    assert reasons(refused)["giant"].startswith(
        "not worth moving: hot by itself: its predicted peak 8.000 cores > 7.000 cores"
    )
    # a larger receiver could take it: it is moved there
    bigger = [node("hot"), node("cold"), node("large", 20_000)]
    report = usage({"hot": 9000, "cold": 1000, "large": 1000}, {"giant": 2500})
    assert [e.name for e in plan(bigger, pods, report, gain_of(0), predicted).evictions] == ["giant"]


@pytest.mark.parametrize(
    ("value", "message"),
    [("-1", "greater than or equal to 0"), (".nan", "finite number"), ("lots", "valid number")],
)
def test_min_expected_gain_is_validated(value: str, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_policy(POLICY.format(extra=f"\n    minExpectedGain: {value}"))
    assert "strategies.0.minExpectedGain" in str(error.value) and message in str(error.value)


COINCIDENT = """
strategies:
  - kind: LowNodeUtilization
    thresholds: {cpu: 20}
    targetThresholds: {cpu: 70}
    classifyBy: predicted
    predicted: {thresholds: {cpu: 50}, targetThresholds: {cpu: 70}}
    predictPlacement: false
    minExpectedGain: 10
"""


@pytest.mark.parametrize(("at", "moved"), [(NOW - 15 * 3600, True), (NOW, False)])
def test_on_daily_profiles_the_gain_counts_the_hours_ahead(at: float, moved: bool) -> None:
    # busy peaks at 80% from 08:00 to 18:00 UTC (two 4000m day pods); moving one leaves it at 40%. At 07:13 the
    # next 6 hours hold 5 of those hours (300 min saved); at 22:13 none: the plan waits for a cycle nearer the peak
    nodes = [node("busy"), node("night-node")]
    pods = [pod("day1", "busy"), pod("day2", "busy"), pod("owl", "night-node")]
    profiles = {
        ("default", "day1"): ("busy", hours(4000, DAYTIME)),
        ("default", "day2"): ("busy", hours(4000, DAYTIME)),
        ("default", "owl"): ("night-node", hours(2500, range(0, 7))),
    }
    report = usage({"busy": 3000, "night-node": 1000}, {"day1": 1000, "day2": 1000, "owl": 500})
    facts = ClusterFacts(tuple(nodes), tuple(pods), ())
    result = plan_cycle(facts, report, parse_policy(COINCIDENT), at, None, load(nodes, profiles))[1]
    if moved:
        assert [e.room_on for e in result.evictions] == ["night-node"]
    else:
        assert result.evictions == ()
        assert reasons(result)["day1"].startswith(
            "not worth moving: expected gain 0.0 min (0.0 saved on the source, 0.0 added on the destination; "
            "daily profiles, the next 6 h)"
        )


def test_a_node_its_staying_pods_keep_hot_gains_nothing_from_a_move() -> None:
    # giant alone is over every receiver's target: moving small leaves the node hot anyway
    nodes = [node("hot", 16_000), node("cold", 16_000)]
    pods = [pod("giant", "hot", cpu_request_m=12_000), pod("small", "hot", cpu_request_m=1500)]
    report = usage({"hot": 13_000, "cold": 1000}, {"giant": 11_500, "small": 1500})
    assert [e.name for e in plan(nodes, pods, report).evictions] == ["small"]
    refused = plan(nodes, pods, report, gain_of(0))
    assert refused.evictions == ()
    assert reasons(refused)["small"].startswith("not worth moving: expected gain 0.0 min (0.0 saved")
    assert reasons(refused)["small"].endswith("(it saves nothing)")
    assert reasons(refused)["giant"].startswith("no destination has 11.500 cores")  # the room search refuses it first
    assert current_gain(CurrentMove(1500, 13_000, 11_200, 1000, 11_200, source_floor_m=11_500)).saved == 0.0


def test_a_pod_no_receiver_has_room_for_stays_and_can_keep_its_node_hot() -> None:
    # giant (11000m) is under the 11200m target but no receiver has that room: moving small leaves the node hot
    nodes = [node("hot", 16_000), node("cold", 16_000)]
    pods = [pod("giant", "hot", cpu_request_m=11_000), pod("small", "hot", cpu_request_m=1500)]
    report = usage({"hot": 13_000, "cold": 2000}, {"giant": 11_000, "small": 1500})
    assert [e.name for e in plan(nodes, pods, report).evictions] == ["small"]
    refused = plan(nodes, pods, report, gain_of(0))
    assert refused.evictions == ()
    assert reasons(refused)["small"].endswith("(it saves nothing)")
