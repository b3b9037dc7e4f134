"""Stopping an informer at awkward moments: as its watch ends by itself, and while it lists.

urllib3 hands a stream's connection back to the client's shared pool as it reads the last chunk, before
the reading thread gets control back; a stop that comes then must neither fail nor cut the pooled
connection. A stop that comes while the collection is listed (a watch cache replaced by a policy change in
the middle of a relisting of every pod) must end the listing, not leave it running beside the new cache's.
Against real HTTP servers on 127.0.0.1: one answering the official client's requests with scripted chunked
answers, and the test API server."""

from __future__ import annotations

import contextlib
import functools
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import kubernetes.client
import msgspec
import pytest

from rebalancer.adapters.kube import connect, wire
from rebalancer.adapters.kube.informer import STOP_WAIT_SECONDS, Informer, WatchTiming
from rebalancer.adapters.kube.lister import ListCall
from rebalancer.adapters.kube.watch_list import QUEUED, watch_list
from tests.adapters.test_watch_cache import eventually
from tests.kubeapi import Fault, TestApiServer
from tests.kubeapi import builders as b
from tests.raw_http import accept_each, chunk

Answer = Callable[[bytes], Iterable[bytes]]  # request line -> the chunks of a chunked answer, sent as they come


def _node(name: str, version: int) -> bytes:
    return b'{"kind":"Node","apiVersion":"v1","metadata":{"name":"%s","resourceVersion":"%d"}}' % (
        name.encode(),
        version,
    )


def _event(kind: str, obj: bytes) -> bytes:
    return b'{"type":"%s","object":%s}' % (kind.encode(), obj)


def _bookmark(version: int, end: bool = False) -> bytes:
    annotations = b'"annotations":{"k8s.io/initial-events-end":"true"},' if end else b""
    meta = b'{"kind":"Node","apiVersion":"v1","metadata":{%s"resourceVersion":"%d"}}' % (annotations, version)
    return _event("BOOKMARK", meta) + b"\n"


def _connection(conn: socket.socket, answer: Answer) -> None:
    """HTTP/1.1 with keep-alive: every answer chunked, each chunk sent as it comes, then ended; until the
    client closes the connection."""
    with conn, contextlib.suppress(OSError):
        reader = conn.makefile("rb")
        while request := reader.readline():
            while reader.readline() not in (b"\r\n", b""):
                pass
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
            for data in answer(request):
                conn.sendall(chunk(data))
            conn.sendall(b"0\r\n\r\n")


@pytest.fixture
def serve() -> Iterator[Callable[[Answer], kubernetes.client.ApiClient]]:
    """An API client for a server on 127.0.0.1 answering with ``answer``, each connection on a thread."""
    stop = threading.Event()
    started: list[tuple[socket.socket, threading.Thread, kubernetes.client.ApiClient]] = []

    def start(answer: Answer) -> kubernetes.client.ApiClient:
        server = socket.create_server(("127.0.0.1", 0))
        thread = threading.Thread(
            target=accept_each, args=(server, stop, functools.partial(_connection, answer=answer)), daemon=True
        )
        thread.start()
        configuration = kubernetes.client.Configuration(host=f"http://127.0.0.1:{server.getsockname()[1]}")
        started.append((server, thread, kubernetes.client.ApiClient(configuration)))
        return started[-1][2]

    yield start
    stop.set()
    for server, thread, api in started:
        thread.join(timeout=5)
        server.close()
        api.close()  # type: ignore[no-untyped-call]


def _nodes(api: kubernetes.client.ApiClient) -> ListCall[wire.Node]:
    return ListCall("nodes", "node", kubernetes.client.CoreV1Api(api).list_node, wire.NODE_LIST)


def _all_pooled(api: kubernetes.client.ApiClient) -> bool:
    """Every connection of the client's pool is back in it (none is lent to a response)."""
    pool = api.rest_client.pool_manager.connection_from_url(api.configuration.host).pool
    return pool is not None and pool.qsize() == pool.maxsize


def test_an_informer_stopped_as_its_watch_ends_stops_without_failing(
    serve: Callable[[Answer], kubernetes.client.ApiClient],
) -> None:
    """The watch's last event comes without its newline, so the informer applies it after the end of the
    stream: its connection is back in the pool then, and a stop comes at that moment."""

    def answer(request: bytes) -> list[bytes]:
        if b"watch=" not in request:
            return [b'{"kind":"NodeList","apiVersion":"v1","metadata":{"resourceVersion":"5"},"items":[]}']
        return [_event("ADDED", _node("last", 6))]

    applying, stopping = threading.Event(), threading.Event()

    def convert(node: wire.Node) -> tuple[str, str]:
        if node.metadata.name == "last":
            applying.set()
            stopping.wait(5)
            time.sleep(0.5)  # stop() is under way meanwhile
        return node.metadata.name, node.metadata.name

    timing = WatchTiming(watch_seconds=60, list_mode="paged", encoding="json")
    api = serve(answer)
    informer = Informer(_nodes(api), msgspec.json.Decoder(wire.Node), convert, host="test", timing=timing)
    informer.start()
    try:
        assert applying.wait(5)
        assert _all_pooled(api)  # the stream ended: its connection went back to the pool
    finally:
        stopping.set()
        informer.stop()  # failed: "Cannot shutdown as connection has already been released to the pool"
    assert informer.get("last") == "last"
    assert informer.problem(max_stale=60) is None  # the watcher ended because it was told to, not by a crash


def test_a_watch_list_whose_stream_ended_while_it_was_decoded_returns_its_listing(
    serve: Callable[[Answer], kubernetes.client.ApiClient],
) -> None:
    """The server sends the initial events, the bookmark marking their end and a few more events, then ends
    the stream; the reader thread reads it all (up to a full queue) while the listing is still converted."""
    later = [_bookmark(7 + i) for i in range(QUEUED)]  # enough to fill the queue the reader fills
    api = serve(lambda request: [_event("ADDED", _node("node-a", 5)) + b"\n" + _bookmark(6, end=True), *later])

    pooled: list[bool] = []

    def convert(items: Sequence[wire.Node]) -> list[str]:
        deadline = time.monotonic() + 5
        while not _all_pooled(api) and time.monotonic() < deadline:  # the reader read up to the end
            time.sleep(0.01)
        pooled.append(_all_pooled(api))
        return [node.metadata.name for node in items]

    listed = watch_list(_nodes(api), convert, timeout=5.0, host="test")  # failed: the connection was released
    assert pooled == [True]  # the stream had ended, its connection back in the pool, before the listing was done
    assert (listed.items, listed.resource_version) == (["node-a"], "6")


def _names(node: wire.Node) -> tuple[str, str]:
    return node.metadata.name, node.metadata.name


def test_an_informer_stopped_while_it_lists_in_pages_asks_for_no_further_page(
    kube_server: TestApiServer, kubeconfig: Path
) -> None:
    kube_server.add(*(b.node(f"node-{i:02d}") for i in range(80)))
    kube_server.set_fault("/api/v1/nodes", Fault(delay=0.1, watch=False))  # a page every 0.1 s at best: 8 s
    timing = WatchTiming(page_size=1, list_mode="paged", encoding="json")
    call = _nodes(connect(kubeconfig=str(kubeconfig)))
    informer = Informer(call, msgspec.json.Decoder(wire.Node), _names, host="test", timing=timing)

    def pages() -> int:
        return len(kube_server.requests_to("/api/v1/nodes"))

    informer.start()
    eventually(lambda: pages() >= 2)
    started = time.monotonic()
    informer.stop()  # waited for the whole listing (8 s), up to the 5 s given to the watcher, and let it go on

    assert time.monotonic() - started < STOP_WAIT_SECONDS - 1  # 4 s: the slack a loaded machine needs
    asked = pages()
    time.sleep(0.3)
    assert pages() == asked < 10  # the page in flight and the one fetched ahead at most
    assert informer.problem(max_stale=60) == "nodes: not listed yet"  # dropped, and no crash of its watcher


def test_an_informer_stopped_while_it_reads_a_watch_list_stops_reading(
    serve: Callable[[Answer], kubernetes.client.ApiClient],
) -> None:
    def answer(request: bytes) -> Iterator[bytes]:
        for i in range(200):  # initial events for 10 s, and never the bookmark marking their end
            yield _event("ADDED", _node(f"node-{i:03d}", 5)) + b"\n"
            time.sleep(0.05)

    listing = threading.Event()

    def convert(node: wire.Node) -> tuple[str, str]:
        listing.set()
        return _names(node)

    timing = WatchTiming(list_mode="watchList", encoding="json")
    informer = Informer(_nodes(serve(answer)), msgspec.json.Decoder(wire.Node), convert, host="test", timing=timing)
    informer.start()
    assert listing.wait(5)
    started = time.monotonic()
    informer.stop()  # waited 5 s for the watcher, then left it reading

    assert time.monotonic() - started < STOP_WAIT_SECONDS - 1  # 4 s: the slack a loaded machine needs
    assert informer.problem(max_stale=60) == "nodes: not listed yet"
