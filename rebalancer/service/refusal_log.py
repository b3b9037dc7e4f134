"""At most one log line per refused client address per period, so that a client sending bad requests in a
loop (no token, a wrong one) cannot flood the log. Every refusal is still counted on /metrics
(``rebalancer_webhook_refused_total{reason}``); the next line a client gets says how many of its
refusals went unlogged.

At most ``max_clients`` addresses are remembered: a crowd of addresses larger than that within one period
gets a single line saying so, and nothing more until the period of the oldest address ends.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

LOG_PERIOD_SECONDS = 60.0
MAX_CLIENTS = 4096


@dataclass(slots=True)
class _Client:
    logged_at: float
    unlogged: int = 0


class RefusalLog:
    """Thread-safe; ``clock`` is monotonic seconds."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        period: float = LOG_PERIOD_SECONDS,
        max_clients: int = MAX_CLIENTS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = logger
        self._period = period
        self._max_clients = max_clients
        self._clock = clock
        self._lock = threading.Lock()
        self._clients: OrderedDict[str, _Client] = OrderedDict()  # by the time of their last line, oldest first
        self._crowd_logged_at = float("-inf")

    @property
    def remembered(self) -> int:
        """Client addresses remembered now (at most ``max_clients``)."""
        with self._lock:
            return len(self._clients)

    def refused(self, client: str, status: int, problem: str) -> None:
        """Log the refusal of a request from ``client`` unless that client had a line within the period."""
        with self._lock:
            now = self._clock()
            known = self._clients.get(client)
            if known is not None and now - known.logged_at < self._period:
                known.unlogged += 1
                return
            unlogged = 0
            if known is not None:
                unlogged = known.unlogged
                del self._clients[client]
            self._forget_before(now - self._period)
            if len(self._clients) >= self._max_clients:
                self._crowded(now)
                return
            self._clients[client] = _Client(now)
        self._log.warning(
            "alertmanager webhook from %s refused (%d): %s%s",
            client,
            status,
            problem,
            f" ({unlogged} more refusal(s) of this client since its last line)" if unlogged else "",
        )

    def _forget_before(self, cutoff: float) -> None:
        while self._clients and next(iter(self._clients.values())).logged_at <= cutoff:
            self._clients.popitem(last=False)

    def _crowded(self, now: float) -> None:
        if now - self._crowd_logged_at < self._period:
            return
        self._crowd_logged_at = now
        self._log.warning(
            "webhook requests refused from more than %d client addresses within %.0f s: not logged one by one "
            "(counted in rebalancer_webhook_refused_total)",
            self._max_clients,
            self._period,
        )
