"""The test API server's ``?watch=true``, read by the official client's own ``kubernetes.watch.Watch``:
if the stream were not the real wire format, the client's generated models would not decode it."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes.watch

from rebalancer.adapters.kube import connect
from tests.kubeapi import TestApiServer
from tests.kubeapi import builders as b


def core(kubeconfig: Path) -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(connect(kubeconfig=str(kubeconfig)))


def events(api: kubernetes.client.CoreV1Api, count: int, timeout: int = 5, **params: Any) -> list[tuple[str, str, str]]:
    """(type, name, resourceVersion) of the first ``count`` events of a pod watch."""
    seen: list[tuple[str, str, str]] = []
    watcher = kubernetes.watch.Watch()  # type: ignore[no-untyped-call]
    for event in watcher.stream(api.list_pod_for_all_namespaces, timeout_seconds=timeout, **params):  # type: ignore[no-untyped-call]
        obj = event["object"]
        seen.append((event["type"], obj.metadata.name, obj.metadata.resource_version))
        if len(seen) >= count:
            watcher.stop()  # type: ignore[no-untyped-call]
    return seen


def test_changes_after_a_resource_version_arrive_in_order(kube_server: TestApiServer, kubeconfig: Path) -> None:
    kube_server.add(b.node("node-1"), b.pod("a"))
    start = str(kube_server.store.revision)

    def writes() -> None:
        time.sleep(0.2)
        kube_server.add(b.pod("b"))
        pod = kube_server.store.get("pods", "a", "default")
        assert pod is not None
        pod["metadata"]["labels"] = {"changed": "yes"}
        kube_server.store.update(pod)
        kube_server.delete("pods", "b", "default")

    threading.Thread(target=writes).start()
    seen = events(core(kubeconfig), 3, resource_version=start)
    assert [(t, n) for t, n, _ in seen] == [("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]
    versions = [int(v) for _, _, v in seen]
    assert versions == sorted(versions) and versions[0] > int(start)


def test_without_a_resource_version_the_current_state_comes_first(kube_server: TestApiServer, kubeconfig: Path) -> None:
    kube_server.add(b.node("node-1"), b.pod("a"), b.pod("b"))
    seen = events(core(kubeconfig), 2)
    assert sorted((t, n) for t, n, _ in seen) == [("ADDED", "a"), ("ADDED", "b")]


def test_a_compacted_resource_version_is_an_error_event_with_410(kube_server: TestApiServer, kubeconfig: Path) -> None:
    kube_server.add(b.node("node-1"), b.pod("a"))
    old = kube_server.store.revision
    kube_server.add(b.pod("b"))
    kube_server.store.compact()
    api = core(kubeconfig)
    response = api.list_pod_for_all_namespaces(watch=True, resource_version=str(old), _preload_content=False)
    body = response.data.decode()
    assert response.status == 200  # the error travels inside the stream, as the watch cache sends it
    assert '"type":"ERROR"' in body and '"code":410' in body and '"reason":"Expired"' in body


def test_bookmarks_carry_the_resource_version_when_asked_for(kube_server: TestApiServer, kubeconfig: Path) -> None:
    kube_server.bookmark_interval = 0.1
    kube_server.add(b.node("node-1"), b.pod("a"))
    api = core(kubeconfig)
    response = api.list_pod_for_all_namespaces(
        watch=True,
        resource_version=str(kube_server.store.revision),
        allow_watch_bookmarks=True,
        timeout_seconds=1,
        _preload_content=False,
    )
    lines = [line for line in response.data.decode().splitlines() if line]
    assert lines and all('"type":"BOOKMARK"' in line for line in lines)
    assert f'"resourceVersion":"{kube_server.store.revision}"' in lines[-1]


def test_the_stream_ends_at_timeout_seconds(kube_server: TestApiServer, kubeconfig: Path) -> None:
    api = core(kubeconfig)
    started = time.monotonic()
    response = api.list_node(watch=True, resource_version=str(kube_server.store.revision), timeout_seconds=1,
                             _preload_content=False)  # fmt: skip
    assert response.data == b""
    assert 0.9 <= time.monotonic() - started < 4


def test_a_selected_watch_sees_objects_enter_and_leave_the_selection(
    kube_server: TestApiServer, kubeconfig: Path
) -> None:
    kube_server.add(b.node("node-1"), b.node("node-2"), b.pod("a", node="node-1"))
    start = str(kube_server.store.revision)

    def move() -> None:
        time.sleep(0.2)
        kube_server.add(b.pod("b", node="node-2"))  # never in the selection: no event
        pod = kube_server.store.get("pods", "a", "default")
        assert pod is not None
        pod["spec"]["nodeName"] = "node-2"  # leaves the selection
        kube_server.store.update(pod)
        kube_server.add(b.pod("c", node="node-1"))

    threading.Thread(target=move).start()
    seen = events(core(kubeconfig), 2, resource_version=start, field_selector="spec.nodeName=node-1")
    assert [(t, n) for t, n, _ in seen] == [("DELETED", "a"), ("ADDED", "c")]


def test_a_silenced_watch_says_nothing_and_then_what_changed_meanwhile(
    kube_server: TestApiServer, kubeconfig: Path
) -> None:
    kube_server.bookmark_interval = 0.1
    kube_server.add(b.node("node-1"))
    start = str(kube_server.store.revision)
    kube_server.silence_watches(1.0)
    kube_server.add(b.pod("during"))
    api = core(kubeconfig)
    started = time.monotonic()
    response = api.list_pod_for_all_namespaces(
        watch=True, resource_version=start, allow_watch_bookmarks=True, timeout_seconds=2, _preload_content=False
    )
    first = next(response.stream(65536))
    assert time.monotonic() - started >= 0.9  # no event and no bookmark while silent
    assert first.startswith(b'{"type":"ADDED"') and b'"name":"during"' in first


def test_an_unwatched_write_is_listed_but_never_reported(kube_server: TestApiServer, kubeconfig: Path) -> None:
    kube_server.add(b.node("node-1"), b.pod("a"))
    start = str(kube_server.store.revision)
    pod = kube_server.store.get("pods", "a", "default")
    assert pod is not None
    pod["metadata"]["labels"] = {"changed": "unseen"}
    kube_server.write_unwatched(pod)
    kube_server.add(b.pod("b"))
    api = core(kubeconfig)
    assert [(t, n) for t, n, _ in events(api, 1, resource_version=start)] == [("ADDED", "b")]
    listed = {p.metadata.name: p.metadata.labels for p in api.list_pod_for_all_namespaces().items if p.metadata}
    assert listed["a"] == {"changed": "unseen"}


def test_a_watch_connection_is_kept_alive_by_tcp_probes(kube_server: TestApiServer, kubeconfig: Path) -> None:
    """A watch is quiet for minutes: TCP keepalive finds a peer that vanished without closing it."""
    response = core(kubeconfig).list_node(watch=True, timeout_seconds=1, _preload_content=False)
    try:
        sock = response.connection.sock
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
    finally:
        response.release_conn()
