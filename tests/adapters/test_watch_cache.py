"""WatchCache: list once, then watch — with the real ``kubernetes`` client against the test API server."""

from __future__ import annotations

import contextlib
import dataclasses
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import msgspec
import pytest

from rebalancer.adapters.kube import KubeSource, connect, decode, wire
from rebalancer.adapters.kube.informer import STOP_WAIT_SECONDS, Informer, WatchTiming
from rebalancer.adapters.kube.lister import ListCall
from rebalancer.adapters.kube.watch_cache import WatchCache
from rebalancer.domain.errors import KubeUnavailable
from rebalancer.domain.model import ClusterFacts, Node, WorkloadRef
from rebalancer.domain.settings.shared import ProtectionSettings
from rebalancer.planning.protections import Protections
from rebalancer.planning.snapshot import group_pods
from tests.kubeapi import Fault, TestApiServer
from tests.kubeapi import builders as b

ANNOTATIONS = Protections.from_settings(ProtectionSettings()).annotations_read()
FAST = WatchTiming(watch_seconds=2, request_timeout=5.0, backoff_max=0.5)


@pytest.fixture
def cache(kube_server: TestApiServer, kubeconfig: Path) -> Iterator[WatchCache]:
    kube_server.bookmark_interval = 0.2
    watch_cache = WatchCache(connect(kubeconfig=str(kubeconfig)), ANNOTATIONS, timing=FAST, max_stale=3.0)
    yield watch_cache
    watch_cache.stop()


def eventually(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


@contextlib.contextmanager
def synced_cache(kubeconfig: Path, timing: WatchTiming = FAST, max_stale: float = 1.0) -> Iterator[WatchCache]:
    """A watch cache started and listed, stopped on the way out."""
    watch_cache = WatchCache(connect(kubeconfig=str(kubeconfig)), ANNOTATIONS, timing=timing, max_stale=max_stale)
    try:
        watch_cache.start()
        assert watch_cache.wait_synced(5)
        yield watch_cache
    finally:
        watch_cache.stop()


def down(cache: WatchCache, collection: str) -> float | None:
    """How long ``collection`` has had no watch open (0 while one is)."""
    [seconds] = [seconds for what, _, _, seconds in cache.stats() if what == collection]
    return seconds


def pod_names(facts: ClusterFacts) -> set[str]:
    return {p.name for p in facts.pods}


def populate(server: TestApiServer) -> None:
    server.add(b.node("node-1"), b.node("node-2"))
    server.add(*b.deployment_chain("web", replicas=4, nodes=("node-1", "node-2")))
    server.add(b.pdb("web", selector={"matchLabels": {"app": "web"}}, min_available=2))


def summary(facts: ClusterFacts) -> tuple[Any, ...]:
    return (
        sorted(n.name for n in facts.nodes),
        sorted((p.namespace, p.name, p.node_name, p.workload) for p in facts.pods),
        sorted((d.namespace, d.name, d.disruptions_allowed) for d in facts.budgets),
    )


def test_the_cache_holds_what_a_listing_reads(kube_server: TestApiServer, kubeconfig: Path, cache: WatchCache) -> None:
    populate(kube_server)
    cache.start()
    assert cache.wait_synced(5)
    listed = KubeSource(connect(kubeconfig=str(kubeconfig)), ANNOTATIONS).read_facts()
    assert summary(cache.facts()) == summary(listed)
    assert {p.workload for p in cache.facts().pods} == {WorkloadRef("Deployment", "default", "web")}


def test_changes_reach_the_cache_without_a_new_listing(kube_server: TestApiServer, cache: WatchCache) -> None:
    populate(kube_server)
    cache.start()
    assert cache.wait_synced(5)
    lists_before = len([r for r in kube_server.requests if r.path == "/api/v1/pods" and "watch" not in r.query])
    kube_server.add(b.pod("extra", node="node-2"))
    victim = next(iter(pod_names(cache.facts()) - {"extra"}))
    kube_server.delete("pods", victim, "default")
    node = kube_server.store.get("nodes", "node-2")
    assert node is not None
    node["spec"]["unschedulable"] = True
    kube_server.store.update(node)

    def caught_up() -> bool:
        facts = cache.facts()
        return (
            "extra" in pod_names(facts) and victim not in pod_names(facts) and any(n.unschedulable for n in facts.nodes)
        )

    eventually(caught_up)
    lists_after = len([r for r in kube_server.requests if r.path == "/api/v1/pods" and "watch" not in r.query])
    assert lists_after == lists_before  # events, not listings
    assert cache.relists == 0


def test_the_pods_by_node_follow_the_events(kube_server: TestApiServer, cache: WatchCache) -> None:
    """The groups the cache keeps event by event are those a regrouping of its pods makes."""
    populate(kube_server)
    cache.start()
    assert cache.wait_synced(5)
    kube_server.add(b.pod("pending", node=None), b.pod("late-abc12-x", owners=[b.owner("ReplicaSet", "late-abc12")]))
    victim = next(iter(pod_names(cache.facts()) - {"pending", "late-abc12-x"}))
    kube_server.delete("pods", victim, "default")
    bound = kube_server.store.get("pods", "pending", "default")
    assert bound is not None
    bound["spec"]["nodeName"] = "node-2"  # the scheduler binds it
    kube_server.store.update(bound)
    done = kube_server.store.get("pods", "late-abc12-x", "default")
    assert done is not None
    done["status"]["phase"] = "Succeeded"
    kube_server.store.update(done)
    kube_server.add(b.replica_set("late-abc12", deployment="late"))  # resolves the owner in place

    def caught_up() -> bool:
        by_name = {p.name: p for p in cache.facts().pods}
        pending, late = by_name.get("pending"), by_name.get("late-abc12-x")
        bound_now = pending is not None and pending.node_name == "node-2"
        return victim not in by_name and bound_now and late is not None and late.phase == "Succeeded"

    eventually(caught_up)
    facts = cache.facts()
    assert facts.by_node == group_pods(facts.pods)
    assert facts.by_workload is not None
    assert {w: {p.name for p in pods} for w, pods in facts.by_workload.items()} == {
        WorkloadRef("Deployment", "default", "web"): {p.name for p in facts.pods if p.labels.get("app") == "web"}
    }
    assert "pending" in {p.name for p in facts.by_node["node-2"].pods}
    assert "late-abc12-x" not in {p.name for group in facts.by_node.values() for p in group.pods}
    assert "" not in facts.by_node


def test_a_pod_seen_before_its_replica_set_resolves_to_the_deployment(
    kube_server: TestApiServer, cache: WatchCache
) -> None:
    kube_server.add(b.node("node-1"))
    cache.start()
    assert cache.wait_synced(5)
    kube_server.add(b.pod("late-abc12-x", owners=[b.owner("ReplicaSet", "late-abc12")]))
    eventually(lambda: "late-abc12-x" in pod_names(cache.facts()))
    kube_server.add(b.replica_set("late-abc12", deployment="late"))
    eventually(lambda: [p.workload for p in cache.facts().pods] == [WorkloadRef("Deployment", "default", "late")])


def test_a_compacted_resource_version_lists_again(kube_server: TestApiServer, cache: WatchCache) -> None:
    populate(kube_server)
    cache.start()
    assert cache.wait_synced(5)
    kube_server.set_fault("/api/v1/pods", Fault(drop=True, times=None))  # the watch breaks ...
    kube_server.close_watches()
    time.sleep(0.3)
    kube_server.add(b.pod("while-away", node="node-1"))
    kube_server.store.expire_continue_tokens()  # ... and history is compacted meanwhile: a 410 on return
    kube_server.clear_faults()
    eventually(lambda: "while-away" in pod_names(cache.facts()))
    assert cache.relists >= 1


def test_each_pods_listing_is_announced(kube_server: TestApiServer, kubeconfig: Path) -> None:
    """serve freezes the heap after each listing of the pods (rebalancer.app.collector.freeze_heap)."""
    populate(kube_server)
    listed: list[int] = []
    cache = WatchCache(
        connect(kubeconfig=str(kubeconfig)),
        ANNOTATIONS,
        timing=FAST,
        max_stale=3.0,
        on_pods_listed=lambda: listed.append(len(listed)),
    )
    try:
        cache.start()
        assert cache.wait_synced(5)
        eventually(lambda: listed == [0])
        kube_server.set_fault("/api/v1/pods", Fault(drop=True, times=None))
        kube_server.close_watches()
        time.sleep(0.3)
        kube_server.store.expire_continue_tokens()  # a 410 on return: the pods are listed again
        kube_server.clear_faults()
        eventually(lambda: listed == [0, 1])
    finally:
        cache.stop()


def test_a_dropped_watch_reconnects_from_where_it_was(kube_server: TestApiServer, cache: WatchCache) -> None:
    populate(kube_server)
    cache.start()
    assert cache.wait_synced(5)
    kube_server.set_fault("/api/v1/pods", Fault(drop=True, times=2))
    kube_server.close_watches()
    kube_server.add(b.pod("after-drop", node="node-1"))
    eventually(lambda: "after-drop" in pod_names(cache.facts()))
    assert cache.relists == 0  # the history was there: no listing needed


def test_an_unreachable_api_server_makes_the_cache_stale(kube_server: TestApiServer, cache: WatchCache) -> None:
    populate(kube_server)
    cache.start()
    assert cache.wait_synced(5)
    cache.facts()
    kube_server.stop()
    # stale once each watcher has seen its watch end and max_stale (3 s) has passed since: wait for that
    eventually(lambda: all(w in (cache.problem() or "") for w in ("pods:", "nodes:")), timeout=30)
    with pytest.raises(
        KubeUnavailable, match=r"no watch open on the API server for (\d+) s: .*Connection refused"
    ) as caught:
        cache.facts()
    assert "pods" in str(caught.value) and "nodes" in str(caught.value)
    assert all(int(s) >= 3 for s in re.findall(r"for (\d+) s", str(caught.value)))  # never before max_stale


def test_a_quiet_watch_stays_fresh_past_every_staleness_limit(kube_server: TestApiServer, kubeconfig: Path) -> None:
    """No event and no bookmark for longer than max_stale and than a watch request lasts: the watches are
    open (and renewed when the server ends them), so the cache is fresh all along."""
    populate(kube_server)
    kube_server.bookmark_interval = float("inf")  # as a real server on a quiet collection: no bookmark either
    # stale after 3 s without an open watch, watches of 5 s: a gap counted from the last event (or the
    # watch's start) instead of the watch's end would pass 2 s, then max_stale, before the renewal
    with synced_cache(kubeconfig, dataclasses.replace(FAST, watch_seconds=5), max_stale=3.0) as quiet:
        kube_server.silence_watches(8.0)  # > max_stale and > watchSeconds
        deadline = time.monotonic() + 7.0
        while time.monotonic() < deadline:
            assert len(quiet.facts().pods) == 4  # never refused as stale
            # only a renewal's gap (tens of milliseconds; 2 s for a loaded machine), never the silence
            assert all(down is not None and down < 2.0 for _, _, _, down in quiet.stats())
            time.sleep(0.1)
        renewed = [r for r in kube_server.requests if r.path == "/api/v1/nodes" and r.query.get("watch") == "true"]
        assert len(renewed) >= 2  # the server ended a watch at its timeoutSeconds, silently, and it was opened again
        kube_server.add(b.pod("after-the-quiet", node="node-1"))
        eventually(lambda: "after-the-quiet" in pod_names(quiet.facts()))
        assert quiet.relists == 0


def test_watches_that_cannot_be_opened_again_make_the_cache_stale(kube_server: TestApiServer, kubeconfig: Path) -> None:
    populate(kube_server)
    with synced_cache(kubeconfig, max_stale=3.0) as failing:  # 3 s: the others re-open within it on a loaded machine
        kube_server.set_fault("/api/v1/nodes", Fault(code=500, times=None))
        kube_server.close_watches()
        eventually(lambda: (down(failing, "nodes") or 0.0) > 0)  # its watch ended and cannot be opened again
        failing.facts()  # down for less than max_stale: still trusted
        eventually(
            lambda: "nodes: no watch open" in (problem := failing.problem() or "") and "pods" not in problem, timeout=15
        )
        with pytest.raises(KubeUnavailable, match=r"watch cache: nodes: no watch open .* for \d s: .*HTTP 500"):
            failing.facts()
        assert failing.problem() is not None and "pods" not in str(failing.problem())  # the others re-opened
        kube_server.clear_faults()
        eventually(lambda: failing.problem() is None)


def test_a_periodic_relist_brings_a_change_the_watch_missed(kube_server: TestApiServer, kubeconfig: Path) -> None:
    populate(kube_server)
    seen: list[int] = []
    refused: list[str] = []
    reading = threading.Event()

    def read_all_along(cache: WatchCache) -> None:
        while not reading.is_set():
            try:
                seen.append(len(cache.facts().pods))
            except KubeUnavailable as exc:
                refused.append(str(exc))
            time.sleep(0.01)

    # a relist every 5 s: the lost event stays missed while the later one arrives (4.9 s for a loaded machine)
    with synced_cache(kubeconfig, dataclasses.replace(FAST, relist_seconds=5.0)) as relisting:
        reader = threading.Thread(target=read_all_along, args=(relisting,))
        reader.start()
        try:
            node = kube_server.store.get("nodes", "node-2")
            assert node is not None
            node["spec"]["unschedulable"] = True
            kube_server.write_unwatched(node)  # its event is lost ...
            kube_server.add(b.pod("later", node="node-1"))  # ... while a later one arrives
            eventually(lambda: "later" in pod_names(relisting.facts()))
            assert not any(n.unschedulable for n in relisting.facts().nodes)  # the watch missed it
            eventually(lambda: any(n.unschedulable for n in relisting.facts().nodes), timeout=15)
            assert relisting.relists >= 1
        finally:
            reading.set()
            reader.join()
    assert refused == [] and min(seen) == 4  # the listing replaced the maps whole: never empty nor refused


def test_a_failing_periodic_relist_keeps_the_watch_and_is_tried_again(
    kube_server: TestApiServer, kubeconfig: Path
) -> None:
    populate(kube_server)

    def node_lists() -> int:
        return len([r for r in kube_server.requests if r.path == "/api/v1/nodes" and "watch" not in r.query])

    paged = dataclasses.replace(FAST, relist_seconds=1.5, list_mode="paged")
    # stale after 2 s without a watch (a renewal's gap, on a loaded machine): a watch given up on its first
    # failed relist (1.5 s in) would be refused by 3.5 s, within the 5 s of reads
    with synced_cache(kubeconfig, paged, max_stale=2.0) as relisting:
        kube_server.set_fault("/api/v1/nodes", Fault(code=500, times=None, watch=False))  # lists fail, watches work
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            relisting.facts()  # never refused: the watch keeps the nodes current
            time.sleep(0.1)
        assert node_lists() >= 3  # the first, then tried again at every relist_seconds
        kube_server.add(b.node("node-3"))
        eventually(lambda: "node-3" in {n.name for n in relisting.nodes()})
        kube_server.clear_faults()
        eventually(lambda: relisting.stats()[0][2] >= 1)  # nodes listed again once the server answers


def test_a_watcher_that_dies_makes_its_collection_stale(kube_server: TestApiServer, kubeconfig: Path) -> None:
    kube_server.add(b.node("node-1"))

    def convert(w: wire.Node) -> tuple[str, Node]:
        if w.metadata.name == "poison":
            raise ValueError("cannot convert this node")
        return w.metadata.name, decode.node(w)

    api = kubernetes.client.CoreV1Api(connect(kubeconfig=str(kubeconfig)))
    nodes = Informer(
        ListCall("nodes", "node", api.list_node, wire.NODE_LIST),
        msgspec.json.Decoder(wire.Node),
        convert,
        host=kube_server.url,
        timing=FAST,
    )
    try:
        nodes.start()
        assert nodes.wait_synced(5)
        assert nodes.problem(60.0) is None
        kube_server.add(b.node("poison"))
        eventually(lambda: nodes.problem(60.0) is not None)
        assert nodes.problem(60.0) == "nodes: the watcher stopped (ValueError: cannot convert this node)"
    finally:
        nodes.stop()


def test_facts_are_refused_until_every_collection_is_listed(kube_server: TestApiServer, cache: WatchCache) -> None:
    populate(kube_server)
    kube_server.forbid("list", "poddisruptionbudgets", group="policy")
    kube_server.forbid("watch", "poddisruptionbudgets", group="policy")  # the watch-list too
    cache.start()
    assert not cache.wait_synced(1.0)
    with pytest.raises(KubeUnavailable, match=r"poddisruptionbudgets: not listed yet .*403"):
        cache.facts()
    kube_server.allow_all()
    assert cache.wait_synced(5)
    assert summary(cache.facts())[2] == [("default", "web", 1)]


def watches(server: TestApiServer) -> set[str]:
    """The collections a watch (not a watch-list) was asked of."""
    return {r.path for r in server.requests if r.query.get("watch") == "true" and "sendInitialEvents" not in r.query}


def test_stop_returns_promptly_with_watches_open(kube_server: TestApiServer, kubeconfig: Path) -> None:
    """Watches of a minute with nothing to say (no bookmark either): a stop that did not wake their reads
    would wait the 5 s a watcher is given to end."""
    populate(kube_server)
    kube_server.bookmark_interval = float("inf")
    with synced_cache(kubeconfig, dataclasses.replace(FAST, watch_seconds=60)) as cache:
        eventually(lambda: len(watches(kube_server)) >= 4)  # every collection's watch asked for
        started = time.monotonic()
        cache.stop()
        assert time.monotonic() - started < STOP_WAIT_SECONDS - 1  # 4 s: the slack a loaded machine needs


def test_stop_waits_for_watchers_stuck_in_a_listing_once_not_once_each(
    kube_server: TestApiServer, kubeconfig: Path
) -> None:
    """Every collection's listing waits 30 s for its answer (a stuck API server): stopping waits the 5 s
    for a watcher to end once for all four, not 5 s each (20 s: past a pod's usual grace period)."""
    collections = ("/api/v1/nodes", "/api/v1/pods", "/apis/apps/v1/replicasets", "/apis/policy/v1/poddisruptionbudgets")
    for path in collections:
        kube_server.set_fault(path, Fault(delay=30, times=None, watch=False))
    timing = WatchTiming(watch_seconds=2, request_timeout=60.0, backoff_max=0.5)
    watch_cache = WatchCache(connect(kubeconfig=str(kubeconfig)), ANNOTATIONS, timing=timing, max_stale=3.0)
    watch_cache.start()
    eventually(lambda: all(kube_server.requests_to(path) for path in collections))
    started = time.monotonic()
    watch_cache.stop()
    took = time.monotonic() - started
    assert STOP_WAIT_SECONDS <= took < 2 * STOP_WAIT_SECONDS, took  # once (5 s), with 5 s for a loaded machine


def test_a_server_ending_every_watch_at_once_is_not_hammered(kube_server: TestApiServer, cache: WatchCache) -> None:
    populate(kube_server)
    cache.start()
    assert cache.wait_synced(5)
    kube_server.set_fault("/api/v1/pods", Fault(body=b"", times=None))  # 200, empty body: the watch ends
    kube_server.close_watches()
    time.sleep(2.0)
    kube_server.clear_faults()
    watches = [r for r in kube_server.requests if r.path == "/api/v1/pods" and r.query.get("watch") == "true"]
    assert len(watches) <= 6  # backoff 0.5, 1, 1 ... s rather than thousands of requests


def test_a_replacement_loses_to_an_event_that_changed_the_entry(kube_server: TestApiServer, kubeconfig: Path) -> None:
    """The owner resolution of a pod that arrived before its ReplicaSet stores its result only over the entry
    it read; an event that came meanwhile wins, and the resolution is tried again on what the event brought."""
    api = kubernetes.client.CoreV1Api(connect(kubeconfig=str(kubeconfig)))
    nodes = Informer(
        ListCall("nodes", "node", api.list_node, wire.NODE_LIST),
        msgspec.json.Decoder(wire.Node),
        lambda w: (w.metadata.name, decode.node(w)),
        host=kube_server.url,
        timing=FAST,
    )
    kube_server.add(b.node("node-1"))
    try:
        nodes.start()
        assert nodes.wait_synced(5)
        read = nodes.get("node-1")
        assert read is not None
        kube_server.store.update(b.node("node-1", cpu="16"))
        eventually(lambda: nodes.get("node-1") is not read)
        evented = nodes.get("node-1")

        assert not nodes.replace("node-1", read, msgspec.structs.replace(read, name="stale"))
        assert nodes.get("node-1") is evented
        assert nodes.replace("node-1", evented, msgspec.structs.replace(evented, name="resolved"))
        assert nodes.get("node-1") == msgspec.structs.replace(evented, name="resolved")
    finally:
        nodes.stop()
