"""The service's HTTP apps, served by :mod:`rebalancer.service.server`: the status app here (``GET /metrics``,
``/healthz``, ``/readyz`` on a port of its own), the webhook's in :mod:`rebalancer.service.webhook_app`, and
what both share: JSON answers, a route table, the bearer token file.

The apps run on the listener's event loop and must never block it: whatever may wait (a Kubernetes
listing behind ``/readyz``, the webhook's payload and the runner's locks) runs on a worker thread of the
app's own. ``/healthz`` is answered on the loop itself, so no worker however busy delays it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web

from rebalancer.domain.errors import TokenFileError
from rebalancer.domain.token_file import WEBHOOK_TOKEN_FILE, read_token_file
from rebalancer.service.metrics import Metrics

log = logging.getLogger(__name__)

JSON = "application/json"
_TEXT = "text/plain; charset=utf-8"
STATUS_WORKERS = 2  # /metrics and /readyz: a scrape and a probe at once
_T = TypeVar("_T")


class TokenUnavailable(Exception):
    """The configured token file cannot be read or is empty: every request is refused."""


class TokenFile:
    """A bearer token kept in a file (a mounted Secret), re-read whenever the file changes.

    Kubernetes rotates a mounted Secret by swapping a symlink, so the file is stat()ed on each request
    (following links; a mounted Secret is in memory, so this is quick enough for the event loop) and read
    again when its inode, size or modification time changed.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._key: tuple[int, int, int, int] | None = None
        self._token = b""

    def current(self) -> bytes:
        try:
            st = os.stat(self.path)
            key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            with self._lock:
                if key != self._key:
                    self._token = read_token_file(self.path, WEBHOOK_TOKEN_FILE)  # an empty one is not kept
                    self._key = key
                return self._token
        except OSError as exc:
            raise TokenUnavailable(f"cannot read {WEBHOOK_TOKEN_FILE} {self.path}: {exc.strerror or exc}") from exc
        except TokenFileError as exc:
            raise TokenUnavailable(str(exc)) from exc


@dataclass(frozen=True, slots=True)
class Answer:
    """What a route answers; ``problem`` and ``reason`` say why a request was refused (log, metric)."""

    status: int
    body: bytes
    content_type: str = JSON
    headers: tuple[tuple[str, str], ...] = ()
    problem: str = ""
    reason: str = ""


def json_answer(
    status: int,
    document: Mapping[str, Any],
    headers: tuple[tuple[str, str], ...] = (),
    problem: str = "",
    reason: str = "",
) -> Answer:
    return Answer(status, json.dumps(document, indent=1).encode() + b"\n", JSON, headers, problem, reason)


def error(status: int, message: str, reason: str, headers: tuple[tuple[str, str], ...] = ()) -> Answer:
    return json_answer(status, {"error": message}, headers, message, reason)


Route = Callable[[web.BaseRequest], Awaitable[Answer]]


class Routes:
    """An app over a table of path -> (method, route); 404 and 405 for the rest. Blocking work goes to
    :meth:`in_worker`, on a pool of ``workers`` threads named ``thread_name``."""

    _routes: dict[str, tuple[str, Route]]

    def __init__(self, workers: int, thread_name: str) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=thread_name)

    async def __call__(self, request: web.BaseRequest) -> web.StreamResponse:
        answer = await self._dispatch(request)
        self._answered(request, answer)
        response = web.Response(status=answer.status, body=answer.body, headers=dict(answer.headers))
        response.headers["Content-Type"] = answer.content_type
        response.headers["Cache-Control"] = "no-store"
        return response

    async def in_worker(self, work: Callable[[], _T]) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, work)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _answered(self, request: web.BaseRequest, answer: Answer) -> None:
        """Called with every answer before it is sent."""

    async def _dispatch(self, request: web.BaseRequest) -> Answer:
        path, method = request.path, request.method
        route = self._routes.get(path)
        if route is None:
            return error(404, f"no such path: {path}", "no-such-path")
        allowed, handler = route
        if method != allowed:
            return error(405, f"{path} accepts {allowed} only", "method", (("Allow", allowed),))
        try:
            return await handler(request)
        except Exception:
            log.exception("%s %s failed", method, path)
            return error(500, "internal error; see the rebalancer log", "internal")


class StatusApp(Routes):
    """``GET /metrics``, ``/healthz``, ``/readyz``: the status port's app; build it with :func:`make_status_app`."""

    def __init__(self, metrics: Metrics, ready: Callable[[], bool]) -> None:
        super().__init__(STATUS_WORKERS, "rebalancer-status")
        self._metrics = metrics
        self._ready = ready
        self._routes = {
            "/metrics": ("GET", self._metrics_page),
            "/healthz": ("GET", self._healthz),
            "/readyz": ("GET", self._readyz),
        }

    async def _metrics_page(self, request: web.BaseRequest) -> Answer:
        body, content_type = await self.in_worker(self._metrics.exposition)
        return Answer(200, body, content_type)

    async def _healthz(self, request: web.BaseRequest) -> Answer:
        return Answer(200, b"ok\n", _TEXT)

    async def _readyz(self, request: web.BaseRequest) -> Answer:
        if await self.in_worker(self._ready):
            return Answer(200, b"ready\n", _TEXT)
        return Answer(503, b"not ready: no cycle or source check has succeeded yet\n", _TEXT)


def make_status_app(*, metrics: Metrics, ready: Callable[[], bool]) -> StatusApp:
    """The status port's app: ``/metrics`` from ``metrics``, ``/healthz`` always 200 while the process
    answers, ``/readyz`` 200 while ``ready()``."""
    return StatusApp(metrics, ready)
