"""Pods' daily profiles read from an hourly recording rule (``history.profileRule``) in the real Prometheus:
beside test_prom_history's 5-minute rule, a series that holds, at 23 minutes and a quarter second past
every hour, the mean of that rule's samples over the hour before it (as a rule group with ``interval: 1h``
records ``avg_over_time(<5m rule>[1h])`` at its fixed offset). Each hour of the profile equals that mean,
placed by its window's middle; a missing hour stays missing; a pod rescheduled within a batch is whole."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from urllib.parse import parse_qsl, unquote, urlsplit

import numpy as np
import pytest

from rebalancer.adapters.prom.history import PrometheusHistorySource
from rebalancer.domain.errors import ConfigError, MetricsMalformed
from rebalancer.domain.settings.predictor import PredictorSettings
from rebalancer.domain.settings.shared import PrometheusSettings
from rebalancer.policy import parse_policy
from tests.adapters.prom_fixture import ASKED_TIME, CannedHttpServer, PrometheusServer, Series, StartPrometheus
from tests.adapters.test_prom_history import (
    AT,
    DAYS,
    HISTORY_END,
    HISTORY_START,
    PODS,
    PODS_PER_NODE,
    RULE,
    history_series,
    stamps,
)

pytestmark = pytest.mark.prometheus

HOUR = 3600
PROFILE_RULE = "namespace_pod:cpu_usage:avg1h"
OFFSET = 23 * 60 + 0.25  # the rule group's evaluation offset into the hour
MISSING = ("shop", "web-1", DAYS[4].start + 11 * HOUR + OFFSET)  # Jan 6 10:23-11:23 (middle 10:53): not recorded


def rule_samples(first: float, last: float) -> list[float]:
    """The 5-minute rule's sample times of a pod's piece (as test_prom_history records them)."""
    return [t for t in stamps(first, last) if t % 300 == 0 and t - 300 >= first]


def hourly_times() -> list[float]:
    count = int((HISTORY_END - HISTORY_START - OFFSET) // HOUR)
    return [HISTORY_START + OFFSET + k * HOUR for k in range(count + 1)]


def hourly_series() -> list[Series]:
    """Per pod and node (a rescheduled pod has two series), the mean of the 5m rule's samples in (t - 1h, t]."""
    out = []
    for namespace, pod, node, rate, first, last in PODS:
        samples = rule_samples(first, last)
        points = []
        for t in hourly_times():
            inside = [rate(s) for s in samples if t - HOUR < s <= t]
            if inside and (namespace, pod, t) != MISSING:
                points.append((t, float(np.mean(inside))))
        out.append(Series(PROFILE_RULE, {"namespace": namespace, "pod": pod, "node": node}, points, "gauge"))
    return out


@pytest.fixture(scope="module")
def prometheus(start_prometheus: StartPrometheus) -> PrometheusServer:
    return start_prometheus([*history_series(), *hourly_series()])


def source(url: str, **history: object) -> PrometheusHistorySource:
    settings = PredictorSettings.model_validate({"history": {"profileRule": PROFILE_RULE, **history}})
    return PrometheusHistorySource(PrometheusSettings(url=url), settings)


def expected_hour(namespace: str, pod: str, day: int, hour: int) -> float:
    """The mean of the pod's 5m samples over the rule's window whose middle is in that hour (the higher of
    two pieces where it was rescheduled), in millicores; NaN where no window holds a sample."""
    end = DAYS[day].start + (hour + 1) * HOUR + OFFSET  # the window ends half an hour after its middle
    means = []
    for ns, name, _node, rate, first, last in PODS:
        inside = [rate(s) for s in rule_samples(first, last) if end - HOUR < s <= end]
        if (ns, name) == (namespace, pod) and inside and (ns, name, end) != MISSING:
            means.append(1000 * float(np.mean(inside)))
    return max(means) if means else math.nan


def test_each_hour_is_the_recorded_mean_of_the_window_whose_middle_is_in_it(prometheus: PrometheusServer) -> None:
    with source(prometheus.url, recordingRule=RULE) as history:
        read = history.read(PODS_PER_NODE, AT)
    profiles = read.profiles
    assert profiles is not None and (profiles.days, profiles.buckets) == (8, 24)
    assert f"from the hourly rule {PROFILE_RULE}" in read.description
    checked = 0
    for key in {(p[0], p[1]) for p in PODS}:
        row = profiles.values[profiles.index(key)]
        for d in range(len(DAYS)):
            for h in range(24):
                want = expected_hour(*key, d, h)
                if math.isnan(want):
                    assert math.isnan(row[d, h]), (key, d, h)  # missing, never zero
                else:
                    assert row[d, h] == pytest.approx(want, rel=1e-5), (key, d, h)
                    checked += 1
    assert checked > 600


def test_an_hour_the_rule_did_not_record_is_missing_not_zero(prometheus: PrometheusServer) -> None:
    with source(prometheus.url) as history:
        profiles = history.read(PODS_PER_NODE, AT).profiles
    assert profiles is not None
    web = profiles.values[profiles.index(("shop", "web-1"))]
    assert math.isnan(web[4, 10]) and not np.isnan(web[4, 9]) and not np.isnan(web[4, 11])
    job = profiles.values[profiles.index(("batch", "job-1"))]
    # created just after midnight on Jan 7: its first window, 23:23-00:23, has its middle on Jan 6
    assert np.isnan(job[:4]).all() and np.isnan(job[4, :23]).all() and not np.isnan(job[4, 23])


def test_a_pod_rescheduled_within_a_batch_equals_one_read_per_node(prometheus: PrometheusServer) -> None:
    """db-0 moves from n1 to n2 at midnight: the window 23:23-00:23 has a mean on each node. One batch
    answers both series at once, per-node batches one each; either way the hour keeps the higher."""
    with source(prometheus.url) as history:
        whole = history.read(PODS_PER_NODE, AT)
    with source(prometheus.url, maxSamplesPerQuery=1000) as history:
        split = history.read(PODS_PER_NODE, AT)
    assert (whole.batches, split.batches) == (1, 2)
    assert whole.profiles is not None and split.profiles is not None
    for key in whole.profiles.keys:
        np.testing.assert_array_equal(
            split.profiles.values[split.profiles.index(key)], whole.profiles.values[whole.profiles.index(key)]
        )
    db = whole.profiles.values[whole.profiles.index(("shop", "db-0"))]
    assert db[2, 23] == pytest.approx(380.0, rel=1e-5)  # Jan 4 23:53: n2's 0.38 cores, above n1's 0.36


def test_the_profile_reads_the_rules_samples_with_an_instant_query(canned_http: CannedHttpServer) -> None:
    vector = {"metric": {"namespace": "a", "pod": "x"}, "value": [ASKED_TIME, "0.5"]}
    canned_http.reply(body={"status": "success", "data": {"resultType": "vector", "result": [vector]}})
    settings = PredictorSettings.model_validate(
        {"history": {"concurrency": 1, "profileRule": PROFILE_RULE, "recordingRule": RULE}}
    )
    history = PrometheusHistorySource(PrometheusSettings(url=canned_http.url), settings)
    with history, pytest.raises(MetricsMalformed) as failure:
        history.read({"n1": 1}, AT)
    assert "matrix" in str(failure.value)
    profile = [unquote(r.path) for r in canned_http.requests if PROFILE_RULE in unquote(r.path)]
    assert profile and all(path.startswith("/api/v1/query?") for path in profile)
    # Jan 2's raw samples: 24 hours and a second, up to half an hour after its closing midnight
    assert f"query={PROFILE_RULE}{{}}[86401s]&time=1704241800.000&" in profile[0]


def test_a_read_just_after_midnight_leaves_out_the_day_whose_last_hour_is_not_recorded(
    canned_http: CannedHttpServer,
) -> None:
    """At 00:10 the hourly rule has not recorded Jan 9's last hour yet (the sample whose window's middle is in
    23:00-24:00 is taken up to 00:30): the read covers Jan 1..8, every sample of them recorded, and asks
    nothing of Jan 9 (serve mode would keep a Jan 9 without its last hour for the whole day)."""
    canned_http.reply(body={"status": "success", "data": {"resultType": "vector", "result": []}})
    settings = PredictorSettings.model_validate(
        {"history": {"concurrency": 1, "profileRule": PROFILE_RULE, "recordingRule": RULE}}
    )
    at = datetime(2024, 1, 10, 0, 10, tzinfo=UTC).timestamp()
    history = PrometheusHistorySource(PrometheusSettings(url=canned_http.url), settings)
    with history, pytest.raises(MetricsMalformed):  # the profile query answered with a vector
        history.read({"n1": 1}, at)
    asked = [dict(parse_qsl(urlsplit(r.path).query)) for r in canned_http.requests]
    pods_times = [float(q["time"]) for q in asked if PROFILE_RULE not in q["query"]]
    assert pods_times == [datetime(2024, 1, d, tzinfo=UTC).timestamp() for d in range(2, 10)]  # Jan 1..8's ends
    assert all(float(q["time"]) <= at for q in asked)


STRATEGY = "strategies:\n- {kind: HighNodeUtilization, thresholds: {cpu: 5}}\n"


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ("{history: {profileRule: 'cpu usage'}}", "String should match pattern"),
        ("{history: {profileRule: '1h:avg'}}", "String should match pattern"),
        ("{profileBuckets: 48, history: {profileRule: ns:avg1h}}", "records one mean per hour: needs profileBuckets"),
    ],
)
def test_a_bad_profile_rule_is_refused_naming_the_field(section: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_policy(f"predictor: {section}\n{STRATEGY}")
    problems = info.value.problems
    assert any(p == "predictor.history.profileRule" and message in m for p, m in problems), problems


@pytest.mark.parametrize(("compressed", "encoding"), [(True, "gzip"), (False, "identity")])
def test_the_answers_are_asked_uncompressed_when_set(
    canned_http: CannedHttpServer, compressed: bool, encoding: str
) -> None:
    canned_http.reply(body={"status": "success", "data": {"resultType": "vector", "result": []}})
    settings = PredictorSettings.model_validate(
        {"nodePeak": "sum", "history": {"recordingRule": RULE, "compressedAnswers": compressed}}
    )
    with PrometheusHistorySource(PrometheusSettings(url=canned_http.url), settings) as history:
        history.read({"n1": 1}, AT)
    accepted = {r.headers.get("Accept-Encoding", "") for r in canned_http.requests}
    assert accepted and all(encoding in value.split(", ") for value in accepted), accepted
