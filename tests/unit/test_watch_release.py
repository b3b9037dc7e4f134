"""A watch stream left open must not go back to the shared connection pool alive: the next request on that
connection would read the rest of the watch (a chunk size as its status line) or wait for an answer the
server never sends while it streams. Against a real HTTP server on 127.0.0.1 that streams a chunked watch,
one event now and one when the test lets the stream go on, as an API server does."""

from __future__ import annotations

import functools
import socket
import threading
from collections.abc import Iterator

import pytest
import urllib3

from rebalancer.adapters.kube.informer import release_watch
from tests.raw_http import accept_each, chunk

EVENT = b'{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"1"}}}\n'
HELD = 10.0  # seconds the stream waits at most for the test to let it go on: past the next request's timeout
ANSWER_WITHIN = 5.0  # the next request's read timeout: it times out if it waits for the stream


def _connection(conn: socket.socket, go_on: threading.Event) -> None:
    """HTTP/1.1 with keep-alive: /watch streams one event, then a second once ``go_on`` is set, then ends;
    any other path answers 200 "ok". A request sent on the connection while it streams is read only after
    the stream."""
    with conn:
        reader = conn.makefile("rb")
        while True:
            request = reader.readline()
            if not request:
                break
            while reader.readline() not in (b"\r\n", b""):
                pass
            if request.startswith(b"GET /watch"):
                conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk(EVENT))
                go_on.wait(HELD)
                conn.sendall(chunk(EVENT) + b"0\r\n\r\n")
            else:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")


@pytest.fixture
def go_on() -> threading.Event:
    """Set: the watch stream sends its second event and ends."""
    return threading.Event()


@pytest.fixture
def pool(go_on: threading.Event) -> Iterator[urllib3.HTTPConnectionPool]:
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()
    handle = functools.partial(_connection, go_on=go_on)
    thread = threading.Thread(target=accept_each, args=(server, stop, handle), daemon=True)
    thread.start()
    with urllib3.HTTPConnectionPool("127.0.0.1", server.getsockname()[1], maxsize=1, block=True) as shared:
        yield shared
    go_on.set()
    stop.set()
    thread.join(timeout=5)
    server.close()


def _first_event(pool: urllib3.HTTPConnectionPool) -> tuple[urllib3.BaseHTTPResponse, Iterator[bytes]]:
    response = pool.request("GET", "/watch", preload_content=False, retries=False)
    events = response.stream(1024)
    assert next(events) == EVENT
    return response, events


def test_a_watch_left_open_is_closed_and_the_next_request_gets_its_own_answer(
    pool: urllib3.HTTPConnectionPool,
) -> None:
    response, events = _first_event(pool)  # the stream stays open: its reader is still alive, as a watcher's is
    release_watch(response, read_to_end=False)
    # answered while the stream is held: a fresh connection (the watch's would give the stream's rest or wait)
    answer = pool.request("GET", "/version", retries=False, timeout=urllib3.Timeout(connect=2, read=ANSWER_WITHIN))
    assert (answer.status, answer.data) == (200, b"ok")
    events.close()


def test_a_watch_read_to_its_end_keeps_its_connection_for_the_next_request(
    pool: urllib3.HTTPConnectionPool, go_on: threading.Event
) -> None:
    response, events = _first_event(pool)
    go_on.set()
    assert b"".join(events) == EVENT  # the rest, up to the end of the stream
    release_watch(response, read_to_end=True)
    answer = pool.request("GET", "/version", retries=False)
    assert (answer.status, answer.data) == (200, b"ok")
    assert pool.num_connections == 1  # the same connection served both
