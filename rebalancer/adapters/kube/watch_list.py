"""A full read in the list mode asked for: pages from the watch cache, consistent pages, or a streaming watch-list
(with the cached pages as the fallback when the server refuses it).

The watch-list (``watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true``,
resourceVersion unset: a consistent read) is answered from the API server's watch cache: one stream of
``ADDED`` events, one per object, then a ``BOOKMARK`` annotated ``k8s.io/initial-events-end: "true"``
whose resourceVersion is the snapshot's. The server encodes each object once for its cache instead of a
whole list per request, which is what a paged LIST costs it.

The events are decoded as they arrive, the lines of each chunk read in one call, with the list's own
narrow item decoder (the pod converter included), and converted chunk by chunk: memory follows a few
chunks (:data:`QUEUED` read ahead) and the result, as on the paged path.

A server refuses it in several ways: HTTP 422 ``Invalid`` when the ``WatchList`` feature gate is off, or
when it is older than the feature (``resourceVersionMatch`` is then forbidden for a watch); an ``ERROR``
event with HTTP 500 when its storage cannot report progress (etcd older than 3.5: "the required storage
feature RequestWatchProgress is disabled"); or it ignores ``sendInitialEvents`` and never sends the
annotated bookmark (a change, or a plain bookmark, arrives first, or the stream ends cleanly without it).
With ``listMode: auto`` any failure of the watch-list after the server was reached (an HTTP error answer,
an ``ERROR`` event, a stream cut or ended before the bookmark, a malformed event) is logged as a warning
and the collection is listed page by page from the watch cache instead, as client-go's reflector lists
(``listMode: cached``, the default: see :func:`~rebalancer.adapters.kube.lister.list_all`): the events read
so far are dropped, never returned as a partial list. With ``listMode: watchList`` the read fails. A server that
cannot be reached at all is an error in every mode (a LIST would meet the same).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import typing
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Generic, Literal, TypeVar

import msgspec
import urllib3
from kubernetes.client.exceptions import ApiException

from rebalancer.adapters.kube import wire
from rebalancer.adapters.kube.bodies import malformed_object
from rebalancer.adapters.kube.lister import (
    CLIENT_ERRORS,
    ListCall,
    Listed,
    api_error,
    client_error,
    fast_switching,
    list_all,
    raise_if_stopped,
    transport_error,
)
from rebalancer.domain.errors import KubeUnavailable

log = logging.getLogger(__name__)

ListMode = Literal["auto", "watchList", "paged", "cached"]
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
WATCH_LIST_SECONDS = 600
"""``timeoutSeconds`` of a watch-list: the server ends the stream then, finished or not."""
READ_SIZE = 1 << 20
QUEUED = 4  # chunks read ahead of the decoding at most (the server sends many events to a chunk)

_W = TypeVar("_W")
_D = TypeVar("_D")


class WatchEvent(msgspec.Struct, gc=False):
    """A watch event, its object left undecoded."""

    type: str = ""
    object: msgspec.Raw = msgspec.Raw(b"null")


class _Bookmark(msgspec.Struct, gc=False):
    class Meta(msgspec.Struct, rename="camel", gc=False):
        resource_version: str = ""
        annotations: dict[str, str] = {}

    metadata: Meta = msgspec.field(default_factory=Meta)


WATCH_EVENT = msgspec.json.Decoder(WatchEvent)
_BOOKMARK = msgspec.json.Decoder(_Bookmark)


class WatchListRefused(Exception):
    """The server did not serve this collection as a watch-list (the text says how it showed it)."""


def read_all(
    call: ListCall[_W],
    convert: Callable[[Sequence[_W]], Iterable[_D]],
    *,
    mode: ListMode,
    page_size: int,
    timeout: float,
    host: str,
    stop: threading.Event | None = None,
) -> Listed[_D]:
    """Every object of ``call``'s collection, as ``mode`` says: ``cached``: pages from the API server's watch
    cache (see :func:`list_all`); ``paged``: consistent pages; ``watchList``: one watch-list stream;
    ``auto``: a watch-list, and cached pages when it fails (as client-go's reflector lists). ``Listed.mode``
    says which path gave the result. Once ``stop`` is set the read ends soon with :class:`ListStopped`."""
    if mode in ("auto", "watchList"):
        try:
            listed = watch_list(call, convert, timeout=timeout, host=host, stop=stop)
        except WatchListRefused as refused:
            if mode == "watchList":
                raise KubeUnavailable(
                    f"list {call.what}: the server refused the watch-list (kubernetes.listMode is watchList): {refused}",
                    reason="WatchListRefused",
                ) from refused
            log.warning(
                "list %s: the watch-list failed (%s); listing page by page from the watch cache", call.what, refused
            )
        else:
            log.info(
                "list %s: %d by watch-list at resourceVersion %s", call.what, len(listed.items), listed.resource_version
            )
            return listed
    if mode == "paged":
        return list_all(call, convert, page_size=page_size, timeout=timeout, host=host, stop=stop)
    listed = list_all(call, convert, page_size=page_size, timeout=timeout, host=host, cached=True, stop=stop)
    log.info(
        "list %s: %d from the %s in %d pages at resourceVersion %s",
        call.what,
        len(listed.items),
        "watch cache" if listed.mode == "cached" else "consistent list",
        listed.pages,
        listed.resource_version,
    )
    return listed


def watch_list(
    call: ListCall[_W],
    convert: Callable[[Sequence[_W]], Iterable[_D]],
    *,
    timeout: float,
    host: str,
    stop: threading.Event | None = None,
) -> Listed[_D]:
    """The collection from one watch-list stream; :class:`WatchListRefused` when the server does not serve one,
    :class:`ListStopped` once ``stop`` is set (looked at as each chunk arrives).

    A helper thread reads the stream while this one decodes (the socket wait releases the GIL), as the
    paged path fetches the next page; at most :data:`QUEUED` chunks wait between them."""
    initial = _InitialEvents(call, convert)
    response = _open(call, timeout, host)
    try:
        return _read_initial_events(initial, response, call, timeout, host, stop)
    except KubeUnavailable as failed:  # the server was reached: a LIST may still be served
        raise WatchListRefused(str(failed)) from failed
    finally:
        response.close()  # the stream goes on after the bookmark: this connection cannot serve another request
        response.release_conn()


def _read_initial_events(
    initial: _InitialEvents[_W, _D],
    response: urllib3.BaseHTTPResponse,
    call: ListCall[_W],
    timeout: float,
    host: str,
    stop: threading.Event | None,
) -> Listed[_D]:
    with fast_switching(), _Reader(response) as reader:
        pending = b""
        for chunk in reader.chunks(call.what, host, timeout):
            raise_if_stopped(call, stop)
            buffer = pending + chunk if pending else chunk
            end = buffer.rfind(b"\n") + 1
            pending = buffer[end:]
            if end and (listed := initial.feed(memoryview(buffer)[:end])) is not None:
                return listed
        if pending.strip() and (listed := initial.feed(memoryview(pending))) is not None:
            return listed
        raise WatchListRefused(f"the stream ended after {initial.seen} objects without the bookmark marking their end")


def item_type(list_decoder: msgspec.json.Decoder[Any]) -> Any:
    """The type of a list's items (the element of its ``items`` field), as its decoder declares it."""
    list_type = typing.cast("type[msgspec.Struct]", list_decoder.type)  # msgspec 0.23 types it as any type form
    for field in msgspec.structs.fields(list_type):
        if field.name == "items":
            return typing.get_args(field.type)[0]
    raise TypeError(f"{list_decoder.type!r} has no items field")


def _open(call: ListCall[Any], timeout: float, host: str) -> urllib3.BaseHTTPResponse:
    action = f"list {call.what}"
    try:
        response: urllib3.BaseHTTPResponse = call.method(
            watch=True,
            send_initial_events=True,
            resource_version_match="NotOlderThan",
            allow_watch_bookmarks=True,
            timeout_seconds=WATCH_LIST_SECONDS,
            field_selector=call.field_selector,
            label_selector=call.label_selector,
            _preload_content=False,
            _request_timeout=(timeout, timeout),  # connect, then each read: the initial events flow without pause
        )
    except ApiException as exc:
        error = api_error(action, exc)
        if exc.status:  # an answer: the server was reached, and a LIST may still be served
            raise WatchListRefused(str(error)) from exc
        raise error from exc
    except CLIENT_ERRORS as exc:
        raise client_error(action, exc, host, timeout) from exc
    return response


class _InitialEvents(Generic[_W, _D]):
    """The initial events of one watch-list, fed a run of whole lines at a time, converted as they come."""

    def __init__(self, call: ListCall[_W], convert: Callable[[Sequence[_W]], Iterable[_D]]) -> None:
        self._call, self._convert = call, convert
        item = item_type(call.decoder)
        self._item: msgspec.json.Decoder[_W] = msgspec.json.Decoder(item)
        added = msgspec.defstruct("AddedEvent", [("type", str), ("object", item)], gc=False)
        self._events: msgspec.json.Decoder[Any] = msgspec.json.Decoder(added)
        self.out: list[_D] = []
        self.seen = 0

    def feed(self, lines: memoryview) -> Listed[_D] | None:
        """Take whole event lines; the listing once the bookmark marking the end of the initial events came.

        The lines are decoded in one call as events carrying an object of the collection: that is every
        ``ADDED`` event. Anything else among them (the bookmark, an error, a change, a malformed object)
        fails that call, and those lines are read one by one instead."""
        try:
            events = self._events.decode_lines(lines)
        except msgspec.DecodeError:
            events = None
        if events is not None and all(e.type == "ADDED" for e in events):
            self.seen += len(events)
            self.out.extend(self._convert([e.object for e in events]))
            return None
        return self._one_by_one(lines)

    def _one_by_one(self, lines: memoryview) -> Listed[_D] | None:
        call, objects = self._call, []
        for line in lines.tobytes().split(b"\n"):  # a copy, of a few lines: the bulk path failed on these
            if not line.strip():
                continue
            try:
                event = WATCH_EVENT.decode(line)
            except msgspec.DecodeError as exc:
                raise KubeUnavailable(f"list {call.what}: malformed response: {exc}", reason="Malformed") from exc
            raw, kind = event.object, event.type
            if kind == "ADDED":
                try:
                    objects.append(self._item.decode(raw))
                except msgspec.DecodeError as exc:
                    raise malformed_object(call, raw, exc) from exc
                self.seen += 1
            elif kind == "BOOKMARK":
                meta = _decoded(call, _BOOKMARK, raw).metadata
                if meta.annotations.get(INITIAL_EVENTS_END) != "true":
                    raise WatchListRefused(f"a bookmark without {INITIAL_EVENTS_END} came after {self.seen} objects")
                self.out.extend(self._convert(objects))
                return Listed(self.out, meta.resource_version, pages=1, relists=0, mode="watchList")
            elif kind == "ERROR":
                raise _stream_error(call, _decoded(call, wire.STATUS, raw), self.seen)
            elif kind in ("MODIFIED", "DELETED"):
                raise WatchListRefused(
                    f"a {kind} event came before the end of the initial events, after {self.seen} objects"
                )
            else:
                raise KubeUnavailable(f"list {call.what}: unknown watch event type {kind!r}", reason="Malformed")
        self.out.extend(self._convert(objects))
        return None


def _decoded(call: ListCall[Any], decoder: msgspec.json.Decoder[_D], raw: memoryview | msgspec.Raw) -> _D:
    try:
        return decoder.decode(raw)
    except msgspec.DecodeError as exc:
        raise KubeUnavailable(f"list {call.what}: malformed response: {exc}", reason="Malformed") from exc


def _stream_error(call: ListCall[Any], status: wire.Status, seen: int) -> Exception:
    """An ``ERROR`` event: the watch-list failed (after ``seen`` objects, which are dropped)."""
    where = f" after {seen} objects" if seen else ""
    return KubeUnavailable(
        f"list {call.what}: HTTP {status.code} {status.reason}: {status.message}{where}",
        status=status.code or None,
        reason=status.reason or None,
    )


def wake_reader(response: urllib3.BaseHTTPResponse) -> None:
    """Cut a streaming response's connection, so that a thread blocked reading it wakes up at once.

    The stream may have ended by itself meanwhile: urllib3 hands the connection back to the pool as it
    reads the last chunk (or closes it on a failure), before the reading thread gets control back. There
    is no read to wake then, and the connection is no longer the response's to cut: urllib3 refuses
    (RuntimeError once released, ValueError once closed, OSError for a socket closed meanwhile)."""
    with contextlib.suppress(RuntimeError, ValueError, OSError):
        response.shutdown()


class _Reader:
    """Reads a response's chunks on a helper thread into a short queue; shuts the response down on exit."""

    def __init__(self, response: urllib3.BaseHTTPResponse) -> None:
        self._response = response
        self._queue: queue.Queue[bytes | BaseException | None] = queue.Queue(QUEUED)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._pump, name="watch-list-reader", daemon=True)

    def __enter__(self) -> _Reader:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            wake_reader(self._response)
        self._thread.join()

    def _pump(self) -> None:
        try:
            for chunk in self._response.stream(READ_SIZE, decode_content=True):
                if not self._put(chunk):
                    return
            self._put(None)
        except BaseException as exc:  # handed to the reading thread, which raises it
            self._put(exc)

    def _put(self, item: bytes | BaseException | None) -> bool:
        while not self._stopped.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def chunks(self, what: str, host: str, timeout: float) -> Iterator[bytes]:
        """The response's bytes as they arrive; a transport failure as :class:`KubeUnavailable`."""
        while (item := self._queue.get()) is not None:
            if isinstance(item, urllib3.exceptions.HTTPError | OSError):
                raise transport_error(f"list {what}", item, host, timeout) from item
            if isinstance(item, BaseException):
                raise item
            yield item
