"""ConfigMapStateStore with the real ``kubernetes`` client against a real API server: optimistic concurrency
with the server's own 409 conflicts, four writers racing, what is not ours kept, RBAC refusals by the real
authorizer, the server's size limit, and the dry-run create that tells a missing namespace (the real
NamespaceLifecycle admission). Failures on demand stay in tests/adapters/test_state_store.py."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from rebalancer.adapters.kube import ConfigMapStateStore, connect
from rebalancer.domain.errors import KubeForbidden, KubeUnavailable, StateConflict
from tests.controlplane import USER, ControlPlane
from tests.realcluster.access import Account, Denied

NS, NAME = "rebalancer", "rebalancer-state"
PATH = f"/api/v1/namespaces/{NS}/configmaps/{NAME}"


def store(kubeconfig: Path, namespace: str = NS) -> ConfigMapStateStore:
    return ConfigMapStateStore(connect(kubeconfig=str(kubeconfig)), namespace, NAME, "state.json", request_timeout=5.0)


def ours(plane: ControlPlane) -> list[dict[str, Any]]:
    """The state ConfigMaps in the namespace (not the service CA's the namespace was made with)."""
    return [c for c in plane.admin.items("v1", "ConfigMap", NS) if c["metadata"]["name"] == NAME]


def test_missing_configmap_loads_as_nothing(api_cluster: ControlPlane, api_kubeconfig: Path) -> None:
    assert store(api_kubeconfig).load() == (None, None)


def test_create_load_update_round_trip(api_cluster: ControlPlane, api_kubeconfig: Path) -> None:
    s = store(api_kubeconfig)

    created = s.save('{"tokens": 3}', None)
    assert s.load() == ('{"tokens": 3}', created)
    updated = s.save('{"tokens": 2}', created)

    assert int(updated) > int(created)
    assert store(api_kubeconfig).load() == ('{"tokens": 2}', updated)
    [cm] = ours(api_cluster)
    assert cm["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "rebalancer"}
    assert cm["data"] == {"state.json": '{"tokens": 2}'}


def test_a_stale_writer_gets_a_conflict_and_wins_after_reloading(
    api_cluster: ControlPlane, api_kubeconfig: Path
) -> None:
    first, second = store(api_kubeconfig), store(api_kubeconfig)
    version = first.save("v1", None)
    _, seen_by_second = second.load()
    first.save("v2 by first", version)

    with pytest.raises(StateConflict) as caught:
        second.save("v2 by second", seen_by_second)

    assert "the object has been modified; please apply your changes to the latest version" in str(caught.value)
    text, current = second.load()
    assert text == "v2 by first"
    second.save("v3 by second", current)
    assert first.load()[0] == "v3 by second"


def test_two_creators_one_conflict(api_cluster: ControlPlane, api_kubeconfig: Path) -> None:
    store(api_kubeconfig).save("mine", None)

    with pytest.raises(StateConflict, match="already exists"):
        store(api_kubeconfig).save("theirs", None)
    assert store(api_kubeconfig).load()[0] == "mine"


def test_a_configmap_deleted_since_loading_is_a_conflict(api_cluster: ControlPlane, api_kubeconfig: Path) -> None:
    s = store(api_kubeconfig)
    version = s.save("x", None)
    api_cluster.admin.delete(PATH)

    with pytest.raises(StateConflict):
        s.save("y", version)
    assert s.load() == (None, None)


def test_other_keys_labels_and_annotations_are_kept(api_cluster: ControlPlane, api_kubeconfig: Path) -> None:
    api_cluster.admin.create(
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": NAME, "namespace": NS, "labels": {"team": "infra"}, "annotations": {"note": "hands off"}},
         "data": {"README": "limiter state of rebalancer"}}
    )  # fmt: skip
    s = store(api_kubeconfig)

    text, version = s.load()
    assert text is None and version is not None
    s.save("{}", version)

    [cm] = ours(api_cluster)
    assert cm["data"] == {"README": "limiter state of rebalancer", "state.json": "{}"}
    assert cm["metadata"]["labels"] == {"team": "infra", "app.kubernetes.io/managed-by": "rebalancer"}
    assert cm["metadata"]["annotations"] == {"note": "hands off"}


def test_concurrent_writers_lose_no_update(api_cluster: ControlPlane, api_kubeconfig: Path) -> None:
    """Each writer adds 1 to a counter 10 times, reloading on conflict: no increment may be lost."""
    store(api_kubeconfig).save("0", None)

    def writer() -> None:
        s = store(api_kubeconfig)
        for _ in range(10):
            while True:
                text, version = s.load()
                try:
                    s.save(str(int(text or "0") + 1), version)
                    break
                except StateConflict:
                    continue

    threads = [threading.Thread(target=writer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert store(api_kubeconfig).load()[0] == "40"


def test_forbidden_names_the_verb(api_cluster: ControlPlane, tmp_path: Path) -> None:
    account = Account(api_cluster, tmp_path)
    s = store(account.kubeconfig)
    version = s.save("x", None)
    account.deny(Denied("update", "configmaps", namespace=NS))

    with pytest.raises(KubeForbidden) as caught:
        s.save("y", version)

    assert "may not update configmaps in namespace rebalancer (grant verb update on configmaps)" in str(caught.value)
    account.deny(Denied("update", "configmaps", namespace=NS), Denied("get", "configmaps"))
    with pytest.raises(KubeForbidden, match="may not get configmaps"):
        s.load()


def test_too_big_a_state_is_not_a_conflict(api_cluster: ControlPlane, api_kubeconfig: Path) -> None:
    with pytest.raises(KubeUnavailable) as caught:
        store(api_kubeconfig).save("x" * (1024 * 1024 + 1), None)

    assert not isinstance(caught.value, StateConflict)
    assert caught.value.status == 422 and "Too long: may not be more than 1048576 bytes" in str(caught.value)


# --- check_create: would a create be taken? (dryRun=All, nothing stored) ---------------------------


def test_check_create_passes_and_stores_nothing(api_cluster: ControlPlane, api_kubeconfig: Path) -> None:
    store(api_kubeconfig).check_create()
    assert ours(api_cluster) == []
    [probe] = [e for e in api_cluster.audit(USER) if e.verb == "create"]
    assert probe.dry_run and probe.code == 201


def test_check_create_passes_when_the_configmap_exists(api_cluster: ControlPlane, api_kubeconfig: Path) -> None:
    version = store(api_kubeconfig).save("kept", None)
    store(api_kubeconfig).check_create()  # 409 AlreadyExists: the namespace is there and the create was authorized
    assert store(api_kubeconfig).load() == ("kept", version)


def test_check_create_names_a_missing_namespace(api_cluster: ControlPlane, api_kubeconfig: Path) -> None:
    with pytest.raises(KubeUnavailable) as caught:
        store(api_kubeconfig, "gone").check_create()
    message = str(caught.value)
    assert message.startswith("the state namespace gone does not exist (create it, or set state.namespace)")
    assert 'namespaces "gone" not found' in message
    assert "\n" not in message
    assert caught.value.status == 404


def test_check_create_names_a_refused_create(api_cluster: ControlPlane, tmp_path: Path) -> None:
    account = Account(api_cluster, tmp_path)
    account.deny(Denied("create", "configmaps", namespace=NS))
    with pytest.raises(KubeForbidden, match="grant verb create on configmaps") as caught:
        store(account.kubeconfig).check_create()
    assert (caught.value.verb, caught.value.resource, caught.value.namespace) == ("create", "configmaps", NS)
