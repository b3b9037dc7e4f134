"""How many requests the HTTP server serves at once, and what a connection beyond that gets.

The server gives each admitted connection a thread. A connection that finds ``max_in_flight``
requests in flight gets no thread: the accept thread answers it at once with a canned 503 and
Retry-After, without reading its request, so an alert storm or a crowd of slow clients costs a
bounded number of threads.

Closing a socket whose input was not read makes the kernel reset the connection, and the client could
lose the answer. A refused socket is therefore half-closed after the answer and left to linger: the
accept loop calls :meth:`Admission.drain` between accepts, which reads and discards, without blocking,
what the clients still send, and closes each socket at the end of its input or after
``linger_seconds``. At most ``max_lingering`` sockets linger; past that the oldest is closed at once.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

LINGER_SECONDS = 2.0  # after answering early, read and discard what the client still sends, this long
MAX_LINGERING = 256
LOG_EVERY_SECONDS = 10.0  # a storm of refusals is logged once per this period, with a count
_DRAIN_CHUNK = 65536
_DRAIN_CHUNKS_PER_PASS = 4  # per socket and pass, so one client cannot hold up the accept loop
_DRAIN_MAX_BYTES = 2 << 20  # a refused client sending more than this is cut off


def busy_answer(max_in_flight: int, retry_after_seconds: int) -> bytes:
    """The whole HTTP response a refused connection gets."""
    body = json.dumps({"error": f"busy: {max_in_flight} requests in flight; retry later"}, indent=1).encode() + b"\n"
    head = (
        "HTTP/1.0 503 Service Unavailable\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"Retry-After: {retry_after_seconds}\r\n"
        "Cache-Control: no-store\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


@dataclass(slots=True)
class _Lingering:
    sock: socket.socket
    until: float
    drained: int = 0


class Admission:
    """Admits at most ``max_in_flight`` connections at once; refuses the others with a 503.

    :meth:`admit` and :meth:`release` are thread-safe; :meth:`refuse` and :meth:`drain` run on the accept
    thread only, :meth:`close` after it stopped.
    """

    def __init__(
        self,
        max_in_flight: int,
        retry_after_seconds: int,
        on_refused: Callable[[], None] = lambda: None,
        *,
        linger_seconds: float = LINGER_SECONDS,
        max_lingering: int = MAX_LINGERING,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        self.max_in_flight = max_in_flight
        self._slots = threading.BoundedSemaphore(max_in_flight)
        self._answer = busy_answer(max_in_flight, retry_after_seconds)
        self._on_refused = on_refused
        self._linger_seconds = linger_seconds
        self._lingering: deque[_Lingering] = deque()
        self._max_lingering = max_lingering
        self._clock = clock
        self._refused_since_log = 0
        self._logged_at = float("-inf")

    def admit(self) -> bool:
        """Take a slot if one is free (never waits). Every True must be followed by one :meth:`release`."""
        return self._slots.acquire(blocking=False)

    def release(self) -> None:
        self._slots.release()

    @property
    def lingering(self) -> int:
        """Refused sockets not closed yet."""
        return len(self._lingering)

    def refuse(self, sock: socket.socket) -> None:
        """Answer 503 on a fresh connection without blocking, half-close it and let it linger."""
        self._on_refused()
        self._log_refusal()
        try:
            sock.setblocking(False)
            sock.send(self._answer)  # a few hundred bytes into an empty send buffer: never partial in practice
            sock.shutdown(socket.SHUT_WR)
        except OSError:  # the client is gone already
            sock.close()
            return
        if len(self._lingering) >= self._max_lingering:
            self._lingering.popleft().sock.close()
        self._lingering.append(_Lingering(sock, self._clock() + self._linger_seconds))

    def drain(self) -> None:
        """Read what refused clients still send; close those that finished, overstayed or sent too much."""
        now = self._clock()
        for _ in range(len(self._lingering)):
            item = self._lingering.popleft()
            if now < item.until and self._still_sending(item):
                self._lingering.append(item)
            else:
                item.sock.close()

    def close(self) -> None:
        while self._lingering:
            self._lingering.popleft().sock.close()

    @staticmethod
    def _still_sending(item: _Lingering) -> bool:
        try:
            for _ in range(_DRAIN_CHUNKS_PER_PASS):
                chunk = item.sock.recv(_DRAIN_CHUNK)
                if not chunk:
                    return False  # the client closed its side: done
                item.drained += len(chunk)
                if item.drained > _DRAIN_MAX_BYTES:
                    return False
        except BlockingIOError:
            return True  # nothing more for now
        except OSError:
            return False
        return True

    def _log_refusal(self) -> None:
        self._refused_since_log += 1
        now = self._clock()
        if now - self._logged_at >= LOG_EVERY_SECONDS:
            log.warning(
                "refused %d connection(s) with 503 since the last such message: all %d request slots busy "
                "(service.maxConcurrentRequests)",
                self._refused_since_log,
                self.max_in_flight,
            )
            self._refused_since_log = 0
            self._logged_at = now
