"""A real Kubernetes control plane on 127.0.0.1 for tests, as controller-runtime's envtest starts one.

etcd (3.6 from the assets, or Debian's 3.4), kube-apiserver with RBAC, a serving certificate and a static
admin token; optionally kube-controller-manager with the controllers the tests need, kube-scheduler, and
hollow nodes (kubemark: a real kubelet with a fake container runtime, 1 CPU / 3840Mi / 110 pods each).
Every process runs on free ports in a scratch directory and is stopped on :meth:`ControlPlane.stop`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import requests
import yaml

from tests.controlplane.admin import Admin, ApiError, collection_path
from tests.controlplane.assets import binary, etcd34
from tests.controlplane.pki import Pki, make_pki
from tests.controlplane.processes import Process, free_port

EtcdVersion = Literal["3.6", "3.4"]


@dataclass(frozen=True)
class AuditEvent:
    """One answered request: the RBAC attributes it was authorized on, and the answer's code."""

    verb: str
    group: str
    resource: str  # with its subresource: "pods/eviction"
    namespace: str | None
    name: str | None
    code: int
    dry_run: bool
    uri: str
    received: float  # when the request reached the server (epoch seconds)
    at: float  # when the answer was sent (epoch seconds)
    body: dict[str, Any] | None  # the object sent, where the audit policy records it (Leases, evictions)

    @classmethod
    def of(cls, event: dict[str, Any]) -> AuditEvent:
        ref = event.get("objectRef") or {}
        resource = ref.get("resource", "")
        if ref.get("subresource"):
            resource += "/" + ref["subresource"]
        uri = event["requestURI"]
        return cls(
            verb=event["verb"],
            group=ref.get("apiGroup", ""),
            resource=resource,
            namespace=ref.get("namespace"),
            name=ref.get("name"),
            code=int(event.get("responseStatus", {}).get("code", 0)),
            dry_run="dryRun=All" in uri,
            uri=uri,
            received=datetime.fromisoformat(event["requestReceivedTimestamp"]).timestamp(),
            at=datetime.fromisoformat(event["stageTimestamp"]).timestamp(),
            body=event.get("requestObject"),
        )


CONTROLLERS = (
    "deployment-controller",
    "replicaset-controller",
    "statefulset-controller",
    "disruption-controller",
    "serviceaccount-controller",
    "root-ca-certificate-publisher-controller",
    "node-lifecycle-controller",
    "garbage-collector-controller",
    "namespace-controller",
)
"""What pods on hollow nodes need to start and to be replaced (README of the assets), budgets' status,
and the clean-up of deleted owners and namespaces."""

SERVICE_CA = "openshift-service-ca.crt"
"""This API server's admission projects this ConfigMap (key ``service-ca.crt``) into every pod's
service-account volume: a pod starts only once it exists in the pod's namespace."""


class ControlPlane:
    def __init__(
        self,
        workdir: Path,
        *,
        etcd: EtcdVersion = "3.6",
        controllers: bool = True,
        scheduler: bool = True,
        node_monitor_grace: str = "1h",
        audit: bool = True,
    ) -> None:
        self.workdir = workdir
        self.etcd_version: EtcdVersion = etcd
        self.with_controllers = controllers
        self.with_scheduler = scheduler
        self.node_monitor_grace = node_monitor_grace
        self.with_audit = audit
        self.processes: dict[str, Process] = {}
        self.pki: Pki | None = None
        self.port = 0
        self.audit_from = 0
        self._admin: Admin | None = None

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> ControlPlane:
        try:
            self.pki = make_pki(self.workdir / "pki")
            self._start_etcd()
            self._start_apiserver()
            self.admin_kubeconfig = self.kubeconfig(self.workdir / "admin.kubeconfig", self.pki.admin_token)
            if self.with_controllers:
                self._start_controller_manager()
            if self.with_scheduler:
                self._start_scheduler()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for name in reversed(list(self.processes)):
            self.processes[name].stop()

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def admin(self) -> Admin:
        assert self.pki is not None
        if self._admin is None:
            self._admin = Admin(self.url, self.pki.admin_token, str(self.pki.ca_cert))
        return self._admin

    def process(self, name: str) -> Process:
        return self.processes[name]

    def _run(self, name: str, argv: Sequence[str | Path]) -> Process:
        process = Process(name, argv, self.workdir / f"{name}.log").start()
        self.processes[name] = process
        return process

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        peer_url = f"http://127.0.0.1:{peer}"
        executable = binary("etcd") if self.etcd_version == "3.6" else etcd34()
        process = self._run(
            "etcd",
            [
                executable,
                "--name=test",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=test={peer_url}",
                "--quota-backend-bytes=8589934592",
            ],
        )
        process.wait_ready(lambda: requests.get(f"{self.etcd_url}/health", timeout=1).ok, timeout=30)

    def _start_apiserver(self) -> None:
        pki = self.pki
        assert pki is not None
        self.port = free_port()
        process = self._run(
            "kube-apiserver",
            [
                binary("kube-apiserver"),
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.port}",
                f"--tls-cert-file={pki.serving_cert}",
                f"--tls-private-key-file={pki.serving_key}",
                f"--client-ca-file={pki.ca_cert}",
                f"--token-auth-file={pki.token_file}",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                "--service-cluster-ip-range=10.96.0.0/12",
                "--endpoint-reconciler-type=none",
                "--profiling=false",
                *self._audit_flags(),
            ],
        )
        session = requests.Session()
        session.verify = str(pki.ca_cert)
        session.trust_env = False
        session.headers["Authorization"] = f"Bearer {pki.admin_token}"
        process.wait_ready(lambda: session.get(f"{self.url}/readyz", timeout=2).text == "ok", timeout=90)

    @property
    def audit_log(self) -> Path:
        return self.workdir / "audit.log"

    def _audit_flags(self) -> list[str]:
        if not self.with_audit:  # benchmarks: the log would cost the server
            return []
        return [f"--audit-policy-file={self._audit_policy()}", f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json", "--audit-log-mode=blocking"]  # fmt: skip

    def _audit_policy(self) -> Path:
        """Every request's metadata (who, verb, object, answer code), once it was answered; Leases, evictions
        and access reviews with the object sent (a Lease's holder; an eviction's annotations; what was asked)."""
        path = self.workdir / "audit-policy.yaml"
        leases = {"level": "Request", "resources": [{"group": "coordination.k8s.io", "resources": ["leases"]}]}
        evictions = {"level": "Request", "resources": [{"group": "", "resources": ["pods/eviction"]}]}
        reviews = {
            "level": "Request",
            "resources": [{"group": "authorization.k8s.io", "resources": ["selfsubjectaccessreviews"]}],
        }
        policy = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"],
                  "rules": [leases, evictions, reviews, {"level": "Metadata"}]}  # fmt: skip
        path.write_text(yaml.safe_dump(policy))
        return path

    def audit(self, user: str) -> list[AuditEvent]:
        """The requests ``user`` made since the last :meth:`reset` (or the start), as the API server's audit
        log recorded them (in order)."""
        events = []
        with self.audit_log.open() as log:
            log.seek(self.audit_from)
            for line in log:
                if not line.endswith("\n"):
                    break  # the API server is still writing this event: a reader may see half of it
                event = json.loads(line)
                if event["user"]["username"] == user and event.get("stage") == "ResponseComplete":
                    events.append(AuditEvent.of(event))
        return events

    def _start_controller_manager(self) -> None:
        pki = self.pki
        assert pki is not None
        self._run(
            "kube-controller-manager",
            [
                binary("kube-controller-manager"),
                f"--kubeconfig={self.admin_kubeconfig}",
                f"--controllers={','.join(CONTROLLERS)}",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={pki.sa_key}",
                f"--root-ca-file={pki.ca_cert}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                f"--node-monitor-grace-period={self.node_monitor_grace}",
                "--concurrent-gc-syncs=5",
            ],
        )
        # ready once it published the root CA into a namespace
        self.processes["kube-controller-manager"].wait_ready(
            lambda: self.admin.exists("/api/v1/namespaces/default/configmaps/kube-root-ca.crt"), timeout=60
        )

    def _start_scheduler(self) -> None:
        self._run(
            "kube-scheduler",
            [
                binary("kube-scheduler"),
                f"--kubeconfig={self.admin_kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
            ],
        )

    # --- access -----------------------------------------------------------------------------------

    def kubeconfig(self, path: Path, token: str, namespace: str = "default") -> Path:
        """A kubeconfig for this API server that authenticates with ``token`` (CA verified)."""
        assert self.pki is not None
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "test",
            "clusters": [
                {"name": "test", "cluster": {"server": self.url, "certificate-authority": str(self.pki.ca_cert)}}
            ],
            "users": [{"name": "user", "user": {"token": token}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "user", "namespace": namespace}}],
        }
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def user_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig for rebalancer itself: a user of its own (in ``system:masters``), so that the audit log
        tells its requests (:meth:`audit` of :data:`USER`) from the test's."""
        assert self.pki is not None
        return self.kubeconfig(path, self.pki.user_token)

    # --- objects ----------------------------------------------------------------------------------

    def namespace(self, name: str, labels: Mapping[str, str] | None = None) -> str:
        """A namespace in which pods can start (with the service CA ConfigMap this server's admission needs)."""
        assert self.pki is not None
        meta: dict[str, Any] = {"name": name}
        if labels:
            meta["labels"] = dict(labels)
        try:
            self.admin.create({"apiVersion": "v1", "kind": "Namespace", "metadata": meta})
        except ApiError as error:
            if error.status != 409:
                raise
        ca = {"service-ca.crt": self.pki.ca_cert.read_text()}
        for obj in (
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": SERVICE_CA, "namespace": name}, "data": ca},
            # made here rather than waited for: the service-account controller may lag or not run
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": name}},
        ):
            try:
                self.admin.create(obj)
            except ApiError as error:
                if error.status != 409:
                    raise
        return name

    def hollow_nodes(
        self,
        names: Sequence[str],
        *,
        labels: Mapping[str, str] | None = None,
        taints: Sequence[str] = (),
        max_pods: int | None = None,
        timeout: float = 90.0,
    ) -> None:
        """Starts one kubemark hollow kubelet per name and waits until each node is Ready and untainted."""
        for name in names:
            argv: list[str | Path] = [
                binary("kubemark"),
                "--morph=kubelet",
                f"--name={name}",
                f"--kubeconfig={self.admin_kubeconfig}",
                f"--kubelet-port={free_port()}",
                "--kubelet-read-only-port=0",
                "--use-host-image-service=false",
            ]
            if labels:
                argv.append("--node-labels=" + ",".join(f"{k}={v}" for k, v in labels.items()))
            if taints:
                argv.append("--register-with-taints=" + ",".join(taints))
            if max_pods is not None:
                argv.append(f"--max-pods={max_pods}")
            self._run(f"kubemark-{name}", argv)
        wanted = set(names)
        expected_taints = {t.split("=")[0].split(":")[0] for t in taints}

        def ready() -> bool:
            nodes = {n["metadata"]["name"]: n for n in self.admin.items("v1", "Node")}
            for name in wanted:
                node = nodes.get(name)
                if node is None:
                    return False
                conditions = {c["type"]: c["status"] for c in node["status"].get("conditions", ())}
                keys = {t["key"] for t in node["spec"].get("taints", ())}
                if conditions.get("Ready") != "True" or keys - expected_taints:
                    return False
            return True

        self.admin.wait_for(f"hollow nodes {sorted(wanted)} Ready", ready, timeout=timeout)

    @contextlib.contextmanager
    def controllers_paused(self) -> Iterator[None]:
        """The controller manager stopped for the block (budgets' status, ReplicaSets and nodes' health stay as
        they were, as with a lagging controller), started again after it."""
        self.processes.pop("kube-controller-manager").stop()
        try:
            yield
        finally:
            self._start_controller_manager()

    def stop_hollow_node(self, name: str) -> None:
        process = self.processes.pop(f"kubemark-{name}", None)
        if process is not None:
            process.stop()

    def reset(self, keep_namespaces: Sequence[str] = ()) -> None:
        """Removes what tests made: every hollow node, every node, and every namespace but the system ones
        and ``keep_namespaces`` (workloads first, then their pods at once, then the namespaces)."""
        for name in [n for n in self.processes if n.startswith("kubemark-")]:
            self.processes.pop(name).stop(grace=5)
        system = {"default", "kube-system", "kube-public", "kube-node-lease", *keep_namespaces}
        namespaces = [n["metadata"]["name"] for n in self.admin.items("v1", "Namespace")]
        for ns in (n for n in namespaces if n not in system):
            for api_version, kind in (("apps/v1", "Deployment"), ("apps/v1", "StatefulSet"), ("apps/v1", "ReplicaSet")):
                for obj in self.admin.items(api_version, kind, ns):
                    self.admin.delete(
                        f"{collection_path(api_version, kind, ns)}/{obj['metadata']['name']}",
                        propagationPolicy="Orphan",
                    )
            for pod in self.admin.items("v1", "Pod", ns):
                self.admin.delete(f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}", gracePeriodSeconds=0)
            self.admin.delete(f"/api/v1/namespaces/{ns}")
        gone = [n for n in namespaces if n not in system]
        self.admin.wait_for(
            f"namespaces {gone} deleted",
            lambda: not {n["metadata"]["name"] for n in self.admin.items("v1", "Namespace")} & set(gone),
            timeout=120,
        )
        self.audit_from = self.audit_log.stat().st_size if self.with_audit else 0
        for kind in ("ClusterRoleBinding", "ClusterRole"):  # those the tests made, not the bootstrap policy
            for obj in self.admin.items("rbac.authorization.k8s.io/v1", kind):
                if "kubernetes.io/bootstrapping" not in obj["metadata"].get("labels", {}):
                    name = obj["metadata"]["name"]
                    self.admin.delete(f"{collection_path('rbac.authorization.k8s.io/v1', kind)}/{name}")
        for node in self.admin.items("v1", "Node"):
            self.admin.delete(f"/api/v1/nodes/{node['metadata']['name']}")
        for lease in self.admin.items("coordination.k8s.io/v1", "Lease", "kube-node-lease"):
            self.admin.delete(
                f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{lease['metadata']['name']}"
            )

    def logs(self) -> str:
        return "\n".join(f"--- {name}\n{p.tail(10)}" for name, p in self.processes.items())
