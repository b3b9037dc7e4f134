"""``?watch=true``: a stream of watch events, as the real API server's watch cache serves it.

Newline-delimited JSON objects ``{"type": ..., "object": ...}`` over a chunked response:

- ``resourceVersion`` N: every change after N (ADDED / MODIFIED / DELETED, the object as written; a
  DELETED carries the last state); unset or ``"0"``: first a synthetic ADDED per live object.
- ``sendInitialEvents=true`` (the streaming watch-list; ``resourceVersionMatch=NotOlderThan`` required, see
  :mod:`tests.kubeapi.list_options`): first a synthetic ADDED per live object as of a revision not older
  than ``resourceVersion`` (unset: the current one, a consistent read), then, with bookmarks allowed, a
  ``BOOKMARK`` at that revision annotated ``k8s.io/initial-events-end: "true"``, then the changes after it.
  ``sendInitialEvents=false``: no initial events, whatever ``resourceVersion`` says.
- A compacted N is not an HTTP error but an ``ERROR`` event carrying a 410 ``Expired`` Status, after which
  the stream ends (the watch cache says so: "once we have passed authn/authz/admission ... errors must fail
  with a watch event of type ERROR"). A client re-lists then.
- ``allowWatchBookmarks=true``: ``BOOKMARK`` events (an object of the kind carrying only
  ``metadata.resourceVersion``) every ``bookmark_interval`` seconds, so a quiet watch still advances.
- While ``silent()``, nothing is sent (changes wait, no bookmark): a quiet watch, open and answering.
- ``timeoutSeconds``: the stream ends cleanly after that long (default 1800, the server's minimum
  request timeout).
- Field and label selectors filter as on a list; an object that stops matching is reported DELETED and
  one that starts matching ADDED, as the real server does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from tests.kubeapi import status
from tests.kubeapi.resources import ResourceType
from tests.kubeapi.status import ApiError
from tests.kubeapi.store import Change, Store

Predicate = Callable[[dict[str, Any]], bool]


class Cut(Exception):
    """The stream is cut mid-way (the server stops, or a test closes the watches)."""


DEFAULT_TIMEOUT_SECONDS = 1800


def parse_start(raw: str) -> int | None:
    """The watch's resourceVersion (None: send the current state first); 400 if it is not a number."""
    if raw in ("", "0"):
        return None
    try:
        return int(raw)
    except ValueError:
        raise status.bad_request(f"invalid resource version: {raw}") from None


def parse_timeout(raw: str) -> float:
    if not raw:
        return DEFAULT_TIMEOUT_SECONDS
    try:
        seconds = int(raw)
    except ValueError:
        raise status.bad_request(f"invalid timeoutSeconds: {raw!r}") from None
    return float(max(seconds, 0))


INITIAL_EVENTS_END = "k8s.io/initial-events-end"
INITIAL_EVENTS_PER_CHUNK = 64  # the real server flushes whenever its queue runs empty: many events a chunk
Chunk = list[bytes | memoryview]  # one HTTP chunk's pieces


@dataclass(frozen=True)
class Interruption:
    """What breaks a watch-list after ``after`` initial events: ``cut`` the connection (no final chunk), or
    send an ``expire`` ERROR event (410 ``Expired``) and end the stream."""

    after: int
    how: Literal["cut", "expire"]


def stream(
    store: Store,
    rtype: ResourceType,
    namespace: str | None,
    start: int | None,
    *,
    predicate: Predicate | None,
    bookmarks: bool,
    bookmark_interval: float,
    timeout: float,
    cut: Callable[[], bool],
    silent: Callable[[], bool] = lambda: False,
    unwatched: Callable[[int], bool] = lambda revision: False,
    end_marker: bool = False,
    interruption: Interruption | None = None,
) -> Iterator[bytes | Chunk]:
    """The event lines of one watch, until ``timeout`` or a 410; :class:`Cut` when ``cut()`` says so.
    ``start`` None: the live objects first, many to a chunk (a list of pieces sent gathered, as they are
    stored); ``end_marker``: then the bookmark marking their end."""
    prefix = f"{namespace}/" if namespace and rtype.namespaced else ""
    deadline = time.monotonic() + timeout
    if start is None:
        live, start = store.live(rtype.plural)
        sent = 0
        batch: Chunk = []
        head = b'{"type":"ADDED","object":{"kind":"%s","apiVersion":"%s",' % (
            rtype.kind.encode(),
            rtype.api_version.encode(),
        )
        for key, version in live:
            # decoded only for a selector: most objects are served as stored, never parsed
            if not version.deleted and key.startswith(prefix) and (predicate is None or predicate(version.obj or {})):
                if interruption is not None and sent == interruption.after:
                    yield batch
                    if interruption.how == "cut":
                        raise Cut
                    yield _encode({"type": "ERROR", "object": status.expired_resource_version(start, start).body})
                    return
                if cut():
                    raise Cut
                item = version.item_bytes()
                batch += (head, memoryview(item)[1:], b"}\n") if item != b"{}" else (head[:-1], b"}}\n")
                sent += 1
                if len(batch) >= 3 * INITIAL_EVENTS_PER_CHUNK:
                    yield batch
                    batch = []
        if batch:
            yield batch
        if end_marker and bookmarks:
            yield _bookmark(rtype, start, {INITIAL_EVENTS_END: "true"})
    position = start
    last_bookmark = time.monotonic()
    while True:
        if cut():
            raise Cut
        left = deadline - time.monotonic()
        if left <= 0:
            return
        if silent():
            time.sleep(min(left, 0.05))
            continue
        try:
            changes, current = store.changes_after(rtype.plural, position, min(left, bookmark_interval, 0.5))
        except ApiError as error:  # compacted: one ERROR event, then the end of the stream
            yield _encode({"type": "ERROR", "object": error.body})
            return
        for change in changes:
            line = None if unwatched(change.revision) else _event(change, rtype, prefix, predicate)
            if line is not None:
                yield line
            position = change.revision
        if not changes:
            position = max(position, current)  # nothing of this table changed up to ``current``
        if bookmarks and time.monotonic() - last_bookmark >= bookmark_interval:
            last_bookmark = time.monotonic()
            yield _bookmark(rtype, position, {})


def _bookmark(rtype: ResourceType, revision: int, annotations: dict[str, str]) -> bytes:
    """A BOOKMARK: an empty object of the kind, as Go encodes one (a pod's spec says ``containers: null``)."""
    meta = {"resourceVersion": str(revision), "creationTimestamp": None, "annotations": annotations}
    empty = {"spec": {"containers": None}, "status": {}} if rtype.kind == "Pod" else {}
    obj = {"kind": rtype.kind, "apiVersion": rtype.api_version, "metadata": meta, **empty}
    return _encode({"type": "BOOKMARK", "object": obj})


def _event(change: Change, rtype: ResourceType, prefix: str, predicate: Predicate | None) -> bytes | None:
    if not change.key.startswith(prefix):
        return None
    if change.type == "DELETED":
        before = change.previous.obj if change.previous is not None else None
        if before is None or (predicate is not None and not predicate(before)):
            return None
        gone = msgspec.json.decode(change.version.item_bytes())
        gone["metadata"]["resourceVersion"] = str(change.revision)
        return _line("DELETED", rtype, msgspec.json.encode(gone))
    now = change.version.obj or {}
    matches = predicate is None or predicate(now)
    before = change.previous.obj if change.previous is not None else None
    matched = before is not None and (predicate is None or predicate(before))
    if matches:
        return _line("MODIFIED" if matched else "ADDED", rtype, change.version.item_bytes())
    if matched:  # it no longer matches the selector: gone, for this watcher
        return _line("DELETED", rtype, change.version.item_bytes())
    return None


def _line(kind: str, rtype: ResourceType, item: bytes) -> bytes:
    """``item`` is a list item's JSON (no kind/apiVersion): a watch event's object carries both."""
    head = b'{"kind":"%s","apiVersion":"%s"' % (rtype.kind.encode(), rtype.api_version.encode())
    body = head + (b"," + item[1:] if item != b"{}" else b"}")
    return b'{"type":"%s","object":%s}\n' % (kind.encode(), body)


def _encode(event: dict[str, Any]) -> bytes:
    return msgspec.json.encode(event) + b"\n"
