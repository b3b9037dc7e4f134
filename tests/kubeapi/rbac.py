"""Request attributes and an RBAC deny list: what the authorizer would refuse, and how it says so.

The API server derives (verb, API group, resource, subresource, namespace, name) from each request
(k8s.io/apiserver/pkg/endpoints/request/requestinfo.go) and the RBAC authorizer refuses with 403
``<resource> "<name>" is forbidden: User "<user>" cannot <verb> resource "<resource>/<subresource>"
in API group "<group>" in the namespace "<namespace>"``. Everything is allowed here unless a test
denies it with :meth:`TestApiServer.forbid`.
"""

from __future__ import annotations

from dataclasses import dataclass

from tests.kubeapi import status

_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch"}


@dataclass(frozen=True)
class Attributes:
    verb: str
    group: str
    resource: str
    subresource: str
    namespace: str | None
    name: str


@dataclass(frozen=True)
class Deny:
    """Refuse ``verb`` ("*": any) on ``resource`` ("pods" or "pods/eviction") of ``group``, in ``namespace`` (None: any)."""

    verb: str
    resource: str
    group: str = ""
    namespace: str | None = None

    def matches(self, a: Attributes) -> bool:
        full = f"{a.resource}/{a.subresource}" if a.subresource else a.resource
        return (
            self.verb in ("*", a.verb)
            and self.resource == full
            and self.group == a.group
            and (self.namespace is None or self.namespace == a.namespace)
        )


def attributes(method: str, path: str, query: dict[str, str]) -> Attributes | None:
    """The request's attributes, or None for a path outside /api and /apis."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, rest = "", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        return None
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest:
        return None
    resource, name = rest[0], rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    if method == "GET":
        verb = "get" if name else ("watch" if query.get("watch") in ("1", "true") else "list")
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        verb = _VERBS.get(method, method.lower())
    return Attributes(verb, group, resource, subresource, namespace, name)


def check(user: str, rules: list[Deny], method: str, path: str, query: dict[str, str]) -> None:
    """Raise the authorizer's 403 when a rule denies the request."""
    if not rules:
        return
    a = attributes(method, path, query)
    if a is not None and any(rule.matches(a) for rule in rules):
        raise status.forbidden(user, a.verb, a.resource, a.group, a.namespace, a.name, a.subresource)
