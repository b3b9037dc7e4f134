"""SelfSubjectAccessReview and the NamespaceLifecycle admission plugin, as the API server has them.

SelfSubjectAccessReview (authorization.k8s.io/v1, pkg/registry/authorization/selfsubjectaccessreview): a
create that stores nothing. The spec must carry exactly one of ``resourceAttributes`` and
``nonResourceAttributes`` (else 422 ``Invalid`` on ``spec.resourceAttributes``); the authorizer is asked
about the requesting user and those attributes, and the answer is 201 with the review and its ``status``
(``allowed``; ``denied`` only from an authorizer that denies explicitly, which RBAC never does). Here the
authorizer is the test server's deny list (:mod:`tests.kubeapi.rbac`): what it would refuse a request, the
review reports as not allowed. Creating a review is itself a request the deny list can refuse (403), as
removing the system:basic-user binding would.

NamespaceLifecycle (plugin/pkg/admission/namespace/lifecycle): a create of a namespaced object in a
namespace that does not exist answers 404 ``namespaces "<name>" not found``, dry runs included (admission
runs for them). A test server that has not been told to keep namespaces (:meth:`TestApiServer.keep_namespaces`)
behaves as though every namespace existed.
"""

from __future__ import annotations

from typing import Any

from tests.kubeapi import rbac, status

GROUP = "authorization.k8s.io"
IMMORTAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_UNION = "exactly one of nonResourceAttributes or resourceAttributes must be specified"


def namespace(name: str) -> dict[str, Any]:
    """A Namespace object in phase Active."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


def admit_create(namespace_name: str | None, exists: bool) -> None:
    """NamespaceLifecycle for a create: 404 naming the namespace when it does not exist."""
    if namespace_name and not exists:
        raise status.not_found("namespaces", "", namespace_name)


def review(raw: Any, denied: list[rbac.Deny]) -> dict[str, Any]:
    """The answer to a SelfSubjectAccessReview create (201), or the error the registry raises."""
    if not isinstance(raw, dict):
        raise status.bad_request("the body of the request was in an unknown format: expected a SelfSubjectAccessReview")
    api_version, kind = raw.get("apiVersion") or f"{GROUP}/v1", raw.get("kind") or "SelfSubjectAccessReview"
    if api_version != f"{GROUP}/v1" or kind != "SelfSubjectAccessReview":
        raise status.bad_request(f"the kind in the data ({api_version} {kind}) is not a SelfSubjectAccessReview")
    spec = raw.get("spec") or {}
    resource_attributes, non_resource = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if (resource_attributes is None) == (non_resource is None):
        raise status.invalid(
            "SelfSubjectAccessReview", GROUP, "", [("spec.resourceAttributes", "FieldValueInvalid", _UNION)]
        )
    allowed = True
    if resource_attributes is not None:
        allowed = not any(rule.matches(_attributes(resource_attributes)) for rule in denied)
    return {
        "kind": "SelfSubjectAccessReview",
        "apiVersion": f"{GROUP}/v1",
        "metadata": {"creationTimestamp": None},
        "spec": spec,
        "status": {"allowed": allowed},
    }


def _attributes(raw: dict[str, Any]) -> rbac.Attributes:
    return rbac.Attributes(
        verb=str(raw.get("verb") or ""),
        group=str(raw.get("group") or ""),
        resource=str(raw.get("resource") or ""),
        subresource=str(raw.get("subresource") or ""),
        namespace=raw.get("namespace") or None,
        name=str(raw.get("name") or ""),
    )
