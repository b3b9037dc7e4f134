"""The HTTP side of `rebalancer serve`, driven over 127.0.0.1 through the real servers: the webhook's, and
the status port's (/metrics, /healthz, /readyz).

Behind the app stands a small triage written for the test (plain code answering with the runner's own
``AlertDecision``), so each answer can be checked against exactly what reached the runner.
"""

from __future__ import annotations

import copy
import http.client
import json
import os
import select
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rebalancer.policy import ServiceSettings
from rebalancer.service import (
    MAX_BODY_BYTES,
    MAX_CONCURRENT_REQUESTS,
    WEBHOOK_PATH,
    WORKER_THREAD_NAME,
    HttpServer,
    NodeAlert,
    ServerLimits,
    TokenFile,
    make_app,
    make_status_app,
    serve_http,
)
from rebalancer.service.metrics import Metrics
from rebalancer.service.runner import AlertDecision
from tests.shared_data import WEBHOOK_SAMPLE

SAMPLE = WEBHOOK_SAMPLE.read_bytes()
TOKEN = "s3cret-token"
NODES = frozenset({"node-hot", "node-a", "node-b"})
DEFAULT_LIMITS = ServerLimits()


class Triage:
    """Stands in for the runner: a node is queued once, then already-queued; returns at once."""

    def __init__(self) -> None:
        self.received: list[list[NodeAlert]] = []
        self.queued: set[str] = set()
        self.gate: threading.Event | None = None  # set by a test to hold a request in flight
        self.entered = threading.Event()
        self.calls = 0  # requests that reached it, those held at the gate included
        self._lock = threading.Lock()

    def __call__(self, alerts: Sequence[NodeAlert]) -> list[AlertDecision]:
        with self._lock:
            self.calls += 1
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(10)
        self.received.append(list(alerts))
        out = []
        for a in alerts:
            if a.node is None:
                out.append(AlertDecision(None, "unknown-node", a.reason_if_unusable or ""))
            elif a.status != "firing":
                out.append(AlertDecision(a.node, "resolved"))
            elif a.node in self.queued:
                out.append(AlertDecision(a.node, "already-queued"))
            else:
                self.queued.add(a.node)
                out.append(AlertDecision(a.node, "queued"))
        return out


@dataclass
class Service:
    server: HttpServer  # the webhook's
    status: HttpServer  # /metrics and the probes
    metrics: Metrics
    triage: Triage
    token_file: Path
    leader: list[bool] = field(default_factory=lambda: [True])
    ready: list[bool] = field(default_factory=lambda: [False])


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@contextmanager
def running_service(
    tmp_path: Path, limits: ServerLimits = DEFAULT_LIMITS, max_concurrent_requests: int = MAX_CONCURRENT_REQUESTS
) -> Iterator[Service]:
    """The apps behind the real servers on 127.0.0.1; ``limits`` are the webhook's."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    metrics, triage = Metrics(), Triage()
    leader, ready = [True], [False]
    app = make_app(
        metrics=metrics,
        submit=triage,
        is_leader=lambda: leader[0],
        known_nodes=lambda: NODES,
        instance_map={"10.0.0.5": "node-a"},
        node_addresses=lambda: {"10.0.0.9": "node-b", "10.0.0.5": "node-hot"},
        token=TokenFile(token_file),
        retry_after_seconds=7,
        max_concurrent_requests=max_concurrent_requests,
    )
    status = serve_http(make_status_app(metrics=metrics, ready=lambda: ready[0]), "127.0.0.1", 0)
    server = serve_http(app, "127.0.0.1", 0, limits=limits)
    try:
        yield Service(server, status, metrics, triage, token_file, leader, ready)
    finally:
        server.stop()
        status.stop()


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[Service]:
    with running_service(tmp_path) as service:
        yield service


def request(
    svc: Service,
    method: str,
    path: str,
    body: bytes | None = None,
    *,
    token: str | None = TOKEN,
    content_type: str | None = "application/json",
    server: HttpServer | None = None,
    timeout: float = 10,
) -> Answer:
    """A request to ``server`` (default: the webhook's)."""
    headers = {}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if content_type is not None:
        headers["Content-Type"] = content_type
    conn = http.client.HTTPConnection("127.0.0.1", (server or svc.server).port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
    finally:
        conn.close()


def post(svc: Service, body: bytes = SAMPLE, **kwargs: Any) -> Answer:
    return request(svc, "POST", WEBHOOK_PATH, body, **kwargs)


def status(svc: Service, path: str, method: str = "GET", body: bytes | None = None, timeout: float = 10) -> Answer:
    """A request to the status port."""
    return request(svc, method, path, body, token=None, content_type=None, server=svc.status, timeout=timeout)


def raw(svc: Service, data: bytes, *, shut_write_while_reading: bool = False) -> Answer:
    """Send bytes as they are (headers included) and read the answer; ``shut_write_while_reading``: close
    the sending side once the server is reading the body."""
    with socket.create_connection(("127.0.0.1", svc.server.port), timeout=10) as sock:
        sock.sendall(data)
        if shut_write_while_reading:
            wait_for_a_body_being_read(svc.server)
            sock.shutdown(socket.SHUT_WR)
        return read_answer(sock)


def read_answer(sock: socket.socket) -> Answer:
    """Read one answer: its head, then the Content-Length bytes of its body (the connection may stay open)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the connection ended without an answer (got {data!r})"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode().split("\r\n")
    headers = {k.lower(): v for k, v in (line.split(": ", 1) for line in header_lines)}
    while len(body) < int(headers["content-length"]):
        chunk = sock.recv(65536)
        assert chunk, "the connection ended inside the body"
        body += chunk
    return Answer(int(status_line.split()[1]), headers, body)


def payload(*alerts: dict[str, Any], **top: Any) -> bytes:
    data = json.loads(SAMPLE)
    base = data["alerts"][0]
    data["alerts"] = [{**copy.deepcopy(base), **a} for a in alerts]
    data.update(top)
    return json.dumps(data).encode()


def metric(svc: Service, name: str, **labels: str) -> float | None:
    answer = status(svc, "/metrics")
    assert answer.status == 200
    for family in text_string_to_metric_families(answer.body.decode()):
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return float(s.value)
    return None


# -- accepted ------------------------------------------------------------------------------------


def test_the_real_sample_is_accepted_and_reaches_the_runner(svc: Service):
    answer = post(svc)
    assert answer.status == 202, answer.body
    assert answer.headers["content-type"] == "application/json"
    summary = answer.json()
    assert summary["accepted"] == ["node-hot"]
    assert summary["ignored"] == [] and summary["resolved"] == [] and summary["notes"] == []
    assert summary["alerts"] == [
        {
            "fingerprint": "e17ee4e5371c2b59",
            "alertname": "NodeCPUHigh",
            "status": "firing",
            "node": "node-hot",
            "action": "queued",
            "detail": "",
        }
    ]
    [[alert]] = svc.triage.received
    assert (alert.node, alert.fingerprint, alert.status) == ("node-hot", "e17ee4e5371c2b59", "firing")
    assert alert.labels["rebalance"] == "true"

    again = post(svc).json()
    assert again["accepted"] == []
    assert again["alerts"][0]["action"] == "already-queued"
    assert metric(svc, "rebalancer_alerts_total", status="firing", action="queued") == 1
    assert metric(svc, "rebalancer_alerts_total", status="firing", action="already-queued") == 1


def test_unknown_nodes_resolved_alerts_and_truncation_are_recorded_not_queued(svc: Service):
    body = payload(
        {"labels": {"alertname": "NodeCPUHigh", "instance": "10.9.9.9:9100"}, "fingerprint": "unknown"},
        {"labels": {"alertname": "NodeCPUHigh", "instance": "10.0.0.5:9100"}, "fingerprint": "mapped"},
        {"status": "resolved", "labels": {"alertname": "NodeCPUHigh", "node": "node-b"}, "fingerprint": "done"},
        truncatedAlerts=4,
    )
    summary = post(svc, body).json()
    assert summary["accepted"] == ["node-a"]  # 10.0.0.5 maps to node-a
    assert summary["ignored"] == [
        {"fingerprint": "unknown", "alertname": "NodeCPUHigh", "reason": "instance='10.9.9.9:9100' names no known node"}
    ]
    assert summary["resolved"] == [{"fingerprint": "done", "alertname": "NodeCPUHigh", "node": "node-b"}]
    assert [a["action"] for a in summary["alerts"]] == ["unknown-node", "queued", "resolved"]
    assert "truncatedAlerts=4" in summary["notes"][0]
    assert svc.triage.queued == {"node-a"}


def test_an_instance_address_resolves_through_the_nodes_addresses(svc: Service):
    body = payload(
        {"labels": {"alertname": "NodeCPUHigh", "instance": "10.0.0.9:9100"}, "fingerprint": "by-address"},
        {"labels": {"alertname": "NodeCPUHigh", "instance": "10.0.0.5:9100"}, "fingerprint": "configured"},
    )
    summary = post(svc, body).json()
    assert summary["accepted"] == ["node-b", "node-a"]  # the configured map wins over the node's address
    assert svc.triage.queued == {"node-a", "node-b"}


def test_a_resolved_only_body_queues_nothing(svc: Service):
    body = payload({"status": "resolved", "endsAt": "2026-11-22T03:10:00Z"}, status="resolved")
    answer = post(svc, body)
    assert answer.status == 202
    assert answer.json()["accepted"] == []
    assert answer.json()["resolved"][0]["node"] == "node-hot"
    assert svc.triage.queued == set()
    assert metric(svc, "rebalancer_alerts_total", status="resolved", action="resolved") == 1


def test_a_body_of_exactly_the_limit_is_accepted(svc: Service):
    body = SAMPLE.rstrip() + b" " * (MAX_BODY_BYTES - len(SAMPLE.rstrip()))
    assert len(body) == MAX_BODY_BYTES
    assert post(svc, body).status == 202


# -- refused -------------------------------------------------------------------------------------


def test_no_token_and_wrong_token_get_401(svc: Service):
    missing = post(svc, token=None)
    assert missing.status == 401
    assert missing.headers["www-authenticate"] == 'Bearer realm="rebalancer"'
    wrong = post(svc, token="s3cret-tokem")
    assert wrong.status == 401
    assert 'error="invalid_token"' in wrong.headers["www-authenticate"]
    assert post(svc, token=TOKEN + "x").status == 401
    basic = raw(svc, b"POST /webhook/alertmanager HTTP/1.1\r\nHost: x\r\nAuthorization: Basic czNjcmV0\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")  # fmt: skip
    assert basic.status == 401
    assert svc.triage.received == []


def test_the_token_file_is_reread_when_the_secret_rotates(svc: Service):
    assert post(svc).status == 202
    rotated = svc.token_file.with_name("token.new")
    rotated.write_text("rotated-token")
    os.replace(rotated, svc.token_file)  # a mounted Secret changes by swapping files, never in place
    assert post(svc).status == 401
    assert post(svc, token="rotated-token").status == 202


def test_an_unreadable_token_file_refuses_everything(svc: Service):
    svc.token_file.unlink()
    answer = post(svc)
    assert answer.status == 500
    assert answer.json() == {"error": "the webhook token is not available"}
    svc.token_file.write_text("\n")
    assert post(svc).status == 500  # an empty token never matches
    assert post(svc, token="").status == 500
    assert svc.triage.received == []


def test_oversize_bodies_get_413(svc: Service):
    too_big = SAMPLE + b" " * (MAX_BODY_BYTES + 1 - len(SAMPLE))
    answer = post(svc, too_big)  # the whole body is sent: the answer still arrives intact
    assert answer.status == 413
    assert f"at most {MAX_BODY_BYTES}" in answer.json()["error"]
    started = time.monotonic()
    announced = raw(svc, b"POST /webhook/alertmanager HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode()
                         + b"\r\nContent-Type: application/json\r\nContent-Length: 50000000\r\n\r\n{")  # fmt: skip
    assert announced.status == 413  # answered on the announced length, without waiting for 50 MB
    assert time.monotonic() - started < 5
    assert svc.triage.received == []


def test_a_body_needs_a_content_length(svc: Service):
    chunked = raw(svc, b"POST /webhook/alertmanager HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode()
                       + b"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n")  # fmt: skip
    assert chunked.status == 411
    short = raw(svc, b"POST /webhook/alertmanager HTTP/1.0\r\nAuthorization: Bearer " + TOKEN.encode()
                     + b"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{}", shut_write_while_reading=True)  # fmt: skip
    assert short.status == 400
    assert "ended after 2 of the 100 bytes" in json.loads(short.body)["error"]


def test_a_body_that_stalls_gets_408_at_the_body_timeout(tmp_path: Path):
    with running_service(tmp_path, ServerLimits(body_timeout=1.0)) as svc:
        with socket.create_connection(("127.0.0.1", svc.server.port), timeout=10) as sock:
            started = time.monotonic()
            sock.sendall(f"POST {WEBHOOK_PATH} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                         f"Content-Type: application/json\r\nContent-Length: {len(SAMPLE)}\r\n\r\n".encode()
                         + SAMPLE[:10])  # fmt: skip
            answer = read_answer(sock)
            waited = time.monotonic() - started
        assert answer.status == 408
        assert answer.json() == {"error": "the body did not arrive in time"}
        # the 1 s set here, not the 10 s default: 5 s of slack for a loaded machine
        assert 0.9 < waited < 6 < DEFAULT_LIMITS.body_timeout
        assert svc.triage.received == []
        assert metric(svc, "rebalancer_webhook_refused_total", reason="timeout") == 1


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_wrong_content_type_gets_415(svc: Service, content_type: str | None):
    answer = post(svc, content_type=content_type)
    assert answer.status == 415
    expected = f"got {content_type}" if content_type else "missing Content-Type: send application/json"
    assert expected in answer.json()["error"]
    assert svc.triage.received == []


def test_content_type_parameters_are_fine(svc: Service):
    assert post(svc, content_type="Application/JSON; charset=utf-8").status == 202
    assert post(svc, content_type='application/json; charset="UTF-8"').status == 202
    other = post(svc, content_type="application/json; charset=utf-16")
    assert other.status == 415
    assert other.json()["error"] == "the body must be UTF-8 (RFC 8259), not charset=utf-16"


@pytest.mark.parametrize(
    ("body", "cause"),
    [
        (SAMPLE.decode().encode("utf-16"), "the body is not UTF-8: it starts with a UTF-16 byte order mark"),
        (SAMPLE.decode().encode("utf-16-le"), "the body is not UTF-8: it has NUL bytes (UTF-16 or UTF-32?)"),
        (SAMPLE.decode().encode("utf-32"), "the body is not UTF-8: it starts with a UTF-32 byte order mark"),
        (SAMPLE.replace(b"NodeCPUHigh", "NodeCPUHigh\u00e9".encode("latin-1")), "the body is not UTF-8: 'utf-8' codec"),
        (b"\xff\xfe\x00", "the body is not UTF-8: it starts with a UTF-16 byte order mark"),
        (b'{"a": "\xc3"}', "the body is not UTF-8: 'utf-8' codec can't decode byte 0xc3 in position 7"),
    ],
    ids=["utf-16", "utf-16-le", "utf-32", "latin-1", "bom-only", "cut-sequence"],
)
def test_a_body_not_in_utf8_gets_400_naming_the_cause(svc: Service, body: bytes, cause: str):
    answer = post(svc, body)
    assert answer.status == 400
    assert answer.json()["error"].startswith(cause)
    assert svc.triage.received == []
    assert metric(svc, "rebalancer_webhook_refused_total", reason="not-utf8") == 1


@pytest.mark.parametrize("body", [b"", b"{not json", b'{"version": "4",', b"[" * 100_000])
def test_invalid_json_gets_400(svc: Service, body: bytes):
    answer = post(svc, body)
    assert answer.status == 400
    assert answer.json()["error"].startswith("the body is not JSON")


def test_schema_errors_get_422_with_field_paths(svc: Service):
    data = json.loads(SAMPLE)
    del data["receiver"], data["alerts"][0]["fingerprint"]
    data["alerts"][0]["labels"]["node"] = 5
    data["version"] = "3"
    answer = post(svc, json.dumps(data).encode())
    assert answer.status == 422
    body = answer.json()
    assert body["error"] == "not an Alertmanager webhook payload (version 4)"
    assert {p["field"] for p in body["problems"]} == {
        "receiver",
        "alerts.0.fingerprint",
        "alerts.0.labels.node",
        "version",
    }
    assert {"field": "alerts.0.fingerprint", "message": "Field required"} in body["problems"]
    assert post(svc, b'"just a string"').status == 422
    assert svc.triage.received == []


def test_a_follower_answers_503_with_retry_after(svc: Service):
    svc.leader[0] = False
    answer = post(svc)
    assert answer.status == 503
    assert answer.headers["retry-after"] == "7"
    assert svc.triage.received == []
    assert post(svc, b"{not json").status == 400  # bad input is reported whichever replica gets it
    svc.leader[0] = True
    assert post(svc).status == 202


def test_paths_and_methods(svc: Service):
    assert request(svc, "GET", "/nope", token=None).status == 404
    wrong = request(svc, "GET", WEBHOOK_PATH)
    assert wrong.status == 405
    assert wrong.headers["allow"] == "POST"
    assert status(svc, "/metrics", "POST", b"{}").status == 405
    assert status(svc, "/healthz", "PUT", b"{}").status == 405
    assert status(svc, WEBHOOK_PATH, "POST", SAMPLE).status == 404  # each port serves its own paths only
    for path in ("/metrics", "/healthz", "/readyz"):
        assert request(svc, "GET", path, token=None).status == 404


# -- probes and metrics --------------------------------------------------------------------------


def test_health_and_readiness(svc: Service):
    assert status(svc, "/healthz").status == 200
    assert status(svc, "/readyz").status == 503
    svc.ready[0] = True
    assert status(svc, "/readyz").status == 200
    assert status(svc, "/healthz?verbose=1").status == 200


def test_every_webhook_answer_is_counted_by_code(svc: Service):
    post(svc)
    post(svc, token=None)
    post(svc, token="wrong")
    post(svc, b"{")
    post(svc, content_type="text/plain")
    request(svc, "GET", WEBHOOK_PATH)
    svc.leader[0] = False
    post(svc)
    status(svc, "/healthz")  # not the webhook: not counted
    answer = status(svc, "/metrics")
    assert answer.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    counts = {
        s.labels["code"]: s.value
        for family in text_string_to_metric_families(answer.body.decode())
        for s in family.samples
        if s.name == "rebalancer_webhook_requests_total"
    }
    assert counts == {"202": 1, "401": 2, "400": 1, "415": 1, "405": 1, "503": 1}
    assert metric(svc, "rebalancer_build_info", version="0.1.0") == 1


# -- the server ----------------------------------------------------------------------------------


def test_requests_run_in_parallel_and_stop_lets_the_one_in_flight_finish(svc: Service):
    gate = threading.Event()
    svc.triage.gate = gate
    answers: list[Answer] = []
    in_flight = threading.Thread(target=lambda: answers.append(post(svc)))
    in_flight.start()
    assert svc.triage.entered.wait(10)
    assert request(svc, "GET", WEBHOOK_PATH).status == 405  # served while the webhook is held
    stopper = threading.Thread(target=svc.server.stop)
    stopper.start()
    stopper.join(0.5)
    assert stopper.is_alive()  # waiting for the request in flight ...
    with pytest.raises(ConnectionRefusedError):  # ... after it stopped accepting
        socket.create_connection(("127.0.0.1", svc.server.port), timeout=2).close()
    gate.set()
    stopper.join(10)
    in_flight.join(10)
    assert not stopper.is_alive()
    assert [a.status for a in answers] == [202]
    svc.server.stop()  # idempotent


# -- the concurrency cap and slow clients ---------------------------------------------------------


def wait_for_a_body_being_read(server: HttpServer, seconds: float = 30) -> None:
    """Until the webhook app is reading a request's body on one of ``server``'s connections (its own state:
    no answer or metric shows a body under way). The connections are copied at once: the listener's loop
    changes them meanwhile."""
    deadline = time.monotonic() + seconds
    while not any(connection.body is not None for connection in tuple(server._server._open)):
        assert time.monotonic() < deadline, "no body was being read"
        time.sleep(0.01)


def start_slow_post(svc: Service, body: bytes = SAMPLE) -> socket.socket:
    """A webhook POST that sends only the first half of its body: the request stays unfinished."""
    sock = socket.create_connection(("127.0.0.1", svc.server.port), timeout=10)
    head = (
        f"POST {WEBHOOK_PATH} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    sock.sendall(head.encode() + body[: len(body) // 2])
    return sock


def finish_slow_post(sock: socket.socket, body: bytes = SAMPLE) -> Answer:
    with sock:
        sock.sendall(body[len(body) // 2 :])
        return read_answer(sock)


def webhook_get(svc: Service) -> int:
    """A GET of the webhook: 405 when it was served."""
    return request(svc, "GET", WEBHOOK_PATH, token=None).status


def worker_threads() -> int:
    return sum(t.name.startswith(WORKER_THREAD_NAME) for t in threading.enumerate())


def test_the_default_cap_is_the_policy_default():
    assert ServiceSettings().max_concurrent_requests == MAX_CONCURRENT_REQUESTS == 64


def test_unfinished_requests_take_no_worker_and_the_cap_counts_requests_being_processed(tmp_path: Path):
    with running_service(tmp_path, max_concurrent_requests=2) as svc:
        unfinished = [start_slow_post(svc) for _ in range(5)]  # beyond the cap, and none is refused
        assert [post(svc).status for _ in range(2)] == [202, 202]
        gate = threading.Event()
        svc.triage.gate = gate
        held: list[Answer] = []
        holders = [threading.Thread(target=lambda: held.append(post(svc))) for _ in range(2)]
        for thread in holders:
            thread.start()
        deadline = time.monotonic() + 10
        while svc.triage.calls < 4:  # the two above, then both held in the runner, a worker each
            assert time.monotonic() < deadline, "the two posts never reached the runner"
            time.sleep(0.01)
        assert worker_threads() == 2
        busy = post(svc)  # a third complete request while both workers are busy
        assert busy.status == 503
        assert busy.headers["retry-after"] == "5"
        assert busy.json() == {"error": "busy: 2 webhook requests in flight; retry later"}
        assert webhook_get(svc) == 405  # what needs no worker is still answered
        gate.set()
        for thread in holders:
            thread.join(10)
        assert [a.status for a in held] == [202, 202]
        assert [finish_slow_post(sock).status for sock in unfinished] == [202] * 5
        assert post(svc).status == 202  # the workers came back
        assert worker_threads() == 2
        assert metric(svc, "rebalancer_webhook_refused_total", reason="busy") == 1


def test_a_body_cut_off_to_make_room_is_a_truncated_request_not_an_internal_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    with running_service(tmp_path, ServerLimits(max_connections=1)) as svc:
        unfinished = start_slow_post(svc)
        wait_for_a_body_being_read(svc.server)
        with socket.create_connection(("127.0.0.1", svc.server.port), timeout=5):  # one too many: makes room
            assert unfinished.recv(1) == b""  # the waiting one was closed
        unfinished.close()
        deadline = time.monotonic() + 5
        while metric(svc, "rebalancer_webhook_refused_total", reason="truncated") != 1:
            assert time.monotonic() < deadline, "the cut-off request was not counted as truncated"
            time.sleep(0.02)
        assert metric(svc, "rebalancer_webhook_requests_total", code="500") is None
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == []


def test_a_silent_client_is_closed_at_the_header_timeout_and_blocks_nobody(tmp_path: Path):
    with running_service(tmp_path, ServerLimits(header_timeout=1.0)) as svc:
        started = time.monotonic()  # before the server can see the connection open and start its timeout
        with socket.create_connection(("127.0.0.1", svc.server.port), timeout=10) as silent:
            assert webhook_get(svc) == 405
            assert silent.recv(1) == b""  # the server drops it, without an answer
            waited = time.monotonic() - started
        # the 1 s set here, not the 10 s default: 5 s of slack for a loaded machine
        assert 0.8 < waited < 6 < DEFAULT_LIMITS.header_timeout


def test_a_trickling_client_is_cut_off_at_the_header_timeout(tmp_path: Path):
    """A byte every 0.2 s never leaves the connection silent; the 2 s header timeout still ends it."""
    with running_service(tmp_path, ServerLimits(header_timeout=2.0)) as svc:
        started = time.monotonic()  # before the server can see the connection open and start its timeout
        with socket.create_connection(("127.0.0.1", svc.server.port), timeout=10) as sock:
            sock.sendall(b"GET /webhook/alertmanager?")
            cut_off = False
            while not cut_off and time.monotonic() - started < 8:
                try:
                    sock.sendall(b"a")
                    readable, _, _ = select.select([sock], [], [], 0.2)
                    cut_off = bool(readable) and sock.recv(1) == b""
                except OSError:  # reset: the server closed with our last byte unread
                    cut_off = True
            held_for = time.monotonic() - started
        assert cut_off, "the trickling client kept its connection for 8 s"
        assert 1.8 < held_for < 6  # the 2 s header timeout, with 4 s of slack for a loaded machine


def test_200_silent_connections_cost_no_thread(tmp_path: Path):
    with running_service(tmp_path) as svc:
        assert post(svc).status == 202
        threads = threading.active_count()
        socks = [socket.create_connection(("127.0.0.1", svc.server.port), timeout=10) for _ in range(200)]
        try:
            assert post(svc).status == 202
            assert threading.active_count() == threads
            assert svc.server.open_connections >= 200
            assert select.select(socks, [], [], 0)[0] == []  # none refused or closed
        finally:
            for sock in socks:
                sock.close()


def test_at_the_connection_cap_the_oldest_waiting_connection_makes_room():
    evicted: list[str] = []
    status_app = make_status_app(metrics=Metrics(), ready=lambda: True)
    limits = ServerLimits(max_connections=5)
    # a connection left waiting is closed at the 10 s header timeout anyway: what is closed, or answered,
    # within half of it was pushed out, or served, for room (5 s of slack for a loaded machine)
    within = limits.header_timeout / 2
    with serve_http(status_app, "127.0.0.1", 0, limits=limits, on_evicted=lambda: evicted.append("status")) as server:
        silent = [socket.create_connection(("127.0.0.1", server.port), timeout=within) for _ in range(10)]
        try:
            assert [sock.recv(1) for sock in silent[:5]] == [b""] * 5  # the newer ones pushed the oldest out
            for _ in range(20):  # the first probe pushes out one more; then there is room
                asked = time.monotonic()
                conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=within)
                conn.request("GET", "/healthz")
                assert conn.getresponse().status == 200
                conn.close()
                assert time.monotonic() - asked < within
            assert silent[5].recv(1) == b""
            assert select.select(silent[6:], [], [], 0.2)[0] == []  # the four newest are still open
            assert evicted == ["status"] * 6
            assert server.open_connections == 4
        finally:
            for sock in silent:
                sock.close()


def test_no_answer_names_the_server_software(svc: Service):
    answers = [
        post(svc),
        status(svc, "/healthz"),
        raw(svc, b"GARBAGE\r\n\r\n"),
        raw(svc, b"GET /" + b"a" * 10_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"),
    ]
    assert [a.status for a in answers] == [202, 200, 400, 400]
    assert {a.headers.get("server") for a in answers} == {"rebalancer"}
    assert all(a.headers["content-type"].startswith(("application/json", "text/plain")) for a in answers)


def test_repeated_content_length_headers_are_refused(svc: Service):
    """Which of two lengths would a proxy in front have used (request smuggling)? The parser refuses any
    repeated Content-Length, the same value twice included, before the webhook sees the request."""
    head = b"POST /webhook/alertmanager HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode() + (
        b"\r\nContent-Type: application/json\r\n"
    )  # fmt: skip
    length = str(len(SAMPLE)).encode()
    conflicting = raw(svc, head + b"Content-Length: " + length + b"\r\nContent-Length: 2\r\n\r\n" + SAMPLE)
    assert conflicting.status == 400
    assert json.loads(conflicting.body)["error"] == "Duplicate Content-Length"
    repeated = raw(svc, head + b"Content-Length: " + length + b"\r\nContent-Length: " + length + b"\r\n\r\n" + SAMPLE)
    assert repeated.status == 400
    assert svc.triage.received == []


def test_a_client_refused_in_a_loop_gets_one_log_line_and_every_refusal_is_counted(
    svc: Service, caplog: pytest.LogCaptureFixture
):
    caplog.set_level("WARNING", logger="rebalancer.service.webhook_app")
    for _ in range(20):
        assert post(svc, token="wrong").status == 401
    for _ in range(5):
        assert post(svc, b"{").status == 400
    lines = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert lines == ["alertmanager webhook from 127.0.0.1 refused (401): the bearer token is wrong"]
    assert metric(svc, "rebalancer_webhook_refused_total", reason="unauthenticated") == 20
    assert metric(svc, "rebalancer_webhook_refused_total", reason="not-json") == 5
    assert metric(svc, "rebalancer_webhook_requests_total", code="401") == 20
