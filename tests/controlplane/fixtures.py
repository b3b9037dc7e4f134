"""pytest fixtures of the real control plane (loaded by tests/conftest.py).

``control_plane``: one per test module, over etcd 3.6, with the controller manager and the scheduler;
``reset`` after each test removes the nodes and namespaces the test made. ``api_server``: an API server alone
over etcd 3.6, one for the whole run, for tests that make every object themselves and need no controller,
scheduler or kubelet (tests/realcluster/conftest.py's ``api_cluster`` empties it after each test).
``control_plane_etcd34``: an API server alone over Debian's etcd 3.4, which refuses the streaming watch-list.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.controlplane.assets import require
from tests.controlplane.cluster import ControlPlane


@pytest.fixture(scope="module")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    require("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubemark")
    with ControlPlane(tmp_path_factory.mktemp("controlplane")) as plane:
        yield plane


@pytest.fixture
def cluster(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    """The module's control plane, emptied of what the test made once it ends."""
    yield control_plane
    control_plane.reset()


@pytest.fixture(scope="session")
def api_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    require("etcd", "kube-apiserver")
    with ControlPlane(tmp_path_factory.mktemp("apiserver"), controllers=False, scheduler=False) as plane:
        yield plane


@pytest.fixture(scope="module")
def control_plane_etcd34(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    require("etcd34", "kube-apiserver")
    with ControlPlane(
        tmp_path_factory.mktemp("controlplane34"), etcd="3.4", controllers=False, scheduler=False
    ) as plane:
        yield plane
