"""Kubernetes adapters: the only package that imports ``kubernetes`` and ``urllib3``."""

from rebalancer.kube.actions import KubeActions
from rebalancer.kube.client import ApiClient, connect
from rebalancer.kube.lease import LeaseClient
from rebalancer.kube.source import KubeSource, ReadStats
from rebalancer.kube.state_store import ConfigMapStateStore

__all__ = ["ApiClient", "ConfigMapStateStore", "KubeActions", "KubeSource", "LeaseClient", "ReadStats", "connect"]
