"""The coincident peak: pods' daily profiles summed per node, the highest bucket plus the system usage;
bounds against the per-pod sum and the largest pod, moves between nodes, and the predictor's use of it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rebalancer.model import ClusterFacts
from rebalancer.predict import DailyPeaks, PredictorSettings, predict
from rebalancer.predict.aggregate import decaying_histogram
from rebalancer.predict.node_peak import PeakBook, pod_profile, workload_shapes
from rebalancer.predict.predictor import peak_book
from rebalancer.predict.profile import DailyProfiles, aggregate_profiles, bucket_label, bucket_of
from tests.builders import node, pod

NAN = math.nan
BUCKETS = 6

profile_values = st.lists(st.floats(0, 5000, allow_nan=False), min_size=BUCKETS, max_size=BUCKETS).map(
    lambda v: np.asarray(v, dtype=np.float32)
)


def k(name: str) -> tuple[str, str]:
    return ("default", name)


def book_of(profiles: list[np.ndarray], nodes: list[str], system: float = 0.0) -> PeakBook:
    book = PeakBook(BUCKETS, dict.fromkeys(("a", "b", "n"), system))
    for i, (p, n) in enumerate(zip(profiles, nodes, strict=True)):
        book.add(k(f"p{i}"), n, p)
    return book


@settings(max_examples=200, deadline=None)
@given(st.lists(profile_values, min_size=1, max_size=8), st.floats(0, 1000))
def test_coincident_peak_lies_between_the_largest_pod_and_the_sum_of_peaks(
    profiles: list[np.ndarray], system: float
) -> None:
    book = book_of(profiles, ["n"] * len(profiles), system)
    found = book.peak("n")
    assert found is not None
    peak, _ = found
    peaks = [float(p.max()) for p in profiles]
    slack = 1e-3 * (1 + sum(peaks))
    assert peak <= sum(peaks) + system + slack
    assert peak >= max(peaks) + system - slack


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
        assert got[0] == pytest.approx(want[0], rel=1e-6, abs=1e-3)
        assert asked[0] == pytest.approx(want[0], rel=1e-6, abs=1e-3)


def test_pods_peaking_apart_do_not_add_up_and_the_node_names_when_and_who() -> None:
    morning = np.array([900, 100, 100, 100, 100, 100], dtype=np.float32)
    evening = np.array([100, 100, 100, 100, 800, 100], dtype=np.float32)
    book = book_of([morning, evening], ["n", "n"], 50.0)
    peak = book.node_peak("n")
    assert peak is not None
    assert peak.cpu_m == pytest.approx(900 + 100 + 50)  # not 900 + 800 + 50
    assert (peak.bucket, peak.at) == (0, "00:00-04:00")
    assert [(p.name, p.cpu_m) for p in peak.pods] == [("p0", 900), ("p1", 100)]


def test_an_unknown_pod_makes_its_node_unknown_and_a_bad_profile_is_refused() -> None:
    book = PeakBook(BUCKETS, {})
    book.add(k("a"), "n", None)
    assert book.peak("n") is None
    assert book.peak_with("n", remove=[k("a")]) == (0.0, 0)
    with pytest.raises(ValueError, match="6 finite buckets"):
        book.add(k("b"), "n", np.array([1.0, NAN, 1, 1, 1, 1], dtype=np.float32))
    with pytest.raises(ValueError, match="already on n"):
        book.add(k("a"), "m", None)


def test_a_pods_profile_follows_its_source() -> None:
    own = np.array([NAN, 200, 400, NAN, 100, 100], dtype=np.float32)
    assert pod_profile("history", 500.0, own, None, BUCKETS).tolist() == [500, 200, 400, 500, 100, 100]
    shape = np.array([1, 0.5, 0.25, 0.25, 0.25, 0.25], dtype=np.float32)
    assert pod_profile("workload", 800.0, None, shape, BUCKETS).tolist() == [800, 400, 200, 200, 200, 200]
    assert pod_profile("request", 300.0, own, shape, BUCKETS).tolist() == [300] * BUCKETS
    assert pod_profile("unknown", None, own, shape, BUCKETS) is None


def test_a_workload_shape_is_the_siblings_shape_not_their_level() -> None:
    low = np.array([100, 50, 50, 50, 50, 50], dtype=np.float32)
    high = np.array([1000, 500, 500, 500, 500, 500], dtype=np.float32)
    shapes = workload_shapes({k("a"): low, k("b"): high}, {k("a"): "web", k("b"): "web"}, BUCKETS)
    assert shapes["web"].tolist() == pytest.approx([1, 0.5, 0.5, 0.5, 0.5, 0.5])


def test_profiles_fold_the_days_bucket_by_bucket_and_missing_stays_missing() -> None:
    values = np.array([[[100, NAN], [300, NAN]]], dtype=np.float32)  # 1 pod, 2 days, 2 buckets
    cfg = PredictorSettings.model_validate(
        {"days": 2, "weights": [1, 1], "aggregation": "weighted_mean", "minHistoryDays": 1}
    )
    out = aggregate_profiles(values, cfg)
    assert out[0, 0] == pytest.approx(200)
    assert math.isnan(out[0, 1])
    with pytest.raises(ValueError, match="finite and not negative"):
        DailyProfiles((k("a"),), np.array([[[-1.0]]], dtype=np.float32))


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
    cfg = PredictorSettings.model_validate(
        {"days": 2, "weights": [1, 1], "aggregation": "max_daily", "minHistoryDays": 1, "profileBuckets": 2}
    )
    daily = DailyPeaks.from_series({k("a"): [900, 900], k("b"): [800, 800]}, 2)
    profiles = DailyProfiles(
        (k("a"), k("b")),
        np.array([[[900, 100], [900, 100]], [[100, 800], [100, 800]]], dtype=np.float32),
    )
    summed = predict(facts, daily, cfg)
    assert (summed.nodes[0].basis, summed.nodes[0].cpu_m, summed.nodes[0].peak) == ("sum", 1700, None)
    coincident = predict(facts, daily, cfg, profiles=profiles)
    n1 = coincident.nodes[0]
    assert (n1.basis, n1.cpu_m, n1.pods_cpu_m) == ("coincident", 1000, 1700)
    assert n1.utilization_pct == pytest.approx(50.0)
    assert n1.peak is not None and n1.peak.at == "00:00-12:00"
    book = peak_book(coincident, profiles, cfg)
    assert book.peak_with("n1", remove=[k("a")]) == (800.0, 1)
    off = predict(facts, daily, cfg.model_copy(update={"node_peak": "sum"}), profiles=profiles)
    assert off.nodes[0].basis == "sum"
