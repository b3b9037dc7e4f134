"""Pods' daily profiles (their mean per hour of each day) read from the real Prometheus with the backfilled
history of test_prom_history: each hour's value equals the mean recomputed from the generated load, missing hours stay missing, the predictor's coincident peak follows from them, and a malformed range
answer fails the read naming the query."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from rebalancer.adapters.prom.client import PromClient
from rebalancer.adapters.prom.history import PrometheusHistorySource
from rebalancer.adapters.prom.matrix import GROUP, pod_matrix
from rebalancer.domain.errors import MetricsMalformed
from rebalancer.domain.model import ClusterFacts
from rebalancer.domain.settings.predictor import PredictorSettings
from rebalancer.domain.settings.shared import PrometheusSettings
from rebalancer.planning.predict import predict
from tests.adapters.prom_fixture import ASKED_TIME, CannedHttpServer, PrometheusServer, StartPrometheus
from tests.adapters.test_prom_history import (
    AT,
    DAYS,
    JOB,
    PODS,
    PODS_PER_NODE,
    RULE,
    WEB,
    history_series,
    stamps,
    subquery_peak,
)
from tests.builders import node, pod

pytestmark = pytest.mark.prometheus

HOUR = 3600


@pytest.fixture(scope="module")
def prometheus(start_prometheus: StartPrometheus) -> PrometheusServer:
    return start_prometheus(history_series())


def source(url: str, predictor: dict[str, object] | None = None, **history: object) -> PrometheusHistorySource:
    settings = PredictorSettings.model_validate({**(predictor or {}), "history": history})
    return PrometheusHistorySource(PrometheusSettings(url=url), settings)


def test_each_hour_of_each_day_is_the_mean_of_the_recorded_samples(prometheus: PrometheusServer) -> None:
    with source(prometheus.url, recordingRule=RULE) as history:
        read = history.read(PODS_PER_NODE, AT)
    profiles = read.profiles
    assert profiles is not None and (profiles.days, profiles.buckets) == (8, 24)
    assert profiles.values.dtype == np.float32
    for namespace, pod_name, _node, rate, first, last in PODS[:3]:
        row = profiles.values[profiles.index((namespace, pod_name))]
        times = [t for t in stamps(first, last) if t % 300 == 0 and t - 300 >= first]
        for d, day in enumerate(DAYS):
            for h in range(24):
                end = day.start + (h + 1) * HOUR
                inside = [1000 * rate(t) for t in times if end - HOUR < t <= end]
                if not inside:
                    assert math.isnan(row[d, h]), (pod_name, day.day, h)  # missing, never zero
                else:
                    want = float(np.mean(inside))
                    assert row[d, h] == pytest.approx(want, rel=1e-5), (pod_name, day.day, h)


def test_the_subquery_profile_matches_the_generated_load_and_a_late_pod_is_missing_before(
    prometheus: PrometheusServer,
) -> None:
    with source(prometheus.url, {"profileBuckets": 48}) as history:
        read = history.read(PODS_PER_NODE, AT)
    profiles = read.profiles
    assert profiles is not None and profiles.buckets == 48
    web = profiles.values[profiles.index(("shop", "web-1"))]
    for d in (0, 7):
        for b in (0, 20, 47):
            end = DAYS[d].start + (b + 1) * 1800
            assert web[d, b] == pytest.approx(subquery_peak(WEB, end, 1800), rel=1e-5)
    job = profiles.values[profiles.index(("batch", "job-1"))]
    assert np.isnan(job[:5]).all()  # created on day 7 (index 5): nothing before, not zero
    assert job[6, 47] == pytest.approx(subquery_peak(JOB, DAYS[6].end, 1800), rel=1e-5)


def test_the_coincident_peak_does_not_add_pods_that_peak_apart(prometheus: PrometheusServer) -> None:
    """On n2, spiky-1 peaks at 1.5 cores 13:00-16:00 (every third day), job-1 climbs to 1.65 cores at 23:00:
    the node's peak is at 15:00, where job-1 runs at 1.25 cores, not the sum of the two peaks."""
    settings = PredictorSettings.model_validate({"history": {"recordingRule": RULE}, "aggregation": "max_daily"})
    with PrometheusHistorySource(PrometheusSettings(url=prometheus.url), settings) as history:
        read = history.read(PODS_PER_NODE, AT)
    facts = ClusterFacts(
        (node("n1", 4000), node("n2", 4000)),
        (
            pod("web-1", "n1", namespace="shop", workload="web"),
            pod("spiky-1", "n2", namespace="shop", workload="spiky"),
            pod("job-1", "n2", namespace="batch", workload="job"),
            pod("db-0", "n2", namespace="shop", workload="db"),
        ),
    )
    prediction = predict(facts, read.pods, settings, read.system, read.profiles)
    n2 = next(n for n in prediction.nodes if n.node == "n2")
    assert n2.basis == "coincident" and n2.peak is not None and n2.pods_cpu_m is not None
    # each day's highest hour of the summed profiles, the highest day (max_daily): Jan 7, spiky-1's hot
    # afternoon, where job-1 (created that day, 1.25 cores at 15:00) and db-0 (0.42 cores that day) add to it
    assert n2.cpu_m == pytest.approx(1500 + 1250 + 420, rel=1e-5)
    assert n2.pods_cpu_m > n2.cpu_m + 300  # the per-pod sum adds job-1's evening peak to spiky-1's afternoon
    assert (n2.peak.bucket, n2.peak.at) == (15, "15:00-16:00")
    assert [(p.name, round(p.cpu_m)) for p in n2.peak.pods] == [("spiky-1", 1500), ("job-1", 1250), ("db-0", 460)]


def test_a_vector_where_the_profile_needs_a_matrix_fails_the_read_naming_the_query(
    canned_http: CannedHttpServer,
) -> None:
    vector = {"metric": {"namespace": "a", "pod": "x"}, "value": [ASKED_TIME, "0.5"]}
    canned_http.reply(body={"status": "success", "data": {"resultType": "vector", "result": [vector]}})
    settings = PredictorSettings.model_validate({"history": {"concurrency": 1}})
    history = PrometheusHistorySource(PrometheusSettings(url=canned_http.url), settings)
    with history, pytest.raises(MetricsMalformed) as failure:
        history.read({"n1": 1}, AT)
    message = str(failure.value)
    assert "profile day 2024-01-02 batch 1/1" in message and "matrix" in message
    assert any("/api/v1/query_range" in r.path for r in canned_http.requests)


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        ([{"metric": {"namespace": "a", "pod": "x"}, "values": [[1, "-2"]]}], "a/x has the value -2"),
        ([{"metric": {"namespace": "a", "pod": "x"}, "values": [[1, "NaN"]]}], "a/x has the value nan"),
        ([{"metric": {"namespace": "a"}, "values": [[1, "1"]]}], "pod"),
        ([{"metric": {"namespace": "a", "pod": "x"}, "values": [[1, "1"]]}] * 2, "more than one series for pod a/x"),
        ([{"metric": {"namespace": "a", "pod": "x"}, "values": [[1, "+Inf"]]}], "not a range vector"),
    ],
)
def test_a_malformed_range_answer_names_the_query_and_the_cause(
    canned_http: CannedHttpServer, result: list[object], expected: str
) -> None:
    canned_http.reply(body={"status": "success", "data": {"resultType": "matrix", "result": result}})
    client = PromClient(PrometheusSettings(url=canned_http.url))
    try:
        with pytest.raises(MetricsMalformed) as failure:
            client.pod_matrix("profile day X", "q", 0, 3600, 3600)
    finally:
        client.close()
    assert "profile day X" in str(failure.value) and expected in str(failure.value)


def test_a_good_range_answer_lands_in_flat_arrays(canned_http: CannedHttpServer) -> None:
    result = [
        {"metric": {"namespace": "a", "pod": "x", "node": "n1"}, "values": [[3600, "0.5"], [7200, "0.25"]]},
        {"metric": {"namespace": "a", "pod": "y"}, "values": [[7200, "1"]]},
    ]
    canned_http.reply(body={"status": "success", "data": {"resultType": "matrix", "result": result}})
    client = PromClient(PrometheusSettings(url=canned_http.url))
    try:
        matrix = client.pod_matrix("profile", "q", 3600, 7200, 3600)
    finally:
        client.close()
    assert matrix.keys == (("a", "x"), ("a", "y"))
    assert matrix.series.tolist() == [0, 0, 1]
    assert matrix.times.tolist() == [3600, 7200, 7200] and matrix.values.tolist() == [0.5, 0.25, 1.0]


def test_an_answer_of_many_groups_of_series_keeps_each_point_with_its_pod() -> None:
    sizes = [i % 4 for i in range(GROUP * 2 + 3)]  # 0 to 3 points a series, across three groups
    result = [
        {"metric": {"namespace": "a", "pod": f"p{i}"}, "values": [[3600 * (k + 1), f"{i}.{k}"] for k in range(n)]}
        for i, n in enumerate(sizes)
    ]
    body = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}).encode()
    matrix = pod_matrix("profile", body, span=(0, 3600 * 4))
    assert matrix.keys == tuple(("a", f"p{i}") for i in range(len(sizes)))
    assert matrix.series.tolist() == [i for i, n in enumerate(sizes) for _ in range(n)]
    assert matrix.times.tolist() == [3600.0 * (k + 1) for n in sizes for k in range(n)]
    assert matrix.values.tolist() == [float(f"{i}.{k}") for i, n in enumerate(sizes) for k in range(n)]
    result[GROUP + 5]["values"] = [[3600, "-1"]]
    bad = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}).encode()
    with pytest.raises(MetricsMalformed, match=f"series of pod a/p{GROUP + 5} has the value -1"):
        pod_matrix("profile", bad, span=(0, 3600 * 4))
    result[GROUP + 5]["values"] = [[3600, "0.5", "extra"]]
    odd = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}).encode()
    with pytest.raises(MetricsMalformed, match="query profile: not a range vector of pod series"):
        pod_matrix("profile", odd, span=(0, 3600 * 4))
