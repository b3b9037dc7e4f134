"""LeaseClient with the real ``kubernetes`` client against tests/kubeapi: MicroTime, conflicts, RBAC, failures."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rebalancer.adapters.kube import LeaseClient, connect
from rebalancer.adapters.kube.lease import micro_time, parse_time
from rebalancer.domain.errors import KubeForbidden, KubeUnavailable, LeaseConflict, RebalancerError, StateConflict
from rebalancer.service.leader import LeaderElector, LeaseRecord
from tests.kubeapi import Fault, TestApiServer

NS, NAME = "rebalancer", "rebalancer"
PATH = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{NAME}"
T = 1_714_560_000.25  # 2024-05-01T10:40:00.250000Z
MICRO_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}(Z|\+00:00)")


def client(kubeconfig: Path, timeout: float = 5.0) -> LeaseClient:
    return LeaseClient(connect(kubeconfig=str(kubeconfig)), NS, NAME, request_timeout=timeout)


def stored(server: TestApiServer) -> dict[str, Any]:
    lease = server.store.get("leases", NAME, NS)
    assert lease is not None
    return lease


def micro(value: Any) -> float:
    """A stored MicroTime as epoch seconds, after checking its form (the client may write Z or +00:00)."""
    assert isinstance(value, str) and MICRO_TIME.fullmatch(value), value
    return parse_time(value)


def record(holder: str = "a", at: float = T, transitions: int = 0) -> LeaseRecord:
    return LeaseRecord(holder, 15, at, at, transitions)


def test_micro_time_round_trip() -> None:
    assert micro_time(T) == "2024-05-01T10:40:00.250000Z"
    assert micro_time(1_714_560_000.0) == "2024-05-01T10:40:00.000001Z"  # never a whole second (see micro_time)
    assert parse_time("2024-05-01T10:40:00.250000Z") == T
    assert parse_time("2024-05-01T10:40:00Z") == 1_714_560_000.0  # metav1.Time, no fraction
    assert parse_time("2024-05-01T12:40:00.25+02:00") == T
    with pytest.raises(ValueError, match="no time zone"):
        parse_time("2024-05-01T10:40:00")


def test_no_lease_reads_as_none(kube_server: TestApiServer, kubeconfig: Path) -> None:
    assert client(kubeconfig).get() is None


def test_create_get_update_round_trip(kube_server: TestApiServer, kubeconfig: Path) -> None:
    leases = client(kubeconfig)

    created = leases.create(record())

    assert created == LeaseRecord("a", 15, T, T, 0, created.resource_version) and created.resource_version
    lease = stored(kube_server)
    spec = lease["spec"]
    assert micro(spec.pop("acquireTime")) == micro(spec.pop("renewTime")) == T
    assert spec == {"holderIdentity": "a", "leaseDurationSeconds": 15, "leaseTransitions": 0}
    assert lease["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "rebalancer"}
    assert client(kubeconfig).get() == created

    renewed = leases.update(LeaseRecord("a", 15, T, T + 2.000001, 0), created.resource_version)

    assert int(renewed.resource_version) > int(created.resource_version)
    assert renewed.renew_time == pytest.approx(T + 2.000001, abs=1e-6) and renewed.acquire_time == T
    assert micro(stored(kube_server)["spec"]["renewTime"]) == pytest.approx(T + 2.000001, abs=1e-6)
    assert client(kubeconfig).get() == renewed


def test_a_time_on_a_whole_second_is_still_a_micro_time(kube_server: TestApiServer, kubeconfig: Path) -> None:
    """The API server refuses a MicroTime without six fractional digits; the client drops a zero fraction."""
    whole = 1_714_560_000.0
    created = client(kubeconfig).create(LeaseRecord("a", 15, whole, whole, 0))

    assert created.renew_time == pytest.approx(whole, abs=2e-6)
    assert micro(stored(kube_server)["spec"]["renewTime"]) == whole + 1e-6


def test_a_stale_resource_version_is_a_lease_conflict(kube_server: TestApiServer, kubeconfig: Path) -> None:
    first, second = client(kubeconfig), client(kubeconfig)
    version = first.create(record("a")).resource_version
    seen_by_second = second.get()
    assert seen_by_second is not None
    first.update(record("a", T + 2), version)

    with pytest.raises(LeaseConflict) as caught:
        second.update(record("b", T + 3, 1), seen_by_second.resource_version)

    assert not isinstance(caught.value, StateConflict)
    assert "the object has been modified; please apply your changes to the latest version" in str(caught.value)
    assert stored(kube_server)["spec"]["holderIdentity"] == "a"
    with pytest.raises(LeaseConflict, match="already exists"):
        second.create(record("b"))


def test_released_lease_reads_with_no_holder(kube_server: TestApiServer, kubeconfig: Path) -> None:
    leases = client(kubeconfig)
    version = leases.create(record("a", transitions=4)).resource_version

    released = leases.update(LeaseRecord("", 1, T + 5, T + 5, 4), version)

    assert (released.holder, released.duration, released.transitions) == ("", 1, 4)
    spec = stored(kube_server)["spec"]
    assert spec["holderIdentity"] == "" and spec["leaseDurationSeconds"] == 1


def test_an_update_writes_back_what_is_not_ours(kube_server: TestApiServer, kubeconfig: Path) -> None:
    kube_server.add(
        {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
         "metadata": {"name": NAME, "namespace": NS, "labels": {"team": "infra"}, "annotations": {"note": "x"}},
         "spec": {"holderIdentity": "old", "leaseDurationSeconds": 60, "renewTime": "2024-05-01T10:00:00Z",
                  "strategy": "OldestEmulationVersion"}}
    )  # fmt: skip
    leases = client(kubeconfig)
    current = leases.get()
    assert current == LeaseRecord("old", 60, None, 1_714_557_600.0, 0, current.resource_version if current else "")
    assert current is not None

    leases.update(record("a", transitions=1), current.resource_version)

    lease = stored(kube_server)
    assert lease["metadata"]["labels"] == {"team": "infra"}
    assert lease["metadata"]["annotations"] == {"note": "x"}
    spec = lease["spec"]
    assert micro(spec.pop("acquireTime")) == micro(spec.pop("renewTime")) == T
    assert spec == {
        "holderIdentity": "a", "leaseDurationSeconds": 15, "leaseTransitions": 1, "strategy": "OldestEmulationVersion"
    }  # fmt: skip


def test_a_malformed_time_is_a_source_error(kube_server: TestApiServer, kubeconfig: Path) -> None:
    kube_server.add(
        {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": NAME, "namespace": NS},
         "spec": {"holderIdentity": "x", "renewTime": "yesterday"}}
    )  # fmt: skip
    with pytest.raises(KubeUnavailable, match=r"spec\.renewTime: not a time: 'yesterday'") as caught:
        client(kubeconfig).get()
    assert caught.value.reason == "Malformed"


@pytest.mark.parametrize("verb", ["get", "create", "update"])
def test_forbidden_names_verb_resource_and_group(kube_server: TestApiServer, kubeconfig: Path, verb: str) -> None:
    leases = client(kubeconfig)
    version = leases.create(record()).resource_version if verb == "update" else ""
    kube_server.forbid(verb, "leases", group="coordination.k8s.io", namespace=NS)

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


@pytest.mark.parametrize(
    "fault", [Fault(code=500), Fault(drop=True), Fault(code=502, body=b"<html>"), Fault(delay=2), Fault(code=422)],
    ids=["500", "dropped", "proxy page", "timeout", "invalid"],
)  # fmt: skip
def test_failures_are_the_projects_errors(kube_server: TestApiServer, kubeconfig: Path, fault: Fault) -> None:
    leases = client(kubeconfig, timeout=0.3)
    version = leases.create(record()).resource_version
    kube_server.set_fault(PATH, fault)

    with pytest.raises(KubeUnavailable) as on_get:
        leases.get()
    with pytest.raises(RebalancerError) as on_update:
        leases.update(record(at=T + 2), version)

    assert not isinstance(on_get.value, LeaseConflict) and not isinstance(on_update.value, LeaseConflict)


def test_two_electors_through_the_real_client(kube_server: TestApiServer, kubeconfig: Path) -> None:
    """The elector's whole cycle over the wire: create, observe, renew, release, take over."""
    now = [0.0]
    a = LeaderElector(client(kubeconfig), "a", 15, 10, 2, clock=lambda: now[0], wall_clock=lambda: T + now[0])
    b = LeaderElector(client(kubeconfig), "b", 15, 10, 2, clock=lambda: now[0], wall_clock=lambda: T + now[0])

    assert a.step(now[0]) is True
    assert b.step(now[0]) is False and b.holder == "a"
    now[0] = 2.0
    assert a.step(now[0]) is True
    assert b.step(now[0]) is False
    assert a.release(now[0]) is True
    assert b.step(now[0]) is True

    spec = stored(kube_server)["spec"]
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
    assert micro(spec["acquireTime"]) == micro(spec["renewTime"]) == T + 2
    kube_server.store.delete("leases", NAME, NS)
    now[0] = 4.0
    assert b.step(now[0]) is True  # deleted under the leader: its renewal (a PUT) creates it again
    assert stored(kube_server)["spec"]["holderIdentity"] == "b"
