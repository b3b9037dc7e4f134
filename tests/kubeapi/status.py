"""metav1.Status error bodies, as the API server writes them (k8s.io/apimachinery/pkg/api/errors).

Every failure the test server answers is an :class:`ApiError` carrying one of these bodies:
``{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":...,
"reason":...,"details":{...},"code":N}``.
"""

from __future__ import annotations

from typing import Any

# HTTP status -> the StatusReason the API server uses for it.
REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}

HTTP_PHRASES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    410: "Gone",
    422: "Unprocessable Entity",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}

EXPIRED_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new "
    "list without the continue parameter, or use the continue token in this response to retrieve the "
    "remainder of the results. Continuing with the provided token results in an inconsistent list - objects "
    "that were created, modified, or deleted between the time the first chunk was returned and now may show "
    "up in the list."
)


class ApiError(Exception):
    """An error answer: HTTP ``code`` with a Status body (and optional extra headers)."""

    def __init__(self, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        super().__init__(body.get("message", ""))
        self.body = body
        self.code = int(body["code"])
        self.headers = headers or {}


def status(
    code: int,
    message: str,
    reason: str | None = None,
    details: dict[str, Any] | None = None,
    continue_token: str | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {"continue": continue_token} if continue_token else {},
        "status": "Failure",
        "message": message,
        "reason": reason if reason is not None else REASONS.get(code, ""),
    }
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


def _details(resource: str, group: str, name: str = "") -> dict[str, Any]:
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    details["kind"] = resource
    return details


def _qualified(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


def bad_request(message: str) -> ApiError:
    return ApiError(status(400, message))


def not_found(resource: str, group: str, name: str) -> ApiError:
    return ApiError(
        status(404, f'{_qualified(resource, group)} "{name}" not found', details=_details(resource, group, name))
    )


def no_route() -> ApiError:
    return ApiError(status(404, "the server could not find the requested resource", details={}))


def method_not_allowed(method: str) -> ApiError:
    return ApiError(
        status(405, f"the server does not allow this method on the requested resource ({method})", details={})
    )


def unauthorized() -> ApiError:
    return ApiError(status(401, "Unauthorized"))


def forbidden(
    user: str,
    verb: str,
    resource: str,
    group: str,
    namespace: str | None = None,
    name: str = "",
    subresource: str = "",
) -> ApiError:
    """The RBAC authorizer's refusal (the subject names the resource, the message resource/subresource)."""
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    subject = f'{_qualified(resource, group)} "{name}"' if name else _qualified(resource, group)
    full = f"{resource}/{subresource}" if subresource else resource
    message = f'{subject} is forbidden: User "{user}" cannot {verb} resource "{full}" in API group "{group}" {scope}'
    return ApiError(status(403, message, details=_details(resource, group, name)))


def already_exists(resource: str, group: str, name: str) -> ApiError:
    return ApiError(
        status(
            409,
            f'{_qualified(resource, group)} "{name}" already exists',
            "AlreadyExists",
            _details(resource, group, name),
        )
    )


def conflict(resource: str, group: str, name: str, why: str) -> ApiError:
    message = f'Operation cannot be fulfilled on {_qualified(resource, group)} "{name}": {why}'
    return ApiError(status(409, message, "Conflict", _details(resource, group, name)))


def expired_continue(inconsistent_token: str | None) -> ApiError:
    return ApiError(status(410, EXPIRED_CONTINUE, "Expired", continue_token=inconsistent_token))


def expired_resource_version(requested: int, compacted: int) -> ApiError:
    return ApiError(status(410, f"too old resource version: {requested} ({compacted})", "Expired"))


def too_large_resource_version(requested: int, current: int) -> ApiError:
    message = f"Too large resource version: {requested}, current: {current}"
    return ApiError(
        status(
            504,
            message,
            "Timeout",
            {"causes": [{"reason": "ResourceVersionTooLarge", "message": message}], "retryAfterSeconds": 1},
        ),
        {"Retry-After": "1"},
    )


def generic(code: int, message: str = "", reason: str | None = None, retry_after: int | None = None) -> ApiError:
    """Any other failure (500, 503, 429, ...), e.g. from fault injection."""
    default = {
        500: "Internal error occurred: etcdserver: request timed out",
        503: "the server is currently unable to handle the request",
        429: "Too many requests, please try again later.",
        504: "the server was unable to return a response in the time allotted, but may still be processing the request",
    }.get(code, HTTP_PHRASES.get(code, "error"))
    details: dict[str, Any] | None = None
    headers: dict[str, str] = {}
    if retry_after is not None:
        details = {"retryAfterSeconds": retry_after}
        headers["Retry-After"] = str(retry_after)
    return ApiError(status(code, message or default, reason, details), headers)


def success(code: int) -> dict[str, Any]:
    """The Status a create answers when the REST storage returns a bare success (eviction: 201)."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}


def failure_without_reason(code: int, message: str) -> ApiError:
    """A Status the storage returned itself with only a code and message (no reason, no details)."""
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "code": code}
    return ApiError(body)


def too_many_requests(message: str, retry_after: int, causes: list[dict[str, str]]) -> ApiError:
    """errors.NewTooManyRequests: Retry-After (header and retryAfterSeconds) only when positive."""
    details: dict[str, Any] = {"causes": causes}
    headers: dict[str, str] = {}
    if retry_after > 0:
        details["retryAfterSeconds"] = retry_after
        headers["Retry-After"] = str(retry_after)
    return ApiError(status(429, message, details=details), headers)


def forbidden_reason(resource: str, group: str, name: str, why: str) -> ApiError:
    """errors.NewForbidden for a reason other than RBAC (e.g. a PodDisruptionBudget's state)."""
    message = f'{_qualified(resource, group)} "{name}" is forbidden: {why}'
    return ApiError(status(403, message, details=_details(resource, group, name)))


def invalid(kind: str, group: str, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """errors.NewInvalid: ``causes`` are (field, cause reason, message) as field.Error renders them."""
    rendered = [f"{path}: {text}" for path, _, text in causes]
    joined = rendered[0] if len(rendered) == 1 else "[" + ", ".join(rendered) + "]"
    message = f'{_qualified(kind, group)} "{name}" is invalid: {joined}'
    details = _details(kind, group, name)
    details["causes"] = [{"reason": reason, "message": text, "field": path} for path, reason, text in causes]
    return ApiError(status(422, message, "Invalid", details))
