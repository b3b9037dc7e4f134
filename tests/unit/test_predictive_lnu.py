"""LowNodeUtilization with classifyBy predicted / max: the predicted next peak drives classes, pod choice and
room; unknown predictions stay unknown; a failed prediction evicts nothing."""

from __future__ import annotations

from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rebalancer.domain.errors import ConfigError
from rebalancer.domain.model import ClusterFacts, Node, Pod, UsageReport
from rebalancer.domain.settings.predictor import PredictorSettings
from rebalancer.planning.plan import EvictionPlan, NodeClass
from rebalancer.planning.predict.history import DailyPeaks
from rebalancer.planning.predict.predictor import predict
from rebalancer.planning.predicted import PredictedLoad
from rebalancer.policy import parse_policy
from rebalancer.policy.cycle import plan_cycle
from tests.builders import node, pod, policy, usage

# predictPlacement off: NODES has one web pod on each node once peaky or steady left quiet-now, so the
# scheduler model ties quiet-now with cold and the replacement may land back (a landing risk of 50%: nothing
# would be planned).
# These tests are about classifyBy; placement prediction is tested in test_placement_prediction.py.
LNU = """
kind: LowNodeUtilization
thresholds: {{cpu: 20}}
targetThresholds: {{cpu: 70}}
classifyBy: {mode}
predictPlacement: false
"""


def lnu(mode: str) -> str:
    return LNU.format(mode=mode)


def predicted(nodes: dict[str, int], pods: dict[str, int], unknown: dict[str, str] | None = None) -> PredictedLoad:
    return PredictedLoad(
        MappingProxyType(nodes),
        MappingProxyType(unknown or {}),
        MappingProxyType({("default", k): v for k, v in pods.items()}),
        None,
        "test prediction",
    )


def run(
    nodes: list[Node], pods: list[Pod], report: UsageReport, mode: str, load: PredictedLoad | None, extra: str = ""
) -> EvictionPlan:
    facts = ClusterFacts(tuple(nodes), tuple(pods), ())
    text = lnu(mode) if not extra else lnu(mode) + extra
    return plan_cycle(facts, report, policy(text), 1_700_000_000.0, None, load)[1]


def classes(plan: EvictionPlan, index: int = 0) -> dict[str, NodeClass]:
    return {d.node: d.node_class for d in plan.results[index].node_decisions}


NODES = [node("quiet-now"), node("cold")]
PODS = [pod("peaky", "quiet-now"), pod("steady", "quiet-now"), pod("idle", "cold")]
NOW = usage({"quiet-now": 4000, "cold": 1000}, {"peaky": 500, "steady": 2000, "idle": 500})
# at the next peak quiet-now reaches 90%: peaky (4000m) alone covers the 2000m above the 70% target
PEAK = predicted({"quiet-now": 9000, "cold": 1500}, {"peaky": 4000, "steady": 1500, "idle": 1000})


def test_current_mode_ignores_the_prediction() -> None:
    plan = run(NODES, PODS, NOW, "current", PEAK)
    assert classes(plan)["quiet-now"] is NodeClass.NORMAL and not plan.evictions


def test_predicted_mode_relieves_a_node_before_its_peak_by_predicted_pod_usage() -> None:
    plan = run(NODES, PODS, NOW, "predicted", PEAK)
    assert classes(plan) == {"quiet-now": NodeClass.HOT, "cold": NodeClass.COLD}
    assert [e.name for e in plan.evictions] == ["peaky"]
    eviction = plan.evictions[0]
    assert eviction.usage_m == 4000 and eviction.room_on == "cold"
    assert "predicted peak usage 90.0% > 70.0%" in eviction.reason
    decision = next(d for d in plan.results[0].node_decisions if d.node == "quiet-now")
    assert decision.reason.startswith("predicted peak usage 90.0% > target 70.0%")


def test_max_mode_takes_the_higher_of_current_and_predicted() -> None:
    hot_now = usage({"quiet-now": 9500, "cold": 1000}, {"peaky": 500, "steady": 2000, "idle": 500})
    calm_peak = predicted({"quiet-now": 5000, "cold": 1500}, {"peaky": 2500, "steady": 3000, "idle": 1000})
    assert classes(run(NODES, PODS, hot_now, "max", calm_peak))["quiet-now"] is NodeClass.HOT  # current wins
    assert classes(run(NODES, PODS, NOW, "max", PEAK))["quiet-now"] is NodeClass.HOT  # predicted wins
    plan = run(NODES, PODS, hot_now, "max", calm_peak)
    # pods weigh max(current, predicted): peaky (500m now, 2500m predicted) covers the 2500m excess exactly,
    # a closer fit than steady (3000m); by its current 500m alone it would not cover it
    assert [(e.name, e.usage_m) for e in plan.evictions] == [("peaky", 2500)]


def test_a_node_with_an_unknown_prediction_is_unknown_never_hot_or_cold() -> None:
    load = predicted({"cold": 1500}, {"idle": 1000}, {"quiet-now": "prediction unknown: no history for x"})
    for mode in ("predicted", "max"):
        plan = run(NODES, PODS, NOW, mode, load)
        decision = next(d for d in plan.results[0].node_decisions if d.node == "quiet-now")
        assert decision.node_class is NodeClass.UNKNOWN and "no history for x" in decision.reason
        assert not plan.evictions


def test_a_node_that_is_not_ready_is_unknown_whatever_its_prediction() -> None:
    # its kubelet does not answer: its reading cannot be trusted and an eviction there cannot complete
    nodes = [node("quiet-now", ready=False), node("cold")]
    for mode in ("predicted", "max"):
        plan = run(nodes, PODS, NOW, mode, PEAK)
        decision = next(d for d in plan.results[0].node_decisions if d.node == "quiet-now")
        assert decision.node_class is NodeClass.UNKNOWN and "not Ready" in decision.reason
        assert not plan.evictions


def test_a_failed_or_missing_prediction_evicts_nothing_and_says_why() -> None:
    for load, words in (
        (PredictedLoad.failed("predictor history: MetricsUnavailable: down"), "down"),
        (None, "no prediction"),
    ):
        plan = run(NODES, PODS, NOW, "predicted", load)
        assert not plan.evictions
        assert any(words in note for note in plan.results[0].notes), plan.results[0].notes


def test_room_on_a_destination_is_judged_by_its_predicted_peak() -> None:
    # cold is at 10% now but predicted at 65%: peaky (4000m) would take it to 105%, steady (1500m) to 80%
    load = predicted({"quiet-now": 9000, "cold": 6500}, {"peaky": 4000, "steady": 1500, "idle": 1000})
    nodes = [node("quiet-now"), node("cold"), node("roomy")]
    report = usage({"quiet-now": 4000, "cold": 1000, "roomy": 1000}, {"peaky": 500, "steady": 2000, "idle": 500})
    plan = run(nodes, PODS, report, "predicted", load)
    assert not plan.evictions  # cold is not cold at its peak (65% >= 20%) and roomy has no prediction
    load = predicted({"quiet-now": 9000, "cold": 1500, "roomy": 6500}, {"peaky": 4000, "steady": 1500, "idle": 1000})
    plan = run(nodes, PODS, report, "predicted", load)
    assert [(e.name, e.room_on) for e in plan.evictions] == [("peaky", "cold")]


def test_a_second_strategy_sees_the_load_the_first_one_moved() -> None:
    """Two predicted strategies in one cycle: the second plans on the predicted load after the first's moves,
    so it does not relieve quiet-now again; a current one after it sees the current usage moved."""
    second = (
        "\n  - kind: LowNodeUtilization\n    thresholds: {cpu: 20}\n    targetThresholds: {cpu: 70}\n"
        "    classifyBy: predicted\n    predictPlacement: false\n"
    )
    facts = ClusterFacts(tuple(NODES), tuple(PODS), ())
    text = (
        f"pools:\n  label: pool\nstrategies:\n  - {lnu('predicted').strip().replace(chr(10), chr(10) + '    ')}{second}"
    )
    _, plan = plan_cycle(facts, NOW, parse_policy(text), 1_700_000_000.0, None, PEAK)
    assert [e.name for e in plan.results[0].evictions] == ["peaky"]
    assert not plan.results[1].evictions
    after = {d.node: d.usage_m for d in plan.results[1].node_decisions}
    assert after == {"quiet-now": 5000, "cold": 5500}


def test_the_predictor_output_feeds_the_strategy() -> None:
    """End to end in the pure core: daily peaks -> predict() -> PredictedLoad -> the plan."""
    history = DailyPeaks.from_series(
        {("default", "peaky"): [3800, 4000, 4100], ("default", "steady"): [1500] * 3, ("default", "idle"): [900] * 3},
        days=3,
    )
    settings = PredictorSettings(days=3, minHistoryDays=2, systemCpuM=500, aggregation="max_daily")
    facts = ClusterFacts(tuple(NODES), tuple(PODS), ())
    prediction = predict(facts, history, settings)
    load = PredictedLoad.from_prediction(prediction, "three days")
    assert load.node_cpu_m == {"quiet-now": 4100 + 1500 + 500, "cold": 900 + 500}  # max_daily + system
    plan = run(NODES, PODS, NOW, "predicted", load)
    assert classes(plan)["quiet-now"] is NodeClass.NORMAL  # 61%: under the 70% target
    history = DailyPeaks.from_series(
        {("default", "peaky"): [3800, 4000, 6100], ("default", "steady"): [1500] * 3, ("default", "idle"): [900] * 3},
        days=3,
    )
    load = PredictedLoad.from_prediction(predict(facts, history, settings), "three days")
    # peaky's last day (6100m) takes the node to 81%: 1100m above target; steady (1500m) is the closest fit
    assert [e.name for e in run(NODES, PODS, NOW, "predicted", load).evictions] == ["steady"]


@settings(max_examples=60, deadline=None)
@given(
    known=st.lists(st.booleans(), min_size=6, max_size=6),
    levels=st.lists(st.integers(0, 6000), min_size=6, max_size=6),
    mode=st.sampled_from(["predicted", "max"]),
)
def test_no_pod_without_a_prediction_is_evicted(known: list[bool], levels: list[int], mode: str) -> None:
    nodes = [node("a"), node("b"), node("c")]
    pods = [pod(f"p{i}", "abc"[i % 3]) for i in range(6)]
    pod_pred = {f"p{i}": levels[i] for i in range(6) if known[i]}
    node_pred = {}
    for name in "abc":
        on = [f"p{i}" for i in range(6) if "abc"[i % 3] == name]
        if all(p in pod_pred for p in on):
            node_pred[name] = sum(pod_pred[p] for p in on)
    report = usage({"a": 5000, "b": 5000, "c": 5000}, {f"p{i}": 1000 for i in range(6)})
    plan = run(nodes, pods, report, mode, predicted(node_pred, pod_pred))
    for eviction in plan.evictions:
        assert eviction.name in pod_pred
        assert eviction.node in node_pred and eviction.room_on in node_pred


PREDICTED_BAND = "predicted: {thresholds: {cpu: 20}, targetThresholds: {cpu: 95}}\n"


def test_predicted_classes_use_their_own_thresholds() -> None:
    """A peak sits higher than a 10-minute window: at 90 % predicted, quiet-now is hot against the 70 % target
    the current window is judged by, and normal against a 95 % one for predicted peaks."""
    plan = run(NODES, PODS, NOW, "predicted", PEAK, PREDICTED_BAND)
    decision = next(d for d in plan.results[0].node_decisions if d.node == "quiet-now")
    assert decision.node_class is NodeClass.NORMAL and decision.high_pct == 95
    assert "within [20.0%, 95.0%]" in decision.reason and not plan.evictions
    hotter = predicted({"quiet-now": 9800, "cold": 1500}, {"peaky": 4800, "steady": 1500, "idle": 1000})
    plan = run(NODES, PODS, NOW, "max", hotter, PREDICTED_BAND)
    assert classes(plan)["quiet-now"] is NodeClass.HOT and len(plan.evictions) == 1  # 300 m above 95 %
    hot = next(d for d in plan.results[0].node_decisions if d.node == "quiet-now")
    assert "98.0% > target 95.0%" in hot.reason


@pytest.mark.parametrize(
    ("mode", "extra", "path", "message"),
    [
        ("current", PREDICTED_BAND, "predicted", "only read with classifyBy predicted or max"),
        (
            "predicted",
            "predicted: {thresholds: {cpu: 80}, targetThresholds: {cpu: 70}}\n",
            "predicted.thresholds.cpu",
            "80 must not be above targetThresholds.cpu (70)",
        ),
        (
            "max",
            "predicted: {thresholds: {cpu: 20}, targetThresholds: {cpu: 100}}\n",
            "predicted.targetThresholds.cpu",
            "makes no node hot",
        ),
        (
            "predicted",
            PREDICTED_BAND + "pools: {gpu: {thresholds: {cpu: 10}, targetThresholds: {cpu: 60}}}\n",
            "predicted",
            "per-pool thresholds (pools) are not read with it",
        ),
    ],
)
def test_predicted_thresholds_are_validated_like_the_others(mode: str, extra: str, path: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        policy(lnu(mode) + extra)
    assert any(p == f"strategies.0.{path}" and message in m for p, m in info.value.problems), info.value.problems
