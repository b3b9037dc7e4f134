"""tests/service/scenario.py's small cluster on a real API server alone (api_made.py): hot-1 with api-0, api-1 and
web-0 of the ``shop`` Deployment and a DaemonSet's exporter, one web pod on each cold node; its history is that
module's, on its fixed clock."""

from __future__ import annotations

from tests.controlplane import ControlPlane
from tests.realcluster import api_made
from tests.realcluster import objects as o
from tests.service.scenario import LOADS, NODES

NAMESPACES = ("shop", "monitoring", "rebalancer")


def build(plane: ControlPlane) -> None:
    admin = plane.admin
    for namespace in NAMESPACES:
        plane.namespace(namespace)
    for name in NODES:
        api_made.ready_node(admin, o.node(name, cpu="4", memory="16Gi"))
    shop = api_made.deployment(admin, "shop", "shop", replicas=len(LOADS) - 1)
    exporter = api_made.daemon_set(admin, "exporter", "monitoring")
    for namespace, name in LOADS:
        node, _ = LOADS[(namespace, name)]
        owner, app = (exporter, "exporter") if namespace == "monitoring" else (shop, "shop")
        api_made.running_pod(admin, name, namespace, node, owner, {"app": app})


def clear(plane: ControlPlane) -> None:
    api_made.clear(plane.admin, NAMESPACES)


def live_pods(plane: ControlPlane, namespace: str = "shop") -> set[str]:
    return {p["metadata"]["name"] for p in plane.admin.items("v1", "Pod", namespace)}
