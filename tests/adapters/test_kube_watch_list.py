"""Whole collections read by streaming watch-list, and the paged LIST when the server refuses it."""

from __future__ import annotations

import dataclasses
import logging
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rebalancer.adapters.kube import KubeSource, connect, protobuf_lists
from rebalancer.adapters.kube.watch_cache import WatchCache
from rebalancer.domain.errors import KubeUnavailable
from rebalancer.domain.model import ClusterFacts
from rebalancer.domain.settings.shared import ProtectionSettings
from rebalancer.planning.protections import Protections
from rebalancer.policy import parse_policy
from tests.adapters.test_watch_cache import FAST, eventually, summary
from tests.controlplane.processes import free_port
from tests.kubeapi import Fault, TestApiServer
from tests.kubeapi import builders as b
from tests.kubeapi.builders import write_kubeconfig

ANNOTATIONS = Protections.from_settings(ProtectionSettings()).annotations_read()
PODS = "/api/v1/pods"
WATCH_LIST = {"watch": "true", "sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"}


def source(kubeconfig: Path, mode: Any = "auto", **options: Any) -> KubeSource:
    return KubeSource(connect(kubeconfig=str(kubeconfig)), ANNOTATIONS, list_mode=mode, **options)


def populate(server: TestApiServer, pods: int = 40, nodes: int = 4) -> None:
    server.add(*(b.node(f"node-{i}") for i in range(nodes)))
    server.add(*b.deployment_chain("web", "shop", replicas=2))
    server.add(b.replica_set("big-7f9c", deployment="big", replicas=pods), b.deployment("big"))
    server.add(b.pdb("web", "shop", min_available=1))
    for i in range(pods):
        server.add(
            b.pod(f"big-7f9c-{i:05d}", namespace=f"ns-{i % 3}", node=f"node-{i % nodes}",
                  owners=[b.owner("ReplicaSet", "big-7f9c")])
        )  # fmt: skip


def watch_lists(server: TestApiServer, path: str = PODS) -> list[dict[str, str]]:
    return [r.query for r in server.requests_to(path) if r.query.get("sendInitialEvents") == "true"]


# --- the watch-list path -----------------------------------------------------------------------


def test_a_full_read_is_one_watch_list_per_collection(kube_server: TestApiServer, kubeconfig: Path) -> None:
    populate(kube_server, pods=1234)
    reader = source(kubeconfig)

    facts = reader.read_facts()

    assert len({p.key for p in facts.pods}) == 1234 + 2
    assert set(reader.last_stats.modes.values()) == {"watchList"}
    [query] = watch_lists(kube_server)
    assert len(kube_server.requests_to(PODS)) == 1  # no page, no separate list
    assert query["allowWatchBookmarks"] == "true" and "resourceVersion" not in query  # a consistent read
    assert {k: query[k] for k in WATCH_LIST} == WATCH_LIST
    assert facts.resource_version == str(kube_server.store.revision)


def test_the_watch_list_is_logged(kube_server: TestApiServer, kubeconfig: Path, caplog: Any) -> None:
    populate(kube_server, pods=3)
    with caplog.at_level(logging.INFO, logger="rebalancer.adapters.kube.watch_list"):
        source(kubeconfig).read_facts()
    assert "list pods: 5 by watch-list at resourceVersion" in caplog.text


def test_a_node_read_stays_paged(kube_server: TestApiServer, kubeconfig: Path) -> None:
    populate(kube_server, pods=8)
    facts = source(kubeconfig).read_facts("node-1")
    assert {p.node_name for p in facts.pods} == {"node-1"}
    assert watch_lists(kube_server) == []


# --- the fallback ------------------------------------------------------------------------------


def test_a_server_without_the_feature_is_listed_page_by_page(
    kube_server: TestApiServer, kubeconfig: Path, caplog: Any
) -> None:
    populate(kube_server, pods=30)
    kube_server.watch_list = False  # the WatchList feature gate off: sendInitialEvents is a 422
    reader = source(kubeconfig, page_size=10)

    with caplog.at_level(logging.INFO, logger="rebalancer.adapters.kube.watch_list"):
        facts = reader.read_facts()

    assert len(facts.pods) == 32
    assert set(reader.last_stats.modes.values()) == {"cached"}  # as client-go's reflector lists
    assert reader.last_stats.pages["pods"] == 4
    assert "list pods: the watch-list failed (list pods: HTTP 422 Invalid: " in caplog.text
    assert "listing page by page from the watch cache" in caplog.text
    assert "WatchList feature gate" in caplog.text


def test_forced_watch_list_fails_when_refused(kube_server: TestApiServer, kubeconfig: Path) -> None:
    kube_server.watch_list = False
    with pytest.raises(KubeUnavailable, match=r"list nodes: the server refused the watch-list \(kubernetes.listMode"):
        source(kubeconfig, "watchList").read_facts()
    assert [r for r in kube_server.requests if "watch" not in r.query] == []  # never a paged LIST


def test_forced_paging_never_asks_for_a_watch_list(kube_server: TestApiServer, kubeconfig: Path) -> None:
    populate(kube_server, pods=3)
    source(kubeconfig, "paged").read_facts()
    assert [r for r in kube_server.requests if "watch" in r.query] == []


@pytest.mark.parametrize(
    "answer",
    [
        # a server that ignores sendInitialEvents: changes after the initial state, never the end marker
        b'{"type":"ADDED","object":{"metadata":{"name":"n1","resourceVersion":"5"}}}\n'
        b'{"type":"MODIFIED","object":{"metadata":{"name":"n1","resourceVersion":"6"}}}\n',
        # a plain bookmark first
        b'{"type":"BOOKMARK","object":{"kind":"Node","apiVersion":"v1","metadata":{"resourceVersion":"5"}}}\n',
        # the stream ends cleanly without the end marker
        b'{"type":"ADDED","object":{"metadata":{"name":"n1","resourceVersion":"5"}}}\n',
        # an error status in the stream, before any object
        b'{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
        b'"message":"sendInitialEvents is forbidden","reason":"Invalid","code":422}}\n',
    ],
    ids=["changes", "plain-bookmark", "no-marker", "error-event"],
)
def test_a_stream_without_watch_list_semantics_falls_back(
    kube_server: TestApiServer, kubeconfig: Path, answer: bytes
) -> None:
    kube_server.add(b.node("node-1"), b.node("node-2"))
    kube_server.set_fault("/api/v1/nodes", Fault(body=answer, watch=True, times=1))
    reader = source(kubeconfig)

    assert [n.name for n in reader.read_nodes()] == ["node-1", "node-2"]
    assert reader.last_stats.modes["nodes"] == "cached"
    assert len([r for r in kube_server.requests_to("/api/v1/nodes") if "watch" not in r.query]) == 1


# --- interrupted: listed again page by page, never a partial list ---------------------------------


INTERRUPTIONS = [
    ("cut", r"list pods: cannot reach the Kubernetes API"),
    ("expire", r"list pods: HTTP 410 Expired: .* after 7"),
]


@pytest.mark.parametrize(("how", "expected"), INTERRUPTIONS)
def test_an_interrupted_watch_list_is_listed_again_page_by_page(
    kube_server: TestApiServer, kubeconfig: Path, how: Any, expected: str, caplog: Any
) -> None:
    populate(kube_server, pods=20)
    kube_server.interrupt_watch_lists("pods", after=7, how=how)
    reader = source(kubeconfig, page_size=10)

    with caplog.at_level(logging.WARNING, logger="rebalancer.adapters.kube.watch_list"):
        facts = reader.read_facts()

    assert len(facts.pods) == 22  # every pod, none twice: the 7 read before the cut were dropped
    assert reader.last_stats.modes["pods"] == "cached"
    [warning] = [r.getMessage() for r in caplog.records if "listing page by page" in r.getMessage()]
    assert re.search(expected, warning)


@pytest.mark.parametrize(("how", "expected"), INTERRUPTIONS)
def test_an_interrupted_forced_watch_list_is_an_error(
    kube_server: TestApiServer, kubeconfig: Path, how: Any, expected: str
) -> None:
    populate(kube_server, pods=20)
    kube_server.interrupt_watch_lists("pods", after=7, how=how)

    with pytest.raises(KubeUnavailable, match=expected):
        source(kubeconfig, "watchList").read_facts()

    assert [r for r in kube_server.requests_to(PODS) if "watch" not in r.query] == []  # no partial list, no LIST


def test_an_error_event_midway_falls_back(kube_server: TestApiServer, kubeconfig: Path) -> None:
    kube_server.add(b.node("node-1"), b.node("node-2"))
    added = b'{"type":"ADDED","object":{"metadata":{"name":"n1","resourceVersion":"5"}}}\n'
    error = (
        b'{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
        b'"message":"etcd leader changed","reason":"InternalError","code":500}}\n'
    )
    kube_server.set_fault("/api/v1/nodes", Fault(body=added + error, watch=True))
    with pytest.raises(KubeUnavailable, match="list nodes: HTTP 500 InternalError: etcd leader changed after 1"):
        source(kubeconfig, "watchList").read_nodes()
    reader = source(kubeconfig)
    assert [n.name for n in reader.read_nodes()] == ["node-1", "node-2"]  # n1 of the failed stream dropped
    assert reader.last_stats.modes["nodes"] == "cached"


def test_an_unreachable_server_is_an_error_in_auto_mode(tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{free_port()}")
    with pytest.raises(KubeUnavailable, match="cannot reach the Kubernetes API"):
        source(kubeconfig, request_timeout=2).read_nodes()


def test_a_malformed_object_names_the_object_and_field(kube_server: TestApiServer, kubeconfig: Path) -> None:
    kube_server.add(b.node("node-1"))
    kube_server.add(b.pod("bad", namespace="shop", node="node-1"))
    kube_server.add(b.pod("fine", node="node-1"))
    stored = kube_server.store.get("pods", "bad", "shop")
    assert stored is not None
    stored["spec"]["containers"][0]["resources"]["requests"]["cpu"] = 5  # a number, not a quantity string
    kube_server.store.update(stored)

    with pytest.raises(KubeUnavailable, match=r"pod shop/bad: spec\.containers\[0\]\.resources\.requests\.cpu"):
        source(kubeconfig, "watchList").read_facts()


# --- both paths, the same snapshot ---------------------------------------------------------------

_names = st.text("abcdefghij", min_size=1, max_size=6)
_cpu = st.sampled_from([None, "50m", "250m", "1", "2500m"])
_pods = st.lists(
    st.tuples(_names, st.sampled_from(["default", "shop", "batch"]), st.integers(0, 3), _cpu, st.booleans()),
    max_size=25,
    unique_by=lambda t: (t[0], t[1]),
)


# its own list replaces the suite profile's: too_slow named again (see tests/conftest.py)
@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(pods=_pods, nodes=st.integers(1, 4), replicas=st.integers(0, 3), budgets=st.booleans())
def test_both_paths_give_the_same_snapshot(
    tmp_path: Path, pods: list[tuple[str, str, int, str | None, bool]], nodes: int, replicas: int, budgets: bool
) -> None:
    with TestApiServer() as server:
        server.add(*(b.node(f"node-{i}") for i in range(nodes)))
        server.add(*b.deployment_chain("web", "shop", replicas=replicas))
        if budgets:
            server.add(b.pdb("web", "shop", min_available=1))
        for name, namespace, node, cpu, owned in pods:
            server.add(
                b.pod(f"p-{name}", namespace=namespace, node=f"node-{node % nodes}",
                      containers=[b.container(cpu=cpu)] if cpu else None,
                      owners=[b.owner("ReplicaSet", "web-7f9c")] if owned and namespace == "shop" else ())
            )  # fmt: skip
        config = b.write_kubeconfig(tmp_path / "kubeconfig", server.url, token=None)
        paged = source(config, "paged", page_size=7)
        streamed = source(config, "watchList")

        assert _comparable(streamed.read_facts()) == _comparable(paged.read_facts())
        assert set(streamed.last_stats.modes.values()) == {"watchList"}
        assert set(paged.last_stats.modes.values()) == {"paged"}


def _comparable(facts: ClusterFacts) -> tuple[Any, ...]:
    by_key = sorted(facts.pods, key=lambda p: p.key)
    return (sorted(facts.nodes, key=lambda n: n.name), by_key, facts.budgets, facts.resource_version)


# --- the settings and the serve mode's watch cache ----------------------------------------------


def test_list_mode_is_validated() -> None:
    policy = "strategies:\n- {kind: LowNodeUtilization, thresholds: {cpu: 20}, targetThresholds: {cpu: 50}}\n"
    assert parse_policy(policy).kubernetes.list_mode == "cached"
    assert parse_policy(policy).kubernetes.encoding == "protobuf"
    assert parse_policy(policy + "kubernetes: {encoding: json}\n").kubernetes.encoding == "json"
    with pytest.raises(Exception, match=r"kubernetes\.encoding"):
        parse_policy(policy + "kubernetes: {encoding: yaml}\n")
    assert parse_policy(policy + "kubernetes: {listMode: paged}\n").kubernetes.list_mode == "paged"
    with pytest.raises(Exception, match=r"kubernetes\.listMode") as caught:
        parse_policy(policy + "kubernetes: {listMode: pages}\n")
    assert "watchList" in str(caught.value)


def test_the_watch_cache_syncs_and_relists_by_watch_list(kube_server: TestApiServer, kubeconfig: Path) -> None:
    populate(kube_server, pods=12)
    timing = dataclasses.replace(FAST, relist_seconds=1.5, list_mode="auto")
    cache = WatchCache(connect(kubeconfig=str(kubeconfig)), ANNOTATIONS, timing=timing, max_stale=3.0)
    cache.start()
    try:
        assert cache.wait_synced(5)
        assert summary(cache.facts())[2] == [("shop", "web", 1)]
        assert len(cache.facts().pods) == 14
        eventually(lambda: cache.relists >= 4, timeout=8)  # every collection listed again
    finally:
        cache.stop()
    for path in ("/api/v1/nodes", PODS, "/apis/apps/v1/replicasets", "/apis/policy/v1/poddisruptionbudgets"):
        assert len(watch_lists(kube_server, path)) >= 2, path
        assert [r for r in kube_server.requests_to(path) if "watch" not in r.query] == [], path


def test_the_watch_cache_falls_back_to_pages(kube_server: TestApiServer, kubeconfig: Path) -> None:
    populate(kube_server, pods=12)
    kube_server.watch_list = False
    timing = dataclasses.replace(FAST, list_mode="auto")
    cache = WatchCache(connect(kubeconfig=str(kubeconfig)), ANNOTATIONS, timing=timing, max_stale=3.0)
    cache.start()
    try:
        assert cache.wait_synced(5)
        assert len(cache.facts().pods) == 14
    finally:
        cache.stop()
    listed = [r.query for r in kube_server.requests_to(PODS) if "limit" in r.query]  # listed page by page
    assert listed and listed[0]["resourceVersionMatch"] == "NotOlderThan"  # from the watch cache


def test_a_cached_read_asks_the_watch_cache_for_any_version_in_pages(
    kube_server: TestApiServer, kubeconfig: Path
) -> None:
    populate(kube_server, pods=30)
    reader = source(kubeconfig, "cached", page_size=10)
    facts = reader.read_facts()
    assert len(facts.pods) == 32
    assert set(reader.last_stats.modes.values()) == {"cached"}
    first, *pages = [r.query for r in kube_server.requests_to(PODS)]
    assert (first["resourceVersion"], first["resourceVersionMatch"], first["limit"]) == ("1", "NotOlderThan", "10")
    assert pages and all("resourceVersion" not in q and "continue" in q for q in pages)  # the token carries it
    assert watch_lists(kube_server) == []


def test_a_protobuf_read_takes_a_json_answer_as_it_comes(kube_server: TestApiServer, kubeconfig: Path) -> None:
    """Protobuf is asked for with JSON accepted: a server that answers JSON (this one) is read all the same."""
    populate(kube_server, pods=12)
    reader = source(kubeconfig, "cached", page_size=5, encoding="protobuf")
    assert len(reader.read_facts().pods) == 14
    asked = {r.path: r.headers.get("accept") for r in kube_server.requests}
    assert asked[PODS] == asked["/api/v1/nodes"] == asked["/apis/apps/v1/replicasets"] == protobuf_lists.ACCEPT
    assert asked["/apis/policy/v1/poddisruptionbudgets"] == "application/json"
    assert set(reader.last_stats.encodings.values()) == {"json"}
    before = len(kube_server.requests)
    source(kubeconfig, "cached", page_size=5, encoding="json").read_facts()
    assert {r.headers.get("accept") for r in kube_server.requests[before:]} == {"application/json"}
