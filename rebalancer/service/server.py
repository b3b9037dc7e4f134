"""The HTTP server of `rebalancer serve`'s two listeners: aiohttp, each listener on an event loop of its own
in a thread of its own, so that the rest of serve stays threaded.

A connection costs a coroutine and a few kilobytes, never a thread: a crowd of slow or idle clients
waits on the event loop while every complete request is answered. What bounds such a crowd:

- **header timeout**: a connection must deliver its request line and headers within ``header_timeout`` of
  opening (or of its previous answer when kept alive), however they trickle, or it is closed;
- **body timeout**: :func:`read_body` fails once a body has not arrived in full ``body_timeout`` after its
  headers;
- **connection cap**: past ``max_connections`` open connections, a new one closes the oldest connection
  still waiting for its request (or for the rest of its body, or idle between requests) to make room,
  so a crowd can only push out its own, older members; a request being processed is never cut off;
- **keep-alive**: at most ``max_requests_per_connection`` requests on one connection, and the header
  timeout bounds the idle time between two;
- the request line and each header at most 8 KiB, at most 128 headers (aiohttp's parser), a request with
  an unread body lingers ``linger_seconds`` after its answer so that the client reads it.

The answers the server makes itself (a malformed request) are JSON like the apps' own; no answer names the
server's software or version.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import StreamReader, web

log = logging.getLogger(__name__)

SERVER_HEADER = "rebalancer"
FILES_RESERVED = 512  # open files kept for everything but the two listeners' connections (clients, logs)


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """What one listener allows a client; see the module's documentation."""

    max_connections: int = 4096
    header_timeout: float = 10.0
    body_timeout: float = 10.0
    max_requests_per_connection: int = 1000
    linger_seconds: float = 2.0
    shutdown_timeout: float = 30.0  # stop() waits this long for the requests in flight

    def __post_init__(self) -> None:
        if self.max_connections < 1 or self.max_requests_per_connection < 1:
            raise ValueError("max_connections and max_requests_per_connection must be at least 1")
        if min(self.header_timeout, self.body_timeout, self.shutdown_timeout) <= 0 or self.linger_seconds < 0:
            raise ValueError("the timeouts must be positive")


STATUS_LIMITS = ServerLimits(header_timeout=5.0, body_timeout=5.0)  # probes and scrapes: small and quick


class App(Protocol):
    """What a listener serves: a request handler that owns whatever it runs work on (closed by stop())."""

    async def __call__(self, request: web.BaseRequest, /) -> web.StreamResponse: ...

    def close(self) -> None: ...


class _Connection(web.RequestHandler):
    """One client connection (aiohttp's protocol), with what the connection cap needs to know of it."""

    def __init__(self, manager: _Server, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self.limits = manager.limits
        self.working = False  # a request that has arrived is being processed: never closed to make room
        self.served = 0
        self.body: StreamReader | None = None  # the body being read, told about the client's EOF

    def eof_received(self) -> bool:  # type: ignore[override]  # asyncio.Protocol allows a bool
        """The client closed its side: a body being read ends there (and is answered as truncated, on
        the half of the connection still open); otherwise the connection is over."""
        if self.body is not None:
            self.body.feed_eof()
            return True
        return False

    def handle_error(
        self, request: web.BaseRequest, status: int = 500, exc: BaseException | None = None, message: str | None = None
    ) -> web.StreamResponse:
        """A request aiohttp's parser refused (or a crash past the app's own handling): a JSON answer,
        one debug line, not a traceback per malformed request in the log."""
        if request.writer.output_size > 0:
            raise ConnectionError("an answer was sent already")
        reason = (message or (str(exc) if exc else "") or "bad request").strip().splitlines()[0].strip(" :")
        if status >= 500:
            log.error("HTTP request from %s failed", request.remote, exc_info=exc)
            reason = "internal error; see the rebalancer log"
        else:
            log.debug("malformed HTTP request from %s: %s", request.remote, reason)
        body = json.dumps({"error": reason}, indent=1).encode() + b"\n"
        response = web.Response(status=status, body=body, content_type="application/json")
        response.headers["Server"] = SERVER_HEADER
        response.headers["Cache-Control"] = "no-store"
        response.force_close()
        return response


class _Server(web.Server):
    """aiohttp's low-level server with the connection cap, the keep-alive cap and our Server header."""

    def __init__(self, app: App, limits: ServerLimits, on_evicted: Callable[[], None]) -> None:
        super().__init__(
            self._serve,
            keepalive_timeout=limits.header_timeout,  # from the connection's start, or its previous answer
            lingering_time=limits.linger_seconds,
            access_log=None,
        )
        self.app = app
        self.limits = limits
        self._on_evicted = on_evicted
        self._open: dict[_Connection, None] = {}  # oldest first

    def __call__(self) -> _Connection:
        return _Connection(self, loop=self._loop, **self._kwargs)

    @property
    def open_connections(self) -> int:
        return len(self._open)

    def connection_made(self, handler: web.RequestHandler, transport: asyncio.Transport) -> None:
        super().connection_made(handler, transport)
        if isinstance(handler, _Connection):
            self._open[handler] = None
            if len(self._open) > self.limits.max_connections:
                self._make_room()

    def connection_lost(self, handler: web.RequestHandler, exc: BaseException | None = None) -> None:
        self._open.pop(handler, None)  # type: ignore[call-overload]
        super().connection_lost(handler, exc)

    def _make_room(self) -> None:
        for connection in self._open:
            if not connection.working:
                del self._open[connection]
                connection.force_close()
                self._on_evicted()
                return

    async def _serve(self, request: web.BaseRequest) -> web.StreamResponse:
        connection = request.protocol
        assert isinstance(connection, _Connection)
        connection.served += 1
        connection.working = True
        try:
            response = await self.app(request)
        finally:
            connection.working = False
        response.headers["Server"] = SERVER_HEADER
        if connection.served >= self.limits.max_requests_per_connection:
            response.force_close()
        return response


@contextmanager
def _waiting(connection: _Connection, body: StreamReader) -> Iterator[None]:
    connection.working, connection.body = False, body
    try:
        yield
    finally:
        connection.working, connection.body = True, None


async def read_body(request: web.BaseRequest, length: int) -> bytes:
    """The ``length`` bytes of ``request``'s body, within the listener's body timeout. While they arrive the
    connection may be closed to make room (it is not being processed yet). Raises TimeoutError,
    :class:`asyncio.IncompleteReadError` when the client ended its side before the last byte, and
    ConnectionError when the connection was lost (reset, or closed to make room)."""
    if length == 0:
        return b""
    connection = request.protocol
    assert isinstance(connection, _Connection)
    with _waiting(connection, request.content):
        async with asyncio.timeout(connection.limits.body_timeout):
            return await request.content.readexactly(length)


class HttpServer:
    """One listener: ``app`` served on an event loop running in a thread of its own."""

    def __init__(self, app: App, host: str, port: int, limits: ServerLimits, on_evicted: Callable[[], None]) -> None:
        self._app = app
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="rebalancer-http", daemon=True)
        self._thread.start()
        self._stop_lock = threading.Lock()
        self._stopped = False
        try:
            started = asyncio.run_coroutine_threadsafe(self._start(host, port, limits, on_evicted), self._loop)
            self._runner, self._server, self.host, self.port = started.result()
        except BaseException:
            self._halt()
            raise

    async def _start(
        self, host: str, port: int, limits: ServerLimits, on_evicted: Callable[[], None]
    ) -> tuple[web.ServerRunner, _Server, str, int]:
        server = _Server(self._app, limits, on_evicted)
        runner = web.ServerRunner(server, shutdown_timeout=limits.shutdown_timeout)
        await runner.setup()
        site = web.TCPSite(runner, host, port, backlog=1024, reuse_address=True)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        bound = runner.addresses[0]
        return runner, server, str(bound[0]), int(bound[1])

    @property
    def open_connections(self) -> int:
        """Client connections open now."""
        return self._server.open_connections

    def stop(self) -> None:
        """Stop accepting, let the requests in flight finish (at most the shutdown timeout), close."""
        with self._stop_lock:
            if self._stopped:
                return
            self._stopped = True
        try:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result()
        finally:
            self._halt()

    def _halt(self) -> None:
        asyncio.run_coroutine_threadsafe(_cancel_the_rest(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
        self._app.close()

    def __enter__(self) -> HttpServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def _cancel_the_rest() -> None:
    """Cancel what the shutdown left on the loop (the tasks of connections it closed) and let it end."""
    rest = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in rest:
        task.cancel()
    await asyncio.gather(*rest, return_exceptions=True)


def serve_http(
    app: App,
    host: str,
    port: int,
    *,
    limits: ServerLimits = ServerLimits(),
    on_evicted: Callable[[], None] = lambda: None,
) -> HttpServer:
    """Serve ``app`` on host:port (port 0: any free port, see ``.port``) until ``stop()``. ``on_evicted`` is
    called (on the listener's loop: keep it quick) for each connection closed to make room."""
    return HttpServer(app, host, port, limits, on_evicted)


def raise_open_files_limit(wanted: int) -> int:
    """Raise the soft limit of open files towards ``wanted`` (never above the hard limit, never lowering
    it); returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


def connections_allowed(max_connections: int, listeners: int = 2) -> int:
    """``max_connections`` per listener, or fewer when the open-files limit (raised as far as it goes) cannot
    hold that many on every listener besides what the rest of the process keeps open: a listener that runs
    out of files stops accepting, probes included, while the cap makes room instead."""
    available = raise_open_files_limit(listeners * max_connections + FILES_RESERVED)
    return max(1, min(max_connections, (available - FILES_RESERVED) // listeners))
