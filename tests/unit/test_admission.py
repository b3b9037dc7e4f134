"""Admission of HTTP connections, on real socket pairs: the cap, the canned 503, the lingering close."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from rebalancer.service.admission import Admission, busy_answer
from tests.fake_clock import FakeClock


@pytest.fixture
def pairs() -> Iterator[list[tuple[socket.socket, socket.socket]]]:
    """(server side, client side) pairs, all closed at the end."""
    made: list[tuple[socket.socket, socket.socket]] = []
    yield made
    for server_side, client_side in made:
        server_side.close()
        client_side.close()


def pair(made: list[tuple[socket.socket, socket.socket]]) -> tuple[socket.socket, socket.socket]:
    server_side, client_side = socket.socketpair()
    client_side.settimeout(5)
    made.append((server_side, client_side))
    return server_side, client_side


def read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def is_closed(server_side: socket.socket) -> bool:
    return server_side.fileno() == -1


def test_admits_up_to_the_cap_and_a_release_frees_a_slot():
    admission = Admission(2, retry_after_seconds=5)
    assert [admission.admit() for _ in range(3)] == [True, True, False]
    admission.release()
    assert admission.admit()
    assert not admission.admit()
    with pytest.raises(ValueError, match="at least 1"):
        Admission(0, retry_after_seconds=5)


def test_a_refused_connection_reads_the_whole_503_then_the_end(pairs):
    refusals: list[None] = []
    admission = Admission(3, retry_after_seconds=7, on_refused=lambda: refusals.append(None))
    server_side, client_side = pair(pairs)
    admission.refuse(server_side)
    answer = read_all(client_side)
    assert answer == busy_answer(3, 7)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == b"HTTP/1.0 503 Service Unavailable"
    assert b"Retry-After: 7" in head.split(b"\r\n")
    assert f"Content-Length: {len(body)}".encode() in head.split(b"\r\n")
    assert body == b'{\n "error": "busy: 3 requests in flight; retry later"\n}\n'
    assert len(refusals) == 1


def test_a_refused_socket_lingers_until_its_client_is_done(pairs):
    clock = FakeClock(1000.0)
    admission = Admission(1, retry_after_seconds=5, clock=clock)
    server_side, client_side = pair(pairs)
    admission.refuse(server_side)
    client_side.sendall(b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\n")  # still sending: kept open
    admission.drain()
    assert admission.lingering == 1 and not is_closed(server_side)
    client_side.sendall(b"hello")
    client_side.shutdown(socket.SHUT_WR)  # done
    admission.drain()
    assert admission.lingering == 0 and is_closed(server_side)


def test_a_refused_socket_is_closed_after_the_linger_time(pairs):
    clock = FakeClock(1000.0)
    admission = Admission(1, retry_after_seconds=5, linger_seconds=2.0, clock=clock)
    server_side, _ = pair(pairs)
    admission.refuse(server_side)
    clock.advance(1.9)
    admission.drain()
    assert admission.lingering == 1
    clock.advance(0.2)
    admission.drain()
    assert admission.lingering == 0 and is_closed(server_side)


def test_at_most_max_lingering_sockets_linger_the_oldest_closed_first(pairs):
    admission = Admission(1, retry_after_seconds=5, max_lingering=2)
    server_sides = [pair(pairs)[0] for _ in range(3)]
    for server_side in server_sides:
        admission.refuse(server_side)
    assert admission.lingering == 2
    assert [is_closed(s) for s in server_sides] == [True, False, False]
    admission.close()
    assert admission.lingering == 0
    assert all(is_closed(s) for s in server_sides)


def test_a_client_that_is_already_gone_is_closed_at_once(pairs):
    admission = Admission(1, retry_after_seconds=5)
    server_side, client_side = pair(pairs)
    client_side.close()
    admission.refuse(server_side)
    assert admission.lingering == 0 and is_closed(server_side)
