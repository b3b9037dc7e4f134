"""A full read as a streaming watch-list, with the paged LIST as the fallback when the server refuses it.

The watch-list (``watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true``,
resourceVersion unset: a consistent read) is answered from the API server's watch cache: one stream of
``ADDED`` events, one per object, then a ``BOOKMARK`` annotated ``k8s.io/initial-events-end: "true"``
whose resourceVersion is the snapshot's. The server encodes each object once for its cache instead of a
whole list per request, which is what a paged LIST costs it.

Each event's object is decoded as it arrives with the list's own narrow item decoder (the pod converter
included) and converted in batches, so memory follows a batch and the result, as on the paged path.

A server refuses it the way a real one does: HTTP 422 ``Invalid`` when the ``WatchList`` feature gate is
off, or when it is older than the feature (``resourceVersionMatch`` is then forbidden for a watch); or it
ignores ``sendInitialEvents`` and never sends the annotated bookmark (a change, or a plain bookmark,
arrives first, or the stream ends cleanly without it). Then the collection is listed page by page
(``listMode: auto``), or the read fails (``listMode: watchList``). A stream interrupted before the
bookmark (the connection cut, an ``ERROR`` event, 410 ``Expired``) is an error, never a partial list.
"""

from __future__ import annotations

import logging
import typing
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Literal, TypeVar

import msgspec
import urllib3
from kubernetes.client.exceptions import ApiException

from rebalancer.errors import KubeUnavailable
from rebalancer.kube import wire
from rebalancer.kube.bodies import malformed_object
from rebalancer.kube.lister import CLIENT_ERRORS, ListCall, Listed, api_error, client_error, list_all, transport_error

log = logging.getLogger(__name__)

ListMode = Literal["auto", "watchList", "paged"]
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
WATCH_LIST_SECONDS = 600
"""``timeoutSeconds`` of a watch-list: the server ends the stream then, finished or not."""
REFUSING_CODES = frozenset({400, 403, 422})
"""An answer with one of these codes refuses the watch-list (a paged LIST needs only ``list``, not ``watch``)."""
BATCH = 500  # objects converted at once, as a page of the paged LIST
READ_SIZE = 1 << 20

_W = TypeVar("_W")
_D = TypeVar("_D")

_ADDED = b'{"type":"ADDED","object":'  # the API server writes every event in this order: type, then object
_CLOSING = ord("}")


class _Event(msgspec.Struct, gc=False):
    type: str = ""
    object: msgspec.Raw = msgspec.Raw(b"null")


class _Bookmark(msgspec.Struct, gc=False):
    class Meta(msgspec.Struct, rename="camel", gc=False):
        resource_version: str = ""
        annotations: dict[str, str] = {}

    metadata: Meta = msgspec.field(default_factory=Meta)


_EVENT = msgspec.json.Decoder(_Event)
_BOOKMARK = msgspec.json.Decoder(_Bookmark)


class WatchListRefused(Exception):
    """The server does not serve this collection as a watch-list (the text says how it showed it)."""


def read_all(
    call: ListCall[_W],
    convert: Callable[[Sequence[_W]], Iterable[_D]],
    *,
    mode: ListMode,
    page_size: int,
    timeout: float,
    host: str,
) -> Listed[_D]:
    """Every object of ``call``'s collection: by watch-list unless ``mode`` is ``paged``; with ``auto``, page
    by page when the server refuses the watch-list. ``Listed.mode`` says which path gave the result."""
    if mode != "paged":
        try:
            listed = watch_list(call, convert, timeout=timeout, host=host)
        except WatchListRefused as refused:
            if mode == "watchList":
                raise KubeUnavailable(
                    f"list {call.what}: the server refused the watch-list (kubernetes.listMode is watchList): {refused}",
                    reason="WatchListRefused",
                ) from refused
            log.info("list %s: the server refused the watch-list (%s); listing page by page", call.what, refused)
        else:
            log.info(
                "list %s: %d by watch-list at resourceVersion %s", call.what, len(listed.items), listed.resource_version
            )
            return listed
    return list_all(call, convert, page_size=page_size, timeout=timeout, host=host)


def watch_list(
    call: ListCall[_W], convert: Callable[[Sequence[_W]], Iterable[_D]], *, timeout: float, host: str
) -> Listed[_D]:
    """The collection from one watch-list stream; :class:`WatchListRefused` when the server does not serve one."""
    item = msgspec.json.Decoder(item_type(call.decoder))
    response = _open(call, timeout, host)
    try:
        return _initial_events(call, item, convert, _lines(response, call.what, host, timeout))
    finally:
        response.close()  # the stream goes on after the bookmark: this connection cannot serve another request
        response.release_conn()


def item_type(list_decoder: msgspec.json.Decoder[Any]) -> Any:
    """The type of a list's items (the element of its ``items`` field), as its decoder declares it."""
    for field in msgspec.structs.fields(list_decoder.type):
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
        if exc.status in REFUSING_CODES:
            raise WatchListRefused(str(error)) from exc
        raise error from exc
    except CLIENT_ERRORS as exc:
        raise client_error(action, exc, host, timeout) from exc
    return response


def _initial_events(
    call: ListCall[_W],
    item: msgspec.json.Decoder[_W],
    convert: Callable[[Sequence[_W]], Iterable[_D]],
    lines: Iterator[memoryview],
) -> Listed[_D]:
    out: list[_D] = []
    batch: list[_W] = []
    seen = 0
    for line in lines:
        if line[: len(_ADDED)] == _ADDED and line[-1] == _CLOSING:
            raw: memoryview | msgspec.Raw = line[len(_ADDED) : -1]
            kind = "ADDED"
        else:
            try:
                event = _EVENT.decode(line)
            except msgspec.DecodeError as exc:
                raise KubeUnavailable(f"list {call.what}: malformed response: {exc}", reason="Malformed") from exc
            raw, kind = event.object, event.type
        if kind == "ADDED":
            try:
                batch.append(item.decode(raw))
            except msgspec.DecodeError as exc:
                raise malformed_object(call, raw, exc) from exc
            seen += 1
            if len(batch) >= BATCH:
                out.extend(convert(batch))
                batch.clear()
        elif kind == "BOOKMARK":
            meta = _decoded(call, _BOOKMARK, raw).metadata
            if meta.annotations.get(INITIAL_EVENTS_END) != "true":
                raise WatchListRefused(f"a bookmark without {INITIAL_EVENTS_END} came after {seen} objects")
            out.extend(convert(batch))
            return Listed(out, meta.resource_version, pages=1, relists=0, mode="watchList")
        elif kind == "ERROR":
            raise _stream_error(call, _decoded(call, wire.STATUS, raw), seen)
        elif kind in ("MODIFIED", "DELETED"):
            raise WatchListRefused(f"a {kind} event came before the end of the initial events, after {seen} objects")
        else:
            raise KubeUnavailable(f"list {call.what}: unknown watch event type {kind!r}", reason="Malformed")
    raise WatchListRefused(f"the stream ended after {seen} objects without the bookmark marking their end")


def _decoded(call: ListCall[Any], decoder: msgspec.json.Decoder[_D], raw: memoryview | msgspec.Raw) -> _D:
    try:
        return decoder.decode(raw)
    except msgspec.DecodeError as exc:
        raise KubeUnavailable(f"list {call.what}: malformed response: {exc}", reason="Malformed") from exc


def _stream_error(call: ListCall[Any], status: wire.Status, seen: int) -> Exception:
    """An ``ERROR`` event: a refusal when it comes first with a refusing code, else the read fails."""
    text = f"list {call.what}: HTTP {status.code} {status.reason}: {status.message}"
    if seen == 0 and status.code in REFUSING_CODES:
        return WatchListRefused(text)
    where = f" after {seen} objects" if seen else ""
    return KubeUnavailable(text + where, status=status.code or None, reason=status.reason or None)


def _lines(response: urllib3.BaseHTTPResponse, what: str, host: str, timeout: float) -> Iterator[memoryview]:
    """The newline-delimited events of a watch response as views of the bytes read (no copy per event)."""
    pending = b""
    try:
        for chunk in response.stream(READ_SIZE, decode_content=True):
            buffer = pending + chunk if pending else chunk
            view = memoryview(buffer)
            start = 0
            while (end := buffer.find(b"\n", start)) >= 0:
                if end > start:
                    yield view[start:end]
                start = end + 1
            pending = buffer[start:]
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise transport_error(f"list {what}", exc, host, timeout) from exc
    if pending.strip():
        yield memoryview(pending)
