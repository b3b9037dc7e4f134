"""ConfigMapStateStore with the real ``kubernetes`` client against the Python test API server, only for the
failures a real one cannot be made to give on demand (500, a dropped connection, a proxy's page, a delay);
the rest runs against a real API server in tests/realcluster/test_state_store.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from rebalancer.adapters.kube import ConfigMapStateStore, connect
from rebalancer.domain.errors import KubeUnavailable, RebalancerError
from tests.kubeapi import Fault, TestApiServer

NS, NAME = "rebalancer", "rebalancer-state"
PATH = f"/api/v1/namespaces/{NS}/configmaps/{NAME}"


def store(kubeconfig: Path, key: str = "state.json", timeout: float = 5.0) -> ConfigMapStateStore:
    return ConfigMapStateStore(connect(kubeconfig=str(kubeconfig)), NS, NAME, key, request_timeout=timeout)


@pytest.mark.parametrize(
    "fault", [Fault(code=500), Fault(drop=True), Fault(code=502, body=b"<html>"), Fault(delay=2)],
    ids=["500", "dropped", "proxy page", "timeout"],
)  # fmt: skip
def test_failures_are_the_projects_errors(kube_server: TestApiServer, kubeconfig: Path, fault: Fault) -> None:
    version = store(kubeconfig).save("x", None)  # the normal timeout: only the faulted calls must fail
    s = store(kubeconfig, timeout=0.2)
    kube_server.set_fault(PATH, fault)

    with pytest.raises(KubeUnavailable):
        s.load()
    with pytest.raises(RebalancerError):
        s.save("y", version)
