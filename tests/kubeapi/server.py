"""A test Kubernetes API server on 127.0.0.1 that speaks the real wire format.

It serves what rebalancer's adapters read (nodes, pods, ReplicaSets, PodDisruptionBudgets, ...)
from a versioned in-memory :class:`Store`, with the real server's list semantics: ``limit`` and
``continue`` (consistent pages, 410 Expired after compaction), ``fieldSelector``,
``labelSelector``, ``resourceVersion``/``resourceVersionMatch`` (checked as the real server checks its
ListOptions, :mod:`tests.kubeapi.list_options`), watches (:mod:`tests.kubeapi.watch`) including the
streaming watch-list (``sendInitialEvents``; ``server.watch_list = False`` refuses it as a server without
the WatchList feature gate does), and ``Status`` error bodies.
Faults (an error answer, a delay, a dropped connection) are injected per path.

Routing is a small table of (method, path regex, handler); :meth:`TestApiServer.route` adds to
it. Writable types (ConfigMaps, Events, Leases) get create/update/delete with resourceVersion
conflicts (:mod:`tests.kubeapi.writes`); pods get the eviction subresource with PodDisruptionBudget
semantics (:mod:`tests.kubeapi.eviction`, ``server.eviction``); :meth:`TestApiServer.forbid` makes
the RBAC authorizer refuse a verb on a resource (:mod:`tests.kubeapi.rbac`), and a SelfSubjectAccessReview
reports what it refuses; :meth:`TestApiServer.keep_namespaces` makes namespaces objects, a create in a
missing one answering 404 as the NamespaceLifecycle admission does (:mod:`tests.kubeapi.authorization`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import re
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import parse_qsl, urlsplit

import msgspec

from tests.kubeapi import authorization, list_options, patch, rbac, resources, selectors, status, watch, writes
from tests.kubeapi.disruption import DisruptionController
from tests.kubeapi.eviction import EvictionSubresource
from tests.kubeapi.resources import ResourceType
from tests.kubeapi.status import ApiError
from tests.kubeapi.store import Store


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    params: dict[str, str] = field(default_factory=dict)  # named groups of the matched route

    def json(self) -> Any:
        return json.loads(self.body or b"null")


@dataclass
class Response:
    code: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    stream: Iterator[bytes | watch.Chunk] | None = None  # a watch: sent chunked, as it comes
    parts: list[bytes] | None = None  # the body as pieces, sent gathered (``body`` is then empty)

    @property
    def length(self) -> int:
        return len(self.body) if self.parts is None else sum(map(len, self.parts))

    @classmethod
    def of(cls, code: int, obj: Any, headers: dict[str, str] | None = None) -> Response:
        return cls(code, msgspec.json.encode(obj), headers or {})


Handler = Callable[[Request], Response]


@dataclass
class Fault:
    """What goes wrong for requests to one path.

    ``error``: answer with this Status (e.g. ``status.forbidden(...)``); ``code``: answer with
    this HTTP status and a Status body (``reason``/``message`` default to the real server's);
    ``body``: answer ``code`` (default 200) with these raw bytes (a proxy's HTML page, say);
    ``delay``: wait this long first (a client timeout); ``drop``: close the connection without
    an answer. ``times``: how many requests it hits (None: until cleared);
    ``method``: only this method; ``with_continue``: only requests carrying (True) or not
    carrying (False) a continue token; ``watch``: only watches (True) or only other requests (False).
    """

    error: ApiError | None = None
    code: int = 0
    body: bytes | None = None
    reason: str | None = None
    message: str = ""
    delay: float = 0.0
    drop: bool = False
    retry_after: int | None = None
    times: int | None = None
    method: str | None = None
    with_continue: bool | None = None
    watch: bool | None = None

    def applies(self, request: Request) -> bool:
        if self.method is not None and request.method != self.method:
            return False
        if self.watch is not None and (request.query.get("watch") in ("1", "true")) != self.watch:
            return False
        return self.with_continue is None or bool(request.query.get("continue")) == self.with_continue


_NAME = r"(?P<name>[^/]+)"
_NS = r"(?P<namespace>[^/]+)"


class TestApiServer:
    """Start with ``TestApiServer()`` (already serving), read ``.url``, ``.stop()`` when done."""

    __test__ = False  # not a test class, whatever pytest thinks of the name

    def __init__(self, *, token: str | None = None, user: str = "system:serviceaccount:kube-system:rebalancer") -> None:
        self.store = Store()
        self.token = token
        self.user = user
        self.requests: list[Request] = []
        self.record_requests = True  # benchmarks turn it off: millions of requests would pile up
        self.bookmark_interval = 1.0  # seconds between BOOKMARK events on a watch (the real server: ~60)
        self._watch_epoch = 0  # close_watches() moves it on: streams opened before it are cut
        self._silent_until = 0.0  # time.monotonic(): until then open watches say nothing (silence_watches)
        self._unwatched: set[int] = set()  # revisions no watch reports (write_unwatched)
        self.watch_list = True  # the WatchList feature gate: False refuses sendInitialEvents (422), as older servers
        self._watch_list_faults: dict[str, list[watch.Interruption]] = {}  # plural -> how the next ones break
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = []
        self._faults: dict[str, list[Fault]] = {}
        self._hooks: list[Callable[[Request], None]] = []
        self._denied: list[rbac.Deny] = []
        self._namespaces_kept = False  # False: every namespace exists (no Namespace objects needed)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self.disruption = DisruptionController(self.store)
        self.eviction = EvictionSubresource(self.store, self.disruption)
        for rtype in resources.RESOURCES:
            self._add_resource_routes(rtype)
        self.route("POST", f"/api/v1/namespaces/{_NS}/pods/{_NAME}/eviction", self._evict)
        self.route("PATCH", f"/api/v1/namespaces/{_NS}/pods/{_NAME}", self._patch_pod)
        self.route("PATCH", f"/api/v1/nodes/{_NAME}", self._patch_node)
        self.route("POST", f"/apis/{authorization.GROUP}/v1/selfsubjectaccessreviews", self._access_review)
        self._http = _HTTPServer(self)
        self._thread = threading.Thread(target=self._http.serve_forever, args=(0.05,), name="kubeapi", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}"

    def stop(self) -> None:
        """Stop serving and cut every open connection (later requests: connection refused)."""
        self._stopping.set()
        self._http.shutdown()
        self._http.server_close()
        self._http.close_connections()
        self._thread.join(timeout=5)

    def __enter__(self) -> TestApiServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- store shortcuts --------------------------------------------------------------------

    def add(self, *objs: dict[str, Any]) -> None:
        for obj in objs:
            self.store.create(obj)

    def delete(self, plural: str, name: str, namespace: str | None = None) -> None:
        self.store.delete(plural, name, namespace)

    def objects(self, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """The stored objects of a type (e.g. ``"events"``), in key order."""
        return self.store.objects(plural, namespace)

    # --- RBAC -------------------------------------------------------------------------------

    def forbid(self, verb: str, resource: str, *, group: str = "", namespace: str | None = None) -> None:
        """Refuse ``verb`` ("*": any) on ``resource`` ("pods/eviction", "configmaps", ...) with the RBAC 403."""
        with self._lock:
            self._denied.append(rbac.Deny(verb, resource, group, namespace))

    def allow_all(self) -> None:
        with self._lock:
            self._denied.clear()

    # --- namespaces -------------------------------------------------------------------------

    def keep_namespaces(self, *names: str) -> None:
        """From now on namespaces are objects: ``names`` and the immortal ones (default, kube-system, ...)
        exist, and a create in any other answers 404 ``namespaces "<name>" not found``."""
        for name in (*authorization.IMMORTAL_NAMESPACES, *names):
            if self.store.get("namespaces", name) is None:
                self.store.create(authorization.namespace(name))
        self._namespaces_kept = True

    def _admit_create(self, namespace: str | None) -> None:
        exists = not self._namespaces_kept or self.store.get("namespaces", namespace or "") is not None
        authorization.admit_create(namespace, exists)

    # --- faults and hooks -------------------------------------------------------------------

    def close_watches(self) -> None:
        """Cut every open watch stream mid-way (no final chunk), as a restarting API server or a proxy does."""
        with self._lock:
            self._watch_epoch += 1

    def silence_watches(self, seconds: float) -> None:
        """For ``seconds``, every watch stream stays open without a word: no event, no bookmark (changes made
        meanwhile follow afterwards), as a real API server's watch on a quiet collection. Streams still end at
        their ``timeoutSeconds``, silently too, and new ones open."""
        with self._lock:
            self._silent_until = time.monotonic() + seconds

    def _silent(self) -> bool:
        return time.monotonic() < self._silent_until

    def write_unwatched(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Update a stored object without any watch reporting it: a watch event lost on the way (listings see
        the change)."""
        stored = self.store.update(obj)
        with self._lock:
            self._unwatched.add(int(stored["metadata"]["resourceVersion"]))
        return stored

    def interrupt_watch_lists(
        self, plural: str, after: int, how: Literal["cut", "expire"] = "cut", times: int = 1
    ) -> None:
        """The next ``times`` watch-lists (``sendInitialEvents=true``) of ``plural`` break after ``after`` initial
        events: the connection is cut (``cut``), or an ERROR event carrying 410 ``Expired`` ends the stream
        (``expire``)."""
        with self._lock:
            self._watch_list_faults.setdefault(plural, []).extend([watch.Interruption(after, how)] * times)

    def _watch_cut(self) -> Callable[[], bool]:
        with self._lock:
            epoch = self._watch_epoch
        return lambda: self._stopping.is_set() or self._watch_epoch != epoch

    def set_fault(self, path: str, fault: Fault) -> None:
        """Add a fault for requests to exactly ``path`` (checked in the order added)."""
        with self._lock:
            self._faults.setdefault(path, []).append(fault)

    def clear_faults(self, path: str | None = None) -> None:
        with self._lock:
            if path is None:
                self._faults.clear()
            else:
                self._faults.pop(path, None)

    def on_request(self, hook: Callable[[Request], None]) -> None:
        """Run ``hook`` before each request is served (e.g. to change the store mid-list)."""
        with self._lock:
            self._hooks.append(hook)

    def expire_continue_on(self, path: str, times: int = 1) -> None:
        """Before the next ``times`` requests to ``path`` carrying a continue token, expire all tokens."""
        left = [times]

        def hook(request: Request) -> None:
            if request.path == path and request.query.get("continue") and left[0] > 0:
                left[0] -= 1
                self.store.expire_continue_tokens()

        self.on_request(hook)

    @staticmethod
    def eviction_path(namespace: str, name: str) -> str:
        """The path of a pod's eviction subresource, for :meth:`set_fault` and :meth:`requests_to`."""
        return f"/api/v1/namespaces/{namespace}/pods/{name}/eviction"

    def requests_to(self, path: str) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.path == path]

    # --- routing ----------------------------------------------------------------------------

    def route(self, method: str, pattern: str, handler: Handler) -> None:
        """Serve ``method`` requests whose path fully matches ``pattern`` with ``handler``."""
        self._routes.append((method, re.compile(pattern), handler))

    def _add_resource_routes(self, rtype: ResourceType) -> None:
        base = re.escape(rtype.prefix)
        plural = re.escape(rtype.plural)
        list_, get = functools.partial(self._list, rtype), functools.partial(self._get, rtype)
        self.route("GET", f"{base}/{plural}", list_)
        if rtype.namespaced:
            self.route("GET", f"{base}/namespaces/{_NS}/{plural}", list_)
            self.route("GET", f"{base}/namespaces/{_NS}/{plural}/{_NAME}", get)
        else:
            self.route("GET", f"{base}/{plural}/{_NAME}", get)
        if rtype.writable:
            self.route("POST", f"{base}/namespaces/{_NS}/{plural}", functools.partial(self._create, rtype))
            self.route("PUT", f"{base}/namespaces/{_NS}/{plural}/{_NAME}", functools.partial(self._update, rtype))
            self.route("DELETE", f"{base}/namespaces/{_NS}/{plural}/{_NAME}", functools.partial(self._remove, rtype))

    def handle(self, request: Request) -> Response | None:
        """Answer one request; None means drop the connection without an answer."""
        with self._lock:
            if self.record_requests:
                self.requests.append(request)
            hooks = list(self._hooks)
        for hook in hooks:
            hook(request)
        try:
            fault = self._take_fault(request)
            if fault is not None:
                if fault.delay and self._stopping.wait(fault.delay):
                    return None
                if fault.drop:
                    return None
                if fault.error is not None:
                    raise fault.error
                if fault.body is not None:
                    return Response(fault.code or 200, fault.body)
                if fault.code:
                    raise status.generic(fault.code, fault.message, fault.reason, fault.retry_after)
            self._authenticate(request)
            with self._lock:
                denied = list(self._denied)
            rbac.check(self.user, denied, request.method, request.path, request.query)
            return self._dispatch(request)
        except ApiError as error:
            return Response.of(error.code, error.body, error.headers)

    def _take_fault(self, request: Request) -> Fault | None:
        with self._lock:
            for fault in self._faults.get(request.path, []):
                if fault.applies(request) and (fault.times is None or fault.times > 0):
                    if fault.times is not None:
                        fault.times -= 1
                    return fault
        return None

    def _authenticate(self, request: Request) -> None:
        if self.token is not None and request.headers.get("authorization") != f"Bearer {self.token}":
            raise status.unauthorized()

    def _dispatch(self, request: Request) -> Response:
        allowed = False
        for method, pattern, handler in self._routes:
            match = pattern.fullmatch(request.path)
            if match is None:
                continue
            if method != request.method:
                allowed = True
                continue
            return handler(dataclasses.replace(request, params=match.groupdict()))
        if allowed:
            raise status.method_not_allowed(request.method)
        raise status.no_route()

    # --- the write handlers -----------------------------------------------------------------

    def _create(self, rtype: ResourceType, request: Request) -> Response:
        self._admit_create(request.params["namespace"])
        obj = writes.create(self.store, rtype, _json(request), request.params["namespace"], request.query)
        return Response.of(201, obj)

    def _update(self, rtype: ResourceType, request: Request) -> Response:
        params = request.params
        if rtype.create_on_update and self.store.get(rtype.plural, params["name"], params["namespace"]) is None:
            self._admit_create(params["namespace"])  # this update creates
        code, obj = writes.update(self.store, rtype, _json(request), params["namespace"], params["name"], request.query)
        return Response.of(code, obj)

    def _remove(self, rtype: ResourceType, request: Request) -> Response:
        params = request.params
        return Response.of(200, writes.delete(self.store, rtype, params["namespace"], params["name"], request.query))

    def _patch_pod(self, request: Request) -> Response:
        params = request.params
        obj = patch.patch_pod(
            self.store, params["namespace"], params["name"], request.body, request.headers.get("content-type", ""),
            request.query,
        )  # fmt: skip
        return Response.of(200, obj)

    def _patch_node(self, request: Request) -> Response:
        obj = patch.patch_node(
            self.store, request.params["name"], request.body, request.headers.get("content-type", ""), request.query
        )
        return Response.of(200, obj)

    def _access_review(self, request: Request) -> Response:
        with self._lock:
            denied = list(self._denied)
        return Response.of(201, authorization.review(_json(request), denied))

    def _evict(self, request: Request) -> Response:
        params = request.params
        return Response.of(
            201, self.eviction.create(params["namespace"], params["name"], _json(request), request.query)
        )

    # --- the generic read handlers ----------------------------------------------------------

    def _get(self, rtype: ResourceType, request: Request) -> Response:
        name, namespace = request.params["name"], request.params.get("namespace")
        obj = self.store.get(rtype.plural, name, namespace)
        if obj is None:
            raise status.not_found(rtype.plural, rtype.group, name)
        return Response.of(200, {"kind": rtype.kind, "apiVersion": rtype.api_version, **obj})

    def _list(self, rtype: ResourceType, request: Request) -> Response:
        q = request.query
        predicates = []
        if q.get("fieldSelector"):
            predicates.append(selectors.field_selector(q["fieldSelector"], rtype))
        if q.get("labelSelector"):
            predicates.append(selectors.label_selector(q["labelSelector"]))
        list_options.validate(q, watch_list_enabled=self.watch_list)
        if list_options.flag(q, "watch"):
            initial = list_options.flag(q, "sendInitialEvents")
            start = watch.parse_start(q.get("resourceVersion", ""))
            interruption = None
            if initial:  # not older than ``start``: the current state (a future revision is too large)
                if start is not None:
                    self.store.check_revision(start, exact=False)
                start = None
                with self._lock:
                    waiting = self._watch_list_faults.get(rtype.plural)
                    interruption = waiting.pop(0) if waiting else None
            elif initial is False and start is None:  # no initial events: from now on
                start = self.store.revision
            events = watch.stream(
                self.store,
                rtype,
                request.params.get("namespace"),
                start,
                predicate=(lambda o: all(p(o) for p in predicates)) if predicates else None,
                bookmarks=bool(list_options.flag(q, "allowWatchBookmarks")),
                bookmark_interval=self.bookmark_interval,
                timeout=watch.parse_timeout(q.get("timeoutSeconds", "")),
                cut=self._watch_cut(),
                silent=self._silent,
                unwatched=self._unwatched.__contains__,
                end_marker=bool(initial),
                interruption=interruption,
            )
            return Response(200, b"", stream=events)
        try:
            limit = int(q.get("limit") or 0)
        except ValueError:
            raise status.bad_request(f"invalid limit: {q['limit']!r}") from None
        token = q.get("continue") or None
        revision = self._list_revision(q, token)
        page = self.store.list(
            rtype,
            request.params.get("namespace"),
            limit=max(limit, 0),
            continue_token=token,
            revision=revision,
            predicate=(lambda o: all(p(o) for p in predicates)) if predicates else None,
            node_name=_node_name_equality(q.get("fieldSelector", "")) if rtype.plural == "pods" else None,
        )
        meta: dict[str, Any] = {"resourceVersion": str(page.revision)}
        if page.continue_token:
            meta["continue"] = page.continue_token
            if page.remaining is not None:
                meta["remainingItemCount"] = page.remaining
        head = msgspec.json.encode({"kind": f"{rtype.kind}List", "apiVersion": rtype.api_version, "metadata": meta})
        # The items are sent as they are stored (a gathered write), never joined into one body: a
        # page of 500 big pods is 4.5 MB, and building it cost this double more CPU than serving it.
        parts = [head[:-1] + b',"items":[']
        for item in page.items:
            parts += (item, b",")
        if page.items:
            parts.pop()
        parts.append(b"]}")
        return Response(200, b"", parts=parts)

    def _list_revision(self, q: dict[str, str], token: str | None) -> int | None:
        raw, match = q.get("resourceVersion", ""), q.get("resourceVersionMatch", "")
        if token and raw not in ("", "0"):
            raise status.bad_request("specifying resource version is not allowed when using continue")
        if raw in ("", "0"):
            return None  # most recent ("0": any, which this server serves as the most recent)
        try:
            requested = int(raw)
        except ValueError:
            raise status.bad_request(f"invalid resource version: {raw}") from None
        return self.store.check_revision(requested, exact=match == "Exact")


def _json(request: Request) -> Any:
    try:
        return request.json()
    except ValueError as exc:
        raise status.bad_request(f"the body of the request was in an unknown format: {exc}") from None


def _node_name_equality(selector: str) -> str | None:
    """The node of a ``spec.nodeName=X`` term in a field selector (served from an index), else None."""
    for term in selector.split(","):
        key, sep, value = term.partition("==" if "==" in term else "=")
        if sep and key.strip() == "spec.nodeName" and not key.endswith("!"):
            return value.strip()
    return None


_GATHER = 512  # buffers per sendmsg call (the kernel takes at most IOV_MAX, 1024 on Linux)


def _send_gathered(sock: socket.socket, parts: list[bytes | memoryview] | list[bytes]) -> None:
    """Send ``parts`` in order with gathered writes (``sendmsg``), resuming after partial sends."""
    views = [memoryview(p) for p in parts if p]
    start = 0
    while start < len(views):
        sent = sock.sendmsg(views[start : start + _GATHER])
        while sent and start < len(views):
            size = len(views[start])
            if sent >= size:
                sent -= size
                start += 1
            else:
                views[start] = views[start][sent:]
                sent = 0


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, app: TestApiServer) -> None:
        self.app = app
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _RequestHandler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that goes away mid-connection is normal (a process exits); anything else is printed."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)

    def close_connections(self) -> None:
        with self.connections_lock:
            for conn in list(self.connections):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
                conn.close()
            self.connections.clear()


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as urllib3 pools connections
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in two writes: without TCP_NODELAY, Nagle's algorithm holds the
        # second until the client's delayed ACK (40 ms) on every keep-alive request. Go's net/http
        # (the real API server) sets TCP_NODELAY too.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server.connections_lock:
            self.server.connections.add(self.connection)

    def finish(self) -> None:
        with self.server.connections_lock:
            self.server.connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: the request log is ``TestApiServer.requests``

    def _serve(self) -> None:
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        request = Request(
            method=self.command,
            path=parts.path,
            query=dict(parse_qsl(parts.query, keep_blank_values=True)),
            headers={k.lower(): v for k, v in self.headers.items()},
            body=self.rfile.read(length) if length else b"",
        )
        response = self.server.app.handle(request)
        if response is None:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.send_response(response.code, status.HTTP_PHRASES.get(response.code))
        self.send_header("Content-Type", "application/json")
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Audit-Id", str(uuid.uuid4()))
        for name, value in response.headers.items():
            self.send_header(name, value)
        if response.stream is not None:
            self._send_chunked(response.stream)
            return
        self.send_header("Content-Length", str(response.length))
        self.end_headers()
        if response.parts is None:
            self.wfile.write(response.body)
        else:
            _send_gathered(self.connection, response.parts)

    def _send_chunked(self, chunks: Iterator[bytes | watch.Chunk]) -> None:
        """A watch: each event as its own chunk, sent at once (the client reads them as they come); a list of
        pieces (initial events) as one chunk, gathered."""
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for chunk in chunks:
                if isinstance(chunk, list):
                    if chunk:
                        size = sum(map(len, chunk))
                        _send_gathered(self.connection, [b"%x\r\n" % size, *chunk, b"\r\n"])
                    continue
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.write(b"0\r\n\r\n")
        except watch.Cut:  # the stream is cut mid-way: no final chunk, the connection closes
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:  # the client went away: normal for a watch
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve
