"""AccessReview (SelfSubjectAccessReview) with the real ``kubernetes`` client against a real API server: the real
RBAC authorizer answers for a service account with every permission but those a test takes away, and the audit
log shows the attributes each review sent."""

from __future__ import annotations

from pathlib import Path

import pytest

from rebalancer.adapters.kube import connect
from rebalancer.adapters.kube.access import AccessReview, Permission
from rebalancer.domain.errors import KubeForbidden
from tests.controlplane import ControlPlane
from tests.controlplane.admin import collection_path
from tests.realcluster.access import RBAC, Account, Denied


def test_allowed_asks_the_authorizer_with_the_permissions_attributes(api_cluster: ControlPlane, tmp_path: Path) -> None:
    account = Account(api_cluster, tmp_path)
    account.deny(Denied("update", "leases", "coordination.k8s.io", "rebalancer"), Denied("create", "pods/eviction"))
    api_cluster.audit_from = api_cluster.audit_log.stat().st_size
    review = AccessReview(connect(str(account.kubeconfig)))

    assert not review.allowed(Permission("update", "leases", "rebalancer", "coordination.k8s.io", "rebalancer"))
    assert review.allowed(Permission("get", "leases", "rebalancer", "coordination.k8s.io", "rebalancer"))
    assert not review.allowed(Permission("create", "pods/eviction", "shop"))
    assert review.allowed(Permission("patch", "nodes"))

    sent = [
        (e.body or {})["spec"]["resourceAttributes"]
        for e in api_cluster.audit(account.user)
        if e.resource == "selfsubjectaccessreviews"
    ]
    assert len(sent) == 4
    assert sent[0] == {
        "verb": "update", "group": "coordination.k8s.io", "resource": "leases", "namespace": "rebalancer",
        "name": "rebalancer",
    }  # fmt: skip
    # as the server decoded them: the core group is the empty string, left out
    assert sent[2] == {"verb": "create", "resource": "pods", "subresource": "eviction", "namespace": "shop"}
    assert sent[3] == {"verb": "patch", "resource": "nodes"}


def test_a_refused_review_names_the_permission_it_needs(api_cluster: ControlPlane, tmp_path: Path) -> None:
    """Every authenticated user may review its own access through the bootstrap binding system:basic-user; with
    that binding gone and the account's own grant taken away, the review is refused and the error names what to
    grant. The binding is put back after."""
    account = Account(api_cluster, tmp_path)
    basic = f"{collection_path(RBAC, 'ClusterRoleBinding')}/system:basic-user"
    kept = api_cluster.admin.get(basic)
    api_cluster.admin.delete(basic)
    try:
        account.deny(Denied("create", "selfsubjectaccessreviews", "authorization.k8s.io"))
        with pytest.raises(
            KubeForbidden, match='grant verb create on selfsubjectaccessreviews in API group "authorization'
        ):
            AccessReview(connect(str(account.kubeconfig))).allowed(Permission("get", "configmaps", "rebalancer"))
    finally:
        for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
            kept["metadata"].pop(key, None)
        api_cluster.admin.create(kept)


def test_a_permission_reads_as_a_sentence() -> None:
    assert str(Permission("update", "configmaps", "ns", name="state")) == 'update configmaps "state" in namespace ns'
    assert str(Permission("create", "leases", "ns", "coordination.k8s.io")) == (
        "create leases.coordination.k8s.io in namespace ns"
    )
    assert str(Permission("patch", "nodes")) == "patch nodes"
