"""The HTTP side of `rebalancer serve`, driven over 127.0.0.1 through the real threaded servers: the
webhook's, and the status port's (/metrics, /healthz, /readyz).

Behind the app stands a small triage written for the test (plain code answering with the runner's own
``AlertDecision``), so each answer can be checked against exactly what reached the runner.
"""

from __future__ import annotations

import contextlib
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
    REQUEST_THREAD_NAME,
    WEBHOOK_PATH,
    HttpServer,
    NodeAlert,
    RequestTimeouts,
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


class Triage:
    """Stands in for the runner: a node is queued once, then already-queued; returns at once."""

    def __init__(self) -> None:
        self.received: list[list[NodeAlert]] = []
        self.queued: set[str] = set()
        self.gate: threading.Event | None = None  # set by a test to hold a request in flight
        self.entered = threading.Event()

    def __call__(self, alerts: Sequence[NodeAlert]) -> list[AlertDecision]:
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
def running_service(tmp_path: Path, **server_options: Any) -> Iterator[Service]:
    """The app behind the real threaded server on 127.0.0.1; ``server_options`` go to serve_http."""
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
    )
    status = serve_http(make_status_app(metrics=metrics, ready=lambda: ready[0]), "127.0.0.1", 0)
    server = serve_http(app, "127.0.0.1", 0, on_refused=metrics.http_connection_refused, **server_options)
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


def raw(svc: Service, data: bytes, *, shut_write: bool = False) -> Answer:
    """Send bytes as they are (headers included) and read the answer."""
    with socket.create_connection(("127.0.0.1", svc.server.port), timeout=10) as sock:
        sock.sendall(data)
        if shut_write:
            sock.shutdown(socket.SHUT_WR)
        return read_answer(sock)


def read_answer(sock: socket.socket) -> Answer:
    """Read an answer up to the end of the connection."""
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    assert chunks, "the connection ended without an answer"
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in header_lines)
    return Answer(int(status_line.split()[1]), {k.lower(): v for k, v in headers.items()}, body)


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
                     + b"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{}", shut_write=True)  # fmt: skip
    assert short.status == 400
    assert "ended after 2 of the 100 bytes" in json.loads(short.body)["error"]


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_wrong_content_type_gets_415(svc: Service, content_type: str | None):
    answer = post(svc, content_type=content_type)
    assert answer.status == 415
    assert svc.triage.received == []


def test_content_type_parameters_are_fine(svc: Service):
    assert post(svc, content_type="Application/JSON; charset=utf-8").status == 202


@pytest.mark.parametrize("body", [b"", b"{not json", b'{"version": "4",', b"\xff\xfe\x00", b"[" * 100_000])
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


def start_slow_post(svc: Service, body: bytes = SAMPLE) -> socket.socket:
    """A webhook POST that sends only the first half of its body: the request stays in flight."""
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
    """A GET of the webhook: 405 when it was served, 503 when every slot was busy."""
    return request(svc, "GET", WEBHOOK_PATH, token=None).status


def wait_until_served(svc: Service) -> None:
    """Slots are released just after a finished request's connection is closed: wait for that."""
    deadline = time.monotonic() + 5
    while webhook_get(svc) == 503:
        assert time.monotonic() < deadline, "the request slots were never released"
        time.sleep(0.01)


def test_the_default_cap_is_the_policy_default():
    assert ServiceSettings().max_concurrent_requests == MAX_CONCURRENT_REQUESTS == 64


def test_beyond_the_cap_a_connection_gets_503_at_once_and_the_slots_come_back(tmp_path: Path):
    with running_service(tmp_path, max_concurrent_requests=2, retry_after_seconds=3) as svc:
        for _ in range(2):  # twice: slots are returned, never leaked
            held = [start_slow_post(svc), start_slow_post(svc)]
            started = time.monotonic()
            refused = request(svc, "GET", WEBHOOK_PATH, token=None)
            assert time.monotonic() - started < 1
            assert refused.status == 503
            assert refused.headers["retry-after"] == "3"
            assert refused.json() == {"error": "busy: 2 requests in flight; retry later"}
            assert post(svc).status == 503  # a webhook post too, and nothing of it reaches the runner
            assert svc.triage.received == []
            assert [finish_slow_post(sock).status for sock in held] == [202, 202]  # the held ones finish
            assert len(svc.triage.received) == 2
            svc.triage.received.clear()
            wait_until_served(svc)
            assert [webhook_get(svc) for _ in range(5)] == [405] * 5
        assert metric(svc, "rebalancer_http_connections_refused_total") == 4
        assert metric(svc, "rebalancer_webhook_requests_total", code="503") is None  # never read: not counted


def test_a_refused_client_sending_a_whole_body_still_reads_its_503(tmp_path: Path):
    """The refused socket lingers while its input is drained: closing it unread could reset the
    connection before the client read the answer."""
    with running_service(tmp_path, max_concurrent_requests=1) as svc:
        held = start_slow_post(svc)
        big = SAMPLE + b" " * (512 * 1024)
        answers = [post(svc, big) for _ in range(5)]
        assert [a.status for a in answers] == [503] * 5
        assert answers[0].json()["error"] == "busy: 1 requests in flight; retry later"
        assert finish_slow_post(held).status == 202


def test_a_silent_client_holds_its_slot_only_until_the_read_timeout(tmp_path: Path):
    with running_service(tmp_path, max_concurrent_requests=1, timeouts=RequestTimeouts(idle=1.0)) as svc:
        with socket.create_connection(("127.0.0.1", svc.server.port), timeout=10) as silent:
            started = time.monotonic()
            assert webhook_get(svc) == 503  # the silent client has the only slot
            assert silent.recv(1) == b""  # then the server drops it, without an answer
            waited = time.monotonic() - started
        assert 0.8 < waited < 5
        wait_until_served(svc)


def test_a_trickling_client_is_cut_off_at_the_request_deadline(tmp_path: Path):
    """A byte every 0.2 s is never silent for the 1 s read timeout; the 2 s deadline still ends it."""
    timeouts = RequestTimeouts(idle=1.0, deadline=2.0)
    with running_service(tmp_path, max_concurrent_requests=1, timeouts=timeouts) as svc:
        with socket.create_connection(("127.0.0.1", svc.server.port), timeout=10) as sock:
            sock.sendall(b"GET /webhook/alertmanager?")
            started = time.monotonic()
            cut_off = False
            while not cut_off and time.monotonic() - started < 8:
                try:
                    sock.sendall(b"a")
                    readable, _, _ = select.select([sock], [], [], 0.2)
                    cut_off = bool(readable) and sock.recv(1) == b""
                except OSError:  # reset: the server closed with our last byte unread
                    cut_off = True
            held_for = time.monotonic() - started
        assert cut_off, "the trickling client kept its slot for 8 s"
        assert 1.5 < held_for < 4
        wait_until_served(svc)


def request_threads() -> int:
    return sum(t.name == REQUEST_THREAD_NAME for t in threading.enumerate())


def test_threads_stay_bounded_under_200_concurrent_connections(tmp_path: Path):
    with running_service(tmp_path, max_concurrent_requests=2) as svc:
        peak = [0]
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], request_threads())
                time.sleep(0.001)

        sampler = threading.Thread(target=sample)
        sampler.start()
        socks: list[socket.socket] = []
        try:
            for _ in range(200):  # none sends anything: the first two take the slots and keep them
                socks.append(socket.create_connection(("127.0.0.1", svc.server.port), timeout=10))
            answers = [read_answer(sock) for sock in socks[2:]]
            assert [a.status for a in answers] == [503] * 198
            assert select.select(socks[:2], [], [], 0)[0] == []  # the admitted two are still waiting
            assert request_threads() == 2
        finally:
            for sock in socks:
                sock.close()
            stop.set()
            sampler.join()
        assert peak[0] == 2
        wait_until_served(svc)
        assert metric(svc, "rebalancer_http_connections_refused_total") == 198


def test_200_slow_clients_on_the_webhook_never_fail_a_probe(svc: Service):
    """Slow clients fill every webhook slot (a byte a second each, never silent long enough to be dropped);
    the probes and /metrics, on the status port, still answer 200 within a probe's timeout."""
    svc.ready[0] = True
    slow = [socket.create_connection(("127.0.0.1", svc.server.port), timeout=10) for _ in range(200)]
    try:
        started = time.monotonic()
        sent = 0
        probes: list[tuple[str, int, float]] = []
        while time.monotonic() - started < 4:
            if time.monotonic() - started >= sent:  # one byte a second on every connection
                for sock in slow:
                    with contextlib.suppress(OSError):  # refused with 503 beyond the cap: the connection is over
                        sock.send(b"POST /webhook/alertmanager HTTP/1.1\r\n"[sent : sent + 1])
                sent += 1
            assert webhook_get(svc) == 503  # the webhook is full
            for path in ("/healthz", "/readyz", "/metrics"):
                asked = time.monotonic()
                answer = status(svc, path, timeout=1)
                probes.append((path, answer.status, time.monotonic() - asked))
            time.sleep(0.2)
    finally:
        for sock in slow:
            sock.close()
    assert len(probes) >= 30
    assert {code for _, code, _ in probes} == {200}
    assert max(seconds for _, _, seconds in probes) < 1
    assert (metric(svc, "rebalancer_http_connections_refused_total") or 0) >= 136  # 200 beyond the cap of 64
    wait_until_served(svc)


def test_content_length_headers_that_disagree_are_refused(svc: Service):
    head = b"POST /webhook/alertmanager HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode() + (
        b"\r\nContent-Type: application/json\r\n"
    )  # fmt: skip
    length = str(len(SAMPLE)).encode()
    conflicting = raw(svc, head + b"Content-Length: " + length + b"\r\nContent-Length: 2\r\n\r\n" + SAMPLE)
    assert conflicting.status == 400
    assert json.loads(conflicting.body)["error"] == f"Content-Length headers disagree: {len(SAMPLE)}, 2"
    assert svc.triage.received == []
    repeated = raw(svc, head + b"Content-Length: " + length + b"\r\nContent-Length: " + length + b"\r\n\r\n" + SAMPLE)
    assert repeated.status == 202  # the same length twice says nothing ambiguous
    assert metric(svc, "rebalancer_webhook_refused_total", reason="bad-length") == 1


def test_a_client_refused_in_a_loop_gets_one_log_line_and_every_refusal_is_counted(
    svc: Service, caplog: pytest.LogCaptureFixture
):
    caplog.set_level("WARNING", logger="rebalancer.service.http")
    for _ in range(20):
        assert post(svc, token="wrong").status == 401
    for _ in range(5):
        assert post(svc, b"{").status == 400
    lines = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert lines == ["alertmanager webhook from 127.0.0.1 refused (401): the bearer token is wrong"]
    assert metric(svc, "rebalancer_webhook_refused_total", reason="unauthenticated") == 20
    assert metric(svc, "rebalancer_webhook_refused_total", reason="not-json") == 5
    assert metric(svc, "rebalancer_webhook_requests_total", code="401") == 20
