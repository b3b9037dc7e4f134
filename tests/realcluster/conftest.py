"""Fixtures of the tests that make their whole cluster through a real API server alone (api_made.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.controlplane import ControlPlane
from tests.realcluster.api_made import clear


@pytest.fixture
def api_cluster(api_server: ControlPlane) -> Iterator[ControlPlane]:
    """The run's API server alone with the state namespace ``rebalancer``, its audit log read from the test's
    start; after the test, what it made is removed (workloads, pods, Events, rebalancer's ConfigMaps, nodes; the
    namespaces stay)."""
    api_server.namespace("rebalancer")
    api_server.audit_from = api_server.audit_log.stat().st_size
    yield api_server
    clear(api_server.admin)


@pytest.fixture
def api_kubeconfig(api_server: ControlPlane, tmp_path: Path) -> Path:
    """A kubeconfig of rebalancer's own user (its requests are :data:`tests.controlplane.USER`'s in the audit log)."""
    return api_server.user_kubeconfig(tmp_path / "api.kubeconfig")
