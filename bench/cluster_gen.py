"""Realistic synthetic clusters for benchmarks: nodes and ~8 KB pods, as a real API server serves them.

Pods carry what real pods carry and the planner never reads (managedFields, probes, env, several
containers, a last-applied annotation on some), so the narrow decoder is measured on honest bytes.
Objects are produced as raw JSON dicts; ``pod_usage`` gives each pod a deterministic CPU usage.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator
from typing import Any

NAMESPACES = [f"team-{i:02d}" for i in range(40)]
CREATED = "2026-10-01T08:00:00Z"
ALLOCATABLE_MEMORY = 62191600 * 1024  # bytes: a node's allocatable memory below


def node(i: int) -> dict[str, Any]:
    name = f"node-{i:05d}"
    pool = ("general", "general", "general", "inference", "batch")[i % 5]
    taints = [{"key": "dedicated", "value": pool, "effect": "NoSchedule"}] if pool != "general" else []
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": f"00000000-0000-4000-8000-{i:012d}",
            "creationTimestamp": CREATED,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "m6i.4xlarge",
                "topology.kubernetes.io/zone": f"zone-{i % 3}",
                "topology.kubernetes.io/region": "region-1",
                "node-pool": pool,
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {"podCIDR": f"10.{i // 250}.{i % 250}.0/24", "providerID": f"aws:///zone/i-{i:017x}", "taints": taints},
        "status": {
            "capacity": {"cpu": "32", "memory": "65023472Ki", "pods": "110", "ephemeral-storage": "104845292Ki"},
            "allocatable": {"cpu": "31750m", "memory": "62191600Ki", "pods": "110", "ephemeral-storage": "96625420Ki"},
            "conditions": [
                {
                    "type": t,
                    "status": "False",
                    "lastHeartbeatTime": CREATED,
                    "lastTransitionTime": CREATED,
                    "reason": f"KubeletHas{r}",
                    "message": f"kubelet has {r.lower()}",
                }
                for t, r in (
                    ("MemoryPressure", "SufficientMemory"),
                    ("DiskPressure", "NoDiskPressure"),
                    ("PIDPressure", "SufficientPID"),
                )
            ]
            + [
                {
                    "type": "Ready",
                    "status": "True",
                    "lastHeartbeatTime": CREATED,
                    "lastTransitionTime": CREATED,
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                }
            ],
            "addresses": [
                {"type": "InternalIP", "address": f"10.200.{i // 250}.{i % 250}"},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "kubeletVersion": "v1.31.2",
                "containerRuntimeVersion": "containerd://1.7.22",
                "kernelVersion": "6.1.0-26-cloud-amd64",
                "osImage": "Debian GNU/Linux 12 (bookworm)",
                "architecture": "amd64",
                "operatingSystem": "linux",
            },
            "images": [
                {
                    "names": [f"registry.example/team/app-{k}@sha256:{k:064x}", f"registry.example/team/app-{k}:v1"],
                    "sizeBytes": 50_000_000 + k,
                }
                for k in range(12)
            ],
        },
    }


def _container(name: str, cpu: str, memory: str, env_count: int) -> dict[str, Any]:
    return {
        "name": name,
        "image": f"registry.example/team/{name}:v1.42.7",
        "ports": [
            {"name": "http", "containerPort": 8080, "protocol": "TCP"},
            {"name": "metrics", "containerPort": 9090, "protocol": "TCP"},
        ],
        "env": [{"name": f"SETTING_{k}", "value": f"value-{k}-" + "x" * 24} for k in range(env_count)]
        + [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}],
        "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"memory": memory}},
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
            "initialDelaySeconds": 10,
            "timeoutSeconds": 1,
            "periodSeconds": 10,
            "successThreshold": 1,
            "failureThreshold": 3,
        },
        "readinessProbe": {
            "httpGet": {"path": "/ready", "port": 8080, "scheme": "HTTP"},
            "timeoutSeconds": 1,
            "periodSeconds": 5,
            "successThreshold": 1,
            "failureThreshold": 3,
        },
        "volumeMounts": [
            {"name": "config", "mountPath": "/etc/app"},
            {"name": "kube-api-access", "readOnly": True, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"},
        ],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
        "securityContext": {
            "runAsNonRoot": True,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
            "allowPrivilegeEscalation": False,
        },
    }


_MANAGED = [
    {
        "manager": "kube-controller-manager",
        "operation": "Update",
        "apiVersion": "v1",
        "time": CREATED,
        "fieldsType": "FieldsV1",
        "fieldsV1": {
            "f:metadata": {
                "f:generateName": {},
                "f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}},
                "f:ownerReferences": {".": {}, 'k:{"uid":"x"}': {}},
            },
            "f:spec": {
                "f:containers": {
                    'k:{"name":"app"}': {
                        ".": {},
                        "f:env": {},
                        "f:image": {},
                        "f:livenessProbe": {},
                        "f:ports": {},
                        "f:readinessProbe": {},
                        "f:resources": {},
                    }
                },
                "f:dnsPolicy": {},
                "f:enableServiceLinks": {},
                "f:restartPolicy": {},
                "f:schedulerName": {},
                "f:securityContext": {},
                "f:terminationGracePeriodSeconds": {},
                "f:volumes": {},
            },
        },
    },
    {
        "manager": "kubelet",
        "operation": "Update",
        "apiVersion": "v1",
        "time": CREATED,
        "fieldsType": "FieldsV1",
        "subresource": "status",
        "fieldsV1": {
            "f:status": {
                "f:conditions": {'k:{"type":"ContainersReady"}': {}, 'k:{"type":"Ready"}': {}},
                "f:containerStatuses": {},
                "f:hostIP": {},
                "f:phase": {},
                "f:podIP": {},
                "f:podIPs": {},
                "f:startTime": {},
            }
        },
    },
]


def node_index_of(i: int, node_count: int) -> int:
    """The node pod ``i`` is bound to (a stride that spreads consecutive pods over the nodes)."""
    return (i * 7919) % node_count


def pod(i: int, node_count: int) -> dict[str, Any]:
    namespace = NAMESPACES[i % len(NAMESPACES)]
    app = f"svc-{(i // 7) % 2000:04d}"
    rs = f"{app}-5d8f9c7b6"
    name = f"{rs}-{i:06x}"
    node_index = node_index_of(i, node_count)
    cpu = ("100m", "250m", "500m", "1", "2")[i % 5]
    annotations = {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9090",
        "kubectl.kubernetes.io/restartedAt": CREATED,
    }
    if i % 4 == 0:
        annotations["kubectl.kubernetes.io/last-applied-configuration"] = (
            '{"apiVersion":"v1","kind":"Pod",'
            + ('"spec":{"containers":[{"name":"app","image":"registry.example/team/app:v1"}]},' * 12)
            + '"metadata":{}}'
        )
    meta = {
        "name": name,
        "generateName": f"{rs}-",
        "namespace": namespace,
        "uid": f"10000000-0000-4000-8000-{i:012d}",
        "resourceVersion": str(1000 + i),
        "creationTimestamp": CREATED,
        "labels": {"app": app, "pod-template-hash": "5d8f9c7b6", "version": "v1.42.7", "team": namespace},
        "annotations": annotations,
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": rs,
                "uid": f"20000000-0000-4000-8000-{(i // 7):012d}",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
        "managedFields": copy.deepcopy(_MANAGED),
    }
    containers = [_container("app", cpu, "1Gi", 12), _container("sidecar", "50m", "128Mi", 4)]
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": meta,
        "spec": {
            "volumes": [
                {"name": "config", "configMap": {"name": f"{app}-config", "defaultMode": 420}},
                {
                    "name": "kube-api-access",
                    "projected": {
                        "defaultMode": 420,
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        ],
                    },
                },
            ],
            "initContainers": [_container("init-config", "10m", "32Mi", 2)],
            "containers": containers,
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "nodeName": f"node-{node_index:05d}",
            "securityContext": {"runAsUser": 1000, "fsGroup": 2000},
            "affinity": {
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 100,
                            "podAffinityTerm": {
                                "labelSelector": {"matchLabels": {"app": app}},
                                "topologyKey": "kubernetes.io/hostname",
                            },
                        }
                    ]
                }
            },
            "schedulerName": "default-scheduler",
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
                {
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": CREATED}
                for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            "hostIP": f"10.200.{node_index // 250}.{node_index % 250}",
            "podIP": f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}",
            "podIPs": [{"ip": f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}"}],
            "startTime": CREATED,
            "containerStatuses": [
                {
                    "name": c["name"],
                    "state": {"running": {"startedAt": CREATED}},
                    "lastState": {},
                    "ready": True,
                    "restartCount": i % 3,
                    "image": c["image"],
                    "imageID": f"{c['image']}@sha256:{i:064x}",
                    "containerID": f"containerd://{i:064x}",
                    "started": True,
                }
                for c in containers
            ],
            "qosClass": "Burstable",
        },
    }


def replica_set(k: int) -> dict[str, Any]:
    app = f"svc-{k % 2000:04d}"
    namespace = NAMESPACES[(k * 7) % len(NAMESPACES)]
    return {
        "kind": "ReplicaSet",
        "apiVersion": "apps/v1",
        "metadata": {
            "name": f"{app}-5d8f9c7b6",
            "namespace": namespace,
            "uid": f"20000000-0000-4000-8000-{k:012d}",
            "creationTimestamp": CREATED,
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": app,
                    "uid": f"30000000-0000-4000-8000-{k:012d}",
                    "controller": True,
                }
            ],
        },
        "spec": {"replicas": 7},
        "status": {"replicas": 7, "readyReplicas": 7},
    }


def cluster(nodes: int, pods: int) -> Iterator[dict[str, Any]]:
    for i in range(nodes):
        yield node(i)
    seen: set[tuple[str, str]] = set()
    for i in range(pods):
        p = pod(i, nodes)
        owner = p["metadata"]["ownerReferences"][0]["name"]
        key = (p["metadata"]["namespace"], owner)
        if key not in seen:
            seen.add(key)
            rs = replica_set(i // 7)
            rs["metadata"]["name"], rs["metadata"]["namespace"] = owner, key[0]
            yield rs
        yield p


def pod_usage_millicores(i: int) -> int:
    """A deterministic, skewed usage: most pods small, a few heavy."""
    rnd = random.Random(i)
    return int(rnd.paretovariate(1.6) * 120)


def pod_memory_bytes(i: int) -> int:
    """A deterministic, skewed memory working set: most pods a few hundred MiB, a few several GiB."""
    rnd = random.Random(-1 - i)
    return int(min(rnd.paretovariate(1.6), 40.0) * 200 * 2**20)


_PLACEHOLDERS = ("@@NAME@@", "@@NS@@", "@@APP@@", "@@NODE@@", "@@UIDN@@", "@@IP@@")


def _template(variant: int) -> bytes:
    """A pod's JSON with placeholders, for one of 20 variants (CPU request, last-applied or not)."""
    import msgspec

    p = pod(variant, 1)
    del p["kind"], p["apiVersion"]  # list items carry no kind/apiVersion
    meta, spec = p["metadata"], p["spec"]
    meta["name"], meta["namespace"], meta["generateName"] = "@@NAME@@", "@@NS@@", "@@APP@@-5d8f9c7b6-"
    meta["uid"] = "10000000-0000-4000-8000-@@UIDN@@"
    meta["labels"]["app"], meta["labels"]["team"] = "@@APP@@", "@@NS@@"
    meta["ownerReferences"][0]["name"] = "@@APP@@-5d8f9c7b6"
    spec["nodeName"] = "@@NODE@@"
    spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"][
        "labelSelector"
    ]["matchLabels"]["app"] = "@@APP@@"
    p["status"]["podIP"] = "@@IP@@"
    p["status"]["podIPs"] = [{"ip": "@@IP@@"}]
    return msgspec.json.encode(p)


_TEMPLATES: dict[int, bytes] = {}


def pod_bytes(i: int, node_count: int) -> tuple[str, str, bytes]:
    """(namespace, name, list-item JSON) of pod ``i``: ``pod(i)`` in shape, about 8x faster to make."""
    variant = i % 20
    template = _TEMPLATES.get(variant)
    if template is None:
        template = _TEMPLATES[variant] = _template(variant)
    namespace = NAMESPACES[i % len(NAMESPACES)]
    app = f"svc-{(i // 7) % 2000:04d}"
    name = f"{app}-5d8f9c7b6-{i:06x}"
    node_name = f"node-{node_index_of(i, node_count):05d}"
    ip = f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}"
    out = (
        template.replace(b"@@NAME@@", name.encode())
        .replace(b"@@NS@@", namespace.encode())
        .replace(b"@@APP@@", app.encode())
        .replace(b"@@NODE@@", node_name.encode())
        .replace(b"@@UIDN@@", f"{i:012d}".encode())
        .replace(b"@@IP@@", ip.encode())
    )
    return namespace, name, out


def list_item(obj: dict[str, Any]) -> tuple[str | None, str, bytes]:
    """(namespace, name, list-item JSON without kind/apiVersion) of a generated object."""
    import msgspec

    item = {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}
    meta = obj["metadata"]
    meta.setdefault("resourceVersion", "1")
    return meta.get("namespace"), meta["name"], msgspec.json.encode(item)


def replica_sets_for(pods: int) -> Iterator[dict[str, Any]]:
    """The ReplicaSets (owned by Deployments) that the first ``pods`` pods reference, once each."""
    seen: set[tuple[str, str]] = set()
    for i in range(pods):
        namespace = NAMESPACES[i % len(NAMESPACES)]
        app = f"svc-{(i // 7) % 2000:04d}"
        if (namespace, app) in seen:
            continue
        seen.add((namespace, app))
        rs = replica_set(len(seen))
        rs["metadata"]["name"], rs["metadata"]["namespace"] = f"{app}-5d8f9c7b6", namespace
        rs["metadata"]["ownerReferences"][0]["name"] = app
        yield rs
