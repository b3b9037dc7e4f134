"""A deadline on a whole HTTP answer, not only on each read of it.

requests' ``timeout`` bounds the wait for the headers and each read of the body; an answer sent slowly
but steadily (a byte every few seconds, from a broken proxy or a hostile peer) passes every read and is
never cut off, and the cycle waiting on it never ends. ``AnswerDeadline`` shuts the answer's socket down
when the deadline passes: the read in progress then ends at once, whatever layer (chunked encoding, gzip,
TLS) it is in, and the request fails with a ``requests`` error that ``cut`` tells apart.

An answer read to its end gives its connection back to the pool (urllib3 does so as it reads the last
bytes, before the reading thread gets control back), where another thread's query may take it at once.
urllib3 puts the connection in the pool before the answer lets go of it, so its own check in
``HTTPResponse.shutdown`` can pass on a connection already pooled (perhaps taken): the answer here gives
its connection back under the deadline's lock, and the deadline cuts only an answer that still holds its
connection, never a pooled one, however late the timer runs.

A deadline that passes between two answers of a query (after a redirect's answer, perhaps cut, which
requests follows all the same) cuts the next answer as soon as its headers arrive.
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
        self._done = False  # disarmed: the query has its answer, or has failed
        self._passed = False  # the deadline has passed: an answer armed from now on is cut at once
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
            self._hold(raw)
            if self._passed:
                self._shut_locked()
            elif self._timer is None:
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

    def _hold(self, raw: urllib3.HTTPResponse) -> None:
        """Makes ``raw`` give its connection back to the pool under the lock, forgetting it first: the
        timer then finds the answer either still holding its connection or gone, never in between."""

        def release_conn() -> None:
            with self._lock:
                if self._raw is raw:
                    self._raw = None
                vars(raw).pop("release_conn", None)  # urllib3's own from now on (no reference cycle left)
                raw.release_conn()

        vars(raw)["release_conn"] = release_conn

    def _shut(self) -> None:
        with self._lock:
            if not self._done:
                self._shut_locked()

    def _shut_locked(self) -> None:
        self._passed = True
        raw, self._raw = self._raw, None
        if raw is None:  # between two answers, or read completely just before the deadline
            return
        # ValueError: closed; OSError: already closed by the peer (the read has ended); RuntimeError: released
        # (urllib3's own check: a release goes through the lock, which has just forgotten the answer)
        with contextlib.suppress(RuntimeError, ValueError, OSError):
            raw.shutdown()
            self._cut = True
