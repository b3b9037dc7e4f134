"""A deadline on a whole HTTP answer, not only on each read of it.

requests' ``timeout`` bounds the wait for the headers and each read of the body; an answer sent slowly
but steadily (a byte every few seconds, from a broken proxy or a hostile peer) passes every read and is
never cut off, and the cycle waiting on it never ends. ``AnswerDeadline`` shuts the answer's socket down
when the deadline passes: the read in progress then ends at once, whatever layer (chunked encoding, gzip,
TLS) it is in, and the request fails with a ``requests`` error that ``cut`` tells apart.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time

import requests

_log = logging.getLogger(__name__)


class AnswerDeadline:
    """Arms on an answer's headers (``arm``), disarms when its body has been read (``disarm``)."""

    def __init__(self, deadline: float) -> None:
        self._deadline = deadline  # time.monotonic() by which the whole answer must have arrived
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._done = False
        self.cut = False  # the deadline passed before the answer was complete, and its socket was shut down

    def arm(self, response: requests.Response) -> None:
        sock = _socket_of(response)
        if sock is None:  # not a urllib3 answer: the per-read timeout still holds
            _log.debug("no socket to bound the answer of %s by a deadline", response.url)
            return
        with self._lock:
            if self._done or self._timer is not None:
                return
            remaining = max(0.0, self._deadline - time.monotonic())
            self._timer = threading.Timer(remaining, self._shut, args=(sock,))
            self._timer.daemon = True
            self._timer.start()

    def disarm(self) -> None:
        with self._lock:
            self._done = True
            timer = self._timer
        if timer is not None:
            timer.cancel()

    def _shut(self, sock: socket.socket) -> None:
        with self._lock:
            if self._done:  # read completely just before the deadline: the connection goes back to the pool intact
                return
            self._done = True
            self.cut = True
            with contextlib.suppress(OSError):  # already closed by the peer: the read has ended on its own
                sock.shutdown(socket.SHUT_RDWR)


def _socket_of(response: requests.Response) -> socket.socket | None:
    connection = getattr(response.raw, "connection", None)  # urllib3's HTTPResponse: the live connection
    sock = getattr(connection, "sock", None)
    return sock if isinstance(sock, socket.socket) else None
