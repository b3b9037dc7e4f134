"""The process-wide switch a list flips while it runs (the thread switch interval), and the paged read."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import msgspec
import pytest

from rebalancer.adapters.kube import wire
from rebalancer.adapters.kube.lister import LISTING_SWITCH_INTERVAL, ListCall, fast_switching, list_all
from rebalancer.domain.errors import KubeUnavailable

DEFAULT = 0.005  # the interpreter keeps microseconds: compare lowered values with approx


@pytest.fixture(autouse=True)
def default_interval() -> Iterator[None]:
    found = sys.getswitchinterval()
    sys.setswitchinterval(DEFAULT)
    yield
    sys.setswitchinterval(found)


class Page:
    """What the generated API methods return with ``_preload_content=False``: a body and a connection."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.released = False

    def release_conn(self) -> None:
        self.released = True


class TwoPages:
    """A collection of two pages; records the switch interval seen while each page is fetched."""

    def __init__(self) -> None:
        self.seen: list[float] = []

    def __call__(self, *, _continue: str | None, **_: Any) -> Page:
        self.seen.append(sys.getswitchinterval())
        token = "" if _continue else "next"
        body = {"metadata": {"continue": token}, "items": [{"metadata": {"name": f"n{len(self.seen)}"}}]}
        return Page(msgspec.json.encode(body))


def names(items: Sequence[wire.Node]) -> list[str]:
    return [n.metadata.name for n in items]


def test_a_list_lowers_the_interval_while_it_runs_and_restores_it() -> None:
    method = TwoPages()

    listed = list_all(ListCall("nodes", "node", method, wire.NODE_LIST), names, page_size=1, timeout=1, host="h")

    assert listed.items == ["n1", "n2"]
    assert method.seen == [pytest.approx(LISTING_SWITCH_INTERVAL)] * 2
    assert sys.getswitchinterval() == DEFAULT


def test_the_interval_is_restored_when_the_list_fails() -> None:
    def refuse(items: Sequence[wire.Node]) -> list[str]:
        raise KubeUnavailable("node n1: bad")

    with pytest.raises(KubeUnavailable):
        list_all(ListCall("nodes", "node", TwoPages(), wire.NODE_LIST), refuse, page_size=1, timeout=1, host="h")

    assert sys.getswitchinterval() == DEFAULT


def test_restored_on_error_and_only_by_the_last_of_nested_users() -> None:
    with pytest.raises(RuntimeError), fast_switching():  # noqa: PT012
        assert sys.getswitchinterval() == pytest.approx(LISTING_SWITCH_INTERVAL)
        with fast_switching():
            pass
        # the inner user left, the outer one has not
        assert sys.getswitchinterval() == pytest.approx(LISTING_SWITCH_INTERVAL)
        raise RuntimeError("boom")
    assert sys.getswitchinterval() == DEFAULT


def test_overlapping_users_on_two_threads_restore_the_value_found_by_the_first() -> None:
    entered, release = threading.Event(), threading.Event()

    def other() -> None:
        with fast_switching():
            entered.set()
            release.wait(5)

    thread = threading.Thread(target=other)
    with fast_switching():
        thread.start()
        assert entered.wait(5)
    assert sys.getswitchinterval() == pytest.approx(LISTING_SWITCH_INTERVAL)  # the other thread still lists
    release.set()
    thread.join(5)
    assert sys.getswitchinterval() == DEFAULT


def test_an_interval_already_lower_is_left_alone() -> None:
    sys.setswitchinterval(LISTING_SWITCH_INTERVAL / 2)
    lower = sys.getswitchinterval()
    with fast_switching():
        assert sys.getswitchinterval() == lower
    assert sys.getswitchinterval() == lower


@pytest.mark.parametrize("found", [0.005, 0.0137, 0.000999, 0.1])
def test_the_value_found_is_restored_exactly(found: float) -> None:
    sys.setswitchinterval(found)
    before = sys.getswitchinterval()
    for _ in range(3):
        with fast_switching():
            pass
    assert sys.getswitchinterval() == before


# --- the continue token read ahead of the items ------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7","continue":"t1"},"items":[{}]}', "t1"),
        (b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[]}', ""),
        (b'{"metadata":{"resourceVersion":"7","continue":"a,\\"items\\":"},"items":[]}', 'a,"items":'),  # in a string
    ],
)
def test_the_head_of_a_list_tells_its_continue_token(body: bytes, expected: str) -> None:
    head = wire.list_head(body)
    assert head is not None
    assert (head.resource_version, head.continue_) == ("7", expected)


@pytest.mark.parametrize(
    "body",
    [
        b'{"items":[{"spec":{"volumes":[{"projected":{"sources":[{"configMap":{"name":"x","items":[]}}]}}]}}],'
        b'"metadata":{"continue":"t1"}}',  # items first: the first ,"items": is a nested key
        b'{"kind":"PodList","items":[],"metadata":{"continue":"t1"}}',  # no metadata ahead of the items
        b'{"kind": "PodList", "metadata": {"continue": "t1"}, "items": []}',  # spaced out
        b"<html>502</html>",
    ],
)
def test_any_other_layout_leaves_the_token_to_the_whole_body(body: bytes) -> None:
    assert wire.list_head(body) is None


class ItemsFirst(TwoPages):
    """The same two pages with the items ahead of the metadata: no token can be read early."""

    def __call__(self, *, _continue: str | None, **options: Any) -> Page:
        page = msgspec.json.decode(super().__call__(_continue=_continue, **options).data)
        return Page(msgspec.json.encode({"items": page["items"], "metadata": page["metadata"]}))


def test_a_list_whose_token_comes_after_its_items_is_listed_whole() -> None:
    listed = list_all(ListCall("nodes", "node", ItemsFirst(), wire.NODE_LIST), names, page_size=1, timeout=1, host="h")

    assert (listed.items, listed.pages) == (["n1", "n2"], 2)


class WaitingDecoder:
    """Decodes node lists, first waiting (bounded) until the next page has been asked for."""

    def __init__(self, asked: threading.Event) -> None:
        self.asked = asked
        self.asked_before_decode: list[bool] = []

    def decode(self, raw: bytes) -> wire.NodeList:
        body = wire.NODE_LIST.decode(raw)
        if body.metadata.continue_:
            self.asked_before_decode.append(self.asked.wait(5))
        return body


def test_the_next_page_is_asked_for_before_this_one_is_decoded() -> None:
    asked = threading.Event()

    class Recording(TwoPages):
        def __call__(self, *, _continue: str | None, **options: Any) -> Page:
            if _continue:
                asked.set()
            return super().__call__(_continue=_continue, **options)

    decoder = WaitingDecoder(asked)
    call: ListCall[wire.Node] = ListCall("nodes", "node", Recording(), decoder)  # type: ignore[arg-type]

    assert list_all(call, names, page_size=1, timeout=1, host="h").items == ["n1", "n2"]
    assert decoder.asked_before_decode == [True]
