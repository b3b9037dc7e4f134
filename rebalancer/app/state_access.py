"""Before a cycle decides anything: can it write its state, and make every call its actuators will make?

A run that plans, says "would evict" (a dry run) or marks nodes and then cannot persist its reservation
has acted on a plan it could not keep; a run that finds at its first eviction that it may not evict has
planned and reserved for nothing. So before planning, every run (dry or not, `run --once` and each
`serve` cycle) asks, writing nothing:

- that the state namespace exists: the limiter ConfigMap is created with ``dryRun=All``, which the API
  server authorizes and admits (the NamespaceLifecycle admission refuses a create in a missing namespace)
  and does not store. A SelfSubjectAccessReview cannot tell this: authorization never looks at whether a
  namespace exists, and reading the Namespace would need a cluster-wide permission the service has not;
- that every verb the cycle may use on its state is allowed, one SelfSubjectAccessReview each: get and
  update of each state ConfigMap (the efficiency records' only with efficiency on), their create; get,
  create and update of the leader-election Lease (``serve`` with leader election; a dry run's own Lease,
  :func:`lease_name`). A review answers for
  an update of a ConfigMap not created yet, where a dry-run update could not;
- that every call of the actuators is allowed (:func:`action_permissions`): the evictor's re-read of a pod
  (and its ReplicaSet), its eviction and Event; the steerer's pod patch; the landing guard's node read,
  patch and Event. A client dry run calls none of them, so it needs none; a server dry run sends the
  writes with ``dryRun=All`` (authorized as the writes) and records no Event.

A failure is one error naming the namespace, or every verb missing. Once a check passed it is not asked
again until what it covers changes (a reloaded policy).
"""

from __future__ import annotations

from rebalancer.actions.evictor import DryRun
from rebalancer.adapters.kube import ApiClient, ConfigMapStateStore
from rebalancer.adapters.kube.access import AccessReview, Permission
from rebalancer.domain.errors import KubeForbidden
from rebalancer.policy import Policy

LEASES = "coordination.k8s.io"
DRY_RUN_LEASE_SUFFIX = "-dry-run"
NODE_EVENTS = "default"  # a node's Events live there, as the kubelet's do


def lease_name(policy: Policy, dry_run: DryRun) -> str:
    """The Lease ``serve`` elects its leader on: ``service.leaderElection.leaseName``, and in a dry run that
    name with ``-dry-run``. A dry run started beside the live service (a trial policy, the old pods while an
    upgrade switches dry run off) so never takes leadership from it, and its own replicas still elect one
    planner among themselves."""
    name = policy.service.leader_election.lease_name
    return name if dry_run is DryRun.OFF else name + DRY_RUN_LEASE_SUFFIX


def state_permissions(policy: Policy, namespace: str) -> tuple[Permission, ...]:
    """What a cycle's state writes need in ``namespace``: get and update of its ConfigMaps, and their create
    (the Lease's are :func:`lease_permissions`)."""
    state = policy.state
    names = [state.config_map, state.backoff_config_map]
    if policy.efficiency.enabled:
        names.append(state.efficiency_config_map)
    needed = [Permission("create", "configmaps", namespace)]
    needed += [Permission(verb, "configmaps", namespace, name=name) for name in names for verb in ("get", "update")]
    return tuple(needed)


def lease_permissions(namespace: str, name: str) -> tuple[Permission, ...]:
    """What electing on the Lease ``name`` in ``namespace`` needs: create (it may not exist yet), get, update."""
    return (
        Permission("create", "leases", namespace, LEASES),
        *(Permission(verb, "leases", namespace, LEASES, name) for verb in ("get", "update")),
    )


def action_permissions(policy: Policy, dry_run: DryRun) -> tuple[Permission, ...]:
    """What the actuators' calls need in this dry-run mode, in every namespace whose pods may be evicted
    (those of ``evictableNamespaces.include``, else all)."""
    if dry_run is DryRun.CLIENT:
        return ()
    scopes: tuple[str | None, ...] = policy.protections.evictable_namespaces.include or (None,)
    events = dry_run is DryRun.OFF
    needed: list[Permission] = []
    for namespace in scopes:
        needed += [Permission("get", "pods", namespace), Permission("get", "replicasets", namespace, "apps")]
        needed.append(Permission("create", "pods/eviction", namespace))
        if any(s.kind == "DeletionCostSteering" and s.enabled for s in policy.strategies):
            needed.append(Permission("patch", "pods", namespace))
        if events:
            needed.append(Permission("create", "events", namespace))
    if policy.landing_guard.enabled:
        needed += [Permission("get", "nodes"), Permission("patch", "nodes")]
        if events:
            needed.append(Permission("create", "events", NODE_EVENTS))
    return tuple(needed)


class StateAccess:
    """The check, remembered once passed (``serve`` keeps one across cycles; `run --once` asks once).
    ``lease``: the (namespace, name) of the leader-election Lease this process holds, None for none (``serve``
    sets it from the policy it started with: its elector keeps that Lease through a reload that names
    another); ``dry_run``: the run's mode, which decides the actuators' calls."""

    def __init__(self, api: ApiClient, *, lease: tuple[str, str] | None = None, dry_run: DryRun = DryRun.OFF) -> None:
        self._api = api
        self.lease = lease
        self.dry_run = dry_run
        self._passed: tuple[str, tuple[Permission, ...]] | None = None

    def needed(self, policy: Policy, namespace: str) -> tuple[Permission, ...]:
        """Every verb :meth:`check` asks for, the state's in ``namespace``."""
        lease = () if self.lease is None else lease_permissions(*self.lease)
        return state_permissions(policy, namespace) + lease + action_permissions(policy, self.dry_run)

    def check(self, policy: Policy, namespace: str) -> None:
        """Raises :class:`KubeUnavailable` (404) when the namespace does not exist, :class:`KubeForbidden`
        naming every verb missing, or the error of a request that failed."""
        needed = self.needed(policy, namespace)
        if self._passed == (namespace, needed):
            return
        ConfigMapStateStore(self._api, namespace, policy.state.config_map).check_create()
        review = AccessReview(self._api)
        missing = [p for p in needed if not review.allowed(p)]
        if missing:
            first = missing[0]
            raise KubeForbidden(
                f"RBAC: the service account may not {'; '.join(map(str, missing))} "
                "(grant these verbs: the cycle cannot write its state or act without them)",
                verb=first.verb,
                resource=first.resource,
                group=first.group,
                namespace=first.namespace,
            )
        self._passed = (namespace, needed)
