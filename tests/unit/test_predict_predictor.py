"""Pods' daily peaks -> node predictions: sums, margins, churn fallbacks with their recorded source,
unknown pods, pods gone, and re-prediction of the nodes whose pod set changed."""

from __future__ import annotations

import math

import msgspec
import numpy as np
import pytest

from rebalancer.domain.model import ClusterFacts, Pod
from rebalancer.planning.predict import DailyPeaks, PredictorSettings, Source, predict, repredict, stale_nodes
from tests.builders import node, pod

NAN = math.nan
EQUAL = (1.0, 1.0, 1.0, 1.0)  # 4 days, equal weights: predictions are plain means


def cfg(**kw: object) -> PredictorSettings:
    base: dict[str, object] = {
        "days": 4,
        "weights": EQUAL,
        "minHistoryDays": 2,
        "hotThreshold": 70,
        "aggregation": "weighted_mean",
    }
    return PredictorSettings.model_validate({**base, **kw})


def history(series: dict[tuple[str, str], list[float | None]], days: int = 4) -> DailyPeaks[tuple[str, str]]:
    return DailyPeaks.from_series(series, days)


def k(name: str) -> tuple[str, str]:
    return ("default", name)


def test_node_is_the_sum_of_its_pods_plus_system_over_allocatable() -> None:
    facts = ClusterFacts(
        (node("n1", 1000), node("n2", 2000)),
        (pod("a", "n1"), pod("b", "n1"), pod("c", "n2")),
    )
    h = history({k("a"): [100, 200, 300, 400], k("b"): [200, 200, 200, 200], k("c"): [0, 0, 0, 0]})
    system = DailyPeaks.from_series({"n1": [100, 100, 100, 100]}, 4)
    p = predict(facts, h, cfg(systemCpuM=50), system)
    n1, n2 = p.nodes
    assert n1.pods_cpu_m == pytest.approx(250 + 200)
    assert (n1.system_cpu_m, n1.system_source) == (100, Source.HISTORY)
    assert n1.utilization_pct == pytest.approx(55.0)
    assert (n2.system_cpu_m, n2.system_source) == (50, Source.DEFAULT)  # no system history: systemCpuM
    assert n2.utilization_pct == pytest.approx(2.5)  # measured zeros are zeros: (0 + 50) / 2000
    assert n1.hot is False
    assert p.hot_threshold == 70


def test_hot_above_threshold_with_margin_and_aggregation() -> None:
    facts = ClusterFacts((node("n1", 1000),), (pod("a", "n1"),))
    h = history({k("a"): [400, 800, 500, 500]})
    assert predict(facts, h, cfg()).nodes[0].hot is False  # mean 550 m: 55 %
    assert predict(facts, h, cfg(aggregation="max_daily")).nodes[0].hot is True  # 800 m: 80 %
    with_margin = predict(facts, h, cfg(safetyMargin=0.3)).nodes[0]  # 550 x 1.3 = 715 m
    assert with_margin.utilization_pct == pytest.approx(71.5)
    assert with_margin.hot is True


def test_a_missing_day_does_not_lower_the_prediction() -> None:
    facts = ClusterFacts((node("n1", 1000),), (pod("a", "n1"),))
    p = predict(facts, history({k("a"): [600, None, 600, None]}), cfg())
    assert p.pods[0].cpu_m == pytest.approx(600.0)
    assert (p.pods[0].source, p.pods[0].history_days) == (Source.HISTORY, 2)


def test_young_pod_borrows_its_workloads_profile_at_the_sibling_quantile() -> None:
    pods = [pod(f"web-{i}", "n1", workload="web") for i in range(4)] + [pod("web-new", "n1", workload="web")]
    h = history(
        {
            k("web-0"): [100] * 4,
            k("web-1"): [200] * 4,
            k("web-2"): [300] * 4,
            k("web-3"): [400] * 4,
            k("web-new"): [None, None, None, 900],  # one day: too young
        }
    )
    p = predict(ClusterFacts((node("n1", 10_000),), tuple(pods)), h, cfg(siblingQuantile=0.75))
    new = next(x for x in p.pods if x.name == "web-new")
    assert new.source is Source.WORKLOAD
    assert new.cpu_m == pytest.approx(325.0)  # P75 of 100..400, linear interpolation
    assert new.history_days == 1
    assert "4 sibling(s) (100-400 m)" in new.detail
    median = predict(ClusterFacts((node("n1", 10_000),), tuple(pods)), h, cfg(siblingQuantile=0.5))
    assert next(x for x in median.pods if x.name == "web-new").cpu_m == pytest.approx(250.0)


def test_fallbacks_request_then_partial_then_unknown() -> None:
    pods = (
        pod("lonely", "n1", workload="solo", cpu_request_m=250),
        pod("besteffort", "n2", workload="be", cpu_request_m=0),
        pod("nothing", "n3", workload="none", cpu_request_m=0),
        pod("other", "n3", workload="x"),
    )
    h = history({k("lonely"): [None, None, None, 999], k("besteffort"): [None, None, None, 40], k("other"): [1] * 4})
    p = predict(ClusterFacts((node("n1"), node("n2"), node("n3")), pods), h, cfg(safetyMargin=0.5))
    by = {x.name: x for x in p.pods}
    assert (by["lonely"].source, by["lonely"].cpu_m) == (Source.REQUEST, 250.0)  # a request takes no margin
    assert (by["besteffort"].source, by["besteffort"].cpu_m) == (Source.PARTIAL, pytest.approx(60.0))
    assert (by["nothing"].source, by["nothing"].cpu_m) == (Source.UNKNOWN, None)
    n3 = next(n for n in p.nodes if n.node == "n3")
    assert n3.hot is None and n3.utilization_pct is None  # an unknown pod makes its node unknown, never cold
    assert n3.unknown_pods == (k("nothing"),)
    assert n3.sources == {"history": 1, "unknown": 1}


def test_pods_gone_are_dropped_and_finished_or_terminating_pods_do_not_count() -> None:
    pods = (
        pod("a", "n1"),
        pod("done", "n1", phase="Succeeded"),
        pod("leaving", "n1", terminating=True),
        pod("pending", None),
    )
    h = history({k("a"): [100] * 4, k("gone"): [5000] * 4, k("done"): [5000] * 4, k("leaving"): [5000] * 4})
    p = predict(ClusterFacts((node("n1", 1000),), pods), h, cfg())
    assert [x.name for x in p.pods] == ["a"]
    assert p.nodes[0].pods == (k("a"),)
    assert p.nodes[0].cpu_m == pytest.approx(100.0)
    assert p.dropped_history == 3


def _move(p: Pod, node_name: str) -> Pod:
    return msgspec.structs.replace(p, node_name=node_name)


def test_nodes_whose_pod_set_changed_are_repredicted_from_their_current_pods() -> None:
    a, b, c = pod("a", "n1"), pod("b", "n1"), pod("c", "n3")
    nodes = (node("n1", 1000), node("n2", 1000), node("n3", 1000))
    h = history({k("a"): [300] * 4, k("b"): [500] * 4, k("c"): [100] * 4})
    before = predict(ClusterFacts(nodes, (a, b, c)), h, cfg())
    assert before.hot_nodes() == ("n1",)  # 800 m of 1000
    new = pod("d", "n3", workload="api", cpu_request_m=400)  # a new pod: no history, no sibling with history
    after_facts = ClusterFacts(nodes, (a, _move(b, "n2"), c, new))
    assert stale_nodes(before, after_facts) == {"n1", "n2", "n3"}
    after = repredict(before, after_facts, h, cfg())
    by = {n.node: n for n in after.nodes}
    assert by["n1"].cpu_m == pytest.approx(300.0)
    assert by["n2"].cpu_m == pytest.approx(500.0)
    assert by["n3"].cpu_m == pytest.approx(100.0 + 400.0)
    assert by["n3"].sources == {"history": 1, "request": 1}
    assert after.hot_nodes() == ()
    assert after.repredicted == ("n1", "n2", "n3")
    assert stale_nodes(after, after_facts) == frozenset()


def test_repredict_keeps_unchanged_nodes_and_drops_nodes_gone() -> None:
    a, b = pod("a", "n1"), pod("b", "n2")
    h = history({k("a"): [300] * 4, k("b"): [500] * 4})
    before = predict(ClusterFacts((node("n1", 1000), node("n2", 1000)), (a, b)), h, cfg())
    changed_history = history({k("a"): [900] * 4, k("b"): [900] * 4})  # a later read: unchanged nodes keep theirs
    after = repredict(before, ClusterFacts((node("n1", 1000),), (a,)), changed_history, cfg())
    assert [n.node for n in after.nodes] == ["n1"]
    assert after.nodes[0] is before.nodes[0]
    assert after.repredicted == ()


def test_history_window_must_match_the_settings() -> None:
    with pytest.raises(ValueError, match="holds 3 days"):
        predict(ClusterFacts((node("n1"),), (pod("a", "n1"),)), history({k("a"): [1, 2, 3]}, days=3), cfg())


def test_daily_peaks_refuse_negative_infinite_and_overlong_series() -> None:
    with pytest.raises(ValueError, match="not negative"):
        DailyPeaks.from_series({"x": [1.0, -1.0]}, 2)
    with pytest.raises(ValueError, match="finite"):
        DailyPeaks((("x"),), np.array([[math.inf, 1.0]]))
    with pytest.raises(ValueError, match="3 days of history"):
        DailyPeaks.from_series({"x": [1.0, 2.0, 3.0]}, 2)
    young = DailyPeaks.from_series({"x": [7.0]}, 3)  # a young pod's days are the most recent
    assert np.isnan(young.values[0, :2]).all() and young.values[0, 2] == 7.0
    assert young.present_days().tolist() == [1]
