"""LeaseClient and the leader elector with the real ``kubernetes`` client against a real API server: MicroTime
as the server validates it, 409 conflicts on a stale resourceVersion or an existing Lease, what is not ours
written back, RBAC refusals by the real authorizer, two electors over the wire. Malformed answers and
failures the server cannot be made to give stay in tests/adapters/test_lease.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rebalancer.adapters.kube import LeaseClient, connect
from rebalancer.adapters.kube.lease import parse_time
from rebalancer.domain.errors import KubeForbidden, LeaseConflict, StateConflict
from rebalancer.service.leader import LeaderElector, LeaseRecord
from tests.adapters.test_lease import MICRO_TIME, NAME, NS, T, record
from tests.controlplane import ControlPlane
from tests.realcluster.access import Account, Denied

PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{NAME}"


def client(kubeconfig: Path, timeout: float = 5.0) -> LeaseClient:
    return LeaseClient(connect(kubeconfig=str(kubeconfig)), NS, NAME, request_timeout=timeout)


def stored(plane: ControlPlane) -> dict[str, Any]:
    lease: dict[str, Any] = plane.admin.get(PATH)
    return lease


def micro(value: Any) -> float:
    """A stored MicroTime as epoch seconds, after checking its form (the server writes it back as it was sent)."""
    assert isinstance(value, str) and MICRO_TIME.fullmatch(value), value
    return parse_time(value)


def test_no_lease_reads_as_none(api_cluster: ControlPlane, api_kubeconfig: Path) -> None:
    assert client(api_kubeconfig).get() is None


def test_create_get_update_round_trip(api_cluster: ControlPlane, api_kubeconfig: Path) -> None:
    leases = client(api_kubeconfig)

    created = leases.create(record())

    assert created == LeaseRecord("a", 15, T, T, 0, created.resource_version) and created.resource_version
    lease = stored(api_cluster)
    spec = lease["spec"]
    assert micro(spec.pop("acquireTime")) == micro(spec.pop("renewTime")) == T
    assert spec == {"holderIdentity": "a", "leaseDurationSeconds": 15, "leaseTransitions": 0}
    assert lease["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "rebalancer"}
    assert client(api_kubeconfig).get() == created

    renewed = leases.update(LeaseRecord("a", 15, T, T + 2.000001, 0), created.resource_version)

    assert int(renewed.resource_version) > int(created.resource_version)
    assert renewed.renew_time == pytest.approx(T + 2.000001, abs=1e-6) and renewed.acquire_time == T
    assert micro(stored(api_cluster)["spec"]["renewTime"]) == pytest.approx(T + 2.000001, abs=1e-6)
    assert client(api_kubeconfig).get() == renewed


def test_a_time_on_a_whole_second_is_still_a_micro_time(api_cluster: ControlPlane, api_kubeconfig: Path) -> None:
    """The API server refuses a MicroTime without six fractional digits; the client drops a zero fraction."""
    whole = 1_714_560_000.0
    created = client(api_kubeconfig).create(LeaseRecord("a", 15, whole, whole, 0))

    assert created.renew_time == pytest.approx(whole, abs=2e-6)
    assert micro(stored(api_cluster)["spec"]["renewTime"]) == whole + 1e-6


def test_a_stale_resource_version_is_a_lease_conflict(api_cluster: ControlPlane, api_kubeconfig: Path) -> None:
    first, second = client(api_kubeconfig), client(api_kubeconfig)
    version = first.create(record("a")).resource_version
    seen_by_second = second.get()
    assert seen_by_second is not None
    first.update(record("a", T + 2), version)

    with pytest.raises(LeaseConflict) as caught:
        second.update(record("b", T + 3, 1), seen_by_second.resource_version)

    assert not isinstance(caught.value, StateConflict)
    assert "the object has been modified; please apply your changes to the latest version" in str(caught.value)
    assert stored(api_cluster)["spec"]["holderIdentity"] == "a"
    with pytest.raises(LeaseConflict, match="already exists"):
        second.create(record("b"))


def test_released_lease_reads_with_no_holder(api_cluster: ControlPlane, api_kubeconfig: Path) -> None:
    leases = client(api_kubeconfig)
    version = leases.create(record("a", transitions=4)).resource_version

    released = leases.update(LeaseRecord("", 1, T + 5, T + 5, 4), version)

    assert (released.holder, released.duration, released.transitions) == ("", 1, 4)
    spec = stored(api_cluster)["spec"]
    assert spec["holderIdentity"] == "" and spec["leaseDurationSeconds"] == 1


def test_an_update_writes_back_the_metadata_that_is_not_ours(api_cluster: ControlPlane, api_kubeconfig: Path) -> None:
    api_cluster.admin.create(
        {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
         "metadata": {"name": NAME, "namespace": NS, "labels": {"team": "infra"}, "annotations": {"note": "x"}},
         "spec": {"holderIdentity": "old", "leaseDurationSeconds": 60, "renewTime": "2024-05-01T10:00:00.000000Z"}}
    )  # fmt: skip
    leases = client(api_kubeconfig)
    current = leases.get()
    assert current == LeaseRecord("old", 60, None, 1_714_557_600.0, 0, current.resource_version if current else "")
    assert current is not None

    leases.update(record("a", transitions=1), current.resource_version)

    lease = stored(api_cluster)
    assert lease["metadata"]["labels"] == {"team": "infra"}
    assert lease["metadata"]["annotations"] == {"note": "x"}
    spec = lease["spec"]
    assert micro(spec.pop("acquireTime")) == micro(spec.pop("renewTime")) == T
    assert spec == {"holderIdentity": "a", "leaseDurationSeconds": 15, "leaseTransitions": 1}


@pytest.mark.parametrize("verb", ["get", "create", "update"])
def test_forbidden_names_verb_resource_and_group(api_cluster: ControlPlane, tmp_path: Path, verb: str) -> None:
    account = Account(api_cluster, tmp_path)
    leases = client(account.kubeconfig)
    version = leases.create(record()).resource_version if verb == "update" else ""
    account.deny(Denied(verb, "leases", "coordination.k8s.io", NS))

    calls: dict[str, Callable[[], object]] = {
        "get": leases.get,
        "create": lambda: leases.create(record()),
        "update": lambda: leases.update(record(), version),
    }

    with pytest.raises(KubeForbidden) as caught:
        calls[verb]()

    error = caught.value
    assert (error.verb, error.resource, error.group, error.namespace) == (verb, "leases", "coordination.k8s.io", NS)
    assert f"may not {verb} leases.coordination.k8s.io in namespace {NS} (grant verb {verb} on leases" in str(error)


def test_two_electors_through_the_real_client(api_cluster: ControlPlane, api_kubeconfig: Path) -> None:
    """The elector's whole cycle over the wire: create, observe, renew, release, take over."""
    now = [0.0]
    a = LeaderElector(client(api_kubeconfig), "a", 15, 10, 2, clock=lambda: now[0], wall_clock=lambda: T + now[0])
    b = LeaderElector(client(api_kubeconfig), "b", 15, 10, 2, clock=lambda: now[0], wall_clock=lambda: T + now[0])

    assert a.step(now[0]) is True
    assert b.step(now[0]) is False and b.holder == "a"
    now[0] = 2.0
    assert a.step(now[0]) is True
    assert b.step(now[0]) is False
    assert a.release(now[0]) is True
    assert b.step(now[0]) is True

    spec = stored(api_cluster)["spec"]
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
    assert micro(spec["acquireTime"]) == micro(spec["renewTime"]) == T + 2
    api_cluster.admin.delete(PATH)
    now[0] = 4.0
    assert b.step(now[0]) is True  # deleted under the leader: its renewal (a PUT) creates it again
    assert stored(api_cluster)["spec"]["holderIdentity"] == "b"
