"""The coincident peak: pods' daily profiles summed per node, each day's highest bucket, aggregated over the
days; bounds against the per-pod sum and the largest pod, moves between nodes, and the predictor's use of it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rebalancer.domain.model import ClusterFacts
from rebalancer.planning.predict import DailyPeaks, PredictorSettings, predict
from rebalancer.planning.predict.aggregate import decaying_histogram
from rebalancer.planning.predict.node_peak import PeakBook, pod_profile, workload_shapes
from rebalancer.planning.predict.predictor import predict_with_book
from rebalancer.planning.predict.profile import (
    DailyProfiles,
    bucket_label,
    bucket_of,
    own_profile,
    own_profiles,
    predicted_peak,
)
from tests.builders import node, pod

NAN = math.nan
DAYS, BUCKETS = 3, 4

profile_values = st.lists(
    st.floats(0, 5000, allow_nan=False, width=32), min_size=DAYS * BUCKETS, max_size=DAYS * BUCKETS
).map(lambda v: np.asarray(v, dtype=np.float32).reshape(DAYS, BUCKETS))
# the aggregations a peak can be bounded under: monotone, and never above the sum over pods
bounded = st.sampled_from(["weighted_mean", "max_daily", "same_weekday"])


def cfg(aggregation: str = "weighted_mean", **kw: object) -> PredictorSettings:
    base = {"days": DAYS, "weights": [3, 2, 1], "aggregation": aggregation, "minHistoryDays": 1}
    return PredictorSettings.model_validate({**base, **kw})


def k(name: str) -> tuple[str, str]:
    return ("default", name)


def book_of(
    profiles: list[np.ndarray], nodes: list[str], system: float = 0.0, aggregation: str = "weighted_mean"
) -> PeakBook:
    book = PeakBook(cfg(aggregation), BUCKETS, dict.fromkeys(("a", "b", "n"), system))
    for i, (p, n) in enumerate(zip(profiles, nodes, strict=True)):
        book.add(k(f"p{i}"), n, p)
    return book


@settings(max_examples=200, deadline=None)
@given(st.lists(profile_values, min_size=1, max_size=8), st.floats(0, 1000), bounded)
def test_coincident_peak_lies_between_the_largest_pod_and_the_sum_of_peaks(
    profiles: list[np.ndarray], system: float, aggregation: str
) -> None:
    book = book_of(profiles, ["n"] * len(profiles), system, aggregation)
    found = book.peak("n")
    assert found is not None
    peak, _ = found
    alone = [predicted_peak(p.astype(np.float64), 0.0, cfg(aggregation))[0] for p in profiles]
    slack = 1e-3 * (1 + sum(alone))
    assert peak <= sum(alone) + system + slack
    assert peak >= max(alone) + system - slack


@settings(max_examples=200, deadline=None)
@given(st.lists(profile_values, min_size=2, max_size=8), st.data())
def test_moving_a_pod_changes_both_nodes_as_if_predicted_afresh(
    profiles: list[np.ndarray], data: st.DataObject
) -> None:
    nodes = [data.draw(st.sampled_from(["a", "b"])) for _ in profiles]
    moved = data.draw(st.integers(0, len(profiles) - 1))
    book = book_of(profiles, nodes, 100.0)
    source = nodes[moved]
    destination = "b" if source == "a" else "a"
    key = k(f"p{moved}")
    asked_source = book.peak_with(source, remove=[key])
    asked_destination = book.peak_with(destination, add=[key])
    book.move(key, destination)
    after = nodes.copy()
    after[moved] = destination
    fresh = book_of(profiles, after, 100.0)
    for name, asked in ((source, asked_source), (destination, asked_destination)):
        got, want = book.peak(name), fresh.peak(name)
        assert got is not None and want is not None and asked is not None
        assert got[0] == pytest.approx(want[0], rel=1e-6, abs=1e-2)
        assert asked[0] == pytest.approx(want[0], rel=1e-6, abs=1e-2)
    assert book.node_of(key) == destination


def test_pods_peaking_apart_do_not_add_up_and_the_node_names_when_and_who() -> None:
    morning = np.tile(np.array([900, 100, 100, 100], dtype=np.float32), (DAYS, 1))
    evening = np.tile(np.array([100, 100, 800, 100], dtype=np.float32), (DAYS, 1))
    book = book_of([morning, evening], ["n", "n"], 50.0)
    peak = book.node_peak("n")
    assert peak is not None
    assert peak.cpu_m == pytest.approx(900 + 100 + 50)  # not 900 + 800 + 50
    assert (peak.bucket, peak.at) == (0, "00:00-06:00")
    assert [(p.name, p.cpu_m) for p in peak.pods] == [("p0", pytest.approx(900)), ("p1", pytest.approx(100))]


def test_each_day_counts_its_own_peak_before_the_days_are_aggregated() -> None:
    """Two pods alternate their peak hour day by day: on no day do they peak together."""
    a = np.array([[1000, 0, 0, 0], [0, 0, 1000, 0], [1000, 0, 0, 0]], dtype=np.float32)
    b = np.array([[0, 0, 1000, 0], [1000, 0, 0, 0], [0, 0, 1000, 0]], dtype=np.float32)
    found = book_of([a, b], ["n", "n"]).peak("n")
    assert found is not None and found[0] == pytest.approx(1000)


def test_an_unknown_pod_makes_its_node_unknown_and_a_bad_profile_is_refused() -> None:
    book = PeakBook(cfg(), BUCKETS, {})
    book.add(k("a"), "n", None)
    assert book.peak("n") is None
    assert book.peak_with("n", remove=[k("a")]) == (0.0, 0)
    bad = np.ones((DAYS, BUCKETS), dtype=np.float32)
    bad[1, 2] = NAN
    with pytest.raises(ValueError, match="3 days x 4 buckets, finite and not negative"):
        book.add(k("b"), "n", bad)
    with pytest.raises(ValueError, match="3 days x 4 buckets"):
        book.add(k("c"), "n", np.ones((DAYS, 5), dtype=np.float32))
    with pytest.raises(ValueError, match="already on n"):
        book.add(k("a"), "m", None)


def test_a_pods_gaps_are_filled_from_its_own_days_never_zero() -> None:
    values = np.array([[NAN, 200, NAN, NAN], [100, 400, NAN, NAN], [300, NAN, NAN, 50]], dtype=np.float32)
    filled = own_profile(values)
    assert filled is not None
    assert filled[:, 0].tolist() == [200, 100, 300]  # day 0's gap: the bucket's mean over the other days
    assert filled[:, 2].tolist() == [400, 400, 400]  # never seen: the pod's highest known level
    assert own_profile(np.full((DAYS, BUCKETS), NAN, dtype=np.float32)) is None


@settings(max_examples=60, deadline=None)
@given(
    cells=st.lists(
        st.one_of(st.just(NAN), st.floats(0, 5000, width=32)), min_size=7 * DAYS * BUCKETS, max_size=7 * DAYS * BUCKETS
    ),
    rows=st.lists(st.integers(0, 6), max_size=9),
    chunk=st.integers(1, 4),
)
def test_pods_filled_a_few_at_a_time_are_each_filled_as_alone(cells: list[float], rows: list[int], chunk: int) -> None:
    values = np.array(cells, dtype=np.float32).reshape(7, DAYS, BUCKETS)
    filled, has = own_profiles(values, rows, chunk=chunk)
    assert filled.shape == (len(rows), DAYS, BUCKETS) and filled.dtype == np.float32
    for n, row in enumerate(rows):
        alone = own_profile(values[row])
        assert has[n] == (alone is not None)
        if alone is None:
            assert np.isnan(filled[n]).all()
        else:
            assert np.array_equal(filled[n], alone)
    everyone, _ = own_profiles(values, chunk=chunk)
    assert np.array_equal(everyone, own_profiles(values)[0], equal_nan=True)


def test_a_pods_profile_follows_its_source() -> None:
    own = np.full((DAYS, BUCKETS), 200, dtype=np.float32)
    shape = np.tile(np.array([1, 0.5, 0.25, 0.25], dtype=np.float32), (DAYS, 1))
    assert pod_profile("history", 500.0, own, None, DAYS, BUCKETS) is own
    assert pod_profile("workload", 800.0, None, shape, DAYS, BUCKETS)[0].tolist() == [800, 400, 200, 200]
    assert pod_profile("request", 300.0, own, shape, DAYS, BUCKETS).tolist() == [[300] * BUCKETS] * DAYS
    assert pod_profile("unknown", None, own, shape, DAYS, BUCKETS) is None


def test_a_workload_shape_is_the_siblings_shape_not_their_level() -> None:
    low = np.tile(np.array([100, 50, 50, 50], dtype=np.float32), (DAYS, 1))
    high = np.tile(np.array([1000, 500, 500, 500], dtype=np.float32), (DAYS, 1))
    shapes = workload_shapes({k("a"): low, k("b"): high}, {k("a"): "web", k("b"): "web"})
    assert shapes["web"][0].tolist() == pytest.approx([1, 0.5, 0.5, 0.5])


def test_profiles_refuse_bad_values() -> None:
    with pytest.raises(ValueError, match="finite and not negative"):
        DailyProfiles((k("a"),), np.array([[[-1.0]]], dtype=np.float32))
    with pytest.raises(ValueError, match="entities, days, buckets"):
        DailyProfiles((k("a"),), np.zeros((1, 2), dtype=np.float32))


def test_buckets_and_their_labels() -> None:
    assert bucket_of([0, 3599, 3600, 86399, 90000], 24).tolist() == [0, 0, 1, 23, 23]
    assert bucket_label(47, 48) == "23:30-24:00"


def test_decaying_histogram_leans_on_recent_days() -> None:
    samples = np.array([[1000.0, 1000.0, 1000.0, 100.0, 100.0, 100.0]])
    ages = np.array([5.5, 4.5, 3.5, 2.5, 1.5, 0.5])
    recent = decaying_histogram(samples, ages, half_life_days=0.5)[0]
    slow = decaying_histogram(samples, ages, half_life_days=50)[0]
    assert 100 <= recent <= 105  # old high days weigh almost nothing; the bucket end is at most 5 % above
    assert 1000 <= slow <= 1050
    assert math.isnan(decaying_histogram(np.array([[NAN, NAN]]), np.array([1.5, 0.5]), 1.0)[0])


def test_the_predictor_uses_the_coincident_peak_when_profiles_are_given() -> None:
    facts = ClusterFacts((node("n1", 2000),), (pod("a", "n1", workload="x"), pod("b", "n1", workload="y")))
    settings = PredictorSettings.model_validate(
        {"days": 2, "weights": [1, 1], "aggregation": "max_daily", "minHistoryDays": 1, "profileBuckets": 2}
    )
    daily = DailyPeaks.from_series({k("a"): [900, 900], k("b"): [800, 800]}, 2)
    profiles = DailyProfiles(
        (k("a"), k("b")),
        np.array([[[900, 100], [900, 100]], [[100, 800], [100, 800]]], dtype=np.float32),
    )
    summed = predict(facts, daily, settings)
    assert (summed.nodes[0].basis, summed.nodes[0].cpu_m, summed.nodes[0].peak) == ("sum", 1700, None)
    coincident = predict(facts, daily, settings, profiles=profiles)
    n1 = coincident.nodes[0]
    assert (n1.basis, n1.cpu_m, n1.pods_cpu_m) == ("coincident", 1000, 1700)
    assert n1.utilization_pct == pytest.approx(50.0)
    assert n1.peak is not None and n1.peak.at == "00:00-12:00"
    book = predict_with_book(facts, daily, settings, profiles=profiles)[1]
    assert book.peak_with("n1", remove=[k("a")]) == (800.0, 1)
    off = predict(facts, daily, settings.model_copy(update={"node_peak": "sum"}), profiles=profiles)
    assert off.nodes[0].basis == "sum"


def test_a_young_pod_takes_its_siblings_shape_at_the_level_it_runs_at() -> None:
    """Siblings at 100 m and 1000 m peak in the morning; the new pod ran yesterday afternoon at 300 m, a third
    of its siblings' mean there: it is predicted with their shape at that level, not their sum or maximum."""
    facts = ClusterFacts(
        (node("n1", 4000), node("n2", 4000)),
        (pod("low", "n1"), pod("high", "n1"), pod("young", "n2")),
    )
    settings = cfg(minHistoryDays=2)
    shape = np.array([1.0, 0.5, 0.5, 0.5], dtype=np.float32)
    young = np.full((DAYS, BUCKETS), NAN, dtype=np.float32)
    young[-1, 1:3] = 150  # 150 m over the two afternoon buckets of yesterday
    profiles = DailyProfiles(
        (k("low"), k("high"), k("young")),
        np.stack([np.tile(shape * 100, (DAYS, 1)), np.tile(shape * 1000, (DAYS, 1)), young]).astype(np.float32),
    )
    daily = DailyPeaks.from_series({k("low"): [100] * DAYS, k("high"): [1000] * DAYS, k("young"): [150]}, DAYS)
    prediction = predict(facts, daily, settings, profiles=profiles)
    young_pod = next(p for p in prediction.pods if p.name == "young")
    assert young_pod.source == "workload"
    n2 = next(n for n in prediction.nodes if n.node == "n2")
    # its observed 150 m where the shape is 0.5: the shape at 300 m, peaking in the morning
    assert n2.cpu_m == pytest.approx(300, rel=1e-5)
    assert n2.peak is not None and n2.peak.bucket == 0
    book = predict_with_book(facts, daily, settings, profiles=profiles)[1]
    assert book.profile(k("young")) == pytest.approx(np.tile(shape * 300, (DAYS, 1)))
    without = pod_profile("workload", 775.0, None, np.tile(shape, (DAYS, 1)), DAYS, BUCKETS)
    assert without is not None and float(without.max()) == pytest.approx(775)  # no own data: its predicted peak


def test_a_node_without_pods_peaks_at_its_system_usage() -> None:
    """A node just joined (or drained) has no pods: its coincident peak is its system usage, made by no pod."""
    facts = ClusterFacts((node("busy", 2000), node("empty", 2000)), (pod("a", "busy", workload="x"),))
    settings = PredictorSettings.model_validate(
        {"days": 2, "aggregation": "max_daily", "minHistoryDays": 1, "profileBuckets": 2, "systemCpuM": 300}
    )
    daily = DailyPeaks.from_series({k("a"): [900, 900]}, 2)
    profiles = DailyProfiles((k("a"),), np.array([[[900, 100], [900, 100]]], dtype=np.float32))
    empty = next(n for n in predict(facts, daily, settings, profiles=profiles).nodes if n.node == "empty")
    assert (empty.basis, empty.cpu_m, empty.hot) == ("coincident", 300, False)
    assert empty.peak is not None and empty.peak.pods == ()


def test_the_safety_margin_counts_once_on_a_system_usage_from_history() -> None:
    """With a 10 % margin, a pod at 900 m and a system usage at 1000 m by their history predict 990 + 1100 m,
    coincident or summed: the system usage's margin is not taken twice."""
    facts = ClusterFacts((node("n1", 4000),), (pod("a", "n1", workload="x"),))
    settings = PredictorSettings.model_validate(
        {"days": 2, "aggregation": "max_daily", "minHistoryDays": 1, "profileBuckets": 2, "safetyMargin": 0.1}
    )
    daily = DailyPeaks.from_series({k("a"): [900, 900]}, 2)
    profiles = DailyProfiles((k("a"),), np.full((1, 2, 2), 900, dtype=np.float32))
    system = DailyPeaks.from_series({"n1": [1000, 1000]}, 2)
    summed = predict(facts, daily, settings.model_copy(update={"node_peak": "sum"}), system).nodes[0]
    coincident = predict(facts, daily, settings, system, profiles).nodes[0]
    assert coincident.basis == "coincident" and coincident.system_source == "history"
    assert coincident.cpu_m == pytest.approx(2090) == summed.cpu_m
