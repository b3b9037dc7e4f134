"""LeaseClient with the real ``kubernetes`` client against the Python test API server, only for what a real one
cannot be made to give: a malformed renewTime (a real server refuses to store it), failures and delays on
demand, and a spec field from a newer server (``strategy``: the real server of the tests runs with its feature
gate off and drops it). The rest of the Lease client and the elector run against a real API server in
tests/realcluster/test_lease.py; MicroTime's form is checked here without a server."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from rebalancer.adapters.kube import LeaseClient, connect
from rebalancer.adapters.kube.lease import micro_time, parse_time
from rebalancer.domain.errors import KubeUnavailable, LeaseConflict, RebalancerError
from rebalancer.service.leader import LeaseRecord
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


def test_an_update_writes_back_a_spec_field_it_does_not_know(kube_server: TestApiServer, kubeconfig: Path) -> None:
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


@pytest.mark.parametrize(
    "fault", [Fault(code=500), Fault(drop=True), Fault(code=502, body=b"<html>"), Fault(delay=2), Fault(code=422)],
    ids=["500", "dropped", "proxy page", "timeout", "invalid"],
)  # fmt: skip
def test_failures_are_the_projects_errors(kube_server: TestApiServer, kubeconfig: Path, fault: Fault) -> None:
    version = client(kubeconfig).create(record()).resource_version  # the normal timeout: it must not fail
    leases = client(kubeconfig, timeout=0.3)
    kube_server.set_fault(PATH, fault)

    with pytest.raises(KubeUnavailable) as on_get:
        leases.get()
    with pytest.raises(RebalancerError) as on_update:
        leases.update(record(at=T + 2), version)

    assert not isinstance(on_get.value, LeaseConflict) and not isinstance(on_update.value, LeaseConflict)
