"""Kubernetes adapters: the only package that imports ``kubernetes`` and ``urllib3``.

The names below are imported on first use (PEP 562): the decoders (``decode``, ``wire``, ``bodies``)
do not need the ``kubernetes`` client, and code that imports only them starts without it (half a
second less).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rebalancer.adapters.kube.actions import KubeActions
    from rebalancer.adapters.kube.annotate import PodAnnotator
    from rebalancer.adapters.kube.client import ApiClient, connect
    from rebalancer.adapters.kube.lease import LeaseClient
    from rebalancer.adapters.kube.source import KubeSource, ReadStats
    from rebalancer.adapters.kube.state_store import ConfigMapStateStore

_HOMES = {
    "KubeActions": "rebalancer.adapters.kube.actions",
    "PodAnnotator": "rebalancer.adapters.kube.annotate",
    "ApiClient": "rebalancer.adapters.kube.client",
    "connect": "rebalancer.adapters.kube.client",
    "LeaseClient": "rebalancer.adapters.kube.lease",
    "KubeSource": "rebalancer.adapters.kube.source",
    "ReadStats": "rebalancer.adapters.kube.source",
    "ConfigMapStateStore": "rebalancer.adapters.kube.state_store",
}

__all__ = [
    "ApiClient",
    "ConfigMapStateStore",
    "KubeActions",
    "KubeSource",
    "LeaseClient",
    "PodAnnotator",
    "ReadStats",
    "connect",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
