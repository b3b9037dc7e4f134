"""The service's HTTP side: two small WSGI apps and a threaded stdlib server to run each.

The webhook app (:func:`make_app`) serves ``POST /webhook/alertmanager`` only; the status app
(:func:`make_status_app`) serves ``GET /metrics``, ``GET /healthz`` and ``GET /readyz`` on a port of
its own, so that no webhook client, however many or slow, can keep a probe or a scrape from being
answered. Every collaborator is injected (no globals): the metrics, the runner's
:class:`~rebalancer.service.webhook.AlertSink`, leadership and readiness checks, the known nodes.

The webhook answers, in this order: 401 (bearer token configured and missing or wrong; 500 while the
token file is unreadable or empty: never open), 415 (not ``application/json``), 411 (no
Content-Length, or a transfer encoding), 400 (Content-Length headers that disagree), 413 (over the
body limit; nothing of it is read), 408/400 (a body that stalls or ends before the announced length),
400 (not JSON), 422 (not a version-4 payload; field paths listed), 503 with Retry-After (this instance is not the leader), 202 (handed to the
runner; the summary says per alert what it did). Input is checked before leadership, so a sender
learns about a bad body whichever replica it reaches. Each refusal is counted by reason; the log has at
most one line a minute per client address (:mod:`rebalancer.service.refusal_log`).

The server serves at most ``max_concurrent_requests`` requests at once, a thread each; a connection
beyond that gets 503 with Retry-After from the accept thread, unread (:mod:`rebalancer.service.admission`).
A request must arrive without a silence longer than the idle timeout and in full before its deadline
(:mod:`rebalancer.service.deadline`), so neither a silent nor a trickling client keeps its thread.
"""

from __future__ import annotations

import hmac
import io
import json
import logging
import os
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any
from wsgiref.simple_server import ServerHandler, WSGIRequestHandler, WSGIServer
from wsgiref.types import InputStream, StartResponse, WSGIApplication, WSGIEnvironment

from pydantic import ValidationError

from rebalancer.domain.errors import TokenFileError
from rebalancer.domain.token_file import WEBHOOK_TOKEN_FILE, read_token_file
from rebalancer.policy import validation_problems
from rebalancer.service.admission import LINGER_SECONDS, Admission
from rebalancer.service.deadline import DeadlineReader
from rebalancer.service.metrics import Metrics
from rebalancer.service.refusal_log import RefusalLog
from rebalancer.service.webhook import (
    DEFAULT_NODE_LABELS,
    QUEUED,
    Ack,
    AlertSink,
    NodeAlert,
    WebhookPayload,
    node_alerts,
)

log = logging.getLogger(__name__)

WEBHOOK_PATH = "/webhook/alertmanager"
MAX_BODY_BYTES = 1 << 20
REQUEST_TIMEOUT_SECONDS = 10.0  # a client silent this long mid-request is dropped (slow clients)
REQUEST_DEADLINE_SECONDS = 30.0  # the whole request (head and body) must arrive within this long
MAX_CONCURRENT_REQUESTS = 64  # requests served at once (a thread each); the policy's default too
STATUS_MAX_CONCURRENT_REQUESTS = 8  # of the status port: probes and scrapes are few and quick
CONTENT_LENGTHS = "rebalancer.content_lengths"  # environ key: every Content-Length header the request had
BUSY_RETRY_AFTER_SECONDS = 5  # Retry-After of the 503 a connection gets when every slot is busy
REQUEST_THREAD_NAME = "rebalancer-http-request"
LINGER_MAX_BYTES = 16 << 20
_JSON = "application/json"


class TokenUnavailable(Exception):
    """The configured token file cannot be read or is empty: every request is refused."""


class TokenFile:
    """A bearer token kept in a file (a mounted Secret), re-read whenever the file changes.

    Kubernetes rotates a mounted Secret by swapping a symlink, so the file is stat()ed on each request
    (following links) and read again when its inode, size or modification time changed.
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
class _Response:
    status: int
    body: bytes
    content_type: str = _JSON
    headers: tuple[tuple[str, str], ...] = ()
    problem: str = ""  # why a request was refused, for the log
    reason: str = ""  # the same as one word, for the metric


def _json(
    status: int,
    document: Mapping[str, Any],
    headers: tuple[tuple[str, str], ...] = (),
    problem: str = "",
    reason: str = "",
) -> _Response:
    return _Response(status, json.dumps(document, indent=1).encode() + b"\n", _JSON, headers, problem, reason)


def _error(status: int, message: str, reason: str, headers: tuple[tuple[str, str], ...] = ()) -> _Response:
    return _json(status, {"error": message}, headers, message, reason)


class _Addresses(Mapping[str, str]):
    """The configured instance map over the nodes' own addresses, built only if an alert needs it
    (an alert that names its node by name never does)."""

    def __init__(self, configured: Mapping[str, str], node_addresses: Callable[[], Mapping[str, str]]) -> None:
        self._configured, self._node_addresses = configured, node_addresses
        self._merged: Mapping[str, str] | None = None

    def _all(self) -> Mapping[str, str]:
        if self._merged is None:
            self._merged = {**self._node_addresses(), **self._configured}
        return self._merged

    def __getitem__(self, key: str) -> str:
        return self._all()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


class _Routes:
    """A WSGI app over a table of path -> (method, handler); 404 and 405 for the rest."""

    _routes: dict[str, tuple[str, Callable[[WSGIEnvironment], _Response]]]

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        response = self._dispatch(environ.get("PATH_INFO", ""), environ.get("REQUEST_METHOD", ""), environ)
        self._answered(environ, response)
        headers = [
            ("Content-Type", response.content_type),
            ("Content-Length", str(len(response.body))),
            ("Cache-Control", "no-store"),
            *response.headers,
        ]
        start_response(f"{response.status} {HTTPStatus(response.status).phrase}", headers)
        return [response.body]

    def _answered(self, environ: WSGIEnvironment, response: _Response) -> None:
        """Called with every answer before it is sent."""

    def _dispatch(self, path: str, method: str, environ: WSGIEnvironment) -> _Response:
        route = self._routes.get(path)
        if route is None:
            return _error(404, f"no such path: {path}", "no-such-path")
        allowed, handler = route
        if method != allowed:
            return _error(405, f"{path} accepts {allowed} only", "method", (("Allow", allowed),))
        try:
            return handler(environ)
        except Exception:
            log.exception("%s %s failed", method, path)
            return _error(500, "internal error; see the rebalancer log", "internal")


class StatusApp(_Routes):
    """``GET /metrics``, ``/healthz``, ``/readyz``: the status port's app; build it with :func:`make_status_app`."""

    def __init__(self, metrics: Metrics, ready: Callable[[], bool]) -> None:
        self._metrics = metrics
        self._ready = ready
        self._routes = {
            "/metrics": ("GET", self._metrics_page),
            "/healthz": ("GET", self._healthz),
            "/readyz": ("GET", self._readyz),
        }

    def _metrics_page(self, environ: WSGIEnvironment) -> _Response:
        body, content_type = self._metrics.exposition()
        return _Response(200, body, content_type)

    def _healthz(self, environ: WSGIEnvironment) -> _Response:
        return _Response(200, b"ok\n", "text/plain; charset=utf-8")

    def _readyz(self, environ: WSGIEnvironment) -> _Response:
        if self._ready():
            return _Response(200, b"ready\n", "text/plain; charset=utf-8")
        return _Response(503, b"not ready: no cycle or source check has succeeded yet\n", "text/plain; charset=utf-8")


def make_status_app(*, metrics: Metrics, ready: Callable[[], bool]) -> StatusApp:
    """The status port's app: ``/metrics`` from ``metrics``, ``/healthz`` always 200 while the process
    answers, ``/readyz`` 200 while ``ready()``."""
    return StatusApp(metrics, ready)


class RebalancerApp(_Routes):
    """The webhook's WSGI application; build it with :func:`make_app`."""

    def __init__(
        self,
        *,
        metrics: Metrics,
        submit: AlertSink,
        is_leader: Callable[[], bool],
        known_nodes: Callable[[], Collection[str]],
        node_labels: tuple[str, ...],
        instance_map: Mapping[str, str],
        node_addresses: Callable[[], Mapping[str, str]],
        token: TokenFile | None,
        max_body_bytes: int,
        retry_after_seconds: int,
        refusal_log: RefusalLog,
    ) -> None:
        self._metrics = metrics
        self._submit = submit
        self._is_leader = is_leader
        self._known_nodes = known_nodes
        self._node_labels = node_labels
        self._instance_map = instance_map
        self._node_addresses = node_addresses
        self._token = token
        self._max_body = max_body_bytes
        self._retry_after = str(retry_after_seconds)
        self._refusal_log = refusal_log
        self._routes = {WEBHOOK_PATH: ("POST", self._webhook)}

    def _answered(self, environ: WSGIEnvironment, response: _Response) -> None:
        self._metrics.webhook_answered(response.status)
        if response.reason:
            self._metrics.webhook_refused_for(response.reason)
        if response.problem:
            self._refusal_log.refused(str(environ.get("REMOTE_ADDR", "?")), response.status, response.problem)

    # -- the webhook --------------------------------------------------------------------------------

    def _webhook(self, environ: WSGIEnvironment) -> _Response:
        denied = self._authenticate(environ)
        if denied is not None:
            return denied
        media_type = str(environ.get("CONTENT_TYPE", "")).split(";", 1)[0].strip().lower()
        if media_type != _JSON:
            return _error(415, f"Content-Type must be {_JSON}, got {media_type or 'none'}", "content-type")
        body_or_error = self._read_body(environ)
        if isinstance(body_or_error, _Response):
            return body_or_error
        try:
            data = json.loads(body_or_error)
        except (ValueError, RecursionError) as exc:
            return _error(400, f"the body is not JSON: {exc}", "not-json")
        try:
            payload = WebhookPayload.model_validate(data)
        except ValidationError as exc:
            found = validation_problems(exc)
            problems = [{"field": path, "message": message} for path, message in found]
            short = "; ".join(f"{path or '(body)'}: {message}" for path, message in found[:5])
            return _json(
                422,
                {"error": "not an Alertmanager webhook payload (version 4)", "problems": problems},
                problem=short,
                reason="invalid-payload",
            )
        if not self._is_leader():
            return _error(503, "not the leader; retry later", "not-leader", (("Retry-After", self._retry_after),))
        alerts = node_alerts(
            payload,
            known_nodes=self._known_nodes(),
            node_labels=self._node_labels,
            instance_map=_Addresses(self._instance_map, self._node_addresses),
        )
        summary = self._summarize(payload, alerts, self._submit(alerts))
        log.info(
            "alertmanager webhook (group %s): %d alert(s), queued %s",
            payload.group_key,
            len(alerts),
            ", ".join(summary["accepted"]) or "nothing",
        )
        return _json(202, summary)

    def _authenticate(self, environ: WSGIEnvironment) -> _Response | None:
        if self._token is None:
            return None
        try:
            expected = self._token.current()
        except TokenUnavailable as exc:
            log.error("%s; refusing webhook requests", exc)
            return _error(500, "the webhook token is not available", "token-unavailable")
        scheme, _, offered = str(environ.get("HTTP_AUTHORIZATION", "")).strip().partition(" ")
        if scheme.lower() != "bearer" or not offered.strip():
            return _error(
                401,
                "a bearer token is required",
                "unauthenticated",
                (("WWW-Authenticate", 'Bearer realm="rebalancer"'),),
            )
        # WSGI hands headers over as latin-1 decoded text: encoding back gives the bytes that were sent
        if not hmac.compare_digest(offered.strip().encode("latin-1"), expected):
            challenge = 'Bearer realm="rebalancer", error="invalid_token"'
            return _error(401, "the bearer token is wrong", "unauthenticated", (("WWW-Authenticate", challenge),))
        return None

    def _read_body(self, environ: WSGIEnvironment) -> bytes | _Response:
        if environ.get("HTTP_TRANSFER_ENCODING"):
            return _error(411, "send the body with a Content-Length, not a transfer encoding", "length-required")
        declared = list(dict.fromkeys(str(value).strip() for value in environ.get(CONTENT_LENGTHS, ())))
        if len(declared) > 1:  # which one would a proxy in front have used? (request smuggling)
            return _error(400, f"Content-Length headers disagree: {', '.join(declared)}", "bad-length")
        raw = str(environ.get("CONTENT_LENGTH", "")).strip()
        if not raw:
            return _error(411, "Content-Length is required", "length-required")
        if not raw.isdigit():
            return _error(400, f"bad Content-Length: {raw!r}", "bad-length")
        length = int(raw)
        if length > self._max_body:
            return _error(413, f"the body is {length} bytes; at most {self._max_body} are accepted", "too-large")
        stream = environ["wsgi.input"]
        chunks: list[bytes] = []
        got = 0
        try:
            while got < length:
                chunk = stream.read(min(length - got, self._max_body + 1 - got))
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
        except OSError as exc:  # the socket timed out (slow client) or broke
            return _error(408, f"the body did not arrive: {exc}", "timeout")
        if got < length:
            return _error(400, f"the body ended after {got} of the {length} bytes announced", "truncated")
        return b"".join(chunks)

    def _summarize(self, payload: WebhookPayload, alerts: list[NodeAlert], acks: Sequence[Ack]) -> dict[str, Any]:
        """The 202 body: per alert what happened, plus the nodes queued, alerts ignored, alerts resolved."""
        per_alert: list[dict[str, str | None]] = []
        accepted: list[str] = []
        for alert, ack in zip(alerts, acks, strict=True):
            self._metrics.alert_handled(alert.status, ack.action)
            detail = ack.detail or alert.reason_if_unusable or ""
            per_alert.append(
                {
                    "fingerprint": alert.fingerprint,
                    "alertname": alert.alertname,
                    "status": alert.status,
                    "node": alert.node,
                    "action": ack.action,
                    "detail": detail,
                }
            )
            if ack.action == QUEUED and ack.node is not None and ack.node not in accepted:
                accepted.append(ack.node)
        return {
            "accepted": accepted,
            "ignored": [
                {"fingerprint": a.fingerprint, "alertname": a.alertname, "reason": a.reason_if_unusable}
                for a in alerts
                if a.node is None
            ],
            "resolved": [
                {"fingerprint": a.fingerprint, "alertname": a.alertname, "node": a.node}
                for a in alerts
                if a.status == "resolved"
            ],
            "alerts": per_alert,
            "notes": list(payload.notes()),
        }


def make_app(
    *,
    metrics: Metrics,
    submit: AlertSink,
    is_leader: Callable[[], bool],
    known_nodes: Callable[[], Collection[str]],
    node_labels: tuple[str, ...] = DEFAULT_NODE_LABELS,
    instance_map: Mapping[str, str] | None = None,
    node_addresses: Callable[[], Mapping[str, str]] = dict,
    token: TokenFile | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
    retry_after_seconds: int = 10,
    refusal_log: RefusalLog | None = None,
) -> RebalancerApp:
    """The webhook's WSGI app. ``token`` None: the webhook is open (serve allows that only when told to);
    otherwise every webhook request must carry it as a bearer token. ``node_addresses``: address -> node
    name from the nodes' ``status.addresses``, asked per request; ``instance_map`` entries take precedence.
    ``refusal_log``: where refusals are logged (default: this module's logger, a line a minute per client)."""
    if not node_labels:
        raise ValueError("node_labels must name at least one label")
    return RebalancerApp(
        metrics=metrics,
        submit=submit,
        is_leader=is_leader,
        known_nodes=known_nodes,
        node_labels=node_labels,
        instance_map=dict(instance_map or {}),
        node_addresses=node_addresses,
        token=token,
        max_body_bytes=max_body_bytes,
        retry_after_seconds=retry_after_seconds,
        refusal_log=refusal_log or RefusalLog(log),
    )


# -- the server ------------------------------------------------------------------------------------


class _CountingInput:
    """wsgi.input that counts what the application read (to know whether a body was left unread)."""

    def __init__(self, stream: InputStream) -> None:
        self._stream = stream
        self.consumed = 0

    def read(self, size: int = -1, /) -> bytes:
        data = self._stream.read(size)
        self.consumed += len(data)
        return data

    def readline(self, size: int = -1, /) -> bytes:
        data = self._stream.readline(size)
        self.consumed += len(data)
        return data

    def readlines(self, hint: int = -1, /) -> list[bytes]:
        lines = self._stream.readlines(hint)
        self.consumed += sum(len(line) for line in lines)
        return lines

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.readline, b"")


@dataclass(frozen=True, slots=True)
class RequestTimeouts:
    """``idle``: the longest silence while a request arrives (then also the bound of each write of the
    answer); ``deadline``: the longest time the whole request may take to arrive, however it trickles."""

    idle: float = REQUEST_TIMEOUT_SECONDS
    deadline: float = REQUEST_DEADLINE_SECONDS


STATUS_TIMEOUTS = RequestTimeouts(idle=5.0, deadline=10.0)  # a probe or a scrape request is a few hundred bytes


class _RequestHandler(WSGIRequestHandler):
    server: _ThreadingServer

    def setup(self) -> None:
        super().setup()
        timeouts = self.server.timeouts
        self.connection.settimeout(timeouts.idle)
        self.rfile.close()  # reads go through the deadline instead
        reader = DeadlineReader(self.connection, time.monotonic() + timeouts.deadline, timeouts.idle)
        self.rfile = io.BufferedReader(reader)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def get_environ(self) -> WSGIEnvironment:
        environ = super().get_environ()
        environ[CONTENT_LENGTHS] = tuple(self.headers.get_all("Content-Length") or ())
        return environ

    def handle(self) -> None:
        """wsgiref's handle(), plus a lingering close when the body was not read (413 and the like):
        closing a socket with unread input makes the kernel reset the connection, and the client could
        lose the answer."""
        try:
            self.raw_requestline = self.rfile.readline(65537)
            if len(self.raw_requestline) > 65536:
                self.requestline = self.request_version = self.command = ""
                self.send_error(HTTPStatus.REQUEST_URI_TOO_LONG)
                return
            if not self.parse_request():
                return
            stdin = _CountingInput(self.rfile)
            handler = ServerHandler(stdin, self.wfile, self.get_stderr(), self.get_environ(), multithread=True)  # type: ignore[arg-type]
            handler.request_handler = self  # type: ignore[attr-defined]  # wsgiref's back-pointer for logging
            app = self.server.get_app()
            assert app is not None  # serve_http sets it before serving
            handler.run(app)
            declared = self.headers.get("Content-Length", "").strip()
            if declared.isdigit() and int(declared) > stdin.consumed:
                self._linger()
        except OSError as exc:  # the client went away or stayed silent past the timeout
            log.debug("connection from %s: %s", self.address_string(), exc)

    def _linger(self) -> None:
        try:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_WR)
            self.connection.settimeout(LINGER_SECONDS)
            deadline = time.monotonic() + LINGER_SECONDS
            drained = 0
            while drained < LINGER_MAX_BYTES and time.monotonic() < deadline:
                chunk = self.connection.recv(65536)
                if not chunk:
                    break
                drained += len(chunk)
        except OSError:
            pass


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    """A thread per admitted connection; the others are refused by :class:`Admission` on the accept thread."""

    daemon_threads = False  # server_close() waits for requests in flight
    block_on_close = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], admission: Admission, timeouts: RequestTimeouts) -> None:
        self.admission = admission
        self.timeouts = timeouts
        super().__init__(address, _RequestHandler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.admission.admit():
            self.admission.refuse(request)
            return
        try:
            super().process_request(request, client_address)  # starts the request's thread
        except BaseException:
            self.admission.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        threading.current_thread().name = REQUEST_THREAD_NAME
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.admission.release()

    def service_actions(self) -> None:
        """Called by serve_forever between accepts (at least every poll interval)."""
        super().service_actions()
        self.admission.drain()

    def server_close(self) -> None:
        super().server_close()  # waits for the requests in flight
        self.admission.close()

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host's FQDN, which can hang on a cluster's DNS: not needed.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)
        self.setup_environ()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.exception("HTTP request from %s failed", client_address)


class _ThreadingServer6(_ThreadingServer):
    address_family = socket.AF_INET6


class HttpServer:
    """A running server: its own accept thread, one thread per admitted request."""

    def __init__(self, server: _ThreadingServer) -> None:
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="rebalancer-http", daemon=True
        )
        self._stop_lock = threading.Lock()
        self._stopped = False
        self._thread.start()

    @property
    def host(self) -> str:
        return str(self._server.server_address[0])

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def stop(self) -> None:
        """Stop accepting, let the requests in flight finish (each bounded by the request timeouts), close."""
        with self._stop_lock:
            if self._stopped:
                return
            self._stopped = True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> HttpServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_http(
    app: WSGIApplication,
    host: str,
    port: int,
    *,
    max_concurrent_requests: int = MAX_CONCURRENT_REQUESTS,
    on_refused: Callable[[], None] = lambda: None,
    retry_after_seconds: int = BUSY_RETRY_AFTER_SECONDS,
    timeouts: RequestTimeouts = RequestTimeouts(),
) -> HttpServer:
    """Serve ``app`` on host:port (port 0: any free port, see ``.port``) from a background thread.

    At most ``max_concurrent_requests`` requests are served at once; a connection beyond that is answered
    503 with Retry-After at once, unread, and ``on_refused`` is called (on the accept thread: keep it quick).
    """
    server_class = _ThreadingServer6 if ":" in host else _ThreadingServer
    admission = Admission(max_concurrent_requests, retry_after_seconds, on_refused)
    server = server_class((host, port), admission, timeouts)
    server.set_app(app)
    return HttpServer(server)
