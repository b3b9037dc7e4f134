"""What the chart's RBAC objects allow, the way the RBAC authorizer decides it, and the API calls the
kube adapter can make, read from its source.

A :class:`Grant` is one (API group, resource, verb) a bound rule allows the pod's service account, with
where (a ClusterRole: every namespace; a Role: its own) and on which names (``resourceNames``; a create
or a list carries no name, so a named rule never allows one).
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import kubernetes.client

from tests.kubeapi.rbac import Attributes, attributes
from tests.packaging.chart import ROOT, Doc, Rendered

KUBE_ADAPTER = ROOT / "rebalancer" / "adapters" / "kube"


@dataclass(frozen=True)
class Grant:
    group: str
    resource: str  # "pods/eviction" for a subresource
    verb: str
    namespace: str | None  # None: every namespace (ClusterRole)
    names: frozenset[str]  # empty: any name

    @property
    def permission(self) -> tuple[str, str, str]:
        return self.group, self.resource, self.verb


def full_resource(a: Attributes) -> str:
    return f"{a.resource}/{a.subresource}" if a.subresource else a.resource


def permission(a: Attributes) -> tuple[str, str, str]:
    return a.group, full_resource(a), a.verb


def grants(rendered: Rendered) -> list[Grant]:
    """Every rule bound to the service account the pod runs as."""
    pod = rendered.pod_spec
    account = (pod["serviceAccountName"], rendered.workload["metadata"]["namespace"])
    found: list[Grant] = []
    for binding in rendered.of_kind("ClusterRoleBinding") + rendered.of_kind("RoleBinding"):
        subjects = {(s["name"], s["namespace"]) for s in binding["subjects"] if s["kind"] == "ServiceAccount"}
        if account not in subjects:
            continue
        ref = binding["roleRef"]
        if binding["kind"] == "ClusterRoleBinding":
            assert ref["kind"] == "ClusterRole"
            role, namespace = rendered.named("ClusterRole", ref["name"]), None
        else:
            assert ref["kind"] == "Role", "a RoleBinding to a ClusterRole would need its own handling"
            role = rendered.named("Role", ref["name"])
            namespace = binding["metadata"]["namespace"]
            assert role["metadata"]["namespace"] == namespace
        found.extend(_rule_grants(role["rules"], namespace))
    return found


def _rule_grants(rules: Iterable[Doc], namespace: str | None) -> Iterator[Grant]:
    for rule in rules:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], f"wildcard in {rule}"
        names = frozenset(rule.get("resourceNames", ()))
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    yield Grant(group, resource, verb, namespace, names)


def allows(grant: Grant, a: Attributes) -> bool:
    return (
        grant.permission == permission(a)
        and (grant.namespace is None or grant.namespace == a.namespace)
        and (not grant.names or a.name in grant.names)
    )


# -- the adapter's calls, from its source ----------------------------------------------------------------

_SERIALIZE = re.compile(r"method='(?P<method>[A-Z]+)',\s*resource_path='(?P<path>[^']+)'")
_CALL_API = re.compile(r"call_api\(\s*'(?P<path>[^']+)',\s*'(?P<method>[A-Z]+)'")  # clients before v31


_VERB_PREFIX = re.compile(r"^(list|read|create|replace|patch|delete|connect|watch)_")


def endpoint(api: type, method_name: str) -> tuple[str, str] | None:
    """(HTTP method, path template) of the generated API method ``api.method_name``, or None."""
    if not _VERB_PREFIX.match(method_name):
        return None
    for source_name in (f"_{method_name}_serialize", f"{method_name}_with_http_info"):
        found = getattr(api, source_name, None)
        if found is None:
            continue
        text = inspect.getsource(found)
        match = _SERIALIZE.search(text) or _CALL_API.search(text)
        if match:
            return match["method"], match["path"]
    return None


def as_request(method: str, path: str) -> Attributes:
    """The attributes of a call to ``path`` (``{namespace}`` and ``{name}`` filled in)."""
    filled = path.replace("{namespace}", "some-namespace").replace("{name}", "some-name")
    found = attributes(method, filled, {})
    assert found is not None, path
    return found


@dataclass(frozen=True)
class AdapterCall:
    method_name: str  # e.g. create_namespaced_pod_eviction
    where: str  # file:line of the reference
    request: Attributes


def _api_classes(trees: Iterable[ast.AST]) -> list[type]:
    """The generated API classes the adapter builds (``kubernetes.client.CoreV1Api(api_client)`` ...)."""
    names = {
        node.attr
        for tree in trees
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr.endswith("Api") and node.attr != "ApiClient"
    }
    return [getattr(kubernetes.client, name) for name in sorted(names)]


def adapter_calls(package: Path = KUBE_ADAPTER) -> list[AdapterCall]:
    """Every method of a generated Kubernetes API class that the adapter's source names (called, or handed
    on to be called, as ``ListCall`` and the informers do), with the request it makes."""
    sources = sorted(package.glob("*.py"))
    trees = {source: ast.parse(source.read_text(encoding="utf-8"), str(source)) for source in sources}
    apis = _api_classes(trees.values())
    assert apis, f"no kubernetes.client API class built in {package}"
    calls: list[AdapterCall] = []
    for source, tree in trees.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            for api in apis:
                if (found := endpoint(api, node.attr)) is not None:
                    where = f"{source.relative_to(ROOT)}:{node.lineno}"
                    calls.append(AdapterCall(f"{api.__name__}.{node.attr}", where, as_request(*found)))
    return calls
