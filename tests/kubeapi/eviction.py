"""The pod eviction subresource (pkg/registry/core/pod/storage/eviction.go), step for step.

``POST /api/v1/namespaces/{ns}/pods/{name}/eviction`` with a policy/v1 (or v1beta1) Eviction:

1. 400 if the body is not an Eviction or names another pod or namespace; ``dryRun`` from the query and
   ``deleteOptions.dryRun`` must agree (400 otherwise).
2. 404 ``pods "x" not found`` when the pod does not exist.
3. A Pending, Succeeded or Failed pod, or one already terminating, is deleted without looking at budgets.
4. Budgets of the pod's namespace whose selector matches the pod (nil selector: none; empty: all).
   More than one: 500 "This pod has more than one PodDisruptionBudget, which the eviction subresource
   does not support." (a Status with no reason).
5. One: a pod that is not Ready is deleted without spending the budget when the budget's
   ``unhealthyPodEvictionPolicy`` is ``AlwaysAllow``, or when ``currentHealthy >= desiredHealthy > 0``.
   Otherwise checkAndDecrement: ``status.observedGeneration < metadata.generation`` -> 429 with
   ``Retry-After: 10`` ("still being processed"); ``disruptionsAllowed < 0`` or more than 2000
   ``disruptedPods`` -> 403; ``disruptionsAllowed == 0`` -> 429 TooManyRequests "Cannot evict pod as it
   would violate the pod's disruption budget." with a ``DisruptionBudget`` cause and, as the real server,
   no Retry-After (``budget_retry_after`` adds one for tests of the header); else ``disruptionsAllowed``
   is decremented and the pod recorded in ``disruptedPods`` (not under dry run).
6. The delete: ``deleteOptions.preconditions`` uid / resourceVersion mismatch -> 409 Conflict (after the
   budget was spent, as in the real server). Under dry run nothing changes. 201 with a Success Status.

Choices of this double (documented deviations):

- ``sync_budgets`` (default True): the disruption controller runs synchronously, so the budget is
  recomputed from the current pods just before the check and again after the pod is gone. With False the
  stored status is used as is, as when the real controller lags (tests of stale status).
- ``terminate_at_once`` (default True): the pod is removed at once, as if its kubelet confirmed the
  termination instantly. With False it is marked as the real server marks it (``deletionTimestamp`` =
  now + grace period, ``deletionGracePeriodSeconds``, condition ``DisruptionTarget`` reason
  ``EvictionByEvictionAPI``) and stays until :meth:`EvictionSubresource.finish_termination`.
- Requests are serialized by one lock where the real server relies on optimistic concurrency of the
  budget's status; the outcomes are the same.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.kubeapi import disruption, status, writes
from tests.kubeapi.disruption import DisruptionController, rfc3339
from tests.kubeapi.status import ApiError
from tests.kubeapi.store import Store

MULTIPLE_BUDGETS = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
VIOLATION = "Cannot evict pod as it would violate the pod's disruption budget."
MAX_DISRUPTED_PODS = 2000
EVICTION_VERSIONS = ("policy/v1", "policy/v1beta1")


@dataclass(frozen=True)
class EvictionRecord:
    """One eviction request as received, with the answer it got."""

    namespace: str
    name: str
    body: Any
    dry_run: bool
    code: int
    outcome: str  # "Success", or the answer's reason (else its message)
    received_at: float = 0.0  # epoch seconds (wall clock) when the request reached the handler

    @property
    def annotations(self) -> dict[str, str]:
        meta = self.body.get("metadata") if isinstance(self.body, dict) else None
        return dict((meta or {}).get("annotations") or {})

    @property
    def preconditions(self) -> dict[str, str]:
        options = self.body.get("deleteOptions") if isinstance(self.body, dict) else None
        return dict((options or {}).get("preconditions") or {})


@dataclass
class EvictionSubresource:
    store: Store
    controller: DisruptionController
    clock: Callable[[], float] = time.time
    sync_budgets: bool = True
    terminate_at_once: bool = True
    budget_retry_after: int = 0
    records: list[EvictionRecord] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def create(self, namespace: str, name: str, body: Any, query: dict[str, str]) -> dict[str, Any]:
        """Serve one eviction request; the answer is 201 with the returned Status, or the raised ApiError."""
        dry = False
        received_at = time.time()  # the real clock, whatever ``clock`` says: benchmarks time requests by it
        try:
            options = _check_body(namespace, name, body)
            dry = _dry_run(query, options)
            with self._lock:
                self._evict(namespace, name, options, dry)
        except ApiError as error:
            outcome = str(error.body.get("reason") or error.body.get("message", ""))
            self.records.append(EvictionRecord(namespace, name, body, dry, error.code, outcome, received_at))
            raise
        self.records.append(EvictionRecord(namespace, name, body, dry, 201, "Success", received_at))
        return status.success(201)

    def finish_termination(self, namespace: str, name: str) -> None:
        """The kubelet confirmed a terminating pod is gone: remove it (and let the controller see it)."""
        pod = self.store.get("pods", name, namespace)
        budgets = self.controller.budgets_for(pod) if pod is not None else []
        self.store.delete("pods", name, namespace)
        self._resync(budgets)

    def _evict(self, namespace: str, name: str, options: dict[str, Any], dry: bool) -> None:
        pod = self.store.get("pods", name, namespace)
        if pod is None:
            raise status.not_found("pods", "", name)
        budgets = self.controller.budgets_for(pod)
        phase = pod.get("status", {}).get("phase")
        if phase in ("Pending", "Succeeded", "Failed") or disruption.terminating(pod):
            self._delete(pod, options, dry)
            self._resync([] if dry else budgets)
            return
        if len(budgets) > 1:
            raise status.failure_without_reason(500, MULTIPLE_BUDGETS)
        if budgets:
            pdb = self.controller.sync(budgets[0]) if self.sync_budgets else budgets[0]
            if disruption.ready(pod) or not _unhealthy_may_go(pdb):
                self._check_and_decrement(pdb, name, dry)
        self._delete(pod, options, dry)
        self._resync([] if dry else budgets)

    def _resync(self, budgets: list[dict[str, Any]]) -> None:
        if self.sync_budgets:
            for pdb in budgets:
                current = self.store.get("poddisruptionbudgets", pdb["metadata"]["name"], pdb["metadata"]["namespace"])
                if current is not None:
                    self.controller.sync(current)

    def _check_and_decrement(self, pdb: dict[str, Any], pod_name: str, dry: bool) -> None:
        st, meta = pdb.get("status") or {}, pdb["metadata"]
        budget = meta["name"]
        if st.get("observedGeneration", 0) < meta.get("generation", 0):
            cause = f"The disruption budget {budget} is still being processed by the server."
            raise status.too_many_requests(VIOLATION, 10, [{"reason": "DisruptionBudget", "message": cause}])
        allowed = int(st.get("disruptionsAllowed", 0))
        if allowed < 0:
            raise status.forbidden_reason(
                "poddisruptionbudget", "policy", budget, "pdb disruptions allowed is negative"
            )
        if len(st.get("disruptedPods") or {}) > MAX_DISRUPTED_PODS:
            why = "DisruptedPods map too big - too many evictions not confirmed by PDB controller"
            raise status.forbidden_reason("poddisruptionbudget", "policy", budget, why)
        if allowed == 0:
            cause = (
                f"The disruption budget {budget} needs {st.get('desiredHealthy', 0)} healthy pods "
                f"and has {st.get('currentHealthy', 0)} currently"
            )
            raise status.too_many_requests(
                VIOLATION, self.budget_retry_after, [{"reason": "DisruptionBudget", "message": cause}]
            )
        if dry:
            return
        new = dict(st, disruptionsAllowed=allowed - 1)
        if allowed == 1:
            disruption.set_condition(new, False, "", "", self.clock())
        new["disruptedPods"] = {**(st.get("disruptedPods") or {}), pod_name: rfc3339(self.clock())}
        self.store.update({**pdb, "status": new})

    def _delete(self, pod: dict[str, Any], options: dict[str, Any], dry: bool) -> None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        name = meta["name"]
        preconditions = options.get("preconditions") or {}
        uid, version = preconditions.get("uid"), preconditions.get("resourceVersion")
        if uid and uid != meta.get("uid"):
            why = (
                f"the UID in the precondition ({uid}) does not match the UID in record ({meta.get('uid')}). "
                "The object might have been deleted and then recreated"
            )
            raise status.conflict("Pod", "", name, why)
        if version and version != meta.get("resourceVersion"):
            why = (
                f"the ResourceVersion in the precondition ({version}) does not match the ResourceVersion in record "
                f"({meta.get('resourceVersion')}). The object might have been modified"
            )
            raise status.conflict("Pod", "", name, why)
        if dry or disruption.terminating(pod):
            return
        grace = options.get("gracePeriodSeconds")
        grace = int(spec.get("terminationGracePeriodSeconds", 30) if grace is None else grace)
        terminal = pod.get("status", {}).get("phase") in ("Succeeded", "Failed")
        if self.terminate_at_once or grace <= 0 or not spec.get("nodeName") or terminal:
            self.store.delete("pods", name, meta["namespace"])
            return
        now = self.clock()
        meta["deletionTimestamp"] = rfc3339(now + grace)
        meta["deletionGracePeriodSeconds"] = grace
        conditions = [c for c in pod.get("status", {}).get("conditions") or [] if c.get("type") != "DisruptionTarget"]
        conditions.append({"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                           "message": "Eviction API: evicting", "lastTransitionTime": rfc3339(now)})  # fmt: skip
        pod.setdefault("status", {})["conditions"] = conditions
        self.store.update(pod)


def _unhealthy_may_go(pdb: dict[str, Any]) -> bool:
    """A not-Ready pod is evicted without spending the budget (AlwaysAllow, or the budget is met)."""
    if (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") == "AlwaysAllow":
        return True
    st = pdb.get("status") or {}
    desired = int(st.get("desiredHealthy", 0))
    return int(st.get("currentHealthy", 0)) >= desired > 0


def _check_body(namespace: str, name: str, body: Any) -> dict[str, Any]:
    """The Eviction's deleteOptions, after the checks the decoder and the handler make."""
    if not isinstance(body, dict):
        raise status.bad_request("the body of the request was in an unknown format - accepted media types include: "
                                 "application/json, application/yaml, application/vnd.kubernetes.protobuf")  # fmt: skip
    api_version = body.get("apiVersion") or "policy/v1"
    if api_version not in EVICTION_VERSIONS:
        raise status.bad_request(
            f"the API version in the data ({api_version}) does not match the expected API version (policy/v1)"
        )
    if (body.get("kind") or "Eviction") != "Eviction":
        raise status.bad_request(f"not a Eviction object: {body.get('kind')}")
    meta = body.get("metadata") or {}
    if meta.get("namespace") and meta["namespace"] != namespace:
        raise status.bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    if meta.get("name") != name:
        raise status.bad_request("name in URL does not match name in Eviction object")
    options = body.get("deleteOptions") or {}
    if not isinstance(options, dict):
        raise status.bad_request("deleteOptions: expected an object")
    return options


def _dry_run(query: dict[str, str], options: dict[str, Any]) -> bool:
    """propagateDryRun: the query's dryRun and deleteOptions.dryRun must agree when both are given."""
    from_query = ["All"] if writes.dry_run(query) else []
    from_body = list(options.get("dryRun") or [])
    if any(v != "All" for v in from_body):
        raise status.bad_request(f'dryRun: Unsupported value: {from_body}: supported values: "All"')
    if from_query and from_body and from_query != from_body:
        raise status.bad_request(f"Non-matching dry-run options in request and content: {from_query} and {from_body}")
    return bool(from_query or from_body)
