"""Raw JSON objects as a real API server returns them, and a kubeconfig for the test server.

Objects carry what the server adds on its own (uid, managedFields, defaulted fields such as
``terminationMessagePath``, the two NoExecute tolerations of DefaultTolerationSeconds, the
projected ``kube-api-access`` volume, ``status.qosClass``), so the narrow decoder is exercised
against bodies of a realistic size and shape, not minimal dicts.
"""

from __future__ import annotations

import hashlib
import itertools
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

CREATED = "2024-05-01T08:00:00Z"
_MISSING: Any = object()
_counter = itertools.count()


def uid() -> str:
    return str(uuid.uuid4())


def _hash(text: str, length: int = 10) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:length]


def managed_fields(manager: str, spec_keys: Iterable[str] = ()) -> list[dict[str, Any]]:
    return [
        {
            "manager": manager,
            "operation": "Update",
            "apiVersion": "v1",
            "time": CREATED,
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {".": {}}}, "f:spec": {f"f:{k}": {} for k in spec_keys}},
        }
    ]


# --- nodes -----------------------------------------------------------------------------------


def node(
    name: str,
    *,
    cpu: str = "8",
    memory: str = "32Gi",
    pods: str = "110",
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    unschedulable: bool = False,
    ready: bool | None = True,
    allocatable: Mapping[str, str] | None = None,
    address: str | None = None,
) -> dict[str, Any]:
    """A Node; ``ready=None`` leaves out the Ready condition (a node that never reported); ``address``: its
    InternalIP (default: one derived from the name)."""
    spec: dict[str, Any] = {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"], "providerID": f"kind://{name}"}
    if taints:
        spec["taints"] = [dict(t) for t in taints]
    if unschedulable:
        spec["unschedulable"] = True
    conditions = [
        _condition(kind, "False", reason)
        for kind, reason in (
            ("MemoryPressure", "KubeletHasSufficientMemory"),
            ("DiskPressure", "KubeletHasNoDiskPressure"),
            ("PIDPressure", "KubeletHasSufficientPID"),
        )
    ]
    if ready is not None:
        conditions.append(
            _condition("Ready", "True" if ready else "False", "KubeletReady" if ready else "KubeletNotReady")
        )
    capacity = {"cpu": cpu, "memory": memory, "pods": pods, "ephemeral-storage": "100Gi", "hugepages-2Mi": "0"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": uid(),
            "creationTimestamp": CREATED,
            "labels": {
                "beta.kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                **(labels or {}),
            },
            "annotations": {
                "kubeadm.alpha.kubernetes.io/cri-socket": "unix:///run/containerd/containerd.sock",
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
            "managedFields": managed_fields("kubelet", ["podCIDR"]),
        },
        "spec": spec,
        "status": {
            "capacity": capacity,
            "allocatable": dict(allocatable if allocatable is not None else capacity),
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": address or _address(name)},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": _hash(name, 32),
                "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_DNS, name)),
                "bootID": str(uuid.uuid5(uuid.NAMESPACE_URL, name)),
                "kubeProxyVersion": "v1.30.0",
                "kernelVersion": "6.1.0-18-amd64",
                "osImage": "Debian GNU/Linux 12 (bookworm)",
                "containerRuntimeVersion": "containerd://1.7.13",
                "kubeletVersion": "v1.30.0",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "images": [{"names": ["registry.k8s.io/pause:3.9"], "sizeBytes": 321520}],
        },
    }


def _address(name: str) -> str:
    digest = hashlib.sha256(name.encode()).digest()
    return f"10.{digest[0]}.{digest[1]}.{digest[2] % 254 + 1}"


def taint(key: str, effect: str = "NoSchedule", value: str | None = None) -> dict[str, str]:
    return {"key": key, "effect": effect, **({"value": value} if value is not None else {})}


def _condition(kind: str, state: str, reason: str = "") -> dict[str, Any]:
    out = {"type": kind, "status": state, "lastHeartbeatTime": CREATED, "lastTransitionTime": CREATED}
    if reason:
        out["reason"] = reason
    return out


# --- pods ------------------------------------------------------------------------------------


def container(
    name: str = "app",
    *,
    cpu: str | None = None,
    memory: str | None = None,
    limit_cpu: str | None = None,
    limit_memory: str | None = None,
    restart_policy: str | None = None,
    image: str = "registry.example.com/team/app:1.4.2",
) -> dict[str, Any]:
    """A container; a limit without a request gets request = limit, as the API server defaults."""
    limits = {k: v for k, v in (("cpu", limit_cpu), ("memory", limit_memory)) if v is not None}
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    for key, value in limits.items():
        requests.setdefault(key, value)
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    out: dict[str, Any] = {
        "name": name,
        "image": image,
        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
            {"name": "LOG_LEVEL", "value": "info"},
        ],
        "resources": resources,
        "volumeMounts": [
            {
                "name": "kube-api-access",
                "readOnly": True,
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            }
        ],
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
            "timeoutSeconds": 1,
            "periodSeconds": 10,
            "successThreshold": 1,
            "failureThreshold": 3,
        },
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }
    if restart_policy is not None:
        out["restartPolicy"] = restart_policy
    return out


def owner(kind: str, name: str, *, controller: bool = True, api_version: str | None = None) -> dict[str, Any]:
    versions = {"ReplicaSet": "apps/v1", "StatefulSet": "apps/v1", "DaemonSet": "apps/v1", "Deployment": "apps/v1",
                "Job": "batch/v1", "Node": "v1"}  # fmt: skip
    ref: dict[str, Any] = {
        "apiVersion": api_version or versions.get(kind, "example.com/v1"),
        "kind": kind,
        "name": name,
        "uid": uid(),
    }
    if controller:
        ref["controller"] = True
        ref["blockOwnerDeletion"] = True
    return ref


DEFAULT_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
]

API_ACCESS_VOLUME = {
    "name": "kube-api-access",
    "projected": {
        "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        ],
        "defaultMode": 420,
    },
}


def pod(
    name: str,
    *,
    namespace: str = "default",
    node: str | None = "node-1",
    containers: Sequence[dict[str, Any]] | None = None,
    init_containers: Sequence[dict[str, Any]] = (),
    owners: Sequence[dict[str, Any]] = (),
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    tolerations: Sequence[dict[str, Any]] | None = None,
    node_selector: Mapping[str, str] | None = None,
    affinity: dict[str, Any] | None = None,
    volumes: Sequence[dict[str, Any]] = (),
    phase: str = "Running",
    ready: bool = True,
    restarts: Sequence[int] | None = None,
    init_restarts: Sequence[int] | None = None,
    priority: int | None = 0,
    priority_class: str | None = None,
    overhead: Mapping[str, str] | None = None,
    qos: str | None = _MISSING,
    created: str = CREATED,
    deleting: bool = False,
) -> dict[str, Any]:
    """A pod as the API server stores it once scheduled (``node=None``: still pending)."""
    containers = list(containers) if containers is not None else [container(cpu="100m", memory="128Mi")]
    spec: dict[str, Any] = {
        "volumes": [*volumes, API_ACCESS_VOLUME],
        "containers": containers,
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "serviceAccount": "default",
        "securityContext": {},
        "schedulerName": "default-scheduler",
        "tolerations": list(tolerations) if tolerations is not None else list(DEFAULT_TOLERATIONS),
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
    }
    if priority is not None:
        spec["priority"] = priority
    if init_containers:
        spec["initContainers"] = list(init_containers)
    if node is not None:
        spec["nodeName"] = node
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if affinity is not None:
        spec["affinity"] = affinity
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    if overhead is not None:
        spec["overhead"] = dict(overhead)
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid(),
        "creationTimestamp": created,
        "labels": dict(labels or {}),
        "managedFields": managed_fields("kube-controller-manager", ["containers", "volumes"]),
    }
    if annotations:
        meta["annotations"] = dict(annotations)
    if owners:
        meta["ownerReferences"] = list(owners)
    if deleting:
        meta["deletionTimestamp"] = "2024-05-01T09:00:00Z"
        meta["deletionGracePeriodSeconds"] = 30
    counts = list(restarts) if restarts is not None else [0] * len(containers)
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": [
            _pod_condition("Initialized", True),
            _pod_condition("Ready", ready),
            _pod_condition("ContainersReady", ready),
            _pod_condition("PodScheduled", node is not None),
        ],
        "hostIP": "172.18.0.2",
        "podIP": f"10.244.1.{next(_counter) % 250 + 2}",
        "startTime": created,
        "containerStatuses": [
            {
                "name": c["name"],
                "state": {"running": {"startedAt": created}},
                "ready": ready,
                "restartCount": n,
                "image": c["image"],
                "imageID": f"{c['image']}@sha256:{_hash(c['image'], 64)}",
                "containerID": f"containerd://{_hash(name + c['name'], 64)}",
                "started": True,
            }
            for c, n in zip(containers, counts, strict=False)
        ],
    }
    if init_containers:
        init_counts = list(init_restarts) if init_restarts is not None else [0] * len(init_containers)
        status["initContainerStatuses"] = [
            _init_status(name, c, n, created) for c, n in zip(init_containers, init_counts, strict=True)
        ]
    status["qosClass"] = qos_class([*containers, *init_containers]) if qos is _MISSING else qos
    if status["qosClass"] is None:
        del status["qosClass"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def _init_status(pod_name: str, c: dict[str, Any], restarts: int, created: str) -> dict[str, Any]:
    """An init container's status once the pod runs: a sidecar (restartPolicy Always) still running, any other
    one terminated with exit code 0."""
    sidecar = c.get("restartPolicy") == "Always"
    state = (
        {"running": {"startedAt": created}}
        if sidecar
        else {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": created, "finishedAt": created}}
    )
    return {
        "name": c["name"],
        "state": state,
        "ready": sidecar,
        "restartCount": restarts,
        "image": c["image"],
        "imageID": f"{c['image']}@sha256:{_hash(c['image'], 64)}",
        "containerID": f"containerd://{_hash(pod_name + c['name'], 64)}",
        "started": sidecar,
    }


def _pod_condition(kind: str, state: bool) -> dict[str, Any]:
    return {"type": kind, "status": "True" if state else "False", "lastProbeTime": None, "lastTransitionTime": CREATED}


def qos_class(containers: Sequence[dict[str, Any]]) -> str:
    """The QoS class the API server computes (requests already defaulted from limits)."""
    res = [c.get("resources", {}) for c in containers]
    if not any(r.get("requests") or r.get("limits") for r in res):
        return "BestEffort"
    for r in res:
        limits, requests = r.get("limits", {}), r.get("requests", {})
        if any(k not in limits or requests.get(k) != limits[k] for k in ("cpu", "memory")):
            return "Burstable"
    return "Guaranteed"


def required_affinity(*terms: Sequence[tuple[str, str, Sequence[str]]]) -> dict[str, Any]:
    """nodeAffinity required terms; each term is a list of (key, operator, values)."""
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": k, "operator": op, **({"values": list(v)} if v else {})} for k, op, v in t
                        ]
                    }
                    for t in terms
                ]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 10, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}
            ],
        },
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "labelSelector": {"matchLabels": {"app": "x"}},
                        "topologyKey": "kubernetes.io/hostname",
                    },
                }
            ]
        },
    }


# --- workloads -------------------------------------------------------------------------------


def _workload(kind: str, api_version: str, name: str, namespace: str, extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid(),
            "creationTimestamp": CREATED,
            "labels": {"app": name},
            "managedFields": managed_fields("kubectl-client-side-apply"),
        },
        **extra,
    }


def deployment(name: str, namespace: str = "default", replicas: int = 3) -> dict[str, Any]:
    spec = {"replicas": replicas, "selector": {"matchLabels": {"app": name}}}
    return _workload("Deployment", "apps/v1", name, namespace, {"spec": spec})


def replica_set(
    name: str, namespace: str = "default", *, deployment: str | None = None, replicas: int = 3
) -> dict[str, Any]:
    spec = {"replicas": replicas, "selector": {"matchLabels": {"app": deployment or name}}}
    status = {"replicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas}
    rs = _workload("ReplicaSet", "apps/v1", name, namespace, {"spec": spec, "status": status})
    rs["metadata"]["annotations"] = {"deployment.kubernetes.io/revision": "1"}
    if deployment is not None:
        rs["metadata"]["ownerReferences"] = [owner("Deployment", deployment)]
    return rs


def deployment_chain(
    name: str, namespace: str = "default", *, replicas: int = 3, nodes: Sequence[str] = ("node-1",), **pod_args: Any
) -> list[dict[str, Any]]:
    """A Deployment, its ReplicaSet and its pods (spread round-robin over ``nodes``)."""
    template_hash = _hash(f"{namespace}/{name}")
    rs_name = f"{name}-{template_hash}"
    labels = {"app": name, "pod-template-hash": template_hash, **pod_args.pop("labels", {})}
    ref = owner("ReplicaSet", rs_name)
    pods = [
        pod(f"{rs_name}-{_hash(f'{rs_name}{i}', 5)}", namespace=namespace, node=nodes[i % len(nodes)],
            owners=[dict(ref)], labels=labels, **pod_args)
        for i in range(replicas)
    ]  # fmt: skip
    return [
        deployment(name, namespace, replicas),
        replica_set(rs_name, namespace, deployment=name, replicas=replicas),
        *pods,
    ]


def pdb(
    name: str,
    namespace: str = "default",
    *,
    selector: dict[str, Any] | None = _MISSING,
    min_available: int | str | None = None,
    max_unavailable: int | str | None = None,
    disruptions_allowed: int = 1,
    current_healthy: int = 3,
    desired_healthy: int = 2,
    expected_pods: int = 3,
) -> dict[str, Any]:
    """A policy/v1 PodDisruptionBudget; ``selector`` omitted unless given (``{}``: every pod)."""
    spec: dict[str, Any] = {}
    if selector is not _MISSING:
        spec["selector"] = selector
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace, "uid": uid(), "creationTimestamp": CREATED,
                     "generation": 1},
        "spec": spec,
        "status": {
            "observedGeneration": 1,
            "disruptionsAllowed": disruptions_allowed,
            "currentHealthy": current_healthy,
            "desiredHealthy": desired_healthy,
            "expectedPods": expected_pods,
            "conditions": [{"type": "DisruptionAllowed", "status": "True" if disruptions_allowed else "False",
                            "reason": "SufficientPods" if disruptions_allowed else "InsufficientPods",
                            "lastTransitionTime": CREATED, "message": "", "observedGeneration": 1}],
        },
    }  # fmt: skip


# --- kubeconfig ------------------------------------------------------------------------------


def write_kubeconfig(
    path: Path,
    server: str,
    *,
    token: str | None = "test-token",
    context: str = "test",
    namespace: str = "default",
    extra_contexts: Mapping[str, str] | None = None,
) -> Path:
    """A kubeconfig pointing at ``server`` (plus ``extra_contexts``: name -> server URL)."""
    clusters = {context: server, **(extra_contexts or {})}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "current-context": context,
        "clusters": [{"name": n, "cluster": {"server": url}} for n, url in clusters.items()],
        "users": [{"name": "rebalancer", "user": {"token": token} if token else {}}],
        "contexts": [
            {"name": n, "context": {"cluster": n, "user": "rebalancer", "namespace": namespace}} for n in clusters
        ],
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path
