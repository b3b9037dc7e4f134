"""DeadlineReader on a real socket pair: bytes that keep trickling in do not outlive the deadline."""

from __future__ import annotations

import io
import socket
import time
from collections.abc import Iterator

import pytest

from rebalancer.service.deadline import DeadlineReader


@pytest.fixture
def sockets() -> Iterator[tuple[socket.socket, socket.socket]]:
    server_side, client_side = socket.socketpair()
    yield server_side, client_side
    server_side.close()
    client_side.close()


def test_reads_before_the_deadline_and_keeps_the_idle_timeout_between_reads(sockets):
    server_side, client_side = sockets
    reader = io.BufferedReader(DeadlineReader(server_side, time.monotonic() + 30, idle_timeout=4.0))
    client_side.sendall(b"GET / HTTP/1.1\r\n")
    assert reader.readline() == b"GET / HTTP/1.1\r\n"
    assert server_side.gettimeout() == 4.0  # what the writes of the answer are bounded by
    reader.close()
    assert server_side.fileno() != -1  # the socket is the server's to close


def test_after_the_deadline_every_read_fails_even_with_bytes_waiting(sockets):
    server_side, client_side = sockets
    now = [100.0]
    reader = io.BufferedReader(DeadlineReader(server_side, 102.0, idle_timeout=4.0, clock=lambda: now[0]))
    client_side.sendall(b"GET /a")
    assert reader.read1(100) == b"GET /a"
    now[0] = 102.0
    client_side.sendall(b"bc")
    with pytest.raises(TimeoutError, match="deadline"):
        reader.read1(100)


def test_a_silent_wait_ends_at_the_deadline_when_that_comes_before_the_idle_timeout(sockets):
    server_side, _ = sockets
    reader = io.BufferedReader(DeadlineReader(server_side, time.monotonic() + 0.3, idle_timeout=5.0))
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        reader.readline()
    assert 0.2 < time.monotonic() - started < 2
    assert server_side.gettimeout() == 5.0
