"""The test API server's streaming watch-list and its ListOptions checks, read over raw HTTP."""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.kubeapi import TestApiServer
from tests.kubeapi import builders as b

WATCH_LIST = "/api/v1/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"


@pytest.fixture
def server() -> Iterator[TestApiServer]:
    with TestApiServer() as s:
        s.add(b.node("node-1"), b.pod("a"), b.pod("b", namespace="shop"), b.pod("c"))
        yield s


def events(server: TestApiServer, path: str) -> list[dict[str, Any]]:
    """Every event of a watch that ends by itself (``timeoutSeconds``)."""
    with urllib.request.urlopen(server.url + path, timeout=10) as response:
        assert response.headers["Transfer-Encoding"] == "chunked"
        return [json.loads(line) for line in response.read().splitlines() if line.strip()]


def refusal(server: TestApiServer, path: str) -> tuple[int, dict[str, Any]]:
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(server.url + path, timeout=5)
    return caught.value.code, json.loads(caught.value.read())


def test_initial_events_then_the_annotated_bookmark_then_changes(server: TestApiServer) -> None:
    revision = server.store.revision
    threading.Timer(0.3, lambda: server.add(b.pod("d"))).start()

    seen = events(server, WATCH_LIST + "&timeoutSeconds=1")

    assert [(e["type"], e["object"]["metadata"]["name"]) for e in seen[:3]] == [
        ("ADDED", "a"),
        ("ADDED", "c"),
        ("ADDED", "b"),
    ]  # default/a, default/c, shop/b: in key order
    assert all(e["object"]["kind"] == "Pod" and e["object"]["apiVersion"] == "v1" for e in seen[:3])
    end = seen[3]
    assert end["type"] == "BOOKMARK"
    assert end["object"]["metadata"] == {
        "resourceVersion": str(revision),
        "creationTimestamp": None,
        "annotations": {"k8s.io/initial-events-end": "true"},
    }
    assert end["object"]["spec"] == {"containers": None}  # an empty Pod, as Go encodes it
    assert ("ADDED", "d") in [(e["type"], e["object"]["metadata"].get("name")) for e in seen[4:]]


def test_without_bookmarks_no_end_marker(server: TestApiServer) -> None:
    path = WATCH_LIST.replace("&allowWatchBookmarks=true", "") + "&timeoutSeconds=1"
    assert [e["type"] for e in events(server, path)] == ["ADDED"] * 3


def test_send_initial_events_false_starts_from_now(server: TestApiServer) -> None:
    path = WATCH_LIST.replace("sendInitialEvents=true", "sendInitialEvents=false") + "&timeoutSeconds=1"
    assert [e for e in events(server, path) if e["type"] != "BOOKMARK"] == []


def test_not_older_than_a_compacted_version_serves_the_current_state(server: TestApiServer) -> None:
    old = server.store.revision
    server.add(b.pod("e"))
    server.store.compact()
    seen = events(server, WATCH_LIST + f"&resourceVersion={old - 1}&timeoutSeconds=1")
    assert len([e for e in seen if e["type"] == "ADDED"]) == 4
    assert seen[4]["object"]["metadata"]["resourceVersion"] == str(server.store.revision)


def test_a_future_resource_version_is_too_large(server: TestApiServer) -> None:
    code, body = refusal(server, WATCH_LIST + f"&resourceVersion={server.store.revision + 100}")
    assert (code, body["reason"]) == (504, "Timeout")


@pytest.mark.parametrize(
    ("query", "cause"),
    [
        (
            "watch=1&sendInitialEvents=true",
            "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
        ),
        (
            "watch=1&sendInitialEvents=true&resourceVersionMatch=Exact&resourceVersion=5",
            'resourceVersionMatch: Unsupported value: "Exact": supported values: "NotOlderThan"',
        ),
        (
            "watch=1&resourceVersionMatch=NotOlderThan",
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents "
            "is provided",
        ),
        ("sendInitialEvents=true", "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list"),
        (
            "resourceVersionMatch=NotOlderThan",
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
        ),
    ],
)
def test_list_options_are_checked_as_the_real_server_checks_them(server: TestApiServer, query: str, cause: str) -> None:
    code, body = refusal(server, f"/api/v1/pods?{query}")
    assert (code, body["reason"], body["details"]["kind"], body["details"]["group"]) == (
        422,
        "Invalid",
        "ListOptions",
        "meta.k8s.io",
    )
    assert cause in body["message"]
    assert body["message"].startswith('ListOptions.meta.k8s.io "" is invalid: ')


def test_without_the_feature_gate_the_watch_list_is_refused(server: TestApiServer) -> None:
    server.watch_list = False
    code, body = refusal(server, WATCH_LIST)
    assert code == 422
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueForbidden",
            "message": "Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is "
            "enabled",
            "field": "sendInitialEvents",
        }
    ]
    assert len(events(server, "/api/v1/pods?watch=1&timeoutSeconds=1")) >= 3  # a plain watch still works


def test_an_expired_watch_list_ends_with_a_410_error_event(server: TestApiServer) -> None:
    server.interrupt_watch_lists("pods", after=2, how="expire")
    seen = events(server, WATCH_LIST + "&timeoutSeconds=5")
    assert [e["type"] for e in seen] == ["ADDED", "ADDED", "ERROR"]
    assert (seen[2]["object"]["code"], seen[2]["object"]["reason"]) == (410, "Expired")


def test_a_cut_watch_list_never_ends_its_chunked_body(server: TestApiServer) -> None:
    server.interrupt_watch_lists("pods", after=1, how="cut")
    started = time.monotonic()
    with pytest.raises(http.client.IncompleteRead):  # no final chunk: the body is cut short
        events(server, WATCH_LIST + "&timeoutSeconds=5")
    assert time.monotonic() - started < 5
