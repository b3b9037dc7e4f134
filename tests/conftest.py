"""Fixtures shared by every test directory (keep this small; specific fixtures live beside their tests)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.kubeapi import TestApiServer
from tests.kubeapi.builders import write_kubeconfig

pytest_plugins = ["tests.prometheus_fixtures", "tests.controlplane.fixtures"]

KUBE_TOKEN = "test-token"

# An example's wall time says nothing of its correctness (speed is measured under bench/): with the closed
# loop running beside the rest on two cores, hypothesis' 200 ms deadline and its too-slow health check
# would fail sound examples at random. A test that sets its own settings keeps whatever it names.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")


@pytest.fixture
def kube_server() -> Iterator[TestApiServer]:
    """The test Kubernetes API server on 127.0.0.1, requiring the bearer token ``KUBE_TOKEN``."""
    with TestApiServer(token=KUBE_TOKEN) as server:
        yield server


@pytest.fixture
def kubeconfig(kube_server: TestApiServer, tmp_path: Path) -> Path:
    """A kubeconfig file pointing at ``kube_server``, for the real client's config loader."""
    return write_kubeconfig(tmp_path / "kubeconfig", kube_server.url, token=KUBE_TOKEN)
