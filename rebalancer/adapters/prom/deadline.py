"""A deadline on a whole HTTP answer, not only on each read of it.

requests' ``timeout`` bounds the wait for the headers and each read of the body; an answer sent slowly
but steadily (a byte every few seconds, from a broken proxy or a hostile peer) passes every read and is
never cut off, and the cycle waiting on it never ends. ``AnswerDeadline`` shuts the answer's socket down
when the deadline passes: the read in progress then ends at once, whatever layer (chunked encoding, gzip,
TLS) it is in, and the request fails with a ``requests`` error that ``cut`` tells apart.

An answer read to its end gives its connection back to the pool (urllib3 does so as it reads the last
bytes, before the reading thread gets control back), where another thread's query may take it at once:
the deadline cuts only a connection its answer still holds (urllib3's ``HTTPResponse.shutdown`` refuses
one released), never a pooled one, however late the timer runs.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time

import requests
import urllib3

_log = logging.getLogger(__name__)


class AnswerDeadline:
    """Arms on an answer's headers (``arm``), disarms when its body has been read (``disarm``). A redirect's
    answer arms it first; the answer the redirect leads to takes its place, under the same deadline."""

    def __init__(self, deadline: float) -> None:
        self._deadline = deadline  # time.monotonic() by which the whole answer must have arrived
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._raw: urllib3.HTTPResponse | None = None  # the answer being read, which the deadline cuts
        self._done = False
        self._cut = False

    def arm(self, response: requests.Response) -> None:
        raw = response.raw
        if not isinstance(raw, urllib3.HTTPResponse) or raw.connection is None:
            # not a urllib3 answer, or one already read whole: the per-read timeout still holds
            _log.debug("no connection to bound the answer of %s by a deadline", response.url)
            return
        with self._lock:
            if self._done:
                return
            self._raw = raw
            if self._timer is None:
                remaining = max(0.0, self._deadline - time.monotonic())
                self._timer = threading.Timer(remaining, self._shut)
                self._timer.daemon = True
                self._timer.start()

    @property
    def cut(self) -> bool:
        """The deadline passed before the answer was complete, and its socket was shut down. Read under the
        lock the shutdown holds: the read it wakes may fail before the shutdown has returned."""
        with self._lock:
            return self._cut

    def disarm(self) -> None:
        with self._lock:
            self._done = True
            timer = self._timer
        if timer is not None:
            timer.cancel()

    def _shut(self) -> None:
        with self._lock:
            raw = self._raw
            if self._done or raw is None:  # read completely just before the deadline: the connection stays intact
                return
            self._done = True
            # RuntimeError: the answer was read whole and its connection is back in the pool (perhaps another
            # query's now); ValueError: closed; OSError: already closed by the peer (the read has ended)
            with contextlib.suppress(RuntimeError, ValueError, OSError):
                raw.shutdown()
                self._cut = True
