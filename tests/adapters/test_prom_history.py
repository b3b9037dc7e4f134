"""PrometheusHistorySource against the real Prometheus with 9 days of history backfilled by promtool.

Per-pod loads are constant within each hour (a different level every hour and day), so every 5-minute
rate() window inside an hour is exact, and the daily peaks Prometheus computes can be recomputed here from
the generated load: ``expected_quantile`` for the subquery over cAdvisor counters, ``numpy.quantile`` over
the raw samples for a recorded series. Days are calendar days in UTC: 2024-01-02 .. 2024-01-09, read on
2024-01-10 at 08:00.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import numpy as np
import pytest

from rebalancer.adapters.prom.history import PrometheusHistorySource, node_batches
from rebalancer.domain.errors import MetricsMalformed, MetricsUnavailable
from rebalancer.domain.settings.predictor import PredictorSettings
from rebalancer.domain.settings.shared import PrometheusSettings
from rebalancer.planning.predict.days import last_days
from tests.adapters.cadvisor import COUNTER_START, METRIC, expected_quantile
from tests.adapters.prom_fixture import ASKED_TIME, CannedHttpServer, PrometheusServer, Series, StartPrometheus

pytestmark = pytest.mark.prometheus

DAY = 86400
HISTORY_START = datetime(2024, 1, 1, tzinfo=UTC).timestamp()
AT = datetime(2024, 1, 10, 8, tzinfo=UTC).timestamp()
HISTORY_END = datetime(2024, 1, 10, 1, tzinfo=UTC).timestamp()
SAMPLE_STEP = 150.0  # divides the 5m subquery step: samples line up with the subquery's points
RULE = "namespace_pod:cpu_usage:rate5m"
SYSTEM_QUERY = (
    'sum by ({node_label}) (rate(container_cpu_usage_seconds_total{{id="/"}}[{rate_window}])) - '
    'sum by ({node_label}) (rate(container_cpu_usage_seconds_total{{container!="", container!="POD"}}[{rate_window}]))'
)
JOB_START = datetime(2024, 1, 7, tzinfo=UTC).timestamp() + SAMPLE_STEP  # a pod created on day 7
MOVED_AT = datetime(2024, 1, 5, tzinfo=UTC).timestamp()  # db-0 is rescheduled from n1 to n2 at midnight

Rate = Callable[[float], float]


def hourly(levels: Callable[[int, int], float]) -> Rate:
    """Cores constant within each hour: ``levels(day_index, hour)`` for the hour that (t - 1 s) is in."""

    def rate(t: float) -> float:
        since = t - 1 - HISTORY_START
        return levels(int(since // DAY), int(since % DAY // 3600))

    return rate


WEB = hourly(lambda d, h: 0.2 + (0.1 * d if 9 <= h < 17 else 0.0))  # a daily peak that grows each day
SPIKY = hourly(lambda d, h: 1.5 if d % 3 == 0 and 13 <= h < 16 else 0.1)  # hot for 3 hours on every third day
JOB = hourly(lambda d, h: 0.5 + 0.05 * h)
DB = hourly(lambda d, h: 0.3 + 0.02 * d)
SYSTEM = {"n1": hourly(lambda d, h: 0.25 + 0.01 * h), "n2": hourly(lambda d, h: 0.4)}


def stamps(start: float, end: float) -> list[float]:
    count = int((end - start) // SAMPLE_STEP)
    return [start + i * SAMPLE_STEP for i in range(count + 1)]


def counter(rate: Rate, times: Sequence[float]) -> list[tuple[float, float]]:
    value, out = COUNTER_START, []
    for i, t in enumerate(times):
        if i:
            value += rate(t) * (t - times[i - 1])
        out.append((t, value))
    return out


# (namespace, pod, node, load, first sample, last sample)
PODS = (
    ("shop", "web-1", "n1", WEB, HISTORY_START, HISTORY_END),
    ("shop", "spiky-1", "n2", SPIKY, HISTORY_START, HISTORY_END),
    ("batch", "job-1", "n2", JOB, JOB_START, HISTORY_END),
    ("shop", "db-0", "n1", DB, HISTORY_START, MOVED_AT),
    ("shop", "db-0", "n2", DB, MOVED_AT + SAMPLE_STEP, HISTORY_END),
)


def history_series() -> list[Series]:
    out = []
    for namespace, pod, node, rate, first, last in PODS:
        labels = {"namespace": namespace, "pod": pod, "node": node, "container": "app", "id": f"/pod-{pod}-{node}"}
        out.append(Series(METRIC, labels, counter(rate, stamps(first, last))))
        # a recording rule evaluated every 5m: the mean load over the 5 minutes before each sample
        rule_times = [t for t in stamps(first, last) if t % 300 == 0 and t - 300 >= first]
        out.append(
            Series(
                RULE, {"namespace": namespace, "pod": pod, "node": node}, [(t, rate(t)) for t in rule_times], "gauge"
            )
        )
    for node, system in SYSTEM.items():
        on_node = [p for p in PODS if p[2] == node]

        def root(t: float, system: Rate = system, on_node: tuple[object, ...] = tuple(on_node)) -> float:
            return system(t) + sum(p[3](t) for p in on_node if p[4] < t <= p[5])  # type: ignore[index,operator]

        labels = {"node": node, "id": "/"}
        out.append(Series(METRIC, labels, counter(root, stamps(HISTORY_START, HISTORY_END))))
    return out


def subquery_peak(rate: Rate, end: float, window: float) -> float:
    return 1000 * expected_quantile(
        rate, end, quantile=0.95, window=window - 1, step=300, rate_window=300, sample_step=SAMPLE_STEP
    )


def present(namespace: str, pod: str, day_end: float) -> list[tuple[Rate, float, float]]:
    """The pod's pieces that have samples during the day that ends at ``day_end``."""
    return [
        (p[3], p[4], p[5]) for p in PODS if (p[0], p[1]) == (namespace, pod) and p[4] < day_end and p[5] > day_end - DAY
    ]


@pytest.fixture(scope="module")
def prometheus(start_prometheus: StartPrometheus) -> PrometheusServer:
    return start_prometheus(history_series())


def source(server_url: str, predictor: dict[str, object] | None = None, **history: object) -> PrometheusHistorySource:
    settings = PredictorSettings.model_validate({**(predictor or {}), "history": history})
    return PrometheusHistorySource(PrometheusSettings(url=server_url), settings)


PODS_PER_NODE = {"n1": 1, "n2": 3, "n3-empty": 0}
DAYS = last_days(AT, 8, "UTC")


def test_days_are_the_eight_calendar_days_before_the_read() -> None:
    assert [str(d.day) for d in DAYS] == [f"2024-01-{d:02d}" for d in range(2, 10)]


def test_daily_peaks_of_the_subquery_match_the_generated_load(prometheus: PrometheusServer) -> None:
    with source(prometheus.url) as history:
        read = history.read(PODS_PER_NODE, AT)
    peaks = read.pods
    assert peaks.days == 8 and read.batches == 1 and read.queries == 16  # 8 daily peaks, 8 profiles
    for key, rate in ((("shop", "web-1"), WEB), (("shop", "spiky-1"), SPIKY), (("shop", "db-0"), DB)):
        row = peaks.values[peaks.index(key)]
        expected = [subquery_peak(rate, day.end, DAY) for day in DAYS]
        np.testing.assert_allclose(row, expected, rtol=1e-6, err_msg=str(key))
    # web-1's peak grows by 100m a day; spiky-1 is hot on every third day only
    web = peaks.values[peaks.index(("shop", "web-1"))]
    assert np.allclose(np.diff(web), 100.0, atol=1e-3)
    # 3 hot hours are 36 of the day's 288 points: above the 95th percentile (Jan 4 and Jan 7: days 3 and 6)
    spiky = peaks.values[peaks.index(("shop", "spiky-1"))]
    assert np.round(spiky).tolist() == [100.0, 100.0, 1500.0, 100.0, 100.0, 1500.0, 100.0, 100.0]


def test_a_pod_created_on_day_seven_is_missing_before_never_zero(prometheus: PrometheusServer) -> None:
    with source(prometheus.url) as history:
        peaks = history.read(PODS_PER_NODE, AT).pods
    index = peaks.index(("batch", "job-1"))
    assert index is not None
    job = peaks.values[index]
    assert all(math.isnan(v) for v in job[:5]), job  # days 2..6: NaN, not 0
    expected = [subquery_peak(JOB, day.end, DAY) for day in DAYS[5:]]
    np.testing.assert_allclose(job[5:], expected, rtol=1e-6)


def test_batches_by_node_give_the_same_peaks_as_one_query(prometheus: PrometheusServer) -> None:
    """A tiny sample budget forces one batch per node; db-0, rescheduled from n1 to n2, is still whole."""
    with source(prometheus.url) as history:
        whole_read = history.read(PODS_PER_NODE, AT)
    whole = whole_read.pods
    with source(prometheus.url, maxSamplesPerQuery=1000) as history:
        seen: list[tuple[int, int, str]] = []
        read = history.read(PODS_PER_NODE, AT, progress=lambda done, total, what: seen.append((done, total, what)))
    assert read.batches == 2 and read.queries == 32
    assert [s[0] for s in seen] == list(range(1, 33)) and {s[1] for s in seen} == {32}
    # 1,000 samples / 288 points a day = 3 pods a batch: n1 (1 pod) and n2 (3 pods) do not fit together
    assert node_batches(PODS_PER_NODE, 1) == [("n1",), ("n2",)]
    assert node_batches(PODS_PER_NODE, 4) == [("n1", "n2")]
    for key in whole.keys:
        np.testing.assert_allclose(
            read.pods.values[read.pods.index(key)], whole.values[whole.index(key)], rtol=1e-6, err_msg=str(key)
        )
    assert read.profiles is not None and whole_read.profiles is not None
    profiles, whole_profiles = read.profiles, whole_read.profiles
    for key in whole_profiles.keys:
        np.testing.assert_allclose(
            profiles.values[profiles.index(key)],
            whole_profiles.values[whole_profiles.index(key)],
            rtol=1e-6,
            err_msg=str(key),
        )


def test_recording_rule_samples_are_read_without_a_subquery(prometheus: PrometheusServer) -> None:
    with source(prometheus.url, recordingRule=RULE) as history:
        read = history.read(PODS_PER_NODE, AT)
    for namespace, pod, _node, rate, first, last in PODS[:3]:
        row = read.pods.values[read.pods.index((namespace, pod))]
        for i, day in enumerate(DAYS):
            times = [t for t in stamps(first, last) if t % 300 == 0 and t - 300 >= first]
            inside = [1000 * rate(t) for t in times if day.start < t <= day.end]
            if not inside:
                assert math.isnan(row[i]), (pod, day.day)
                continue
            assert row[i] == pytest.approx(float(np.quantile(inside, 0.95)), rel=1e-9), (pod, day.day)


def test_pooled_p95_is_one_quantile_over_the_whole_window(prometheus: PrometheusServer) -> None:
    with source(prometheus.url, predictor={"aggregation": "pooled_p95"}) as history:
        read = history.read(PODS_PER_NODE, AT)
    assert read.queries == 17 and read.pods.pooled is not None
    index = read.pods.index(("shop", "web-1"))
    assert index is not None
    window = DAYS[-1].end - DAYS[0].start
    assert read.pods.pooled[index] == pytest.approx(subquery_peak(WEB, DAYS[-1].end, window), rel=1e-6)


def test_system_usage_is_the_root_cgroup_minus_the_pods(prometheus: PrometheusServer) -> None:
    with source(prometheus.url, systemQuery=SYSTEM_QUERY) as history:
        read = history.read(PODS_PER_NODE, AT)
    assert read.system is not None and read.queries == 24
    for node, system in SYSTEM.items():
        row = read.system.values[read.system.index(node)]
        np.testing.assert_allclose(row, [subquery_peak(system, day.end, DAY) for day in DAYS], rtol=1e-6, atol=1e-6)


def test_a_query_over_prometheus_sample_limit_fails_the_read_with_its_error(
    start_prometheus: StartPrometheus,
) -> None:
    tight = start_prometheus(history_series(), extra_args=["--query.max-samples=500"])
    with source(tight.url) as history, pytest.raises(MetricsUnavailable) as failure:
        history.read(PODS_PER_NODE, AT)
    message = str(failure.value)
    assert "history day 2024-01-" in message and "422" in message and "too many samples" in message


def test_a_malformed_answer_names_the_query(canned_http: CannedHttpServer) -> None:
    canned_http.reply(
        body={
            "status": "success",
            "data": {"resultType": "vector", "result": [{"metric": {"pod": "x"}, "value": [ASKED_TIME, "0.5"]}]},
        }
    )
    with source(canned_http.url, concurrency=1) as history, pytest.raises(MetricsMalformed) as failure:
        history.read({"n1": 1}, AT)
    assert "history day 2024-01-02" in str(failure.value) and "'namespace'" in str(failure.value)


def test_answers_are_fetched_at_most_concurrency_ahead_of_their_use(canned_http: CannedHttpServer) -> None:
    """An answer is held from its fetch to its use only: the read never piles up every day's answer (at
    150,000 pods each is tens of megabytes)."""
    canned_http.reply(
        body={
            "status": "success",
            "data": {
                "resultType": "vector",
                "result": [{"metric": {"namespace": "a", "pod": "b"}, "value": [ASKED_TIME, "0.5"]}],
            },
        }
    )
    fetched_at_use: list[tuple[int, int]] = []

    def slow_use(done: int, total: int, name: str) -> None:
        time.sleep(0.1)  # the answers come at once: without a bound every query would be fetched by now
        fetched_at_use.append((done, len(canned_http.requests)))

    with source(canned_http.url, {"nodePeak": "sum"}, concurrency=2) as history:
        history.read({"n1": 1}, AT, progress=slow_use)
    assert len(fetched_at_use) == 8  # the eight days, one batch
    assert all(fetched <= done + 3 for done, fetched in fetched_at_use), fetched_at_use


MOVED_MID_HOUR = datetime(2024, 1, 5, 12, 30, tzinfo=UTC).timestamp()  # sts-0: n1 -> n2, mid-day, mid-hour
BEFORE_MOVE = hourly(lambda d, h: 0.3 + 0.01 * h)
AFTER_MOVE = hourly(lambda d, h: 0.6 + 0.01 * h)


def rule_samples(rate: Rate, first: float, last: float) -> list[tuple[float, float]]:
    return [(t, rate(t)) for t in stamps(first, last) if t % 300 == 0 and t - 300 >= first]


def test_a_pod_rescheduled_mid_hour_with_the_recording_rule_is_read(start_prometheus: StartPrometheus) -> None:
    """A pod that keeps its name on another node (a StatefulSet's, after a drain) has two series of the
    recording rule on its move day: its daily peak is the higher of the two, an upper bound of the day's
    (a quantile of the union is at most the higher of the parts'), and so is the hour it moved in."""
    labels = {"namespace": "db", "pod": "sts-0"}
    before = rule_samples(BEFORE_MOVE, HISTORY_START, MOVED_MID_HOUR)
    after = rule_samples(AFTER_MOVE, MOVED_MID_HOUR + SAMPLE_STEP, HISTORY_END)
    server = start_prometheus(
        [
            Series(RULE, {**labels, "node": "n1"}, before, "gauge"),
            Series(RULE, {**labels, "node": "n2"}, after, "gauge"),
        ]
    )
    with source(server.url, recordingRule=RULE) as history:
        read = history.read({"n1": 1, "n2": 1}, AT)

    day = next(i for i, d in enumerate(DAYS) if d.start < MOVED_MID_HOUR <= d.end)
    window = DAYS[day]
    parts = [[1000 * v for t, v in samples if window.start < t <= window.end] for samples in (before, after)]
    peak = read.pods.values[read.pods.index(("db", "sts-0"))][day]
    assert peak == pytest.approx(max(float(np.quantile(p, 0.95)) for p in parts), rel=1e-6)
    assert peak >= float(np.quantile(parts[0] + parts[1], 0.95)) - 1e-6
    assert read.profiles is not None
    hour_start = datetime(2024, 1, 5, 12, tzinfo=UTC).timestamp()
    in_hour = [[1000 * v for t, v in samples if hour_start < t <= hour_start + 3600] for samples in (before, after)]
    profile = read.profiles.values[read.profiles.index(("db", "sts-0")), day, 12]
    assert profile == pytest.approx(max(float(np.mean(p)) for p in in_hour), rel=1e-5)
