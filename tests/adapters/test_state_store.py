"""ConfigMapStateStore with the real ``kubernetes`` client against tests/kubeapi: optimistic concurrency."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from rebalancer.adapters.kube import ConfigMapStateStore, connect
from rebalancer.domain.errors import KubeForbidden, KubeUnavailable, RebalancerError, StateConflict
from tests.kubeapi import Fault, TestApiServer

NS, NAME = "rebalancer", "rebalancer-state"
PATH = f"/api/v1/namespaces/{NS}/configmaps/{NAME}"


def store(kubeconfig: Path, key: str = "state.json", timeout: float = 5.0) -> ConfigMapStateStore:
    return ConfigMapStateStore(connect(kubeconfig=str(kubeconfig)), NS, NAME, key, request_timeout=timeout)


def test_missing_configmap_loads_as_nothing(kube_server: TestApiServer, kubeconfig: Path) -> None:
    assert store(kubeconfig).load() == (None, None)


def test_create_load_update_round_trip(kube_server: TestApiServer, kubeconfig: Path) -> None:
    s = store(kubeconfig)

    created = s.save('{"tokens": 3}', None)
    assert s.load() == ('{"tokens": 3}', created)
    updated = s.save('{"tokens": 2}', created)

    assert int(updated) > int(created)
    assert store(kubeconfig).load() == ('{"tokens": 2}', updated)
    [cm] = kube_server.objects("configmaps", NS)
    assert cm["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "rebalancer"}
    assert cm["data"] == {"state.json": '{"tokens": 2}'}


def test_a_stale_writer_gets_a_conflict_and_wins_after_reloading(kube_server: TestApiServer, kubeconfig: Path) -> None:
    first, second = store(kubeconfig), store(kubeconfig)
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


def test_two_creators_one_conflict(kube_server: TestApiServer, kubeconfig: Path) -> None:
    store(kubeconfig).save("mine", None)

    with pytest.raises(StateConflict, match="already exists"):
        store(kubeconfig).save("theirs", None)
    assert store(kubeconfig).load()[0] == "mine"


def test_a_configmap_deleted_since_loading_is_a_conflict(kube_server: TestApiServer, kubeconfig: Path) -> None:
    s = store(kubeconfig)
    version = s.save("x", None)
    kube_server.delete("configmaps", NAME, NS)

    with pytest.raises(StateConflict):
        s.save("y", version)
    assert s.load() == (None, None)


def test_other_keys_labels_and_annotations_are_kept(kube_server: TestApiServer, kubeconfig: Path) -> None:
    kube_server.add(
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": NAME, "namespace": NS, "labels": {"team": "infra"}, "annotations": {"note": "hands off"}},
         "data": {"README": "limiter state of rebalancer"}}
    )  # fmt: skip
    s = store(kubeconfig)

    text, version = s.load()
    assert text is None and version is not None
    s.save("{}", version)

    [cm] = kube_server.objects("configmaps", NS)
    assert cm["data"] == {"README": "limiter state of rebalancer", "state.json": "{}"}
    assert cm["metadata"]["labels"] == {"team": "infra", "app.kubernetes.io/managed-by": "rebalancer"}
    assert cm["metadata"]["annotations"] == {"note": "hands off"}


def test_concurrent_writers_lose_no_update(kube_server: TestApiServer, kubeconfig: Path) -> None:
    """Each writer adds 1 to a counter 10 times, reloading on conflict: no increment may be lost."""
    store(kubeconfig).save("0", None)

    def writer() -> None:
        s = store(kubeconfig)
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

    assert store(kubeconfig).load()[0] == "40"


def test_forbidden_names_the_verb(kube_server: TestApiServer, kubeconfig: Path) -> None:
    s = store(kubeconfig)
    version = s.save("x", None)
    kube_server.forbid("update", "configmaps", namespace=NS)

    with pytest.raises(KubeForbidden) as caught:
        s.save("y", version)

    assert "may not update configmaps in namespace rebalancer (grant verb update on configmaps)" in str(caught.value)
    kube_server.forbid("get", "configmaps")
    with pytest.raises(KubeForbidden, match="may not get configmaps"):
        s.load()


def test_too_big_a_state_is_not_a_conflict(kube_server: TestApiServer, kubeconfig: Path) -> None:
    with pytest.raises(KubeUnavailable) as caught:
        store(kubeconfig).save("x" * (1024 * 1024 + 1), None)

    assert not isinstance(caught.value, StateConflict)
    assert caught.value.status == 422 and "must have at most 1048576 bytes" in str(caught.value)


@pytest.mark.parametrize(
    "fault", [Fault(code=500), Fault(drop=True), Fault(code=502, body=b"<html>"), Fault(delay=2)],
    ids=["500", "dropped", "proxy page", "timeout"],
)  # fmt: skip
def test_failures_are_the_projects_errors(kube_server: TestApiServer, kubeconfig: Path, fault: Fault) -> None:
    s = store(kubeconfig, timeout=0.2)
    version = s.save("x", None)
    kube_server.set_fault(PATH, fault)

    with pytest.raises(KubeUnavailable):
        s.load()
    with pytest.raises(RebalancerError):
        s.save("y", version)


# --- check_create: would a create be taken? (dryRun=All, nothing stored) ---------------------------


def test_check_create_passes_and_stores_nothing(kube_server: TestApiServer, kubeconfig: Path) -> None:
    kube_server.keep_namespaces(NS)
    store(kubeconfig).check_create()
    assert kube_server.objects("configmaps", NS) == []
    [probe] = [r for r in kube_server.requests if r.method == "POST"]
    assert probe.query == {"dryRun": "All"}


def test_check_create_passes_when_the_configmap_exists(kube_server: TestApiServer, kubeconfig: Path) -> None:
    kube_server.keep_namespaces(NS)
    version = store(kubeconfig).save("kept", None)
    store(kubeconfig).check_create()  # 409 AlreadyExists: the namespace is there and the create was authorized
    assert store(kubeconfig).load() == ("kept", version)


def test_check_create_names_a_missing_namespace(kube_server: TestApiServer, kubeconfig: Path) -> None:
    kube_server.keep_namespaces("elsewhere")
    with pytest.raises(KubeUnavailable) as caught:
        store(kubeconfig).check_create()
    message = str(caught.value)
    assert message.startswith("the state namespace rebalancer does not exist (create it, or set state.namespace)")
    assert 'namespaces "rebalancer" not found' in message
    assert "\n" not in message
    assert caught.value.status == 404


def test_check_create_names_a_refused_create(kube_server: TestApiServer, kubeconfig: Path) -> None:
    kube_server.forbid("create", "configmaps", namespace=NS)
    with pytest.raises(KubeForbidden, match="grant verb create on configmaps") as caught:
        store(kubeconfig).check_create()
    assert (caught.value.verb, caught.value.resource, caught.value.namespace) == ("create", "configmaps", NS)
