"""How serve sees the cluster when the API server fails or falls silent, with the real client against the
Python test API server: a node listing answered 500 on demand while a fake clock runs readiness past its
staleness limit, and watches that get no event and no bookmark for seconds, then a server gone. A real API
server cannot be made to do either on demand (it bookmarks every minute and answers the listing); the rest
of serve's cluster view (watch-list, addresses, rebuilds, counters) runs on the real control plane in
tests/realcluster/test_serve_cluster_view.py."""

from __future__ import annotations

import socket
import threading
import time
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
from rebalancer.service.runner import Trigger
from tests.adapters.prom_fixture import PrometheusServer, StartPrometheus
from tests.fake_clock import FakeClock
from tests.kubeapi import TestApiServer
from tests.kubeapi import builders as b
from tests.kubeapi.builders import write_kubeconfig
from tests.kubeapi.server import Fault
from tests.service.scenario import END, HISTORY, build_cluster, write_policy

BASE = "strategies:\n- {kind: LowNodeUtilization, thresholds: {cpu: 20}, targetThresholds: {cpu: 50}}\n"


def policy(extra: str = "") -> Policy:
    return parse_policy(BASE + extra)


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


def test_a_readiness_probe_does_not_wait_for_a_node_listing_under_way(tmp_path: Path) -> None:
    """An API server that takes connections and never answers: the probe that lists waits out the listing's
    timeouts; another probe meanwhile answers at once from the last listing (none: not ready). Had it
    waited, probes arriving every few seconds would hold both of the status port's workers, /metrics behind."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        api = connect(kubeconfig=str(write_kubeconfig(tmp_path / "kubeconfig", url)))
        cache = _ClusterCache(api)
        assert cache.ensure(policy("service: {watchCache: {enabled: false}}\n")) is None
        known = _KnownNodes(KubeSource(api, frozenset(), request_timeout=10.0), cache, time.monotonic)
        listing = threading.Thread(target=known.source_ok)
        listing.start()
        silent.settimeout(5)
        request, _ = silent.accept()  # the first probe's listing is under way
        started = time.monotonic()
        assert not known.source_ok()
        # had it waited for the listing, at least its timeout (10 s); 5 s for a loaded machine
        assert time.monotonic() - started < 5
        request.close()
        silent.close()  # the listing (and its retry) fails at once now
        listing.join(timeout=30)
        assert not listing.is_alive()


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
        silenced, planned = time.monotonic(), []
        while True:  # cycles until one starts 3.5 maxStale into the silence, however long each takes
            started = time.monotonic()
            planned.append([e.name for e in cycles(policy, schedule).plan.evictions])
            if started - silenced >= 3.5:
                break
            time.sleep(0.25)
        assert len(planned) >= 2 and all(names == ["api-1"] for names in planned)
        kube_server.stop()  # connection refused from now on: the watches cannot be opened again
        watches = cache.ensure(policy)
        assert watches is not None
        deadline = time.monotonic() + 30  # stale maxStale after the nodes watcher saw its watch end
        while "nodes: no watch open" not in (watches.problem() or ""):
            assert time.monotonic() < deadline, "the watch cache never turned stale"
            time.sleep(0.05)
        with pytest.raises(KubeUnavailable, match=r"watch cache: nodes: no watch open on the API server .*refused"):
            cycles(policy, schedule)
    finally:
        cycles.close()
        cache.stop()
