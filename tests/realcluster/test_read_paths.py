"""Full reads against a real kube-apiserver: the default read in protobuf pages from the watch cache over etcd 3.4
and 3.6; the streaming watch-list over etcd 3.6, and over Debian's etcd 3.4, which refuses it with HTTP 500,
the fall back to the cached pages that says so."""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path
from typing import Any

import pytest

from rebalancer.adapters.kube import KubeSource, connect
from rebalancer.adapters.kube.informer import WatchTiming
from rebalancer.adapters.kube.watch_cache import WatchCache
from rebalancer.domain.errors import KubeUnavailable
from rebalancer.domain.settings.shared import KubernetesSettings, ProtectionSettings
from rebalancer.planning.protections import Protections
from tests.controlplane import ControlPlane
from tests.realcluster import objects as o

ANNOTATIONS = Protections.from_settings(ProtectionSettings()).annotations_read()
PODS = 120
FAST = WatchTiming(watch_seconds=5, request_timeout=10.0, backoff_max=0.5)


def populate(plane: ControlPlane) -> set[str]:
    admin = plane.admin
    for i in range(3):
        admin.create(o.node(f"read-node-{i}"))
    plane.namespace("shop")
    names = {f"app-{i:03d}" for i in range(PODS)}
    for i, name in enumerate(sorted(names)):
        admin.create(o.pod(name, "shop", node=f"read-node-{i % 3}"))
    admin.create(o.pdb("app", "shop", app="app-000", max_unavailable=1))
    return names


def source(plane: ControlPlane, tmp_path: Path, mode: Any = None, page_size: int = 50) -> KubeSource:
    """A reader in ``mode``; None: the defaults, as the policy's."""
    assert plane.pki is not None
    kubeconfig = plane.kubeconfig(tmp_path / "kubeconfig", plane.pki.admin_token)
    settings = KubernetesSettings()
    return KubeSource(connect(kubeconfig=str(kubeconfig)), ANNOTATIONS, list_mode=mode or settings.list_mode,
                      encoding=settings.encoding, page_size=page_size)  # fmt: skip


@pytest.fixture(scope="module")
def etcd36(control_plane: ControlPlane) -> ControlPlane:
    populate(control_plane)
    return control_plane


@pytest.fixture(scope="module")
def etcd34(control_plane_etcd34: ControlPlane) -> ControlPlane:
    populate(control_plane_etcd34)
    return control_plane_etcd34


def read_names(reader: KubeSource) -> set[str]:
    return {p.name for p in reader.read_facts().pods if p.namespace == "shop"}


@pytest.mark.parametrize("etcd", ["3.4", "3.6"])
def test_the_default_read_is_protobuf_pages_from_the_watch_cache_and_says_so(
    etcd: str, etcd34: ControlPlane, etcd36: ControlPlane, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The read costing the API server least on both (docs/performance.md); the log names its resourceVersion."""
    reader = source(etcd34 if etcd == "3.4" else etcd36, tmp_path)
    with caplog.at_level(logging.INFO, logger="rebalancer.adapters.kube.watch_list"):
        names = read_names(reader)
    assert len(names) == PODS
    assert set(reader.last_stats.modes.values()) == {"cached"}
    assert reader.last_stats.encodings == {"nodes": "protobuf", "replicasets": "protobuf", "pods": "protobuf",
                                           "poddisruptionbudgets": "json"}  # fmt: skip
    assert reader.last_stats.pages["pods"] > 1
    assert re.search(r"list pods: \d+ from the watch cache in \d+ pages at resourceVersion \d+", caplog.text)
    assert "watch-list" not in caplog.text


def test_etcd36_serves_the_watch_list(etcd36: ControlPlane, tmp_path: Path) -> None:
    reader = source(etcd36, tmp_path, "auto")
    names = read_names(reader)
    assert len(names) == PODS
    assert reader.last_stats.modes == {"nodes": "watchList", "pods": "watchList", "replicasets": "watchList",
                                       "poddisruptionbudgets": "watchList"}  # fmt: skip


def test_etcd36_paged_and_watch_list_read_the_same(etcd36: ControlPlane, tmp_path: Path) -> None:
    paged = source(etcd36, tmp_path, "paged")
    assert read_names(paged) == read_names(source(etcd36, tmp_path, "watchList"))
    assert set(paged.last_stats.modes.values()) == {"paged"}


def test_etcd34_refuses_the_watch_list_and_auto_falls_back_saying_so(
    etcd34: ControlPlane, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    reader = source(etcd34, tmp_path, "auto")
    with caplog.at_level(logging.INFO, logger="rebalancer.adapters.kube.watch_list"):
        names = read_names(reader)
    assert len(names) == PODS
    assert set(reader.last_stats.modes.values()) == {"cached"}  # as client-go's reflector lists
    refusals = [r for r in caplog.records if "listing page by page from the watch cache" in r.getMessage()]
    assert refusals and all(r.levelno == logging.WARNING for r in refusals)
    assert "RequestWatchProgress" in refusals[0].getMessage()


def test_etcd34_watch_list_mode_fails_naming_the_refusal(etcd34: ControlPlane, tmp_path: Path) -> None:
    with pytest.raises(KubeUnavailable, match="RequestWatchProgress"):
        source(etcd34, tmp_path, "watchList").read_facts()


@pytest.mark.parametrize("etcd", ["3.4", "3.6"])
def test_the_watch_cache_fills_and_follows_changes(
    etcd: str, etcd34: ControlPlane, etcd36: ControlPlane, tmp_path: Path
) -> None:
    """serve's cache: listed once (a watch-list, or pages where the server refuses it), then watched."""
    plane = etcd34 if etcd == "3.4" else etcd36
    assert plane.pki is not None
    kubeconfig = plane.kubeconfig(tmp_path / "kubeconfig", plane.pki.admin_token)
    cache = WatchCache(connect(kubeconfig=str(kubeconfig)), ANNOTATIONS, timing=FAST, max_stale=30.0)
    cache.start()
    try:
        assert cache.wait_synced(30), cache.problem()
        assert len({p.name for p in cache.facts().pods if p.namespace == "shop"}) == PODS
        plane.admin.create(o.pod(f"late-{etcd}", "shop", node="read-node-0"))
        deadline = time.monotonic() + 20
        while f"late-{etcd}" not in {p.name for p in cache.facts().pods}:
            assert time.monotonic() < deadline, "the cache never saw the new pod"
            time.sleep(0.1)
    finally:
        cache.stop()
        plane.admin.delete(f"/api/v1/namespaces/shop/pods/late-{etcd}", gracePeriodSeconds=0)


@pytest.mark.parametrize("etcd", ["3.4", "3.6"])
def test_a_cached_read_pages_from_the_watch_cache_even_for_a_quiet_collection(
    etcd: str, etcd34: ControlPlane, etcd36: ControlPlane, tmp_path: Path
) -> None:
    """Over etcd 3.4 the nodes' cache cannot tell it is current (no progress notifications): a bound on its
    freshness would wait and fail; any version, in pages, is served at once."""
    plane = etcd34 if etcd == "3.4" else etcd36
    reader = source(plane, tmp_path, "cached", page_size=25)
    facts = reader.read_facts()
    assert len({p.name for p in facts.pods if p.namespace == "shop"}) == PODS
    assert {n.name for n in facts.nodes} >= {"read-node-0", "read-node-1", "read-node-2"}
    assert set(reader.last_stats.modes.values()) == {"cached"}
    assert reader.last_stats.pages["pods"] > 1  # paged, not one whole answer
