"""split_list: a long list's pages shared between the listing thread and a sink of workers (no processes here)."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest

from rebalancer.errors import KubeUnavailable
from rebalancer.kube import split_list as split_module
from rebalancer.kube.split_list import Split, split_list

PAGES = 12  # page i holds the items [10 * i, 10 * i + 10)


def body(index: int) -> bytes:
    return f"{index}".encode()


def items_of(raw: bytes) -> list[int]:
    index = int(raw)
    return list(range(10 * index, 10 * index + 10))


class Pages:
    """The fetch callback: page ``i`` continues with token ``i + 1``; counts pages fetched and not yet
    converted (on either side), to check that memory stays flat."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.fetched: list[int] = []
        self.fail_at = fail_at
        self.outstanding = 0
        self.most_outstanding = 0
        self._lock = threading.Lock()

    def fetch(self, token: str) -> tuple[bytes, str]:
        index = int(token)
        if index == self.fail_at:
            raise KubeUnavailable("list things: HTTP 500 InternalError", status=500)
        self.fetched.append(index)
        with self._lock:
            self.outstanding += 1
            self.most_outstanding = max(self.most_outstanding, self.outstanding)
        return body(index), "" if index + 1 == PAGES else str(index + 1)

    def converted(self) -> None:
        with self._lock:
            self.outstanding -= 1


class Sink:
    """Takes the pages ``accept`` says yes to and converts them at once (as a free, instant worker)."""

    def __init__(self, pages: Pages, accept: Callable[[int], bool], fail_at: int | None = None) -> None:
        self.pages = pages
        self.accept = accept
        self.fail_at = fail_at
        self.taken: list[int] = []
        self.ready: deque[list[int] | KubeUnavailable] = deque()
        self.aborted = False

    def offer(self, raw: bytes) -> bool:
        index = int(raw)
        if not self.accept(index):
            return False
        self.taken.append(index)
        self.pages.converted()
        self.ready.append(KubeUnavailable(f"thing {index}: bad") if index == self.fail_at else items_of(raw))
        return True

    def done(self, wait: bool) -> list[Sequence[int]]:
        out: list[Sequence[int]] = []
        while self.ready:
            result = self.ready.popleft()
            if isinstance(result, KubeUnavailable):
                raise result
            out.append(result)
        return out

    def abort(self) -> None:
        self.aborted = True


@pytest.fixture
def fetcher() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=1) as pool:
        yield pool


def run(
    pages: Pages, sink: Sink, fetcher: ThreadPoolExecutor, here: Callable[[bytes], list[int]] = items_of
) -> Split[int]:
    def convert(raw: bytes) -> list[int]:
        out = here(raw)
        pages.converted()
        return out

    return split_list(lambda: items_of(body(0)), "1", pages.fetch, convert, sink, fetcher)


@pytest.mark.parametrize(
    ("accept", "offloaded"),
    [(lambda i: i % 3 == 0, 3), (lambda i: False, 0), (lambda i: True, PAGES - 1), (lambda i: i > 8, 3)],
)
def test_items_come_out_in_page_order_whoever_converted_them(
    fetcher: ThreadPoolExecutor, accept: Callable[[int], bool], offloaded: int
) -> None:
    pages = Pages()
    sink = Sink(pages, accept)

    split = run(pages, sink, fetcher)

    assert split.items == list(range(10 * PAGES))
    assert split.pages == PAGES
    assert split.offloaded == offloaded == len(sink.taken)
    assert not sink.aborted


def test_pages_waiting_for_the_listing_thread_are_bounded(fetcher: ThreadPoolExecutor) -> None:
    pages = Pages()
    slow = threading.Event()

    def slow_here(raw: bytes) -> list[int]:
        slow.wait(0.02)  # the listing thread is the slow side: the fetcher must not run ahead
        return items_of(raw)

    split = run(pages, Sink(pages, lambda i: False), fetcher, slow_here)

    assert split.items == list(range(10 * PAGES))
    # LOCAL_AHEAD queued, one being converted, one fetched and waiting for room
    assert pages.most_outstanding <= split_module.LOCAL_AHEAD + 2


def test_with_no_local_room_every_later_page_waits_for_a_worker(
    fetcher: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(split_module, "LOCAL_AHEAD", 0)
    pages = Pages()
    busy = iter([False, False, True] * PAGES)  # the worker is busy two times in three
    sink = Sink(pages, lambda i: next(busy))

    split = run(pages, sink, fetcher)

    assert split.items == list(range(10 * PAGES))
    assert sink.taken == list(range(1, PAGES))


def test_a_page_that_fails_in_the_sink_fails_the_list_and_stops_fetching(fetcher: ThreadPoolExecutor) -> None:
    pages = Pages()
    sink = Sink(pages, lambda i: i % 2 == 0, fail_at=4)

    with pytest.raises(KubeUnavailable, match=r"^thing 4: bad$"):
        run(pages, sink, fetcher)

    assert sink.aborted
    assert max(pages.fetched) < PAGES - 1  # stopped early: at most a page or two after the failure


def test_a_page_that_fails_here_aborts_the_sink_and_stops_fetching(fetcher: ThreadPoolExecutor) -> None:
    pages = Pages()
    sink = Sink(pages, lambda i: i % 2 == 0)

    def failing(raw: bytes) -> list[int]:
        if int(raw) == 3:
            raise KubeUnavailable("thing 3: bad here")
        return items_of(raw)

    with pytest.raises(KubeUnavailable, match=r"^thing 3: bad here$"):
        run(pages, sink, fetcher, failing)

    assert sink.aborted
    fetched = len(pages.fetched)
    assert fetched < PAGES - 1
    threading.Event().wait(0.05)
    assert len(pages.fetched) == fetched  # the fetching thread is done, not running on


def test_a_failed_fetch_fails_the_list(fetcher: ThreadPoolExecutor) -> None:
    pages = Pages(fail_at=5)
    sink = Sink(pages, lambda i: i % 2 == 1)

    with pytest.raises(KubeUnavailable, match="HTTP 500") as caught:
        run(pages, sink, fetcher)

    assert caught.value.status == 500
    assert sink.aborted
    assert pages.fetched == [1, 2, 3, 4]


def test_a_one_page_list_never_reaches_the_sink(fetcher: ThreadPoolExecutor) -> None:
    sink = Sink(Pages(), lambda i: True)

    split = split_list(lambda: [1, 2], "", Pages().fetch, items_of, sink, fetcher)

    assert split == Split([1, 2], 1, 0)
    assert sink.taken == []
