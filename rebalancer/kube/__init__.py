"""Kubernetes adapters: the only package that imports ``kubernetes`` and ``urllib3``."""

from rebalancer.kube.client import connect
from rebalancer.kube.source import KubeSource, ReadStats

__all__ = ["KubeSource", "ReadStats", "connect"]
