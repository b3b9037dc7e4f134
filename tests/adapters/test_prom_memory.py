"""Memory working set from a real Prometheus: read only when asked, per pod without the pause and pod-level
series, per node from the root cgroup, a stale node unknown (never zero)."""

from __future__ import annotations

import urllib.parse

import pytest

from rebalancer.adapters.prom import PrometheusUsageSource
from rebalancer.domain.errors import MetricsStale
from rebalancer.domain.model import UsageReport
from rebalancer.domain.settings.shared import PrometheusSettings, UsageQueries
from tests.adapters.cadvisor import CadvisorHistory, Container, NodeSpec, PodSpec, constant
from tests.adapters.cadvisor_memory import GiB, MiB, memory_series, node_bytes
from tests.adapters.prom_fixture import CannedHttpServer, PrometheusServer, StartPrometheus

pytestmark = pytest.mark.prometheus

END = 1_700_000_000.0
HISTORY = CadvisorHistory(
    nodes=(NodeSpec("n1", 0.3), NodeSpec("n2", 0.2), NodeSpec("n3", 0.2, last_sample=END - 700)),
    pods=(
        PodSpec("shop", "web-1", "n1", (Container("app", constant(0.5)), Container("sidecar", constant(0.1)))),
        PodSpec("shop", "cache-1", "n2", (Container("app", constant(0.2)),)),
        PodSpec("shop", "old-1", "n3", (Container("app", constant(0.2)),)),
    ),
    start=END - 3600,
    end=END,
)
POD_BYTES = {("shop", "web-1"): 3 * GiB + 1, ("shop", "cache-1"): 700 * MiB, ("shop", "old-1"): GiB}
SYSTEM_BYTES = {"n1": GiB, "n2": 512 * MiB, "n3": GiB}


@pytest.fixture(scope="module")
def prom(start_prometheus: StartPrometheus) -> PrometheusServer:
    return start_prometheus([*HISTORY.series(), *memory_series(HISTORY, POD_BYTES, SYSTEM_BYTES)])


def read(url: str, *, memory: bool, **queries: str) -> UsageReport:
    settings = PrometheusSettings(url=url, max_data_age="5m", queries=UsageQueries(**queries))
    with PrometheusUsageSource(settings) as source:
        return source.read(END, memory=memory)


def test_memory_is_not_read_unless_asked(prom: PrometheusServer) -> None:
    report = read(prom.url, memory=False)

    assert report.node_memory is None
    assert report.pod_memory == {}
    assert "memory" not in report.description


def test_pod_and_node_working_set(prom: PrometheusServer) -> None:
    report = read(prom.url, memory=True)

    assert report.pod_memory[("shop", "web-1")] == 3 * GiB + 1  # no pause, no pod cgroup
    assert report.pod_memory[("shop", "cache-1")] == 700 * MiB
    for node in ("n1", "n2"):
        assert report.node_memory[node] == node_bytes(HISTORY, node, POD_BYTES, SYSTEM_BYTES)
    assert "memory: working set" in report.description


def test_a_stale_node_has_unknown_memory(prom: PrometheusServer) -> None:
    report = read(prom.url, memory=True)

    assert "n3" in report.node_problems
    assert "n3" not in report.node_memory


def test_no_memory_series_is_stale_never_zero(prom: PrometheusServer) -> None:
    with pytest.raises(MetricsStale, match="node_memory"):
        read(prom.url, memory=True, node_memory='sum by (node) (container_memory_rss{{id="/"}})')


def pod_memory(url: str, nodes: frozenset[str]) -> dict[tuple[str, str], int]:
    with PrometheusUsageSource(PrometheusSettings(url=url, max_data_age="5m")) as source:
        return dict(source.pod_memory(END, nodes))


def test_a_cycle_can_leave_the_pods_memory_for_later(prom: PrometheusServer) -> None:
    settings = PrometheusSettings(url=prom.url, max_data_age="5m")
    with PrometheusUsageSource(settings) as source:
        report = source.read(END, memory=True, pod_memory=False)

    assert report.node_memory is not None and set(report.node_memory) == {"n1", "n2"}
    assert report.pod_memory == {}


def test_the_pods_memory_of_some_nodes_only(prom: PrometheusServer) -> None:
    assert pod_memory(prom.url, frozenset({"n1"})) == {("shop", "web-1"): 3 * GiB + 1}
    assert pod_memory(prom.url, frozenset({"n1", "n2"})) == {
        ("shop", "web-1"): 3 * GiB + 1,
        ("shop", "cache-1"): 700 * MiB,
    }
    assert pod_memory(prom.url, frozenset()) == {}


def test_nodes_without_memory_series_leave_their_pods_unknown(prom: PrometheusServer) -> None:
    assert pod_memory(prom.url, frozenset({"gone-1"})) == {}  # unknown: no entry, never zero


def test_a_filter_naming_thousands_of_nodes_is_read(prom: PrometheusServer) -> None:
    many = frozenset({"n2", *(f"ip-10-0-{i // 250}-{i % 250}.eu-west-1.compute.internal" for i in range(2000))})

    assert pod_memory(prom.url, many) == {("shop", "cache-1"): 700 * MiB}


def test_a_long_query_is_posted_a_short_one_is_not(canned_http: CannedHttpServer) -> None:
    canned_http.reply(200, {"status": "success", "data": {"resultType": "vector", "result": []}})
    many = frozenset(f"ip-10-0-{i // 250}-{i % 250}.eu-west-1.compute.internal" for i in range(200))

    pod_memory(canned_http.url, frozenset({"n1"}))
    pod_memory(canned_http.url, many)

    short, long = canned_http.requests
    assert (short.method, short.body) == ("GET", b"")
    assert 'node=~"n1"' in urllib.parse.unquote_plus(short.path)
    assert long.method == "POST" and "?" not in long.path  # proxies refuse request lines of a few KB
    fields = urllib.parse.parse_qs(long.body.decode())
    assert "ip-10-0-0-199" in fields["query"][0] and fields["time"] == [f"{END:.3f}"]
