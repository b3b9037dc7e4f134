"""LeaseClient: the leader-election Lease (coordination.k8s.io/v1), one request per call.

:meth:`LeaseClient.get` reads the Lease into a :class:`~rebalancer.service.leader.LeaseRecord` (narrow decode,
times as epoch seconds); :meth:`LeaseClient.create` and :meth:`LeaseClient.update` write one, the update
only if the Lease is still at the ``resourceVersion`` given (a PUT carrying it). A 409 — another candidate
created or changed the Lease — is :class:`LeaseConflict`, a 403 names the verb to grant
(:class:`KubeForbidden`), anything else is :class:`KubeUnavailable`. Nothing is retried here: the elector
decides.

As client-go's ``LeaseLock`` does, an update writes back the whole Lease as last read (labels,
annotations, owner references, spec fields rebalancer does not know) with only the leader-election fields
replaced. Times are written as MicroTime (RFC 3339 with exactly six fractional digits; see
:func:`micro_time`).

RBAC needed: get, create and update on leases (API group coordination.k8s.io) in that namespace.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import kubernetes.client
import msgspec

from rebalancer.adapters.kube import wire
from rebalancer.adapters.kube.calls import Reply, decode, describe, http_error, send
from rebalancer.domain.errors import KubeUnavailable, LeaseConflict
from rebalancer.service.leader import LeaseRecord

GROUP = "coordination.k8s.io"
API_VERSION = f"{GROUP}/v1"
MANAGED_BY = {"app.kubernetes.io/managed-by": "rebalancer"}


def micro_time(epoch: float) -> str:
    """Epoch seconds as a MicroTime: ``2024-05-01T10:40:00.250000Z``; never on a whole second.

    The API server parses a MicroTime with the fixed layout ``2006-01-02T15:04:05.000000Z07:00`` and
    refuses anything but six fractional digits (400). Recent versions of the official client validate the
    body into their models and write times back with ``datetime.isoformat()``, which leaves out a zero
    fraction; so a time that falls on a whole second is written one microsecond later.
    """
    at = datetime.fromtimestamp(epoch, UTC)
    if at.microsecond == 0:
        at += timedelta(microseconds=1)
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> float:
    """An RFC 3339 time (MicroTime, or Time without fraction) as epoch seconds; ValueError if it is not one."""
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        raise ValueError(f"no time zone in {text!r}")
    return parsed.timestamp()


class LeaseClient:
    """The Lease ``namespace/name``, read and written through the official client (CoordinationV1Api)."""

    def __init__(
        self, api_client: kubernetes.client.ApiClient, namespace: str, name: str, request_timeout: float = 10.0
    ) -> None:
        self._api = kubernetes.client.CoordinationV1Api(api_client)
        self._host = str(api_client.configuration.host)
        self._timeout = request_timeout
        self.namespace, self.name = namespace, name
        self._seen: dict[str, Any] | None = None  # the Lease as last read or written, to write back

    def __repr__(self) -> str:
        return f"LeaseClient({self.namespace}/{self.name})"

    @property
    def _what(self) -> str:
        return f"lease {self.namespace}/{self.name}"

    def get(self) -> LeaseRecord | None:
        """The Lease as stored; None when there is none."""
        action = f"get {self._what}"
        reply = send(action, self._host, self._timeout, self._api.read_namespaced_lease, self.name, self.namespace)
        if reply.code == 404:
            self._seen = None
            return None
        if not reply.ok:
            raise self._error(action, reply, "get")
        return self._remember(action, reply.body)

    def create(self, record: LeaseRecord) -> LeaseRecord:
        """Create the Lease; :class:`LeaseConflict` when it exists already (another candidate was first)."""
        action = f"create {self._what}"
        body = {
            "apiVersion": API_VERSION,
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace, "labels": dict(MANAGED_BY)},
            "spec": _spec({}, record),
        }
        reply = send(action, self._host, self._timeout, self._api.create_namespaced_lease, self.namespace, body)
        if reply.code == 409:
            self._seen = None
            raise LeaseConflict(f"{describe(action, reply)} (another candidate created it: read it again)")
        if not reply.ok:
            raise self._error(action, reply, "create")
        return self._remember(action, reply.body)

    def update(self, record: LeaseRecord, resource_version: str) -> LeaseRecord:
        """Write ``record`` if the Lease is still at ``resource_version``, else :class:`LeaseConflict`."""
        action = f"update {self._what} at resourceVersion {resource_version}"
        seen = self._seen
        if seen is not None and seen.get("metadata", {}).get("resourceVersion") == resource_version:
            body = copy.deepcopy(seen)
        else:
            body = {"apiVersion": API_VERSION, "kind": "Lease", "metadata": {"name": self.name}}
        body["apiVersion"], body["kind"] = API_VERSION, "Lease"
        body["metadata"].update(name=self.name, namespace=self.namespace, resourceVersion=resource_version)
        body["spec"] = _spec(body.get("spec") or {}, record)
        reply = send(
            action, self._host, self._timeout, self._api.replace_namespaced_lease, self.name, self.namespace, body
        )
        if reply.code == 409:
            self._seen = None
            raise LeaseConflict(f"{describe(action, reply)} (another candidate wrote it: read it again)")
        if not reply.ok:
            raise self._error(action, reply, "update")
        return self._remember(action, reply.body)

    def _error(self, action: str, reply: Reply, verb: str) -> KubeUnavailable:
        return http_error(action, reply, verb=verb, resource="leases", namespace=self.namespace, group=GROUP)

    def _remember(self, action: str, body: bytes) -> LeaseRecord:
        lease: wire.Lease = decode(action, wire.LEASE, body)
        record = _record(action, lease)
        if not record.resource_version:
            raise KubeUnavailable(f"{action}: the answer carries no resourceVersion", reason="Malformed")
        self._seen = msgspec.json.decode(body)
        return record


def _spec(spec: dict[str, Any], record: LeaseRecord) -> dict[str, Any]:
    """``spec`` with the leader-election fields of ``record`` (an absent time or duration is left out)."""
    fields: dict[str, Any] = {
        "holderIdentity": record.holder,
        "leaseDurationSeconds": record.duration,
        "acquireTime": None if record.acquire_time is None else micro_time(record.acquire_time),
        "renewTime": None if record.renew_time is None else micro_time(record.renew_time),
        "leaseTransitions": record.transitions,
    }
    merged = {k: v for k, v in spec.items() if k not in fields}
    merged.update({k: v for k, v in fields.items() if v is not None})
    return merged


def _record(action: str, lease: wire.Lease) -> LeaseRecord:
    spec = lease.spec
    times: list[float | None] = []
    for field, text in (("acquireTime", spec.acquire_time), ("renewTime", spec.renew_time)):
        try:
            times.append(parse_time(text) if text else None)
        except ValueError as exc:
            raise KubeUnavailable(f"{action}: spec.{field}: not a time: {text!r}", reason="Malformed") from exc
    return LeaseRecord(
        holder=spec.holder_identity or "",
        duration=spec.lease_duration_seconds,
        acquire_time=times[0],
        renew_time=times[1],
        transitions=spec.lease_transitions or 0,
        resource_version=lease.metadata.resource_version,
    )
