"""One collection kept current in memory: listed once, then watched from the list's resourceVersion.

The loop of client-go's reflector, narrowly decoded: a full read (a watch-list, or a paged LIST when the
server refuses it: ``watch_list.read_all``), then a WATCH with bookmarks from its resourceVersion; each event updates the map; a BOOKMARK or a clean end of the
stream (``timeoutSeconds``) only moves the resourceVersion on, and the watch is opened again from there.
An expired resourceVersion (HTTP 410, or an ``ERROR`` event carrying 410) means events were lost: the
collection is listed again and replaced whole. Every ``relist_seconds`` it is listed again anyway (the
fallback for an event lost without a 410); the new map replaces the old one at once, so readers never
see it empty. Any other failure is retried with a capped backoff.

Freshness comes from the connection, not from traffic: while a watch stream is open the map is current
however long the collection stays quiet (a real API server may send no bookmark for minutes). It turns
stale only once no watch has been open for longer than the limit (the stream failed and re-opening it
keeps failing), or when the watcher thread has died (:meth:`Informer.problem`). A connection that is
open but dead (a vanished peer) ends at the read timeout, or sooner through TCP keepalive.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import msgspec
import urllib3
from kubernetes.client.exceptions import ApiException

from rebalancer.adapters.kube import wire
from rebalancer.adapters.kube.lister import (
    CLIENT_ERRORS,
    ListCall,
    ListStopped,
    api_error,
    client_error,
    transport_error,
)
from rebalancer.adapters.kube.protobuf_lists import Encoding
from rebalancer.adapters.kube.watch_list import WATCH_EVENT, ListMode, read_all, wake_reader
from rebalancer.domain.errors import KubeUnavailable, RebalancerError

log = logging.getLogger(__name__)

_W = TypeVar("_W")
_D = TypeVar("_D")
_D_contra = TypeVar("_D_contra", contravariant=True)
_T = TypeVar("_T")
Clock = Callable[[], float]
MIN_QUIET_WATCH_SECONDS = 1.0  # a watch that ends sooner without an event is retried with backoff
RELIST_RETRY_SECONDS = 60.0  # a periodic listing that failed is tried again this much later, watching meanwhile
STOP_WAIT_SECONDS = 5.0  # how long stop() waits for the watcher thread


class _Versioned(msgspec.Struct, gc=False):
    class Meta(msgspec.Struct, rename="camel", gc=False):
        resource_version: str = ""

    metadata: Meta = msgspec.field(default_factory=Meta)


_VERSIONED = msgspec.json.Decoder(_Versioned)


class Index(Protocol[_D_contra]):
    """Something kept alongside the map (pods by node, say), told of every change under the map's lock."""

    def reset(self, items: Mapping[Hashable, _D_contra]) -> None: ...

    def change(self, key: Hashable, old: _D_contra | None, new: _D_contra | None) -> None: ...


class _Expired(Exception):
    """The watch's resourceVersion is gone: list again."""


@dataclass(frozen=True, slots=True)
class WatchTiming:
    """``watch_seconds``: how long one watch request asks the server to stay open (``timeoutSeconds``);
    ``request_timeout``: seconds per LIST page, and the connect timeout of a watch; ``backoff_max``:
    the longest wait between attempts after failures; ``relist_seconds``: how often the collection is
    listed again although no 410 asked for it; ``list_mode``: how a listing reads the collection (watch-list
    or pages, see :func:`rebalancer.adapters.kube.watch_list.read_all`); ``encoding``: in which encoding the
    pages of the collections that have a protobuf reader are asked for (watch events are JSON)."""

    watch_seconds: int = 300
    request_timeout: float = 30.0
    backoff_max: float = 30.0
    page_size: int = 500
    relist_seconds: float = 1800.0
    list_mode: ListMode = "cached"
    encoding: Encoding = "protobuf"


class Informer(Generic[_W, _D]):
    """``convert`` turns a wire object into (key, value); value None means "not kept" (dropped).
    ``index``: told of every change of the map, under the map's lock (read it with :meth:`read`).
    ``on_listed``: called on the watcher thread after each listing (the first one included)."""

    def __init__(
        self,
        call: ListCall[_W],
        decoder: msgspec.json.Decoder[_W],
        convert: Callable[[_W], tuple[Hashable, _D | None]],
        *,
        host: str,
        timing: WatchTiming,
        clock: Clock = time.monotonic,
        on_listed: Callable[[], None] | None = None,
        index: Index[_D] | None = None,
    ) -> None:
        self._call, self._decoder, self._convert = call, decoder, convert
        self._host, self._timing, self._clock = host, timing, clock
        self._on_listed = on_listed
        self._index = index
        self._lock = threading.Lock()
        self._items: dict[Hashable, _D] = {}
        self._version = ""
        self._synced = threading.Event()
        # None while a watch stream is open; else since when none is (the end of the last stream or list)
        self._down_since: float | None = None
        self._listed_at = float("-inf")
        self._failure: str | None = None
        self._crash: str | None = None  # why the watcher thread died, if it did
        self._stopped = threading.Event()
        self._response: urllib3.BaseHTTPResponse | None = None
        self._thread = threading.Thread(target=self._run, name=f"watch-{call.what}", daemon=True)
        self.relists = 0  # lists after the first one (after a 410, or every relist_seconds)
        self.events = 0

    # -- the reader's side ------------------------------------------------------------------------

    @property
    def what(self) -> str:
        return self._call.what

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.begin_stop()
        self.join(STOP_WAIT_SECONDS)

    def begin_stop(self) -> None:
        """Asks the watcher to stop, and wakes a read in progress; :meth:`join` waits for it."""
        self._stopped.set()
        response = self._response
        if response is not None:
            wake_reader(response)  # unblocks the watcher's read at once

    def join(self, timeout: float) -> None:
        """Waits up to ``timeout`` seconds for the watcher to end (a listing request still waiting for its
        answer ends only at its timeout: the thread is a daemon and is left behind)."""
        self._thread.join(timeout=timeout)

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    def items(self) -> list[_D]:
        with self._lock:
            return list(self._items.values())

    def read(self, reader: Callable[[], _T]) -> tuple[tuple[_D, ...], _T]:
        """The values and what ``reader`` (of the index, say) returns, both at the same moment."""
        with self._lock:
            return tuple(self._items.values()), reader()

    def get(self, key: Hashable) -> _D | None:
        with self._lock:
            return self._items.get(key)

    def replace(self, key: Hashable, old: _D, new: _D) -> bool:
        """Swap ``old`` for ``new`` unless an event changed the entry meanwhile; whether it did."""
        with self._lock:
            if self._items.get(key) is not old:
                return False
            self._items[key] = new
            if self._index is not None:
                self._index.change(key, old, new)
            return True

    @property
    def resource_version(self) -> str:
        return self._version

    def seconds_since_contact(self) -> float | None:
        """0 while a watch is open, else the seconds since one was (or the last list); None before the list."""
        if not self._synced.is_set():
            return None
        down_since = self._down_since
        return 0.0 if down_since is None else max(0.0, self._clock() - down_since)

    def problem(self, max_stale: float) -> str | None:
        """Why the map cannot be trusted now, or None: not listed yet, the watcher thread died, or no watch
        open for more than ``max_stale`` s. A quiet open watch is no problem, however long it stays quiet."""
        if self._crash is not None:
            return f"{self.what}: the watcher stopped ({self._crash})"
        if not self._synced.is_set():
            return f"{self.what}: not listed yet" + (f" ({self._failure})" if self._failure else "")
        down = self.seconds_since_contact() or 0.0
        if down > max_stale:
            cause = f": {self._failure}" if self._failure else ""
            return f"{self.what}: no watch open on the API server for {down:.0f} s{cause}"
        return None

    # -- the watcher thread -----------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
        except Exception as exc:  # a bug, not the server: the cache must not pass for fresh without its watcher
            self._crash = f"{type(exc).__name__}: {exc}"
            log.exception("watch %s: the watcher thread died", self.what)

    def _loop(self) -> None:
        backoff = 0.0
        must_list = True
        while not self._stopped.is_set():
            relisting = False  # a periodic listing, not one the watch needs
            try:
                relist_in = self._listed_at + self._timing.relist_seconds - self._clock()
                relisting = not must_list and relist_in < MIN_QUIET_WATCH_SECONDS
                if must_list or relisting:
                    if relisting:
                        log.info("watch %s: listing again, as every %.0f s", self.what, self._timing.relist_seconds)
                    self._list()
                    must_list = relisting = False
                    relist_in = self._timing.relist_seconds
                opened, events = self._clock(), self.events
                self._watch(int(min(self._timing.watch_seconds, relist_in)))
                if self.events == events and self._clock() - opened < MIN_QUIET_WATCH_SECONDS:
                    # ended at once with nothing said (a proxy closing streams?): do not hammer the server
                    backoff = min(max(backoff * 2, 0.5), self._timing.backoff_max)
                    self._stopped.wait(backoff)
                else:
                    backoff = 0.0
            except _Expired:
                log.info("watch %s: resourceVersion %s expired, listing again", self.what, self._version)
                must_list = True
            except ListStopped:  # stop() came while listing: the listing was dropped
                return
            except RebalancerError as exc:
                if self._stopped.is_set():
                    return
                self._failure = str(exc)
                if relisting:  # the map is still current through the watch: keep watching, list later
                    retry = min(self._timing.relist_seconds, RELIST_RETRY_SECONDS)
                    self._listed_at = self._clock() - self._timing.relist_seconds + retry
                    log.warning("watch %s: listing again failed (retry in %.0f s): %s", self.what, retry, exc)
                    continue
                backoff = min(max(backoff * 2, 0.5), self._timing.backoff_max)
                log.warning("watch %s failed (retry in %.1f s): %s", self.what, backoff, exc)
                self._stopped.wait(backoff)

    def _list(self) -> None:
        listed = read_all(
            self._call,
            lambda items: [self._convert(w) for w in items],
            mode=self._timing.list_mode,
            page_size=self._timing.page_size,
            timeout=self._timing.request_timeout,
            host=self._host,
            stop=self._stopped,
        )
        fresh = {key: value for key, value in listed.items if value is not None}
        with self._lock:
            before, self._items = self._items, fresh
            self._version = listed.resource_version
            if self._index is not None:
                self._index.reset(fresh)
        if self._synced.is_set():
            self.relists += 1
            log.info(
                "watch %s: listed again, %d entries differed from the watch's", self.what, _differing(before, fresh)
            )
        self._listed_at = self._down_since = self._clock()
        self._failure = None
        self._synced.set()
        if self._on_listed is not None:
            self._on_listed()

    def _watch(self, seconds: int) -> None:
        """One watch request, open for ``seconds`` at most; a clean end (the server's timeout) returns."""
        response = self._open(seconds)
        self._response = response
        read_to_end = False
        try:
            if self._stopped.is_set():  # stop() came while the watch was opening: it could not cut it
                return
            self._down_since, self._failure = None, None  # open: fresh, whether or not anything comes
            for line in _lines(response, self._call.what, self._host, seconds):
                self._apply(line)
            read_to_end = True
        finally:
            self._down_since = self._clock()  # ended or failed: the next open (or list) makes it fresh again
            self._response = None
            release_watch(response, read_to_end)

    def _open(self, seconds: int) -> urllib3.BaseHTTPResponse:
        call = self._call
        try:
            response: urllib3.BaseHTTPResponse = call.method(
                watch=True,
                resource_version=self._version,
                allow_watch_bookmarks=True,
                timeout_seconds=seconds,
                field_selector=call.field_selector,
                label_selector=call.label_selector,
                _preload_content=False,
                # connect, then read: a quiet server sends nothing until it ends the watch after ``seconds``
                _request_timeout=(self._timing.request_timeout, seconds + 30.0),
            )
        except ApiException as exc:
            if exc.status == 410:
                raise _Expired from exc
            raise api_error(f"watch {call.what}", exc) from exc
        except CLIENT_ERRORS as exc:
            raise client_error(f"watch {call.what}", exc, self._host, self._timing.request_timeout) from exc
        return response

    def _apply(self, line: bytes) -> None:
        try:
            event = WATCH_EVENT.decode(line)
            kind = event.type
            if kind == "ERROR":
                status = wire.STATUS.decode(event.object)
                if status.code == 410:
                    raise _Expired
                raise KubeUnavailable(
                    f"watch {self.what}: HTTP {status.code} {status.reason}: {status.message}",
                    status=status.code or None,
                    reason=status.reason or None,
                )
            version = _VERSIONED.decode(event.object).metadata.resource_version
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                key, value = self._convert(self._decoder.decode(event.object))
                with self._lock:
                    if kind == "DELETED" or value is None:
                        old = self._items.pop(key, None)
                        value = None
                    else:
                        old = self._items.get(key)
                        self._items[key] = value
                    if self._index is not None and (old is not None or value is not None):
                        self._index.change(key, old, value)
                    self._version = version or self._version
                self.events += 1
            elif kind == "BOOKMARK":
                self._version = version or self._version
            else:
                raise KubeUnavailable(f"watch {self.what}: unknown event type {kind!r}", reason="Malformed")
        except msgspec.DecodeError as exc:
            raise KubeUnavailable(f"watch {self.what}: malformed event: {exc}", reason="Malformed") from exc


def _differing(before: Mapping[Hashable, object], after: Mapping[Hashable, object]) -> int:
    """How many keys a new listing added, removed or changed (events lost, or in flight during the list)."""
    return len(before.keys() ^ after.keys()) + sum(
        1 for key, value in after.items() if key in before and before[key] != value
    )


def release_watch(response: urllib3.BaseHTTPResponse, read_to_end: bool) -> None:
    """Hand a watch response's connection back to the pool the client shares. Only a stream read to its end
    may serve another request: the connection of one left open (stopped while it opened, or failed midway)
    would hand the next request the rest of the watch (a chunk size read as a status line), or wait for an
    answer the server never sends while it streams; it is closed first."""
    if not read_to_end:
        response.close()
    response.release_conn()


def _lines(response: urllib3.BaseHTTPResponse, what: str, host: str, timeout: float) -> Iterator[bytes]:
    """The newline-delimited events of a watch response, as they arrive."""
    pending = b""
    try:
        for chunk in response.stream(65536, decode_content=True):
            pending += chunk
            if b"\n" not in chunk:
                continue
            *complete, pending = pending.split(b"\n")
            for line in complete:
                if line.strip():
                    yield line
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise transport_error(f"watch {what}", exc, host, timeout) from exc
    if pending.strip():
        yield pending
