"""How serve sees the cluster on a real API server: the watch cache the policy asks for (watch-list, rebuilt when
the policy keeps other annotations, its counters on /metrics) and the nodes, with their addresses, that alerts
may name. Nodes and pods are made through an API server alone (the cache reads, nothing runs); the
faults and silences a real server cannot make on demand stay in tests/service/test_serve_cluster_view.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rebalancer.adapters.kube import KubeSource, connect
from rebalancer.app.serve import _ClusterCache, _KnownNodes
from rebalancer.policy import Policy, parse_policy
from rebalancer.service.metrics import Metrics
from tests.controlplane import ControlPlane
from tests.realcluster import objects as o

BASE = "strategies:\n- {kind: LowNodeUtilization, thresholds: {cpu: 20}, targetThresholds: {cpu: 50}}\n"
NAMESPACE = "shop"


def policy(extra: str = "") -> Policy:
    return parse_policy(BASE + extra)


@pytest.fixture
def cluster(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    """The module's control plane with the namespace; the nodes and pods a test made are deleted after it
    (quicker than the namespace: no controller has to empty it)."""
    control_plane.namespace(NAMESPACE)
    yield control_plane
    admin = control_plane.admin
    for made in admin.items("v1", "Pod", NAMESPACE):
        admin.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/{made['metadata']['name']}", gracePeriodSeconds=0)
    for made in admin.items("v1", "Node"):
        admin.delete(f"/api/v1/nodes/{made['metadata']['name']}")
    admin.wait_for(
        "pods and nodes deleted", lambda: not admin.items("v1", "Pod", NAMESPACE) + admin.items("v1", "Node")
    )


@pytest.fixture
def view(cluster: ControlPlane, tmp_path: Path) -> Iterator[tuple[_ClusterCache, _KnownNodes]]:
    api = connect(kubeconfig=str(cluster.user_kubeconfig(tmp_path / "kubeconfig")))
    cache = _ClusterCache(api)
    yield cache, _KnownNodes(KubeSource(api, frozenset()), cache, time.monotonic)
    cache.stop()


def node(name: str, address: str) -> dict[str, Any]:
    made = o.node(name)
    made["status"]["addresses"] = [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": name}]
    return made


def pod(name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    made = o.pod(name, NAMESPACE, node="node-1")
    if annotations:
        made["metadata"]["annotations"] = annotations
    return made


def test_addresses_map_to_their_node_and_a_shared_address_to_none(
    cluster: ControlPlane, view: tuple[_ClusterCache, _KnownNodes]
) -> None:
    cluster.admin.apply_all(node("node-a", "10.0.0.1"), node("node-b", "10.0.0.2"), node("node-c", "10.0.0.2"))
    cache, known = view
    watch_cache = cache.ensure(policy())
    assert watch_cache is not None and watch_cache.wait_synced(10)
    addresses = known.addresses()
    assert addresses["10.0.0.1"] == "node-a"
    assert addresses["node-b"] == "node-b"  # the Hostname address
    assert "10.0.0.2" not in addresses  # two nodes claim it: it names neither
    assert known.names() == {"node-a", "node-b", "node-c"}
    assert known.source_ok()


def test_a_policy_keeping_other_annotations_rebuilds_the_cache(
    cluster: ControlPlane, view: tuple[_ClusterCache, _KnownNodes]
) -> None:
    cluster.admin.apply_all(node("node-1", "10.0.0.1"), pod("p", {"example.com/keep": "yes"}))
    cache, _ = view
    first = cache.ensure(policy())
    assert first is not None and first.wait_synced(10)
    assert cache.ensure(policy()) is first  # same settings: the same cache
    assert "example.com/keep" not in first.facts().pods[0].annotations
    second = cache.ensure(policy("protections: {optOutAnnotation: example.com/keep}\n"))
    assert second is not None and second is not first
    assert second.wait_synced(10)
    assert second.facts().pods[0].annotations.get("example.com/keep") == "yes"
    assert cache.ensure(policy("service: {watchCache: {enabled: false}}\n")) is None
    assert cache.current() is None


def test_watch_counters_reach_the_metrics(cluster: ControlPlane, view: tuple[_ClusterCache, _KnownNodes]) -> None:
    cluster.admin.create(node("node-1", "10.0.0.1"))
    cache, _ = view
    metrics = Metrics()
    metrics.watch_cache(cache.stats)
    assert "rebalancer_watch_events_total{" not in metrics.exposition()[0].decode()  # no cache yet: no series
    watch_cache = cache.ensure(policy())
    assert watch_cache is not None and watch_cache.wait_synced(10)
    cluster.admin.apply_all(pod("p1"), pod("p2"))
    deadline = time.monotonic() + 10
    while len(watch_cache.facts().pods) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    text = metrics.exposition()[0].decode()
    assert 'rebalancer_watch_events_total{collection="pods"} 2.0' in text
    assert 'rebalancer_watch_relists_total{collection="pods"} 0.0' in text
    silence = [line for line in text.splitlines() if line.startswith("rebalancer_watch_seconds_since_contact")]
    assert len(silence) == 4 and all(0 <= float(line.split()[-1]) < 5 for line in silence)
