"""A real Kubernetes control plane for the tests (kube-apiserver, controller manager, scheduler, kubemark
hollow nodes, etcd 3.6 or 3.4), found through ``REBALANCER_KUBE_ASSETS``; see :mod:`tests.controlplane.assets`."""

from tests.controlplane.admin import Admin, ApiError
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.pki import USER

__all__ = ["USER", "Admin", "ApiError", "ControlPlane"]
