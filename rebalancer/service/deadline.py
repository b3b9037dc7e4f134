"""A socket reader with a deadline for the whole request, against clients that trickle.

A socket timeout bounds one silent wait only: a client sending a byte just before each timeout keeps a
request (and its thread) alive for as long as it likes. :class:`DeadlineReader` also fails every read
once the deadline has passed, however the bytes arrive.
"""

from __future__ import annotations

import io
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer


class DeadlineReader(io.RawIOBase):
    """Raw reads from ``sock``: each waits at most ``idle_timeout`` seconds and none ends after ``deadline``
    (a ``clock()`` time); both raise :class:`TimeoutError`. Between reads the socket keeps
    ``idle_timeout``, which then bounds the writes of the answer. Wrap it in :class:`io.BufferedReader`.
    Closing the reader leaves the socket open."""

    def __init__(
        self,
        sock: socket.socket,
        deadline: float,
        idle_timeout: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self._sock = sock
        self._deadline = deadline
        self._idle_timeout = idle_timeout
        self._clock = clock

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer, /) -> int:
        remaining = self._deadline - self._clock()
        if remaining <= 0:
            raise TimeoutError("the request did not arrive before its deadline")
        self._sock.settimeout(min(remaining, self._idle_timeout))
        try:
            return self._sock.recv_into(buffer)
        finally:
            self._sock.settimeout(self._idle_timeout)
