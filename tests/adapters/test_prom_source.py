"""PrometheusUsageSource: the real prometheus-api-client against the real Prometheus binary.

History (cAdvisor-shaped counters, one pod driven by the real Bitbrains trace) is backfilled with
promtool and queried at END, a fixed instant in July 2013: nothing depends on the wall clock.
HTTP failures a real Prometheus cannot be made to produce on demand (503, silence, odd bodies) come
from a tiny local HTTP server.
"""

from __future__ import annotations

import base64
import contextlib
import gc
import gzip
import json
import socket
import ssl
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from contextlib import closing
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import requests
import urllib3
from prometheus_api_client.exceptions import PrometheusApiClientException

from rebalancer.adapters.prom import PrometheusUsageSource
from rebalancer.adapters.prom.client import PromClient
from rebalancer.adapters.prom.deadline import AnswerDeadline
from rebalancer.domain.errors import MetricsMalformed, MetricsStale, MetricsUnavailable, SourceError
from rebalancer.domain.settings.shared import DEFAULT_POD_CPU_QUERY, PrometheusSettings, UsageQueries
from tests import builders
from tests.adapters.cadvisor import (
    CadvisorHistory,
    Container,
    NodeSpec,
    PodSpec,
    bitbrains_vm,
    constant,
    expected_quantile,
    spike,
)
from tests.adapters.prom_fixture import CannedHttpServer, PrometheusServer, StartPrometheus, closed_port
from tests.controlplane.pki import make_pki
from tests.raw_http import chunk, serving

pytestmark = pytest.mark.prometheus

END = 1372718700.0  # 2013-07-01T22:45:00Z, inside the Bitbrains trace month
START = END - 2 * 3600
STALE_AGE = 810  # n3's cAdvisor stopped reporting this long before END
SPIKE_END = END - 240  # spiky-1 burns 3.5 extra cores during the 30 s before this
TRACE = bitbrains_vm(1)  # 2 cores; busy from about 22:20 to 23:20 UTC on 2013-07-01 (up to 1.26 cores)

HISTORY = CadvisorHistory(
    nodes=(NodeSpec("n1", 0.30), NodeSpec("n2", 0.20), NodeSpec("n3", 0.25, last_sample=END - STALE_AGE)),
    pods=(
        PodSpec("shop", "web-1", "n1", (Container("app", constant(0.5)), Container("sidecar", constant(0.1)))),
        PodSpec("shop", "trace-1", "n1", (Container("app", TRACE),)),
        PodSpec("shop", "spiky-1", "n2", (Container("app", spike(0.4, 3.5, SPIKE_END - 30, SPIKE_END)),)),
        PodSpec("batch", "batch-1", "n2", (Container("worker", constant(1.2)),)),
        PodSpec("shop", "stale-1", "n3", (Container("app", constant(0.7)),)),
    ),
    start=START,
    end=END,
)

RATE = 'rate(container_cpu_usage_seconds_total{{container!="", container!="POD"}}[5m])'
POD_SUM = f"sum by (namespace, pod) ({RATE})"
# The default freshness query looks back over the usage window, so it shows the age of every node the
# usage queries can still see (window + lookback), also when nodes are summed from pods.
WINDOW_FRESHNESS = PrometheusSettings().queries.node_freshness


@pytest.fixture(scope="module")
def prom(start_prometheus: StartPrometheus) -> PrometheusServer:
    return start_prometheus(HISTORY.series())


ONLY_QUERIES = ("pod_cpu", "node_cpu", "node_freshness", "young_nodes", "young_pods")
POD_QUERY_ONLY = {"node_cpu": None, "node_freshness": None, "young_nodes": None, "young_pods": None}


def settings_for(url: str, **queries: Any) -> PrometheusSettings:
    options = {k: queries.pop(k) for k in list(queries) if k not in ONLY_QUERIES}
    return PrometheusSettings(url=url, queries=UsageQueries(**queries), **options)


def read(url: str, at: float = END, **settings: Any) -> Any:
    with PrometheusUsageSource(settings_for(url, **settings)) as source:
        return source.read(at)


def expected_m(rate: Any, **window: float) -> int:
    shape = {"quantile": 0.95, "window": 600, "step": 60, "rate_window": 300} | window
    return round(expected_quantile(rate, END, sample_step=HISTORY.step, **shape) * 1000)


# -- usage figures -----------------------------------------------------------------------------


def test_pod_usage_counts_real_containers_only(prom: PrometheusServer) -> None:
    report = read(prom.url)

    assert report.failure is None
    assert report.pod_cpu_m[("shop", "web-1")] == 600  # app 0.5 + sidecar 0.1
    assert report.pod_cpu_m[("batch", "batch-1")] == 1200
    # The history does hold the trap: summing every cAdvisor series of the pod doubles it (+ pause).
    naive = prom.query('sum by (pod) (rate(container_cpu_usage_seconds_total{pod="web-1"}[5m]))', END)
    assert isinstance(naive, dict)
    assert round(float(naive["result"][0]["value"][1]) * 1000) == 1204


@pytest.mark.parametrize("collector_on", [False, True])
def test_a_read_leaves_the_collector_alone(prom: PrometheusServer, collector_on: bool) -> None:
    """The collector is the composition root's (rebalancer.app.collector): a read neither flips its switch
    nor runs a collection of its own while it is paused."""
    was_on = gc.isenabled()
    gc.enable() if collector_on else gc.disable()
    started: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started.append(info["generation"])

    gc.callbacks.append(count)
    try:
        report = read(prom.url)
        assert gc.isenabled() is collector_on
        assert report.pod_cpu_m
        if not collector_on:
            assert started == []
    finally:
        gc.callbacks.remove(count)
        gc.enable() if was_on else gc.disable()


def test_node_usage_is_the_root_cgroup_window_quantile(prom: PrometheusServer) -> None:
    report = read(prom.url)

    for node in ("n1", "n2"):
        assert abs(report.node_cpu_m[node] - expected_m(HISTORY.node_usage(node))) <= 2, node
    assert report.node_source == {"n1": "cadvisor", "n2": "cadvisor"}
    assert report.sources == ("cadvisor", "nodeExporter", "podSum")
    assert "0.95 quantile over 10m (step 1m) of rate[5m]" in report.description


def test_real_trace_shape_is_read_as_its_window_p95(prom: PrometheusServer) -> None:
    recent = [TRACE(END - k * 30) for k in range(30)]  # the last 15 minutes of the trace
    assert max(recent) - min(recent) > 0.5, "the chosen trace slice should move (busy VM)"

    report = read(prom.url)

    value = report.pod_cpu_m[("shop", "trace-1")]
    assert abs(value - expected_m(TRACE)) <= 2
    assert value < round(max(recent) * 1000)  # a 5-minute peak is smoothed, not copied


def test_short_spike_barely_moves_the_window_quantile(prom: PrometheusServer) -> None:
    peak = 400 + 3500
    smoothed = 400 + 3500 * 30 // 300  # the spike spread over the 5-minute rate window

    default = read(prom.url).pod_cpu_m[("shop", "spiky-1")]
    # With a long window of fine steps the spike is under 5 % of the points: the P95 ignores it.
    guarded = read(prom.url, window="30m", step="30s", rate_window="1m").pod_cpu_m[("shop", "spiky-1")]

    assert default == expected_m(HISTORY.pods[2].usage()) == smoothed
    assert default < peak / 5
    assert guarded == expected_m(HISTORY.pods[2].usage(), window=1800, step=30, rate_window=60) == 400


def test_node_from_pods_when_no_node_query(prom: PrometheusServer) -> None:
    report = read(prom.url, node_cpu=None, node_freshness=WINDOW_FRESHNESS)

    assert report.node_from_pods is True
    assert report.node_cpu_m == {}
    assert report.pod_cpu_m[("shop", "web-1")] == 600
    assert "n3" in report.pod_sum_problems  # freshness still applies to a node summed from its pods
    assert report.sources == ("podSum",)  # a node query set alone: the only node source, as before
    assert "sum of their pods" in report.description


# -- staleness ---------------------------------------------------------------------------------


def test_stale_node_is_unknown_not_zero(prom: PrometheusServer) -> None:
    # Prometheus itself still answers a node CPU value for n3 (the window reaches back to its data).
    raw = prom.query(PrometheusSettings().render(PrometheusSettings().queries.node_cpu or ""), END)
    assert isinstance(raw, dict)
    assert {r["metric"]["node"] for r in raw["result"]} == {"n1", "n2", "n3"}

    report = read(prom.url)

    assert set(report.node_cpu_m) == {"n1", "n2"}
    assert report.node_problems == {"n3": f"cadvisor: newest sample {STALE_AGE}s old > maxDataAge 5m"}


def test_the_pods_of_a_stale_node_have_unknown_usage_in_the_snapshot(prom: PrometheusServer) -> None:
    """n3's cAdvisor stopped 810 s before END: the pod query still reads stale-1 from its old samples (the
    window and the rate reach back 15 minutes); the pods' freshness check says they are old."""
    report = read(prom.url)
    assert ("shop", "stale-1") in report.pod_cpu_m  # the trap: a value from 13-minute-old samples
    assert report.fresh_nodes == frozenset({"n1", "n2"})

    pods = [builders.pod(p.name, p.node, namespace=p.namespace) for p in HISTORY.pods]
    snap = builders.snapshot([builders.node(n.name) for n in HISTORY.nodes], pods, report)

    assert {p.name for p in pods if snap.usage_of(p) is None} == {"stale-1"}


def test_freshness_query_limited_to_the_lookback_still_flags_the_node(prom: PrometheusServer) -> None:
    # timestamp() alone sees only the 5-minute lookback: n3 vanishes from the answer, so its age is
    # unknown -- still a problem for that node, never a pass.
    lookback_only = 'max by ({node_label}) (timestamp(container_cpu_usage_seconds_total{{id="/"}}))'
    report = read(prom.url, node_freshness=lookback_only)

    assert set(report.node_problems) == {"n3"}
    assert "lookback" in report.node_problems["n3"]
    assert set(report.node_cpu_m) == {"n1", "n2"}


def test_without_freshness_query_no_node_is_flagged(prom: PrometheusServer) -> None:
    report = read(prom.url, node_freshness=None)

    assert report.node_problems == {}
    assert set(report.node_cpu_m) == {"n1", "n2", "n3"}
    assert "not checked" in report.description


def test_all_nodes_stale_fails_the_source(prom: PrometheusServer) -> None:
    with pytest.raises(MetricsStale, match="answered no series"):
        read(prom.url, at=END + 3600)
    with pytest.raises(MetricsStale, match="node_freshness answered no series"):
        read(prom.url, at=END + 3600, node_freshness=WINDOW_FRESHNESS)
    with pytest.raises(MetricsStale, match=r"newest sample over all 2 node\(s\) is 700s old"):
        read(prom.url, at=END + 700, node_freshness=WINDOW_FRESHNESS)


def test_no_pod_samples_is_stale_never_zero(prom: PrometheusServer) -> None:
    query = DEFAULT_POD_CPU_QUERY.replace('container!="POD"', 'container!="POD", namespace="nowhere"')
    with pytest.raises(MetricsStale, match="pod_cpu answered no series"):
        read(prom.url, pod_cpu=query)


# -- malformed answers -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("queries", "message"),
    [
        pytest.param({"pod_cpu": f"scalar(sum({RATE}))"}, "got a scalar or string", id="scalar"),
        pytest.param({"pod_cpu": '"text"'}, "got a scalar or string", id="string"),
        pytest.param(
            {"pod_cpu": 'container_cpu_usage_seconds_total{{container="app"}}[5m]'}, "range vector", id="matrix"
        ),
        pytest.param({"node_cpu": 'container_cpu_usage_seconds_total{{id="/"}}[5m]'}, "range vector", id="node-matrix"),
        pytest.param({"pod_cpu": f"({POD_SUM} - {POD_SUM}) / 0"}, "has the value NaN", id="nan"),
        pytest.param({"pod_cpu": f"{POD_SUM} / 0"}, r"has the value \+Inf", id="inf"),
        pytest.param({"pod_cpu": f"-1 * {POD_SUM}"}, "negative value", id="negative"),
        pytest.param({"pod_cpu": f"sum by (pod) ({RATE})"}, "no 'namespace' label", id="no-namespace"),
        pytest.param({"pod_cpu": f"sum by (namespace) ({RATE})"}, "no 'pod' label", id="no-pod"),
        pytest.param(
            {"node_cpu": 'sum(rate(container_cpu_usage_seconds_total{{id="/"}}[5m]))'}, "no 'node' label", id="no-node"
        ),
        pytest.param({"node_label": "kubernetes_node"}, "no 'kubernetes_node' label", id="wrong-node-label"),
        pytest.param(
            {"pod_cpu": f"sum by (namespace, pod, container) ({RATE})"},
            "more than one series for pod shop/web-1",
            id="duplicate-pod",
        ),
        pytest.param(
            {"node_cpu": "sum by (node, id) (rate(container_cpu_usage_seconds_total[5m]))"},
            "more than one series for node",
            id="duplicate-node",
        ),
    ],
)
def test_untrustworthy_answers_are_malformed(prom: PrometheusServer, queries: dict[str, Any], message: str) -> None:
    with pytest.raises(MetricsMalformed, match=message):
        read(prom.url, **queries)


def test_invalid_promql_carries_prometheus_message(prom: PrometheusServer) -> None:
    with pytest.raises(MetricsUnavailable, match=r"HTTP 400 \(bad_data\): .*parse error") as caught:
        read(prom.url, pod_cpu=f"sum by (namespace, pod) ({RATE}")
    assert isinstance(caught.value.__cause__, PrometheusApiClientException)


def test_an_answer_with_warnings_is_malformed_never_read(start_prometheus: StartPrometheus) -> None:
    """A remote-read endpoint that fails leaves Prometheus' answer partial: it says so in ``warnings`` only."""
    with closed_port() as port:
        remote = {"url": f"http://127.0.0.1:{port}/api/v1/read", "read_recent": True}
        server = start_prometheus(HISTORY.series(), remote_read=[remote])
        raw = urllib.request.urlopen(f"{server.url}/api/v1/query?query=up&time={END}", timeout=10).read()
        assert b'"warnings"' in raw and b'"status":"success"' in raw  # the answer a cycle meets

        with pytest.raises(
            MetricsMalformed, match=r"query \w+: Prometheus answered with warnings, .*remote_read: .*refused"
        ):
            read(server.url)
        pods = 'sum by (namespace, pod) (container_cpu_usage_seconds_total{container!=""})'
        client = PromClient(PrometheusSettings(url=server.url))
        asks = (
            lambda: client.vector("q", pods, END),
            lambda: client.large_vector("q", pods, END),
            lambda: client.pod_values("q", pods, END),
            lambda: client.pod_matrix("q", pods, END - 600, END, 60),  # the history's profiles
            lambda: client.pod_samples("q", 'container_cpu_usage_seconds_total{container="app"}[5m]', END),
        )
        try:
            for ask in asks:
                with pytest.raises(MetricsMalformed, match=r"query q: Prometheus answered with warnings"):
                    ask()
        finally:
            client.close()


@pytest.mark.parametrize("stamp", [END - 300, END + 61, "1372718700"], ids=["earlier", "later", "not-a-number"])
def test_an_answer_for_another_time_is_malformed_never_read(canned_http: CannedHttpServer, stamp: object) -> None:
    """A cache or proxy in front of Prometheus that ignores ``time`` answers for another instant: every sample
    of an instant vector carries the time it was evaluated at, so the answer says so."""
    canned_http.reply(200, answer({"metric": AB, "value": [stamp, "0.25"]}))

    with pytest.raises(MetricsMalformed, match=r"query pod_cpu: series .* is for the time .*, not 1372718700\.000"):
        read(canned_http.url, **POD_QUERY_ONLY)
    client = PromClient(PrometheusSettings(url=canned_http.url))
    try:
        for ask in (client.vector, client.large_vector, client.pod_values):
            with pytest.raises(MetricsMalformed, match=r"query q: series .* is for the time"):
                ask("q", "q", END)
        late = [{"metric": AB, "values": [[END + 3600, "1"]]}]  # an hour past the range asked for
        canned_http.reply(200, {"status": "success", "data": {"resultType": "matrix", "result": late}})
        with pytest.raises(MetricsMalformed, match=r"query q: series of pod a/b has a point at .*, outside"):
            client.pod_matrix("q", "q", END - 600, END, 60)
        with pytest.raises(MetricsMalformed, match=r"outside -inf\.\.1372718760\.000"):  # a minute's tolerance
            client.pod_samples("q", "q[1d]", END)
    finally:
        client.close()


# -- transport failures ------------------------------------------------------------------------


def test_prometheus_down_is_unavailable_without_retries() -> None:
    with closed_port() as port:
        started = time.monotonic()
        with pytest.raises(MetricsUnavailable, match="cannot reach Prometheus") as caught:
            read(f"http://127.0.0.1:{port}")
    assert time.monotonic() - started < 2
    assert isinstance(caught.value.__cause__, requests.ConnectionError)


def test_http_503_is_unavailable_with_prometheus_error(canned_http: CannedHttpServer) -> None:
    canned_http.reply(503, {"status": "error", "errorType": "unavailable", "error": "TSDB not ready"})

    with pytest.raises(MetricsUnavailable, match=r"HTTP 503 \(unavailable\): TSDB not ready"):
        read(canned_http.url)
    paths = [request.path for request in canned_http.requests]
    assert len(paths) == len(set(paths)) > 0  # each query sent once: no retry storm inside a cycle


def test_the_queries_are_sent_at_once(canned_http: CannedHttpServer) -> None:
    """Every query is in flight before any is answered: a cycle waits on Prometheus once, not per query."""
    canned_http.reply(200, answer(), delay=30)
    failed: list[BaseException] = []

    def run() -> None:
        try:
            read(canned_http.url, timeout=timedelta(seconds=40))
        except SourceError as exc:
            failed.append(exc)

    reader = threading.Thread(target=run)
    reader.start()
    deadline = time.monotonic() + 20
    while len(canned_http.requests) < 9 and time.monotonic() < deadline:
        time.sleep(0.02)
    held = len(canned_http.requests)  # all held by the canned server: none answered yet
    canned_http.release()
    reader.join(30)
    # per node source: cadvisor's and nodeExporter's CPU, freshness and young nodes, podSum's freshness;
    # then pod CPU and young pods
    assert held == 9
    assert len(failed) == 1 and isinstance(failed[0], MetricsStale)  # empty answers: stale, never zero


def test_timeout_is_unavailable(canned_http: CannedHttpServer) -> None:
    canned_http.reply(200, answer(), delay=30)  # held until the test ends

    started = time.monotonic()
    with pytest.raises(MetricsUnavailable, match=r"did not answer within 1s") as caught:
        read(canned_http.url, timeout=timedelta(seconds=1))
    assert time.monotonic() - started < 6  # the 1 s timeout, not the answer; 5 s for a loaded machine
    assert isinstance(caught.value.__cause__, requests.Timeout)
    paths = [request.path for request in canned_http.requests]
    assert len(paths) == len(set(paths)) > 0  # each query sent once: not asked again after its timeout


def _stalled_answer(asked: list[socket.socket], over: threading.Event) -> Callable[[socket.socket], None]:
    """Headers and the first bytes of an answer, then nothing until ``over`` (a Prometheus or proxy that
    stalls); each connection is added to ``asked``."""

    def handle(conn: socket.socket) -> None:
        asked.append(conn)
        with conn:
            conn.recv(65536)
            body = json.dumps(answer({"metric": AB, "value": [END, "0.25"]})).encode()
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
            conn.sendall(body[:20])
            over.wait(30)

    return handle


def test_an_answer_that_stalls_midway_is_a_timeout() -> None:
    asked: list[socket.socket] = []
    over = threading.Event()
    with (
        serving(_stalled_answer(asked, over)) as url,
        closing(PromClient(PrometheusSettings(url=url, timeout=timedelta(seconds=1)))) as client,
    ):
        try:
            for count, ask in enumerate((client.vector, client.large_vector, client.pod_values), start=1):
                started = time.monotonic()
                with pytest.raises(MetricsUnavailable) as caught:
                    ask("q", "q", END)
                assert time.monotonic() - started < 6  # the 1 s timeout, not the stall; 5 s for a loaded machine
                assert len(asked) == count  # asked once: not again after the timeout
                message = str(caught.value)
                assert "stopped sending its answer: nothing came for 1s" in message, message
                assert "cannot reach" not in message  # it was reached, and answered part of it
        finally:
            over.set()


# one byte of the answer every this long: each read gets a byte well within the tests' 1 s timeout (0.9 s
# to spare on a loaded machine)
DRIP_SECONDS = 0.1


def _dripped_answer(framing: str) -> Callable[[socket.socket], None]:
    """An answer sent a byte at a time, steadily, so that no read ever times out (a broken proxy, a hostile
    peer): plain with a Content-Length, chunked, gzip-compressed and chunked, or ended by closing the connection."""

    def handle(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):  # the client cuts it off
            conn.recv(65536)
            body = json.dumps(answer({"metric": AB, "value": [END, "0.25"]}) | {"padding": "x" * 400}).encode()
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            if framing == "gzip":
                body = gzip.compress(body)
                head += b"Content-Encoding: gzip\r\n"
            if framing == "length":
                conn.sendall(head + b"Content-Length: %d\r\n\r\n" % len(body))
                wire = body
            elif framing == "close":  # no length, not chunked: the answer ends where the connection does
                conn.sendall(head + b"Connection: close\r\n\r\n")
                wire = body
            else:
                conn.sendall(head + b"Transfer-Encoding: chunked\r\n\r\n")
                wire = b"".join(chunk(body[i : i + 1]) for i in range(len(body))) + b"0\r\n\r\n"
            for i in range(len(wire)):
                conn.sendall(wire[i : i + 1])
                time.sleep(DRIP_SECONDS)

    return handle


@pytest.mark.parametrize(
    ("framing", "ask"),
    [
        ("length", "vector"),
        ("chunked", "large_vector"),
        ("gzip", "pod_values"),
        ("close", "vector"),
        ("close", "large_vector"),
    ],
)
def test_an_answer_still_coming_at_twice_the_timeout_is_cut_off(framing: str, ask: str) -> None:
    with (
        serving(_dripped_answer(framing)) as url,
        closing(PromClient(PrometheusSettings(url=url), timeout_seconds=1.0)) as client,
    ):
        started = time.monotonic()
        with pytest.raises(MetricsUnavailable) as caught:
            getattr(client, ask)("q", "q", END)
        elapsed = time.monotonic() - started
    # the answer takes over 40 s to drip; cut at 2 s (5 s of slack for the timer thread's wake-up on a
    # loaded machine: still far below the drip)
    assert 2.0 <= elapsed < 7.0, elapsed
    message = str(caught.value)
    assert "did not finish its answer within 2s (twice prometheus.timeout)" in message, message


def test_an_answer_behind_a_redirect_is_cut_off_at_the_same_deadline() -> None:
    """A redirect (a proxy sending /api/v1/query elsewhere) answers first; the answer it leads to, dripped,
    is still cut at twice the timeout from the request."""
    drip = _dripped_answer("length")

    def handle(conn: socket.socket) -> None:
        if conn.recv(65536, socket.MSG_PEEK).startswith(b"GET /api/"):  # the dripped one reads its request
            with conn, contextlib.suppress(OSError):
                conn.sendall(
                    b"HTTP/1.1 302 Found\r\nLocation: /moved/query\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                )
            return
        drip(conn)

    with serving(handle) as url, closing(PromClient(PrometheusSettings(url=url), timeout_seconds=1.0)) as client:
        started = time.monotonic()
        with pytest.raises(MetricsUnavailable, match="did not finish its answer within 2s"):
            client.vector("q", "q", END)
        assert 2.0 <= time.monotonic() - started < 7.0  # cut at 2 s (5 s for a loaded machine); the drip takes 40 s


def _over_tls(handle: Callable[[socket.socket], None], directory: Path) -> Callable[[socket.socket], None]:
    """``handle`` behind TLS, with a certificate of a test CA (not trusted: the client sets verifyTls false)."""
    pki = make_pki(directory)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pki.serving_cert, pki.serving_key)

    def wrapped(conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            handle(context.wrap_socket(conn, server_side=True))

    return wrapped


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_an_https_answer_still_coming_at_twice_the_timeout_is_cut_off(tmp_path: Path) -> None:
    """The deadline shuts the TLS connection down under its read as well."""
    with (
        serving(_over_tls(_dripped_answer("chunked"), tmp_path), "https") as url,
        closing(PromClient(PrometheusSettings(url=url, verifyTls=False), timeout_seconds=1.0)) as client,
    ):
        started = time.monotonic()
        with pytest.raises(MetricsUnavailable, match="did not finish its answer within 2s"):
            client.large_vector("q", "q", END)
        assert 2.0 <= time.monotonic() - started < 7.0  # cut at 2 s (5 s for a loaded machine); the drip takes 40 s


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_verify_tls_false_holds_beside_a_ca_bundle_named_in_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """requests lets REQUESTS_CA_BUNDLE override a session's verify: every query, the fast paths too, still
    takes an untrusted certificate when the policy says verifyTls: false."""
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", requests.certs.where())
    connections: list[socket.socket] = []
    with (
        serving(_over_tls(_keep_alive_answers(connections), tmp_path), "https") as url,
        closing(PromClient(PrometheusSettings(url=url, verifyTls=False))) as client,
    ):
        assert client.vector("q", "q", END) == [(AB, 0.25)]
        assert client.large_vector("q", "q", END) == [(AB, 0.25)]


def _keep_alive_answers(connections: list[socket.socket]) -> Callable[[socket.socket], None]:
    """Answers every request on a connection with a small vector, keeping the connection open."""

    def handle(conn: socket.socket) -> None:
        connections.append(conn)
        body = json.dumps(answer({"metric": AB, "value": [END, "0.25"]})).encode()
        with conn, contextlib.suppress(OSError):
            while conn.recv(65536):
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                    % (len(body), body)
                )

    return handle


def test_an_answer_read_in_time_leaves_its_connection_open_past_the_deadline() -> None:
    connections: list[socket.socket] = []
    with (
        serving(_keep_alive_answers(connections)) as url,
        # a 2 s timeout: each read of an answer sent at once has it to spare on a loaded machine
        closing(PromClient(PrometheusSettings(url=url), timeout_seconds=2.0)) as client,
    ):
        for again in (False, True):
            if again:
                time.sleep(4.2)  # past the 4 s deadline of each answer: a deadline left armed would shut the socket
            assert client.large_vector("q", "q", END) == [(AB, 0.25)]
            assert client.vector("q", "q", END) == [(AB, 0.25)]
            # each query's deadline is disarmed with its answer: its timer ends now, not at the deadline (4 s)
            timers = [t for t in threading.enumerate() if isinstance(t, threading.Timer)
                      and isinstance(getattr(t.function, "__self__", None), AnswerDeadline)]  # fmt: skip
            ended_by = time.monotonic() + 3.0  # before the deadline, 4 s from each request
            for timer in timers:
                timer.join(max(0.0, ended_by - time.monotonic()))
            assert not [t for t in timers if t.is_alive()]
        assert len(connections) == 1  # every query went over the first connection, kept alive


def _answers_after(delays: list[float], connections: list[socket.socket]) -> Callable[[socket.socket], None]:
    """Answers the n-th request on a connection after ``delays[n]`` seconds, keeping the connection open."""

    def handle(conn: socket.socket) -> None:
        connections.append(conn)
        with conn, contextlib.suppress(OSError):
            for delay in delays:
                if not conn.recv(65536):
                    return
                time.sleep(delay)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok")
            conn.recv(65536)

    return handle


def test_a_late_deadline_never_cuts_the_pooled_connection_another_query_took() -> None:
    """An answer read whole gives its connection back to the pool before its query ends (its decoding and
    checks come after), and another thread's query may take it at once: the first answer's deadline passing
    then must not shut that other query's answer down."""
    connections: list[socket.socket] = []
    # the second answer comes 3 s after its request, which starts once the first answer is read: the first
    # answer's deadline passes while the second is awaited, if the first is read within its 2 s (the slack
    # a loaded machine needs)
    with serving(_answers_after([0.0, 3.0], connections)) as base, requests.Session() as session:
        url = base + "/"
        first = AnswerDeadline(time.monotonic() + 2.0)  # armed on the first answer, not yet disarmed
        try:
            hooks = {"response": lambda response, **_: first.arm(response)}
            assert session.get(url, timeout=5, hooks=hooks).text == "ok"
            second = session.get(url, timeout=5)  # the pooled connection: answered after the first deadline
            assert second.text == "ok"
            assert len(connections) == 1 and not first.cut
        finally:
            first.disarm()


def test_a_deadline_passing_as_its_answer_goes_back_to_the_pool_spares_the_query_that_takes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """urllib3 puts a connection back in the pool before the answer lets go of it: a deadline passing in
    between must not shut down the connection another thread's query has taken meanwhile. The pool is held
    in that window until the deadline has passed (a timer that cannot act then waits for the window to close)."""
    connections: list[socket.socket] = []
    second_sent, answer_second = threading.Event(), threading.Event()

    def handle(conn: socket.socket) -> None:
        connections.append(conn)
        with conn, contextlib.suppress(OSError):
            for n in range(2):
                if not conn.recv(65536):
                    return
                if n == 1:
                    second_sent.set()
                    answer_second.wait(10)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok")
            conn.recv(65536)

    before = set(threading.enumerate())
    first = AnswerDeadline(time.monotonic() + 2.0)  # 2 s for the first answer to arrive on a loaded machine
    second: list[object] = []
    put_conn = urllib3.HTTPConnectionPool._put_conn

    def put_then_hold(pool: urllib3.HTTPConnectionPool, conn: Any) -> None:
        put_conn(pool, conn)
        if conn is None or second:
            return
        second.append("asked")
        other = threading.Thread(target=lambda: second.append(ask(session.get)))
        other.start()
        assert second_sent.wait(10)  # the other query has taken the connection and sent its request
        for timer in set(threading.enumerate()) - before:
            if isinstance(timer, threading.Timer):
                timer.join(3.0)  # the first deadline passes 2 s after it was set
        answer_second.set()
        other.join(10)

    def ask(get: Callable[..., requests.Response]) -> object:
        try:
            return get(url, timeout=10).text
        except requests.RequestException as exc:
            return exc

    monkeypatch.setattr(urllib3.HTTPConnectionPool, "_put_conn", put_then_hold)
    with serving(handle) as base, requests.Session() as session:
        url = base + "/"
        try:
            hooks = {"response": lambda response, **_: first.arm(response)}
            assert session.get(url, timeout=10, hooks=hooks).text == "ok"
        finally:
            first.disarm()
        assert second == ["asked", "ok"]
        assert len(connections) == 1 and not first.cut


def test_a_redirect_cut_off_is_not_followed_past_the_deadline() -> None:
    """requests reads a redirect's answer to its end before following it, and follows it even when that read
    fails: a redirect's answer cut by the deadline leaves the answer it leads to under the deadline, cut at once."""
    drip = _dripped_answer("length")

    def handle(conn: socket.socket) -> None:
        if not conn.recv(65536, socket.MSG_PEEK).startswith(b"GET /api/"):
            drip(conn)
            return
        with conn, contextlib.suppress(OSError):  # a redirect whose own answer drips for 10 s
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 302 Found\r\nLocation: /moved/query\r\nContent-Length: 100\r\n\r\n")
            for _ in range(100):
                conn.sendall(b"x")
                time.sleep(DRIP_SECONDS)

    with serving(handle) as url, closing(PromClient(PrometheusSettings(url=url), timeout_seconds=1.0)) as client:
        started = time.monotonic()
        with pytest.raises(MetricsUnavailable, match="did not finish its answer within 2s"):
            client.vector("q", "q", END)
        # cut at 2 s (5 s for a loaded machine); the redirect would take 10 s, the drip after it 40 s
        assert 2.0 <= time.monotonic() - started < 7.0


def answer(*series: dict[str, Any]) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "vector", "result": list(series)}}


AB = {"namespace": "a", "pod": "b"}


@pytest.mark.parametrize(
    ("status", "body", "error", "message"),
    [
        pytest.param(503, {"status": "error", "error": "x"}, MetricsUnavailable, "HTTP 503", id="503"),
        pytest.param(502, b"<html>bad gateway</html>", MetricsUnavailable, "HTTP 502: <html>bad gateway", id="502"),
        pytest.param(401, b"Unauthorized", MetricsUnavailable, "HTTP 401: Unauthorized", id="401"),
        pytest.param(
            422,
            {"status": "error", "errorType": "execution", "error": "too many samples"},
            MetricsUnavailable,
            r"HTTP 422 \(execution\): too many samples",
            id="422",
        ),
        pytest.param(200, b"<html>login</html>", MetricsMalformed, "not JSON", id="html-200"),
        pytest.param(
            200,
            {"status": "error", "errorType": "internal", "error": "boom"},
            MetricsUnavailable,
            r"HTTP 200 \(internal\): boom",
            id="status-error-200",
        ),
        pytest.param(200, {"status": "success"}, MetricsMalformed, "no data.result", id="no-data"),
        pytest.param(
            200,
            {"status": "success", "data": {"result": {"a": 1}}},
            MetricsMalformed,
            "instant vector",
            id="result-not-list",
        ),
        pytest.param(
            200,
            answer({"metric": AB, "value": [END, "many"]}),
            MetricsMalformed,
            "unparsable value 'many'",
            id="bad-number",
        ),
        pytest.param(
            200, answer({"metric": AB, "value": [END]}), MetricsMalformed, r"no \[time, value\] pair", id="bad-pair"
        ),
        pytest.param(
            200, answer({"metric": AB, "histogram": [END, {}]}), MetricsMalformed, "native histogram", id="histogram"
        ),
        pytest.param(200, answer({"value": [END, "1"]}), MetricsMalformed, "no label set", id="no-metric"),
    ],
)
def test_no_library_exception_leaks(
    canned_http: CannedHttpServer, status: int, body: Any, error: type[SourceError], message: str
) -> None:
    canned_http.reply(status, body)

    with pytest.raises(SourceError) as caught:
        read(canned_http.url, **POD_QUERY_ONLY)

    assert type(caught.value) is error
    caught.match(message)
    assert type(caught.value).__module__ == "rebalancer.domain.errors"


@pytest.mark.parametrize("ask", ["vector", "large_vector", "pod_values"])
def test_a_body_only_a_lenient_json_parser_reads_is_malformed(canned_http: CannedHttpServer, ask: str) -> None:
    """NaN and Infinity are not JSON: the library's parser takes them, the strict one refuses them, and
    every query says the body is not JSON."""
    canned_http.reply(200, b'{"status": "success", "data": {"resultType": "vector", "result": []}, "stats": NaN}')
    with (
        closing(PromClient(PrometheusSettings(url=canned_http.url))) as client,
        pytest.raises(MetricsMalformed, match="HTTP 200 but the body is not JSON"),
    ):
        getattr(client, ask)("q", "q", END)


# -- request details ---------------------------------------------------------------------------


def test_bearer_token_time_and_timeout_are_sent(canned_http: CannedHttpServer, tmp_path: Path) -> None:
    canned_http.reply(200, answer({"metric": AB, "value": [END, "0.2504"]}))
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    settings = settings_for(canned_http.url, **POD_QUERY_ONLY, bearer_token_file=str(token))

    with PrometheusUsageSource(settings) as source:
        report = source.read(END)
        token.write_text("rotated")
        source.read(END)

    assert report.pod_cpu_m == {("a", "b"): 250}
    first, second = canned_http.requests
    assert first.headers["Authorization"] == "Bearer s3cret"
    assert second.headers["Authorization"] == "Bearer rotated"
    sent = urllib.parse.parse_qs(urllib.parse.urlsplit(first.path).query)
    assert sent["time"] == ["1372718700.000"]
    assert sent["timeout"] == ["15s"]


def test_a_password_in_the_url_is_sent_and_never_shown(canned_http: CannedHttpServer) -> None:
    """A generated password with a quote and angle brackets: sent as basic auth, never in a description or error."""
    canned_http.reply(200, answer({"metric": AB, "value": [END, "0.25"]}))
    password = "it's<3>"
    url = canned_http.url.replace("http://", "http://admin:" + password + "@")

    with PrometheusUsageSource(settings_for(url, **POD_QUERY_ONLY)) as source:
        report = source.read(END)
    canned_http.reply(503, b"down")
    with PrometheusUsageSource(settings_for(url, **POD_QUERY_ONLY)) as source, pytest.raises(SourceError) as caught:
        source.read(END)

    [sent] = canned_http.requests
    assert sent.headers["Authorization"] == "Basic " + base64.b64encode(f"admin:{password}".encode()).decode()
    assert report.description.startswith(f"Prometheus http://***@{canned_http.url.removeprefix('http://')} at ")
    assert password not in report.description and "3>" not in str(caught.value)


def test_unreadable_token_file_is_unavailable(tmp_path: Path) -> None:
    settings = settings_for("http://127.0.0.1:9", bearer_token_file=str(tmp_path / "missing"))
    with pytest.raises(MetricsUnavailable, match="bearer token file"):
        PrometheusUsageSource(settings).read(END)


@pytest.mark.parametrize("content", [b"s3cretA\ns3cretB\n", b"s3cretA s3cretB", b"s3cret\x7f"])
def test_a_token_a_header_cannot_carry_is_refused_without_showing_it(
    canned_http: CannedHttpServer, tmp_path: Path, content: bytes
) -> None:
    """Two lines in the token file (a Secret made from the wrong file): requests refuses the header and quotes it."""
    token = tmp_path / "token"
    token.write_bytes(content)
    settings = settings_for(canned_http.url, **POD_QUERY_ONLY, bearer_token_file=str(token))

    with pytest.raises(MetricsUnavailable) as caught:
        PrometheusUsageSource(settings).read(END)

    message = str(caught.value)
    assert f"the Prometheus bearer token file {token} holds white space or a control character" in message
    assert "s3cret" not in message and "s3cret" not in repr(caught.value.__cause__)
    assert canned_http.requests == []  # nothing sent


def test_an_alert_cycle_reads_only_the_alerted_nodes_pods(prom: PrometheusServer) -> None:
    settings = settings_for(prom.url)
    with PrometheusUsageSource(settings) as source:
        report = source.read(END, frozenset({"n1"}))
    assert set(report.pod_cpu_m) == {("shop", "web-1"), ("shop", "trace-1")}
    assert set(report.node_cpu_m) == {"n1", "n2"}  # every node's own usage is still read (destinations)


def test_pod_filter_escapes_node_names_for_the_regex() -> None:
    settings = PrometheusSettings()
    rendered = settings.render(settings.queries.pod_cpu, frozenset({"ip-10-0-0-1.ec2.internal"}))
    assert 'node=~"ip-10-0-0-1\\\\.ec2\\\\.internal"' in rendered
    assert "{pod_filter}" not in settings.render(settings.queries.pod_cpu)


def test_pod_filter_matches_the_pod_series_node_label_not_the_node_queries() -> None:
    settings = PrometheusSettings(node_label="instance", pod_node_label="node")
    rendered = settings.render(settings.queries.pod_cpu, frozenset({"node-02"}))
    assert 'node=~"node-02"' in rendered
    assert "instance" not in rendered
    assert "sum by (instance)" in settings.render(settings.queries.node_cpu or "")


# -- less history than the rate window -----------------------------------------------------------

YOUNG_AGE = 70  # new-1, fresh-1 and late-1 have been scraped for this long at END
SHORT = CadvisorHistory(
    nodes=(NodeSpec("old-1", 0.3),),
    pods=(PodSpec("shop", "steady-1", "old-1", (Container("app", constant(1.0)),)),),
    start=END - 3600,
    end=END,
)
YOUNG_NODE = CadvisorHistory(
    nodes=(NodeSpec("new-1", 0.3),),
    pods=(PodSpec("shop", "fresh-1", "new-1", (Container("app", constant(6.5)),)),),
    start=END - YOUNG_AGE,
    end=END,
    step=10,
)
LATE_POD = CadvisorHistory(  # a pod that started on old-1 70 s ago (old-1's own series come from SHORT)
    nodes=(NodeSpec("old-1", 0.3),),
    pods=(PodSpec("shop", "late-1", "old-1", (Container("app", constant(2.0)),)),),
    start=END - YOUNG_AGE,
    end=END,
    step=10,
)
SETTLED = CadvisorHistory(  # 400 s of data: more than rateWindow + step (360 s)
    nodes=(NodeSpec("settled-1", 0.4),),
    pods=(PodSpec("shop", "settled-pod", "settled-1", (Container("app", constant(3.0)),)),),
    start=END - 400,
    end=END,
)


@pytest.fixture(scope="module")
def short_prom(start_prometheus: StartPrometheus) -> PrometheusServer:
    late = [s for s in LATE_POD.series() if s.labels.get("id") != "/"]
    return start_prometheus([*SHORT.series(), *YOUNG_NODE.series(), *late, *SETTLED.series()])


def test_a_node_with_less_than_the_rate_window_of_data_is_unknown_never_cold(short_prom: PrometheusServer) -> None:
    settings = PrometheusSettings(url=short_prom.url)
    # the trap: rate() spreads 70 s of data over the whole 5m window, a node at 6.8 cores reads about 1.5
    raw = short_prom.query(settings.render(settings.queries.node_cpu or ""), END)
    assert isinstance(raw, dict)
    naive = {r["metric"]["node"]: float(r["value"][1]) for r in raw["result"]}
    assert naive["new-1"] < 0.3 * YOUNG_NODE.node_usage("new-1")(END)

    report = read(short_prom.url)

    assert "new-1" not in report.node_cpu_m
    reason = report.node_problems["new-1"]
    assert "less than 360s of data (rateWindow 5m + step 1m)" in reason
    assert "usage is unknown" in reason
    assert abs(report.node_cpu_m["old-1"] - 1302) <= 2  # system 0.3 + steady-1 1.0 + pause
    assert abs(report.node_cpu_m["settled-1"] - 3402) <= 2  # 400 s of data: read, and read right
    assert "old-1" not in report.node_problems


def test_a_pod_with_less_than_the_rate_window_of_data_is_unknown(short_prom: PrometheusServer) -> None:
    report = read(short_prom.url)

    assert set(report.pod_cpu_m) == {("shop", "steady-1"), ("shop", "settled-pod")}
    assert report.pod_cpu_m[("shop", "steady-1")] == 1000
    assert "2 pod(s) with less than 360s of data: usage unknown" in report.description


def test_an_alert_cycle_leaves_the_alerted_nodes_young_pods_unknown(short_prom: PrometheusServer) -> None:
    with PrometheusUsageSource(PrometheusSettings(url=short_prom.url)) as source:
        report = source.read(END, frozenset({"old-1"}))
    assert set(report.pod_cpu_m) == {("shop", "steady-1")}  # late-1 is on old-1 but 70 s old
    assert "1 pod(s) with less than 360s" in report.description


def test_the_data_span_checks_can_be_switched_off(short_prom: PrometheusServer) -> None:
    report = read(short_prom.url, young_nodes=None, young_pods=None)
    assert report.node_cpu_m["new-1"] < 300 * YOUNG_NODE.node_usage("new-1")(END)  # the trap, knowingly (m)
    assert ("shop", "late-1") in report.pod_cpu_m
    assert "pods' data span: not checked" in report.description
