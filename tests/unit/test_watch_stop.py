"""Cutting a watch whose stream has just ended by itself. urllib3 hands a stream's connection back to the
client's shared pool as it reads the last chunk, before the reading thread gets control back; a stop that
comes then must neither fail nor cut the pooled connection. Against a real HTTP server on 127.0.0.1 that
answers the official client's requests with scripted chunked watches, ended at once."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence

import kubernetes.client
import msgspec
import pytest

from rebalancer.adapters.kube import wire
from rebalancer.adapters.kube.informer import Informer, WatchTiming
from rebalancer.adapters.kube.lister import ListCall
from rebalancer.adapters.kube.watch_list import QUEUED, watch_list

Answer = Callable[[bytes], list[bytes]]  # request line -> the chunks of a chunked answer, then its end


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


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _connection(conn: socket.socket, answer: Answer) -> None:
    """HTTP/1.1 with keep-alive: every answer is sent whole, chunked, and ended."""
    with conn:
        reader = conn.makefile("rb")
        while request := reader.readline():
            while reader.readline() not in (b"\r\n", b""):
                pass
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            conn.sendall(head + b"".join(map(_chunk, answer(request))) + b"0\r\n\r\n")


@pytest.fixture
def serve() -> Iterator[Callable[[Answer], kubernetes.client.ApiClient]]:
    """An API client for a server on 127.0.0.1 answering with ``answer``, each connection on a thread."""
    stop = threading.Event()
    started: list[tuple[socket.socket, threading.Thread, kubernetes.client.ApiClient]] = []

    def accept(server: socket.socket, answer: Answer) -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            threading.Thread(target=_connection, args=(conn, answer), daemon=True).start()

    def start(answer: Answer) -> kubernetes.client.ApiClient:
        server = socket.create_server(("127.0.0.1", 0))
        thread = threading.Thread(target=accept, args=(server, answer), daemon=True)
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

    def convert(items: Sequence[wire.Node]) -> list[str]:
        deadline = time.monotonic() + 5
        while not _all_pooled(api) and time.monotonic() < deadline:  # the reader read up to the end
            time.sleep(0.01)
        return [node.metadata.name for node in items]

    listed = watch_list(_nodes(api), convert, timeout=5.0, host="test")  # failed: the connection was released
    assert (listed.items, listed.resource_version) == (["node-a"], "6")
