"""A long list's pages shared between this thread and worker processes (the lister's fast path).

The fetching thread fetches every page after the first. Each goes to a worker that is free at that
moment (a :class:`PageSink`, :mod:`page_workers`), else to the listing thread, which decodes and
converts it in-process exactly as the plain path does. No page waits for a busy worker and no worker
waits for the listing thread, so the split follows how fast each side is (150,000 pods, one worker,
two cores shared with the test API server: about 140 of the 300 pages went to the worker). At most
:data:`LOCAL_AHEAD` pages wait for the listing thread and two for each worker, so memory stays flat.
The pods come out in page order.

On any failure (a page that does not decode here or in a worker, a transport error, an expired
continue token) the sink is aborted and the fetching thread stopped before the error goes on.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

_D = TypeVar("_D")

LOCAL_AHEAD = 2
"""Fetched pages that may wait for the listing thread (4.5 MB each for big pods); 0: every page after
the first waits for a worker instead (the listing thread converts only the first)."""
_POLL_SECONDS = 0.002  # how often a fetched page with nowhere to go looks again for a free worker


class PageSink(Protocol[_D]):
    """Worker processes that decode and convert pages (all methods run on the fetching thread)."""

    def offer(self, raw: bytes) -> bool:
        """Hand the page to a worker if one is free now; False: none is (the page is decoded here)."""

    def done(self, wait: bool) -> list[Sequence[_D]]:
        """The converted pages not yet returned, in the order offered, as far as they are complete
        (with ``wait``: all of them). A page that failed raises its error here."""

    def abort(self) -> None:
        """Stop the workers now (the list failed): an :meth:`offer` blocked on a full pipe fails."""


Offload = Callable[[], AbstractContextManager[PageSink[_D] | None]]
"""Opens a :class:`PageSink` for one list, or gives None (everything is decoded in-process)."""


@dataclass(frozen=True, slots=True)
class _End:
    pages: int


_Ticket = tuple[int, bytes] | _End | BaseException  # a page for the listing thread, the end, or the error


@dataclass(frozen=True, slots=True)
class Split(Generic[_D]):
    items: list[_D]
    pages: int
    offloaded: int  # pages converted by the sink


def split_list(
    first: Callable[[], Iterable[_D]],
    token: str,
    fetch: Callable[[str], tuple[bytes, str]],
    convert: Callable[[bytes], Iterable[_D]],
    sink: PageSink[_D],
    fetcher: ThreadPoolExecutor,
) -> Split[_D]:
    """The items of a list: ``first`` converts the first page (already fetched), ``token`` continues
    after it, ``fetch(token)`` gives a page's body and the next token ("" after the last page),
    ``convert`` decodes and converts a page in-process."""
    local: queue.Queue[_Ticket] = queue.Queue(maxsize=max(LOCAL_AHEAD, 1))
    remote: dict[int, Sequence[_D]] = {}  # page index -> the sink's items (written by the fetching thread)
    stop = threading.Event()
    producer = fetcher.submit(_produce, token, fetch, sink, local, remote, stop)
    try:
        here: dict[int, Iterable[_D]] = {0: first()}
        while not isinstance(ticket := local.get(), _End):
            if isinstance(ticket, BaseException):
                raise ticket
            here[ticket[0]] = convert(ticket[1])
            del ticket
        out: list[_D] = []
        for index in range(ticket.pages):
            out.extend(here[index] if index in here else remote[index])
        return Split(out, ticket.pages, len(remote))
    except BaseException:
        stop.set()
        sink.abort()
        wait([producer])
        raise


def _produce(
    token: str,
    fetch: Callable[[str], tuple[bytes, str]],
    sink: PageSink[_D],
    local: queue.Queue[_Ticket],
    remote: dict[int, Sequence[_D]],
    stop: threading.Event,
) -> None:
    """The fetching thread: each page to a free worker or to the listing thread; then the end."""
    offered: deque[int] = deque()

    def collect(wait: bool) -> None:
        for items in sink.done(wait):
            remote[offered.popleft()] = items

    index = 1
    try:
        while token:
            raw, token = fetch(token)
            while True:
                collect(False)
                if sink.offer(raw):
                    offered.append(index)
                    break
                if LOCAL_AHEAD == 0:  # wait for a worker
                    stop.wait(_POLL_SECONDS)
                elif _put(local, (index, raw), stop, _POLL_SECONDS):
                    break
                if stop.is_set():
                    return
            del raw
            index += 1
        collect(True)
        ending: _Ticket = _End(index)
    except BaseException as exc:  # handed to the listing thread, which raises it
        ending = exc
    while not stop.is_set() and not _put(local, ending, stop, 0.1):
        pass


def _put(local: queue.Queue[_Ticket], item: _Ticket, stop: threading.Event, timeout: float) -> bool:
    if stop.is_set():
        return False
    try:
        local.put(item, timeout=timeout)
    except queue.Full:
        return False
    return True
