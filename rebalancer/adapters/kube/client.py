"""Build an ``ApiClient`` with the official loaders (kubeconfig, in-cluster service account).

Each call builds a fresh ``Configuration`` and passes it to the loader, so the client
library's process-wide default configuration is never read or changed.
"""

from __future__ import annotations

import os

import kubernetes.client
import urllib3
import yaml
from kubernetes import config as kube_config
from kubernetes.config import ConfigException

from rebalancer import __version__
from rebalancer.domain.errors import ConfigError

ApiClient = kubernetes.client.ApiClient
"""The connection handed to every adapter (the composition root passes it along, never looks inside)."""

DEFAULT_KUBECONFIG = "~/.kube/config"
IN_CLUSTER_ENV = "KUBERNETES_SERVICE_HOST"

# Connection failures are retried (nothing was sent); a read failure once (a pooled connection
# the server closed); never an answer status: errors are the caller's to judge. urllib3 never
# retries a read failure of a POST, so an eviction is not sent twice.
RETRIES = urllib3.Retry(total=3, connect=2, read=1, redirect=0, status=0, other=0, backoff_factor=0.1)

_LOADER_ERRORS = (ConfigException, OSError, yaml.YAMLError, ValueError, TypeError, KeyError, AttributeError)


def connect(kubeconfig: str | None = None, context: str | None = None) -> kubernetes.client.ApiClient:
    """An API client for ``kubeconfig`` (and ``context``), else in-cluster, else the default kubeconfig.

    The default kubeconfig is ``$KUBECONFIG`` (a ``:``-separated list is merged) or
    ``~/.kube/config``. In a pod (``KUBERNETES_SERVICE_HOST`` set) without an explicit
    kubeconfig or context, the service account token and CA are used.
    Raises :class:`ConfigError` when no usable configuration is found.
    """
    configuration = kubernetes.client.Configuration()
    if kubeconfig is not None:
        path = os.path.expanduser(kubeconfig)
        if not os.path.isfile(path):
            raise ConfigError(f"kubeconfig {kubeconfig}", [("", "no such file")])
        _load_kubeconfig(path, context, configuration)
    elif os.environ.get(IN_CLUSTER_ENV) and context is None:
        try:
            kube_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        except _LOADER_ERRORS as exc:
            raise ConfigError("in-cluster configuration", [("", str(exc) or type(exc).__name__)]) from exc
    else:
        _load_kubeconfig(os.environ.get("KUBECONFIG") or DEFAULT_KUBECONFIG, context, configuration)
    configuration.retries = RETRIES
    # TCP keepalive with client-go's timings: an open watch whose peer vanished (no FIN) fails within
    # minutes instead of at its read timeout, so the watch cache learns that it is down
    configuration.keep_alive = True
    client = kubernetes.client.ApiClient(configuration=configuration)
    client.user_agent = f"rebalancer/{__version__}"
    return client


def _load_kubeconfig(path: str, context: str | None, configuration: kubernetes.client.Configuration) -> None:
    try:
        kube_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=path,
            context=context,
            client_configuration=configuration,
            persist_config=False,  # never write refreshed tokens back into the user's file
        )
    except _LOADER_ERRORS as exc:
        where = f"kubeconfig {path}" + (f" (context {context})" if context else "")
        raise ConfigError(where, [("", str(exc) or type(exc).__name__)]) from exc
