"""AccessReview: may the service account do this? Asked of the API server's authorizer, nothing written.

One SelfSubjectAccessReview (authorization.k8s.io/v1) per :class:`Permission`: the authorizer answers for
the caller's own identity, through every authorizer the cluster runs (RBAC, a webhook), as
``kubectl auth can-i`` does. It answers for an update of a ConfigMap not created yet and for a node patch
without naming a node, which a dry-run write could not. Creating a review is granted to every authenticated
user by the default ``system:basic-user`` ClusterRole; a cluster that removed that binding refuses it (403,
:class:`KubeForbidden` naming ``create selfsubjectaccessreviews``). A review says nothing about whether the
namespace exists: :meth:`ConfigMapStateStore.check_create` asks that.

RBAC needed: create on selfsubjectaccessreviews (API group authorization.k8s.io).
"""

from __future__ import annotations

from dataclasses import dataclass

import kubernetes.client

from rebalancer.adapters.kube import wire
from rebalancer.adapters.kube.calls import decode, http_error, send

GROUP = "authorization.k8s.io"


@dataclass(frozen=True, slots=True)
class Permission:
    """A verb on a resource (``pods/eviction`` for a subresource), in a namespace (None: cluster-scoped),
    on one named object ("": any, and a create names none)."""

    verb: str
    resource: str
    namespace: str | None = None
    group: str = ""
    name: str = ""

    def __str__(self) -> str:
        """``update configmaps "rebalancer-state" in namespace rebalancer``, ``patch nodes``."""
        what = f"{self.resource}.{self.group}" if self.group else self.resource
        named = f' "{self.name}"' if self.name else ""
        where = f" in namespace {self.namespace}" if self.namespace else ""
        return f"{self.verb} {what}{named}{where}"


class AccessReview:
    def __init__(self, api_client: kubernetes.client.ApiClient, request_timeout: float = 10.0) -> None:
        self._api = kubernetes.client.AuthorizationV1Api(api_client)
        self._host = str(api_client.configuration.host)
        self._timeout = request_timeout

    def allowed(self, permission: Permission) -> bool:
        """True when the authorizer allows it; raises when the review itself is refused or fails."""
        resource, _, subresource = permission.resource.partition("/")
        body = kubernetes.client.V1SelfSubjectAccessReview(
            api_version=f"{GROUP}/v1",
            kind="SelfSubjectAccessReview",
            spec=kubernetes.client.V1SelfSubjectAccessReviewSpec(
                resource_attributes=kubernetes.client.V1ResourceAttributes(
                    verb=permission.verb,
                    group=permission.group,
                    resource=resource,
                    subresource=subresource or None,
                    namespace=permission.namespace or None,
                    name=permission.name or None,
                )
            ),
        )
        action = f"review whether the service account may {permission}"
        reply = send(action, self._host, self._timeout, self._api.create_self_subject_access_review, body)
        if not reply.ok:
            raise http_error(action, reply, verb="create", resource="selfsubjectaccessreviews", namespace=None,
                             group=GROUP)  # fmt: skip
        answer: wire.AccessReview = decode(action, wire.ACCESS_REVIEW, reply.body)
        return answer.status.allowed
