"""The webhook's app: ``POST /webhook/alertmanager`` only. Every collaborator is injected (no globals): the
metrics, the runner's :class:`~rebalancer.service.webhook.AlertSink`, leadership, the known nodes.

It answers, in this order: 401 (bearer token configured and missing or wrong; 500 while the token file is
unreadable or empty: never open), 415 (no Content-Type, or not ``application/json`` in UTF-8), 411 (no
Content-Length, or a transfer encoding), 413 (over the body limit; nothing of it is read), 408/400 (a body
that stalls past the body timeout, or ends or loses its connection before the announced length), 503 with
Retry-After (every worker busy), 400 (not UTF-8, not JSON), 422 (not a version-4 payload; field paths
listed), 503 with Retry-After (this instance is not the leader), 202 (handed to the runner; the summary
says per alert what it did).
Input is checked before leadership, so a sender learns about a bad body whichever replica it reaches. Each
refusal is counted by reason; the log has at most one line a minute per client address
(:mod:`rebalancer.service.refusal_log`).

The checks up to the body run on the listener's event loop; a body that has arrived is handled on one of
``max_concurrent_requests`` worker threads (parsing, the node lookup, the runner's queue), so neither a
slow client nor a slow Kubernetes listing holds the loop. Requests arriving while every worker is busy get
503 with Retry-After at once.
"""

from __future__ import annotations

import asyncio
import codecs
import hmac
import json
import logging
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from rebalancer.policy import validation_problems
from rebalancer.service.http import JSON, Answer, Routes, TokenFile, TokenUnavailable, error, json_answer
from rebalancer.service.metrics import Metrics
from rebalancer.service.refusal_log import RefusalLog
from rebalancer.service.server import read_body
from rebalancer.service.webhook import (
    DEFAULT_NODE_LABELS,
    QUEUED,
    Ack,
    AlertSink,
    NodeAlert,
    WebhookPayload,
    node_alerts,
)

log = logging.getLogger(__name__)

WEBHOOK_PATH = "/webhook/alertmanager"
MAX_BODY_BYTES = 1 << 20
MAX_CONCURRENT_REQUESTS = 64  # webhook requests processed at once (a worker thread each); the policy's default
BUSY_RETRY_AFTER_SECONDS = 5  # Retry-After of the 503 a request gets when every worker is busy
WORKER_THREAD_NAME = "rebalancer-webhook"
_CHARSETS = ("utf-8", "utf8")


class _Addresses(Mapping[str, str]):
    """The configured instance map over the nodes' own addresses, built only if an alert needs it
    (an alert that names its node by name never does)."""

    def __init__(self, configured: Mapping[str, str], node_addresses: Callable[[], Mapping[str, str]]) -> None:
        self._configured, self._node_addresses = configured, node_addresses
        self._merged: Mapping[str, str] | None = None

    def _all(self) -> Mapping[str, str]:
        if self._merged is None:
            self._merged = {**self._node_addresses(), **self._configured}
        return self._merged

    def __getitem__(self, key: str) -> str:
        return self._all()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


class RebalancerApp(Routes):
    """The webhook's app; build it with :func:`make_app`."""

    def __init__(
        self,
        *,
        metrics: Metrics,
        submit: AlertSink,
        is_leader: Callable[[], bool],
        known_nodes: Callable[[], Collection[str]],
        node_labels: tuple[str, ...],
        instance_map: Mapping[str, str],
        node_addresses: Callable[[], Mapping[str, str]],
        token: TokenFile | None,
        max_body_bytes: int,
        retry_after_seconds: int,
        max_concurrent_requests: int,
        refusal_log: RefusalLog,
    ) -> None:
        super().__init__(max_concurrent_requests, WORKER_THREAD_NAME)
        self._metrics = metrics
        self._submit = submit
        self._is_leader = is_leader
        self._known_nodes = known_nodes
        self._node_labels = node_labels
        self._instance_map = instance_map
        self._node_addresses = node_addresses
        self._token = token
        self._max_body = max_body_bytes
        self._retry_after = str(retry_after_seconds)
        self._max_in_flight = max_concurrent_requests
        self._in_flight = 0  # touched on the event loop only
        self._refusal_log = refusal_log
        self._routes = {WEBHOOK_PATH: ("POST", self._webhook)}

    def _answered(self, request: web.BaseRequest, answer: Answer) -> None:
        self._metrics.webhook_answered(answer.status)
        if answer.reason:
            self._metrics.webhook_refused_for(answer.reason)
        if answer.problem:
            self._refusal_log.refused(request.remote or "?", answer.status, answer.problem)

    async def _webhook(self, request: web.BaseRequest) -> Answer:
        refused = self._authenticate(request) or self._check_content_type(request)
        length_or_refusal = refused or self._declared_length(request)
        if isinstance(length_or_refusal, Answer):
            return length_or_refusal
        length = length_or_refusal
        try:
            body = await read_body(request, length)
        except TimeoutError:
            return error(408, "the body did not arrive in time", "timeout")
        except asyncio.IncompleteReadError as exc:
            got = len(exc.partial)
            return error(400, f"the body ended after {got} of the {length} bytes announced", "truncated")
        except ConnectionError:  # reset by the client, or closed to make room: nobody reads the answer
            return error(400, "the connection was lost before the body arrived", "truncated")
        if self._in_flight >= self._max_in_flight:
            message = f"busy: {self._max_in_flight} webhook requests in flight; retry later"
            return error(503, message, "busy", (("Retry-After", str(BUSY_RETRY_AFTER_SECONDS)),))
        self._in_flight += 1
        try:
            return await self.in_worker(lambda: self._take(body))
        finally:
            self._in_flight -= 1

    def _authenticate(self, request: web.BaseRequest) -> Answer | None:
        if self._token is None:
            return None
        try:
            expected = self._token.current()
        except TokenUnavailable as exc:
            log.error("%s; refusing webhook requests", exc)
            return error(500, "the webhook token is not available", "token-unavailable")
        scheme, _, offered = request.headers.get("Authorization", "").strip().partition(" ")
        if scheme.lower() != "bearer" or not offered.strip():
            return error(
                401,
                "a bearer token is required",
                "unauthenticated",
                (("WWW-Authenticate", 'Bearer realm="rebalancer"'),),
            )
        # the parser decodes headers as UTF-8, keeping any other byte as a surrogate: this gives back what was sent
        if not hmac.compare_digest(offered.strip().encode("utf-8", "surrogateescape"), expected):
            challenge = 'Bearer realm="rebalancer", error="invalid_token"'
            return error(401, "the bearer token is wrong", "unauthenticated", (("WWW-Authenticate", challenge),))
        return None

    @staticmethod
    def _check_content_type(request: web.BaseRequest) -> Answer | None:
        written = request.headers.get("Content-Type")
        if written is None or not written.strip():
            return error(415, f"missing Content-Type: send {JSON}", "content-type")
        media_type, _, parameters = written.partition(";")
        media_type = media_type.strip().lower()
        if media_type != JSON:
            return error(415, f"Content-Type must be {JSON}, got {media_type}", "content-type")
        for parameter in parameters.split(";"):
            name, _, value = parameter.partition("=")
            charset = value.strip().strip('"').lower()
            if name.strip().lower() == "charset" and charset not in _CHARSETS:
                return error(415, f"the body must be UTF-8 (RFC 8259), not charset={charset}", "content-type")
        return None

    def _declared_length(self, request: web.BaseRequest) -> int | Answer:
        if "Transfer-Encoding" in request.headers:
            return error(411, "send the body with a Content-Length, not a transfer encoding", "length-required")
        length = request.content_length  # the parser refuses a malformed or repeated Content-Length with 400
        if length is None:
            return error(411, "Content-Length is required", "length-required")
        if length > self._max_body:
            return error(413, f"the body is {length} bytes; at most {self._max_body} are accepted", "too-large")
        return length

    # -- on a worker thread -------------------------------------------------------------------------

    def _take(self, body: bytes) -> Answer:
        """Parse and check the body, then hand its alerts to the runner (which returns at once)."""
        foreign = _not_utf8(body)
        if foreign:
            return error(400, f"the body is not UTF-8: {foreign}", "not-utf8")
        text = body.decode("utf-8")
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            return error(400, f"the body is not JSON: {exc}", "not-json")
        try:
            payload = WebhookPayload.model_validate(data)
        except ValidationError as exc:
            found = validation_problems(exc)
            problems = [{"field": path, "message": message} for path, message in found]
            short = "; ".join(f"{path or '(body)'}: {message}" for path, message in found[:5])
            document = {"error": "not an Alertmanager webhook payload (version 4)", "problems": problems}
            return json_answer(422, document, problem=short, reason="invalid-payload")
        if not self._is_leader():
            return error(503, "not the leader; retry later", "not-leader", (("Retry-After", self._retry_after),))
        alerts = node_alerts(
            payload,
            known_nodes=self._known_nodes(),
            node_labels=self._node_labels,
            instance_map=_Addresses(self._instance_map, self._node_addresses),
        )
        summary = self._summarize(payload, alerts, self._submit(alerts))
        log.info(
            "alertmanager webhook (group %s): %d alert(s), queued %s",
            payload.group_key,
            len(alerts),
            ", ".join(summary["accepted"]) or "nothing",
        )
        return json_answer(202, summary)

    def _summarize(self, payload: WebhookPayload, alerts: list[NodeAlert], acks: Sequence[Ack]) -> dict[str, Any]:
        """The 202 body: per alert what happened, plus the nodes queued, alerts ignored, alerts resolved."""
        per_alert: list[dict[str, str | None]] = []
        accepted: list[str] = []
        for alert, ack in zip(alerts, acks, strict=True):
            self._metrics.alert_handled(alert.status, ack.action)
            detail = ack.detail or alert.reason_if_unusable or ""
            per_alert.append(
                {
                    "fingerprint": alert.fingerprint,
                    "alertname": alert.alertname,
                    "status": alert.status,
                    "node": alert.node,
                    "action": ack.action,
                    "detail": detail,
                }
            )
            if ack.action == QUEUED and ack.node is not None and ack.node not in accepted:
                accepted.append(ack.node)
        return {
            "accepted": accepted,
            "ignored": [
                {"fingerprint": a.fingerprint, "alertname": a.alertname, "reason": a.reason_if_unusable}
                for a in alerts
                if a.node is None
            ],
            "resolved": [
                {"fingerprint": a.fingerprint, "alertname": a.alertname, "node": a.node}
                for a in alerts
                if a.status == "resolved"
            ],
            "alerts": per_alert,
            "notes": list(payload.notes()),
        }


_BYTE_ORDER_MARKS = (
    (codecs.BOM_UTF32_LE, "UTF-32"),
    (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"),
    (codecs.BOM_UTF16_BE, "UTF-16"),
)


def _not_utf8(body: bytes) -> str:
    """Why ``body`` is not UTF-8 JSON text (RFC 8259 allows no other encoding), or "" when it is."""
    for mark, encoding in _BYTE_ORDER_MARKS:
        if body.startswith(mark):
            return f"it starts with a {encoding} byte order mark"
    if b"\x00" in body:  # no JSON text in UTF-8 has a NUL byte; UTF-16 and UTF-32 text always has
        return "it has NUL bytes (UTF-16 or UTF-32?)"
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return str(exc)
    return ""


def make_app(
    *,
    metrics: Metrics,
    submit: AlertSink,
    is_leader: Callable[[], bool],
    known_nodes: Callable[[], Collection[str]],
    node_labels: tuple[str, ...] = DEFAULT_NODE_LABELS,
    instance_map: Mapping[str, str] | None = None,
    node_addresses: Callable[[], Mapping[str, str]] = dict,
    token: TokenFile | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
    retry_after_seconds: int = 10,
    max_concurrent_requests: int = MAX_CONCURRENT_REQUESTS,
    refusal_log: RefusalLog | None = None,
) -> RebalancerApp:
    """The webhook's app. ``token`` None: the webhook is open (serve allows that only when told to);
    otherwise every webhook request must carry it as a bearer token. ``node_addresses``: address -> node
    name from the nodes' ``status.addresses``, asked per request; ``instance_map`` entries take precedence.
    ``max_concurrent_requests``: requests processed at once (a worker thread each), beyond which 503.
    ``refusal_log``: where refusals are logged (default: this module's logger, a line a minute per client)."""
    if not node_labels:
        raise ValueError("node_labels must name at least one label")
    if max_concurrent_requests < 1:
        raise ValueError("max_concurrent_requests must be at least 1")
    return RebalancerApp(
        metrics=metrics,
        submit=submit,
        is_leader=is_leader,
        known_nodes=known_nodes,
        node_labels=node_labels,
        instance_map=dict(instance_map or {}),
        node_addresses=node_addresses,
        token=token,
        max_body_bytes=max_body_bytes,
        retry_after_seconds=retry_after_seconds,
        max_concurrent_requests=max_concurrent_requests,
        refusal_log=refusal_log or RefusalLog(log),
    )
