"""A service account on the real API server that may do everything but what a test takes away, so that the
real RBAC authorizer (and its answers to SelfSubjectAccessReviews) decides every refusal.

RBAC only grants, so "everything but" is spelled out from the server's own discovery: every resource of a
group that holds a denied permission gets its own rule with the remaining verbs; other groups get ``*``. A
permission denied in one namespace only is granted in every other namespace that exists when it is denied.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.controlplane import ControlPlane
from tests.controlplane.admin import collection_path

VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
RBAC = "rbac.authorization.k8s.io/v1"
NAMESPACE = "default"  # always there, whichever namespace a test leaves out
NAME = "rebalancer"
LABEL = {"test.rebalancer.io/account": NAME}


@dataclass(frozen=True)
class Denied:
    """One permission taken away: ``resource`` with its subresource ("pods/eviction"); ``namespace`` None for
    every namespace."""

    verb: str
    resource: str
    group: str = ""
    namespace: str | None = None


class Account:
    """The service account ``default/rebalancer``, a kubeconfig with its token, and :meth:`deny`."""

    user = f"system:serviceaccount:{NAMESPACE}:{NAME}"

    def __init__(self, plane: ControlPlane, workdir: Path) -> None:
        self.plane = plane
        admin = plane.admin
        if not admin.exists(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{NAME}"):
            admin.create({"apiVersion": "v1", "kind": "ServiceAccount",
                          "metadata": {"name": NAME, "namespace": NAMESPACE}})  # fmt: skip
        token = admin.service_account_token(NAMESPACE, NAME)
        self.kubeconfig = plane.kubeconfig(workdir / "account.kubeconfig", token)
        self.denied: tuple[Denied, ...] = ()
        if not admin.exists(f"{collection_path(RBAC, 'ClusterRoleBinding')}/{NAME}"):  # an API server's first
            admin.create(cluster_role(NAME, [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]))
            admin.create(binding("ClusterRoleBinding", NAME, None))
        self.deny()

    def deny(self, *denied: Denied) -> None:
        """From now on the account may do everything but ``denied`` (what an earlier call denied is granted
        again); returns once the API server's authorizer answers so."""
        before = self.denied
        admin = self.plane.admin
        for kind in ("RoleBinding", "ClusterRole"):
            for obj in admin.items(RBAC, kind, labelSelector="test.rebalancer.io/account"):
                if obj["metadata"]["name"] != NAME:
                    admin.delete(f"{collection_path(RBAC, kind, obj['metadata'].get('namespace'))}/"
                                 f"{obj['metadata']['name']}")  # fmt: skip
        admin.patch(f"{collection_path(RBAC, 'ClusterRole')}/{NAME}", {"rules": self._rules(denied)})
        namespaces = [n["metadata"]["name"] for n in admin.items("v1", "Namespace")]
        for i, one in enumerate(d for d in denied if d.namespace is not None):
            role = f"{NAME}-{i}"
            admin.create(cluster_role(role, [{"apiGroups": [one.group], "resources": [one.resource],
                                              "verbs": [one.verb]}]))  # fmt: skip
            for namespace in namespaces:
                if namespace != one.namespace:
                    admin.create(binding("RoleBinding", role, namespace))
        self.denied = tuple(denied)
        self._settle(before)

    def _rules(self, denied: Sequence[Denied]) -> list[dict[str, Any]]:
        groups = {d.group for d in denied}
        rules: list[dict[str, Any]] = [
            {"apiGroups": [g], "resources": ["*"], "verbs": ["*"]} for g in self._groups() if g not in groups
        ]
        for group in sorted(groups):
            for resource in self._resources(group):
                verbs = [v for v in VERBS if not any((d.group, d.resource, d.verb) == (group, resource, v)
                                                     for d in denied)]  # fmt: skip
                if verbs:
                    rules.append({"apiGroups": [group], "resources": [resource], "verbs": verbs})
        return rules

    def _groups(self) -> list[str]:
        return ["", *(g["name"] for g in self.plane.admin.get("/apis")["groups"])]

    def _resources(self, group: str) -> list[str]:
        if group == "":
            path = "/api/v1"
        else:
            [found] = [g for g in self.plane.admin.get("/apis")["groups"] if g["name"] == group]
            path = f"/apis/{found['preferredVersion']['groupVersion']}"
        return [r["name"] for r in self.plane.admin.get(path)["resources"]]

    def may(self, verb: str, resource: str, group: str = "", namespace: str | None = None) -> bool:
        """The API server's RBAC answer for the account (a SubjectAccessReview the test's admin asks, so that it
        holds even with the account's own reviews taken away)."""
        name, _, sub = resource.partition("/")
        attributes = {"verb": verb, "group": group, "resource": name, "subresource": sub}
        if namespace is not None:
            attributes["namespace"] = namespace
        groups = ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}", "system:authenticated"]
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                  "spec": {"user": self.user, "groups": groups, "resourceAttributes": attributes}}  # fmt: skip
        answer = self.plane.admin.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", json=review)
        return bool(answer["status"].get("allowed"))

    def _settle(self, before: Iterable[Denied]) -> None:
        def decided() -> bool:
            for one in {*before, *self.denied}:
                namespace = one.namespace or "default"
                if self.may(one.verb, one.resource, one.group, namespace) == (one in self.denied):
                    return False
            return self.may("create", "pods/eviction", namespace="default") or any(
                d.resource == "pods/eviction" for d in self.denied
            )

        self.plane.admin.wait_for("the account's permissions in force", decided, timeout=30)


def cluster_role(name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": RBAC, "kind": "ClusterRole", "metadata": {"name": name, "labels": LABEL}, "rules": rules}


def binding(kind: str, role: str, namespace: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": role, "labels": LABEL}
    if namespace is not None:
        meta["namespace"] = namespace
    return {
        "apiVersion": RBAC,
        "kind": kind,
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}],
    }
