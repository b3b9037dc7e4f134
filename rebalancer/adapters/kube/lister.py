"""Paged LIST through the official client, decoded narrowly page by page.

The official client does configuration, authentication and transport; with
``_preload_content=False`` it hands back the raw body, which goes straight to a msgspec
decoder. One page's bytes and wire structs live only until that page is converted to domain
objects, so memory follows the page size and the result, never the whole JSON list.

A continue token the server no longer honours (HTTP 410 ``Expired``, after etcd compaction)
restarts the list from the beginning: a snapshot stitched from two resource versions could
show a pod twice or miss one. Every library exception becomes a :class:`KubeUnavailable`.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import msgspec
import urllib3
from kubernetes.client.exceptions import ApiException, OpenApiException
from kubernetes.config import ConfigException

from rebalancer.adapters.kube import protobuf_lists, wire
from rebalancer.adapters.kube.bodies import decode_body
from rebalancer.domain.errors import KubeForbidden, KubeUnavailable

log = logging.getLogger(__name__)
MAX_RELISTS = 3
LISTING_SWITCH_INTERVAL = 0.0002
"""Seconds: the interpreter's thread switch interval while a list is read (the default is 0.005)."""
_W = TypeVar("_W")
_W_co = TypeVar("_W_co", covariant=True)
_D = TypeVar("_D")


class ListBody(Protocol[_W_co]):
    @property
    def metadata(self) -> wire.ListMeta: ...

    @property
    def items(self) -> Sequence[_W_co]: ...


@dataclass(frozen=True, slots=True)
class ListCall(Generic[_W]):
    """One collection to list: the generated API method and the narrow decoder of its body."""

    what: str  # "pods", "nodes", ...: the collection, in error messages
    kind: str  # "pod", "node", ...: one object, in error messages
    method: Callable[..., Any]  # e.g. CoreV1Api(client).list_pod_for_all_namespaces
    decoder: msgspec.json.Decoder[Any]
    field_selector: str | None = None
    label_selector: str | None = None
    protobuf: protobuf_lists.ProtobufList | None = None  # set: the pages are asked for in protobuf

    def body(self, raw: bytes) -> ListBody[_W]:
        """A page's body, read as what it is: protobuf, or JSON (what a server that cannot encode protobuf sends)."""
        if self.protobuf is not None and protobuf_lists.is_protobuf(raw):
            return self.protobuf(self.what, raw)
        return decode_body(self, self.decoder, raw)

    def head(self, raw: bytes) -> wire.ListMeta | None:
        """The page's metadata read ahead of its items (see :func:`wire.list_head`), or None."""
        if self.protobuf is not None and protobuf_lists.is_protobuf(raw):
            return protobuf_lists.head(raw)
        return wire.list_head(raw)


@dataclass(frozen=True, slots=True)
class Listed(Generic[_D]):
    items: list[_D]
    resource_version: str
    pages: int
    relists: int
    mode: str = "paged"  # how it was read: "paged" (LIST pages) or "watchList" (one watch-list stream)
    encoding: str = "json"  # how the server encoded it: "json" or "protobuf"


class _Expired(Exception):
    """The continue token expired: restart the list."""


class ListStopped(Exception):
    """The reader was told to stop (its ``stop`` event was set) before the collection was read whole."""


def list_all(
    call: ListCall[_W],
    convert: Callable[[Sequence[_W]], Iterable[_D]],
    *,
    page_size: int,
    timeout: float,
    host: str,
    cached: bool = False,
    stop: threading.Event | None = None,
) -> Listed[_D]:
    """Every object of ``call``'s collection, converted page by page with ``convert``; :class:`ListStopped`
    once ``stop`` is set (no page is asked for after it, the one in flight is waited for).

    ``cached``: pages the API server answers from its watch cache, not from etcd: the first asks for a list
    not older than resourceVersion 1 (``resourceVersionMatch=NotOlderThan``): any version the cache holds,
    as client-go's reflector lists. The cache follows etcd by a watch: it is behind by the watch's delay
    (milliseconds, seconds on an overloaded server), and the list's resourceVersion says which state it is.
    A fresher bound would not do: over etcd older than 3.5 the cache of a quiet collection cannot tell it is
    current, and the server answers 504 after waiting 3 s. A plan stays safe on such a list: every eviction
    re-reads its pod first, goes through the Eviction API (the server checks every budget against its own
    state) with the pod's uid as a precondition (a pod replaced since is left alone). The pages keep the
    client's memory flat (a ``resourceVersion=0`` list comes whole, whatever the page size).
    Over etcd older than 3.5 the cache of a quiet collection stays at the version of its last change, and
    once etcd has compacted that version the server cannot continue the list (HTTP 410 on the second
    page): the collection is then listed in consistent pages (``Listed.mode`` ``paged``), with a warning.
    """
    with fast_switching(), ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"list-{call.what}") as fetcher:
        for relists in range(MAX_RELISTS + 1):
            try:
                listed = _list_once(call, convert, fetcher, _Paging(page_size, timeout, host, cached, stop), relists)
            except _Expired as expired:
                if cached:
                    log.warning(
                        "list %s: the watch cache could not continue its list (%s); listing consistent pages",
                        call.what,
                        expired,
                    )
                    cached = False
                continue
            return dataclasses.replace(listed, mode="cached") if cached else listed
    raise KubeUnavailable(
        f"list {call.what}: the continue token expired {MAX_RELISTS + 1} times in a row; "
        "the cluster changes faster than it can be listed",
        status=410,
        reason="Expired",
    )


@dataclass(frozen=True, slots=True)
class _Paging:
    page_size: int
    timeout: float
    host: str
    cached: bool = False  # the pages come from the watch cache (see list_all)
    stop: threading.Event | None = None  # set: stop listing


def _list_once(
    call: ListCall[_W],
    convert: Callable[[Sequence[_W]], Iterable[_D]],
    fetcher: ThreadPoolExecutor,
    paging: _Paging,
    relists: int,
) -> Listed[_D]:
    out: list[_D] = []
    resource_version = ""
    encoding = "json"
    pages = 0
    pending: Future[bytes] = fetcher.submit(_fetch, call, paging, None)
    while True:
        raise_if_stopped(call, paging.stop)
        raw = pending.result()
        head = call.head(raw)
        if head is not None and head.continue_:
            pending = fetcher.submit(_fetch, call, paging, head.continue_)
        body = call.body(raw)
        pages += 1
        if pages == 1:
            resource_version = body.metadata.resource_version
            encoding = "protobuf" if protobuf_lists.is_protobuf(raw) else "json"
        token = body.metadata.continue_ or None
        if token is not None and head is None:
            pending = fetcher.submit(_fetch, call, paging, token)
        del raw
        out.extend(convert(body.items))
        del body
        if token is None:
            return Listed(out, resource_version, pages, relists, encoding=encoding)


def raise_if_stopped(call: ListCall[Any], stop: threading.Event | None) -> None:
    """:class:`ListStopped` if ``stop`` is set."""
    if stop is not None and stop.is_set():
        raise ListStopped(f"list {call.what}: stopped")


class _SwitchInterval:
    """The interpreter's thread switch interval, lowered by any number of users at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._saved: float | None = None  # the value to restore; None: it was left alone

    @contextmanager
    def lowered(self, interval: float) -> Iterator[None]:
        with self._lock:
            if self._users == 0:
                found = sys.getswitchinterval()
                self._saved = found if found > interval else None
                if self._saved is not None:
                    sys.setswitchinterval(interval)
            self._users += 1
        try:
            yield
        finally:
            with self._lock:
                self._users -= 1
                if self._users == 0 and self._saved is not None:
                    # The interpreter keeps whole microseconds and truncates: half a microsecond
                    # more gives back exactly the value read, never one a microsecond lower.
                    sys.setswitchinterval(self._saved + 5e-7)


_SWITCH_INTERVAL = _SwitchInterval()


def fast_switching() -> AbstractContextManager[None]:
    """Lower the interpreter's thread switch interval while a list is read, then restore it.

    The helper thread that fetches the next page wakes from every socket read needing the GIL back,
    and the converting thread keeps it for up to the switch interval (5 ms by default) each time: a
    page arrives in a few reads, and the fetcher spent seconds of a 150,000-pod read waiting for the
    GIL while the socket sat full. At :data:`LISTING_SWITCH_INTERVAL` it gets the GIL back within a
    fraction of a millisecond, and a converting thread hardly notices (it only gives the GIL away
    when another thread asks for it).

    The interval is process-wide: nested and concurrent users share one lowering (counted), and
    the value found by the first is restored when the last one leaves, even on error.
    """
    return _SWITCH_INTERVAL.lowered(LISTING_SWITCH_INTERVAL)


_FROM_CACHE = {"resource_version": "1", "resource_version_match": "NotOlderThan"}
"""Any version the watch cache holds, served in pages: the first page of a cached read asks for it."""


def _fetch(call: ListCall[Any], paging: _Paging, token: str | None) -> bytes:
    """One page's raw body (runs on the fetcher thread); library errors become ours."""
    timeout = paging.timeout
    try:
        try:
            response = _page(call, paging, token, None if call.protobuf is None else protobuf_lists.ACCEPT)
        except ApiException as exc:
            if exc.body is not None or call.protobuf is None:
                raise
            # a protobuf error answer is not UTF-8, which the client drops: the same request in JSON tells why
            response = _page(call, paging, token, "application/json")
        try:
            raw: bytes = response.data
        finally:
            response.release_conn()
    except ApiException as exc:
        if exc.status == 410 and token is not None:
            raise _Expired(str(api_error(f"list {call.what}", exc))) from exc
        raise api_error(f"list {call.what}", exc) from exc
    except CLIENT_ERRORS as exc:
        raise client_error(f"list {call.what}", exc, paging.host, timeout) from exc
    return raw


def _page(call: ListCall[Any], paging: _Paging, token: str | None, accept: str | None) -> Any:
    return call.method(
        limit=paging.page_size,
        _continue=token,
        **(_FROM_CACHE if paging.cached and token is None else {}),
        field_selector=call.field_selector,
        label_selector=call.label_selector,
        _headers=None if accept is None else {"Accept": accept},
        _preload_content=False,
        _request_timeout=paging.timeout,
    )


def api_error(action: str, exc: ApiException) -> KubeUnavailable:
    """An HTTP error answer, with the ``reason`` and ``message`` of its ``Status`` body."""
    status = int(exc.status or 0)
    reason, message = str(exc.reason or ""), ""
    if exc.body:
        try:
            body = wire.STATUS.decode(exc.body)
        except msgspec.DecodeError:
            message = str(exc.body)[:300]
        else:
            reason, message = body.reason or reason, body.message
    if status == 0:  # the client's own failure, e.g. a TLS handshake error
        return KubeUnavailable(f"{action}: {reason.splitlines()[0] if reason else 'request failed'}")
    text = f"{action}: HTTP {status} {reason}" + (f": {message}" if message else "")
    error_type = KubeForbidden if status == 403 else KubeUnavailable
    return error_type(text, status=status, reason=reason or None)


CLIENT_ERRORS = (urllib3.exceptions.HTTPError, OSError, ConfigException, OpenApiException)
"""The client's failures other than an HTTP error answer (catch ``ApiException``, a subclass, first)."""


def client_error(action: str, exc: Exception, host: str, timeout: float) -> KubeUnavailable:
    """One of :data:`CLIENT_ERRORS` as ours: the transport, an auth plugin, or the client itself failed."""
    if isinstance(exc, urllib3.exceptions.HTTPError | OSError):
        return transport_error(action, exc, host, timeout)
    if isinstance(exc, ConfigException):  # an auth plugin failed while refreshing credentials
        return KubeUnavailable(f"{action}: authentication failed: {exc}")
    return KubeUnavailable(f"{action}: {type(exc).__name__}: {exc}")


def transport_error(action: str, exc: Exception, host: str, timeout: float) -> KubeUnavailable:
    """A connection refused, reset or timed out, with the underlying cause named."""
    cause: BaseException = exc
    while isinstance(cause, urllib3.exceptions.MaxRetryError) and cause.reason is not None:
        cause = cause.reason
    # NewConnectionError subclasses ConnectTimeoutError for old callers' sake: test it first.
    timed_out = isinstance(cause, TimeoutError | urllib3.exceptions.TimeoutError)
    if timed_out and not isinstance(cause, urllib3.exceptions.NewConnectionError):
        return KubeUnavailable(f"{action}: no answer from {host} within {timeout:g}s ({cause})", reason="Timeout")
    return KubeUnavailable(f"{action}: cannot reach the Kubernetes API at {host}: {cause}")
