"""One request through the official client, answered as raw bytes or as an HTTP error to translate.

Writes and single GETs go through :func:`send`. The official client does configuration, auth and
transport; with ``_preload_content=False`` the body comes back raw and is decoded narrowly by the
caller, never into the client's generated models. An HTTP error answer is returned as a :class:`Reply`
(each caller knows what a 404 or a 409 means for it); the client's other failures (connection refused
or reset, timeout, TLS, an auth plugin) raise :class:`KubeUnavailable`. So no library exception leaves
this package.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
from kubernetes.client.exceptions import ApiException

from rebalancer.adapters.kube import wire
from rebalancer.adapters.kube.lister import CLIENT_ERRORS, client_error
from rebalancer.domain.errors import KubeForbidden, KubeUnavailable, PatchError, RebalancerError

MERGE_PATCH = "application/merge-patch+json"


@dataclass(frozen=True, slots=True)
class Reply:
    """An HTTP answer: status code, raw body, headers (names in lower case)."""

    code: int
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return 200 <= self.code < 300

    def status(self) -> wire.Status:
        """The body as a metav1.Status; a body that is not one gives an empty Status with its text as message."""
        try:
            decoded = wire.STATUS.decode(self.body) if self.body else wire.Status()
        except msgspec.DecodeError:
            return wire.Status(message=self.body[:300].decode("utf-8", "replace"))
        return decoded

    def retry_after(self) -> float | None:
        """Seconds to wait: the Retry-After header (delta-seconds), else details.retryAfterSeconds; None: no advice."""
        raw = self.headers.get("retry-after", "").strip()
        if raw.isdigit():
            return float(raw)
        details = self.status().details
        if details is not None and details.retry_after_seconds > 0:
            return float(details.retry_after_seconds)
        return None


def send(action: str, host: str, timeout: float, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Reply:
    """Call the generated API ``method``; HTTP errors come back as the Reply, other failures raise."""
    try:
        response = method(*args, _preload_content=False, _request_timeout=timeout, **kwargs)
        try:
            return Reply(int(response.status), bytes(response.data or b""), _headers(response.headers))
        finally:
            response.release_conn()
    except ApiException as exc:
        if not exc.status:  # the client's own failure, e.g. a TLS handshake error
            reason = str(exc.reason or "request failed").splitlines()[0]
            raise KubeUnavailable(f"{action}: {reason}") from exc
        body = exc.body.encode() if isinstance(exc.body, str) else bytes(exc.body or b"")
        return Reply(int(exc.status), body, _headers(exc.headers))
    except CLIENT_ERRORS as exc:
        raise client_error(action, exc, host, timeout) from exc


def _headers(raw: Any) -> dict[str, str]:
    if not raw:
        return {}
    return {str(k).lower(): str(v) for k, v in raw.items()}


def describe(action: str, reply: Reply) -> str:
    """``<action>: HTTP <code> <reason>: <message>`` from the Status body."""
    st = reply.status()
    text = f"{action}: HTTP {reply.code}" + (f" {st.reason}" if st.reason else "")
    return text + (f": {st.message}" if st.message else "")


def is_rbac_refusal(reply: Reply) -> bool:
    """A 403 from the authorizer (not from an admission webhook or a budget's state)."""
    message = reply.status().message
    return not message or 'is forbidden: User "' in message


def http_error(
    action: str, reply: Reply, *, verb: str, resource: str, namespace: str | None, group: str = ""
) -> KubeUnavailable:
    """The error for an answer the caller has no special meaning for: RBAC names the permission to grant."""
    if reply.code == 403 and is_rbac_refusal(reply):
        return KubeForbidden.rbac(verb, resource, namespace, group, detail=reply.status().message)
    st = reply.status()
    return KubeUnavailable(describe(action, reply), status=reply.code, reason=st.reason or None)


def decode(action: str, decoder: msgspec.json.Decoder[Any], body: bytes) -> Any:
    """A 2xx body decoded narrowly; a body that is not the expected JSON is a malformed answer."""
    try:
        return decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise KubeUnavailable(f"{action}: malformed response: {exc}", reason="Malformed") from exc


def patch_refused(action: str, reply: Reply, resource: str, namespace: str | None) -> RebalancerError:
    """The error of a refused merge patch: RBAC -> KubeForbidden naming ``patch <resource>``; 400, 404, 409,
    415, 422 -> PatchError with the status and the server's causes; anything else -> KubeUnavailable."""
    if reply.code == 403 and is_rbac_refusal(reply):
        return KubeForbidden.rbac("patch", resource, namespace, detail=reply.status().message)
    status = reply.status()
    if reply.code in (400, 404, 409, 415, 422):
        causes = status.details.causes if status.details is not None else []
        text = describe(action, reply) + (f" ({'; '.join(c.message for c in causes if c.message)})" if causes else "")
        return PatchError(text, status=reply.code, reason=status.reason or None)
    return KubeUnavailable(describe(action, reply), status=reply.code, reason=status.reason or None)
