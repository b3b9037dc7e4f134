"""The test's own hands on a real API server: create, read, patch and delete any object as an admin (a
static token in ``system:masters``), with paths derived from ``apiVersion`` and ``kind``."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import requests

T = TypeVar("T")

# kind -> plural, for the kinds the tests make (the API server's discovery has the rest)
PLURALS = {
    "Pod": "pods",
    "Node": "nodes",
    "Namespace": "namespaces",
    "ConfigMap": "configmaps",
    "Secret": "secrets",
    "Event": "events",
    "ServiceAccount": "serviceaccounts",
    "Deployment": "deployments",
    "ReplicaSet": "replicasets",
    "StatefulSet": "statefulsets",
    "DaemonSet": "daemonsets",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "Lease": "leases",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
    "PriorityClass": "priorityclasses",
}
CLUSTER_SCOPED = {"Node", "Namespace", "ClusterRole", "ClusterRoleBinding", "PriorityClass"}


class ApiError(Exception):
    def __init__(self, status: int, body: str, what: str) -> None:
        super().__init__(f"{what}: HTTP {status}: {body[:500]}")
        self.status = status


def collection_path(api_version: str, kind: str, namespace: str | None = None) -> str:
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    plural = PLURALS[kind]
    if kind in CLUSTER_SCOPED or namespace is None:
        return f"{base}/{plural}"
    return f"{base}/namespaces/{namespace}/{plural}"


def object_path(obj: Mapping[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{collection_path(obj['apiVersion'], obj['kind'], meta.get('namespace'))}/{meta['name']}"


class Admin:
    """An admin session against the API server at ``url`` (TLS verified against ``ca_file``)."""

    def __init__(self, url: str, token: str, ca_file: str) -> None:
        self.url = url
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {token}"
        self.session.verify = ca_file
        self.session.trust_env = False  # else REQUESTS_CA_BUNDLE from the environment overrides ca_file

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.session.request(method, self.url + path, timeout=30, **kwargs)
        if response.status_code >= 400:
            raise ApiError(response.status_code, response.text, f"{method} {path}")
        return response.json() if response.content else None

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params)

    def items(self, api_version: str, kind: str, namespace: str | None = None, **params: Any) -> list[Any]:
        items: list[Any] = self.get(collection_path(api_version, kind, namespace), **params)["items"]
        return items

    def create(self, obj: Mapping[str, Any]) -> Any:
        meta = obj["metadata"]
        path = collection_path(obj["apiVersion"], obj["kind"], meta.get("namespace"))
        return self.request("POST", path, json=obj)

    def apply_all(self, *objs: Mapping[str, Any]) -> list[Any]:
        return [self.create(o) for o in objs]

    def patch(self, path: str, body: Mapping[str, Any], kind: str = "merge") -> Any:
        content_type = {"merge": "application/merge-patch+json", "strategic": "application/strategic-merge-patch+json"}
        return self.request("PATCH", path, json=body, headers={"Content-Type": content_type[kind]})

    def delete(self, path: str, **body: Any) -> Any:
        try:
            return self.request("DELETE", path, json={"kind": "DeleteOptions", "apiVersion": "v1", **body})
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    def exists(self, path: str) -> bool:
        try:
            self.get(path)
        except ApiError as error:
            if error.status == 404:
                return False
            raise
        return True

    def wait_for(self, what: str, probe: Callable[[], T | None], timeout: float = 60.0, every: float = 0.2) -> T:
        """The first truthy answer of ``probe``; an AssertionError naming ``what`` after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            last = probe()
            if last:
                return last
            time.sleep(every)
        raise AssertionError(f"timed out after {timeout:g}s waiting for {what} (last: {last!r})")

    def service_account_token(self, namespace: str, name: str, seconds: int = 3600) -> str:
        """A bound token of a service account (the TokenRequest API), as a pod of that account gets."""
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": seconds},
        }
        answer = self.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", json=body)
        token: str = answer["status"]["token"]
        return token
