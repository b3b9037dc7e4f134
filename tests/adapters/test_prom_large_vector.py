"""PromClient.large_vector (the history source's msgspec path) answers and fails exactly as vector() does.

The same answers are read both ways, from the real Prometheus and from canned HTTP answers that a real
server cannot be made to give, and the results or the errors (type and message) must be equal.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import pytest

from rebalancer.adapters.prom.client import PromClient, Vector
from rebalancer.adapters.prom.history import _Table
from rebalancer.domain.errors import MetricsMalformed, MetricsUnavailable, SourceError
from rebalancer.domain.settings.shared import PrometheusSettings
from tests.adapters.prom_fixture import CannedHttpServer, PrometheusServer, Series, StartPrometheus, closed_port

pytestmark = pytest.mark.prometheus

END = 1_704_067_200.0  # 2024-01-01T00:00:00Z
RULE = "namespace_pod:cpu_usage:rate5m"


def rule_series(pods: int) -> list[Series]:
    stamps = [END - 600 + 60 * i for i in range(11)]
    return [
        Series(
            RULE,
            {"namespace": f"ns-{i % 3}", "pod": f"pod-{i}", "node": f"n{i % 4}"},
            [(t, 0.001 * i + 0.0001 * k) for k, t in enumerate(stamps)],
            "gauge",
        )
        for i in range(pods)
    ]


@pytest.fixture(scope="module")
def prom(start_prometheus: StartPrometheus) -> PrometheusServer:
    return start_prometheus(rule_series(500))


def both(url: str, promql: str, timeout: float = 10.0) -> tuple[Vector | SourceError, Vector | SourceError]:
    client = PromClient(PrometheusSettings(url=url), timeout_seconds=timeout)
    out: list[Vector | SourceError] = []
    try:
        for read in (client.vector, client.large_vector):
            try:
                out.append(read("q", promql, END))
            except SourceError as exc:
                out.append(exc)
    finally:
        client.close()
    return out[0], out[1]


def assert_same(small: Vector | SourceError, large: Vector | SourceError) -> None:
    if isinstance(small, SourceError):
        assert type(large) is type(small) and str(large) == str(small), (small, large)
    else:
        assert large == small


@pytest.mark.parametrize(
    "promql",
    [
        pytest.param(RULE, id="500-series"),
        pytest.param(f"quantile_over_time(0.95, {RULE}[10m])", id="quantile"),
        pytest.param(f'{RULE}{{node="nowhere"}}', id="empty"),
        pytest.param("sum by (namespace) (" + RULE + ")", id="aggregated"),
        pytest.param(f"{RULE}[5m]", id="matrix"),
        pytest.param("1", id="scalar"),
        pytest.param('"text"', id="string"),
        pytest.param(f"{RULE} / 0", id="inf"),
        pytest.param(f"({RULE} - {RULE}) / 0", id="nan"),
        pytest.param(f"-1 * {RULE}", id="negative"),
        pytest.param(f"sum by (pod) ({RULE}", id="parse-error"),
    ],
)
def test_real_answers_read_both_ways_are_equal(prom: PrometheusServer, promql: str) -> None:
    small, large = both(prom.url, promql)
    assert_same(small, large)
    if promql == RULE:
        assert isinstance(large, list) and len(large) == 500
        values = {labels["pod"]: value for labels, value in large}
        assert values["pod-7"] == pytest.approx(0.007 + 0.001)  # the sample at END (the eleventh)


def answer(*series: dict[str, Any], result_type: str = "vector") -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": result_type, "result": list(series)}}


AB = {"namespace": "a", "pod": "b"}
INFO = 'PromQL info: metric might not be a counter, name does not end in _total/_sum/_count/_bucket: "cpu"'


@pytest.mark.parametrize(
    ("status", "body"),
    [
        pytest.param(
            200, answer({"metric": AB, "value": [END, "0.25"]}, {"metric": {}, "value": [END, "1e-3"]}), id="ok"
        ),
        pytest.param(200, {**answer({"metric": AB, "value": [END, "1"]}), "warnings": ["slow"]}, id="warnings"),
        pytest.param(
            200,
            {**answer({"metric": AB, "value": [END, "1"]}), "warnings": [INFO, "remote_read: connection refused"]},
            id="info-and-warning",
        ),
        pytest.param(200, {**answer({"metric": AB, "value": [END, "1"]}), "warnings": [INFO]}, id="info-only"),
        pytest.param(503, {"status": "error", "errorType": "unavailable", "error": "TSDB not ready"}, id="503"),
        pytest.param(502, b"<html>bad gateway</html>", id="502"),
        pytest.param(422, {"status": "error", "errorType": "execution", "error": "too many samples"}, id="422"),
        pytest.param(200, b"<html>login</html>", id="html-200"),
        pytest.param(200, {"status": "error", "errorType": "internal", "error": "boom"}, id="status-error-200"),
        pytest.param(200, {"status": "success"}, id="no-data"),
        pytest.param(200, {"status": "success", "data": {"result": {"a": 1}}}, id="result-not-list"),
        pytest.param(
            200, {"status": "success", "data": {"result": [{"metric": AB, "value": [END, "1"]}]}}, id="no-type"
        ),
        pytest.param(200, answer({"metric": AB, "value": [END, "many"]}), id="bad-number"),
        pytest.param(200, answer({"metric": AB, "value": [END, "NaN"]}), id="nan"),
        pytest.param(200, answer({"metric": AB, "value": [END, "-0.5"]}), id="negative"),
        pytest.param(200, answer({"metric": AB, "value": [END]}), id="bad-pair"),
        pytest.param(200, answer({"metric": AB, "value": [END, 0.5]}), id="number-not-string"),
        pytest.param(200, answer({"metric": AB, "histogram": [END, {}]}), id="histogram"),
        pytest.param(200, answer({"value": [END, "1"]}), id="no-metric"),
        pytest.param(200, answer({"metric": {"pod": 3}, "value": [END, "1"]}), id="label-not-string"),
        pytest.param(200, answer({"metric": AB, "values": [[END, "1"]]}, result_type="matrix"), id="matrix"),
        pytest.param(200, {"status": "success", "data": {"resultType": "scalar", "result": [END, "1"]}}, id="scalar"),
    ],
)
def test_canned_answers_read_both_ways_are_equal(canned_http: CannedHttpServer, status: int, body: Any) -> None:
    canned_http.reply(status, body)
    small, large = both(canned_http.url, "q")
    assert_same(small, large)
    if status != 200 or body == {"status": "success"}:
        assert isinstance(large, SourceError)
    if isinstance(body, dict) and "warnings" in body and body["warnings"] != [INFO]:  # a partial answer is never read
        assert isinstance(large, MetricsMalformed) and "answered with warnings" in str(large)
        assert INFO not in str(large)
    if isinstance(body, dict) and body.get("warnings") == [INFO]:  # an advisory on the query, as 2.47-2.53 sent it
        assert large == [(AB, 1.0)]


def test_transport_failures_are_the_same_errors(canned_http: CannedHttpServer) -> None:
    with closed_port() as port:
        small, large = both(f"http://127.0.0.1:{port}", "q")
    assert isinstance(large, MetricsUnavailable) and "cannot reach Prometheus" in str(large)
    assert type(small) is type(large)
    canned_http.reply(200, answer(), delay=30)  # held until the test ends
    started = time.monotonic()
    small, large = both(canned_http.url, "q", timeout=0.3)
    assert time.monotonic() - started < 5  # two 0.3 s timeouts, not the answers; slack for a loaded machine
    assert_same(small, large)
    assert isinstance(large, MetricsUnavailable) and "did not answer within 0.3s" in str(large)


def test_large_vector_sends_time_timeout_and_token(canned_http: CannedHttpServer, tmp_path: Any) -> None:
    canned_http.reply(200, answer({"metric": AB, "value": [END, "0.5"]}))
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    client = PromClient(PrometheusSettings(url=canned_http.url, bearer_token_file=str(token)), timeout_seconds=7)
    try:
        client.authorize()
        assert client.large_vector("q", 'up{job="x"}', END) == [(AB, 0.5)]
    finally:
        client.close()
    (request,) = canned_http.requests
    assert "time=1704067200.000" in request.path and "timeout=7s" in request.path and "query=up" in request.path
    assert request.headers.get("Authorization") == "Bearer s3cret"


def test_table_keeps_the_highest_value_of_a_key_answered_twice_and_nan_where_missing() -> None:
    table: _Table[str] = _Table(3)
    table.add(0, {"a": 0.1, "b": 0.2})
    table.add(1, {"b": 0.3})
    table.add(1, {"b": 0.25, "c": 0.05})  # a second batch of the same day: "b" moved between nodes
    keys, values = table.millicores()
    assert keys == ("a", "b", "c")
    np.testing.assert_allclose(values, [[100, np.nan, np.nan], [200, 300, np.nan], [np.nan, 50, np.nan]])
    pooled: _Table[str] = _Table(1)
    pooled.add(0, {"c": 0.07, "z": 1.0})
    peaks = table.peaks(pooled)
    assert peaks.pooled is not None
    assert math.isnan(peaks.pooled[0]) and math.isnan(peaks.pooled[1]) and peaks.pooled[2] == pytest.approx(70)


def test_a_plain_vector_takes_the_msgspec_path(prom: PrometheusServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The generic walk over decoded dicts is only for answers that are not a plain vector of floats."""

    def walked(name: str, result: object, at: float) -> Vector:
        raise AssertionError("the answer went through parse_vector")

    monkeypatch.setattr("rebalancer.adapters.prom.client.parse_vector", walked)
    client = PromClient(PrometheusSettings(url=prom.url))
    try:
        assert len(client.large_vector("q", RULE, END)) == 500
        with pytest.raises(AssertionError, match="parse_vector"):
            client.large_vector("q", f"{RULE}[5m]", END)
    finally:
        client.close()
