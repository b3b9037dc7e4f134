"""How serve sees the cluster: the watch cache the policy asks for, and the nodes (with their addresses)
that alerts may name — with the real client against the test API server."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from rebalancer.actions.evictor import DryRun
from rebalancer.adapters.kube import KubeSource, connect
from rebalancer.app.runtime import Runtime
from rebalancer.app.serve import _ClusterCache, _Cycles, _KnownNodes, _UsageSource
from rebalancer.domain.errors import KubeUnavailable
from rebalancer.domain.settings.shared import PrometheusSettings
from rebalancer.policy import Policy, load_policy, parse_policy
from rebalancer.service.metrics import Metrics
from rebalancer.service.runner import Trigger
from tests.adapters.prom_fixture import PrometheusServer, StartPrometheus
from tests.fake_clock import FakeClock
from tests.kubeapi import TestApiServer
from tests.kubeapi import builders as b
from tests.kubeapi.server import Fault
from tests.service.scenario import END, HISTORY, build_cluster, write_policy

BASE = "strategies:\n- {kind: LowNodeUtilization, thresholds: {cpu: 20}, targetThresholds: {cpu: 50}}\n"


def policy(extra: str = "") -> Policy:
    return parse_policy(BASE + extra)


@pytest.fixture
def view(kube_server: TestApiServer, kubeconfig: Path) -> Iterator[tuple[_ClusterCache, _KnownNodes]]:
    api = connect(kubeconfig=str(kubeconfig))
    cache = _ClusterCache(api)
    yield cache, _KnownNodes(KubeSource(api, frozenset()), cache, time.monotonic)
    cache.stop()


def test_addresses_map_to_their_node_and_a_shared_address_to_none(
    kube_server: TestApiServer, view: tuple[_ClusterCache, _KnownNodes]
) -> None:
    kube_server.add(
        b.node("node-a", address="10.0.0.1"), b.node("node-b", address="10.0.0.2"), b.node("node-c", address="10.0.0.2")
    )
    cache, known = view
    watch_cache = cache.ensure(policy())
    assert watch_cache is not None and watch_cache.wait_synced(5)
    addresses = known.addresses()
    assert addresses["10.0.0.1"] == "node-a"
    assert addresses["node-b"] == "node-b"  # the Hostname address
    assert "10.0.0.2" not in addresses  # two nodes claim it: it names neither
    assert known.names() == {"node-a", "node-b", "node-c"}
    assert known.source_ok()


def test_without_the_cache_readiness_lists_the_nodes_itself_and_fails_once_listings_go_stale(
    kube_server: TestApiServer, kubeconfig: Path
) -> None:
    kube_server.add(b.node("node-a"))
    api = connect(kubeconfig=str(kubeconfig))
    cache = _ClusterCache(api)
    assert cache.ensure(policy("service: {watchCache: {enabled: false}}\n")) is None
    clock = FakeClock(1000.0)
    known = _KnownNodes(KubeSource(api, frozenset()), cache, clock, ttl=30)

    def listings() -> int:
        return sum(1 for r in kube_server.requests if r.path == "/api/v1/nodes")

    assert known.source_ok()  # a follower runs no cycle: readiness lists the nodes itself
    assert listings() == 1
    assert known.source_ok() and listings() == 1  # within the ttl: no new listing
    kube_server.set_fault("/api/v1/nodes", Fault(code=500))
    clock.advance(31)
    assert known.source_ok()  # the listing failed, but the last good one is only 31 s old
    clock.advance(60)
    assert not known.source_ok()  # 91 s: more than three ttl without an answer
    assert known.names() == {"node-a"}  # what was known is kept for the webhook
    kube_server.clear_faults()
    clock.advance(31)
    assert known.source_ok()
    assert not [
        r for r in kube_server.requests if "watch" in r.query and "sendInitialEvents" not in r.query
    ]  # no watch kept open


def test_a_policy_keeping_other_annotations_rebuilds_the_cache(
    kube_server: TestApiServer, view: tuple[_ClusterCache, _KnownNodes]
) -> None:
    kube_server.add(b.node("node-1"), b.pod("p", annotations={"example.com/keep": "yes"}))
    cache, _ = view
    first = cache.ensure(policy())
    assert first is not None and first.wait_synced(5)
    assert cache.ensure(policy()) is first  # same settings: the same cache
    assert "example.com/keep" not in first.facts().pods[0].annotations
    second = cache.ensure(policy("protections: {optOutAnnotation: example.com/keep}\n"))
    assert second is not None and second is not first
    assert second.wait_synced(5)
    assert second.facts().pods[0].annotations.get("example.com/keep") == "yes"
    assert cache.ensure(policy("service: {watchCache: {enabled: false}}\n")) is None
    assert cache.current() is None


def test_watch_counters_reach_the_metrics(kube_server: TestApiServer, view: tuple[_ClusterCache, _KnownNodes]) -> None:
    kube_server.add(b.node("node-1"))
    cache, _ = view
    metrics = Metrics()
    metrics.watch_cache(cache.stats)
    assert "rebalancer_watch_events_total{" not in metrics.exposition()[0].decode()  # no cache yet: no series
    watch_cache = cache.ensure(policy())
    assert watch_cache is not None and watch_cache.wait_synced(5)
    kube_server.add(b.pod("p1"), b.pod("p2"))
    deadline = time.monotonic() + 5
    while len(watch_cache.facts().pods) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    text = metrics.exposition()[0].decode()
    assert 'rebalancer_watch_events_total{collection="pods"} 2.0' in text
    assert 'rebalancer_watch_relists_total{collection="pods"} 0.0' in text
    silence = [line for line in text.splitlines() if line.startswith("rebalancer_watch_seconds_since_contact")]
    assert len(silence) == 4 and all(0 <= float(line.split()[-1]) < 5 for line in silence)


def test_one_prometheus_source_is_kept_between_cycles_until_its_settings_change() -> None:
    """Its HTTP session (and connection) stays warm for the next alert; new settings get a new one."""
    usage = _UsageSource()
    first = PrometheusSettings(url="http://127.0.0.1:9")
    source = usage.get(first)
    assert usage.get(PrometheusSettings(url="http://127.0.0.1:9")) is source  # equal settings after a reload
    changed = usage.get(PrometheusSettings(url="http://127.0.0.1:9", timeout=timedelta(seconds=3)))
    assert changed is not source
    usage.close()
    assert usage.get(first) is not changed
    usage.close()


@pytest.fixture(scope="module")
def prometheus(start_prometheus: StartPrometheus) -> PrometheusServer:
    return start_prometheus(HISTORY.series())


def test_schedule_cycles_keep_running_while_the_api_server_says_nothing(
    kube_server: TestApiServer, kubeconfig: Path, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    """A quiet cluster: no event and no bookmark for four times maxStale (time scaled: 1 s), and
    past a watch's renewal. Every cycle plans from the cache; once the API server is gone they fail."""
    build_cluster(kube_server)
    kube_server.bookmark_interval = float("inf")
    quiet = "service: {watchCache: {maxStale: 1s, watchTimeout: 10s}}\n"
    policy = load_policy(write_policy(tmp_path / "policy.yaml", prometheus.url, extra=quiet))
    api = connect(kubeconfig=str(kubeconfig))
    cache = _ClusterCache(api)
    known = _KnownNodes(KubeSource(api, frozenset()), cache, time.monotonic)
    cycles = _Cycles(Runtime(policy, api, lambda: END, DryRun.CLIENT, requester="rebalancer/test"), known, cache)
    schedule = Trigger("schedule", (0,))
    try:
        first = cycles(policy, schedule)
        assert [e.name for e in first.plan.evictions] == ["api-1"]
        kube_server.silence_watches(4.0)
        planned = []
        deadline = time.monotonic() + 4.0
        while time.monotonic() < deadline:
            planned.append([e.name for e in cycles(policy, schedule).plan.evictions])
            time.sleep(0.25)
        assert len(planned) >= 6 and all(names == ["api-1"] for names in planned)
        kube_server.stop()  # connection refused from now on: the watches cannot be opened again
        time.sleep(1.8)
        with pytest.raises(KubeUnavailable, match=r"watch cache: nodes: no watch open on the API server .*refused"):
            cycles(policy, schedule)
    finally:
        cycles.close()
        cache.stop()
