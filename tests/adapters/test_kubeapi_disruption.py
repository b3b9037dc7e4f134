"""The test API server's disruption controller: PodDisruptionBudget status from the current pods."""

from __future__ import annotations

from typing import Any

import pytest

from tests.kubeapi import builders as b
from tests.kubeapi.disruption import DisruptionController
from tests.kubeapi.store import Store

NS = "shop"
LABELS = {"matchLabels": {"app": "web"}}
NOW = 1_714_560_000.0


def synced(*objs: dict[str, Any], now: float = NOW, **spec: Any) -> dict[str, Any]:
    store = Store()
    for obj in objs:
        store.create(obj)
    store.create(b.pdb("web", NS, selector=spec.pop("selector", LABELS), **spec))
    controller = DisruptionController(store, clock=lambda: now)
    pdb = store.get("poddisruptionbudgets", "web", NS)
    assert pdb is not None
    status: dict[str, Any] = controller.sync(pdb)["status"]
    return status


def chain(replicas: int = 4, ready: int | None = None) -> list[dict[str, Any]]:
    """A Deployment of ``replicas`` (its pods all created), the first ``ready`` of them Ready."""
    objs = b.deployment_chain("web", NS, replicas=replicas)
    pods = [o for o in objs if o["kind"] == "Pod"]
    for pod in pods[ready if ready is not None else replicas :]:
        for c in pod["status"]["conditions"]:
            if c["type"] == "Ready":
                c["status"] = "False"
    return objs


def counts(status: dict[str, Any]) -> tuple[int, int, int, int]:
    return status["expectedPods"], status["currentHealthy"], status["desiredHealthy"], status["disruptionsAllowed"]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"min_available": 2}, (4, 4, 2, 2)),
        ({"min_available": 5}, (4, 4, 5, 0)),
        ({"min_available": "50%"}, (4, 4, 2, 2)),
        ({"min_available": "51%"}, (4, 4, 3, 1)),  # ceil(2.04)
        ({"max_unavailable": 1}, (4, 4, 3, 1)),
        ({"max_unavailable": "25%"}, (4, 4, 3, 1)),
        ({"max_unavailable": "26%"}, (4, 4, 2, 2)),  # maxUnavailable rounded up: ceil(1.04) = 2
        ({"max_unavailable": 0}, (4, 4, 4, 0)),
        ({"max_unavailable": 9}, (4, 4, 0, 4)),  # desiredHealthy never below 0
        ({}, (0, 4, 0, 0)),  # neither field: nothing is expected, nothing allowed
    ],
)
def test_budget_arithmetic(spec: dict[str, Any], expected: tuple[int, int, int, int]) -> None:
    status = synced(*chain(4), **spec)

    assert counts(status) == expected
    assert status["observedGeneration"] == 1


def test_unready_and_terminating_pods_are_not_healthy() -> None:
    objs = chain(4, ready=3)
    pods = [o for o in objs if o["kind"] == "Pod"]
    pods[0]["metadata"]["deletionTimestamp"] = "2024-05-01T10:40:00Z"

    assert counts(synced(*objs, max_unavailable=1)) == (4, 2, 3, 0)


def test_percentages_count_the_controllers_replicas_not_the_pods() -> None:
    objs = chain(4)
    deployment = next(o for o in objs if o["kind"] == "Deployment")
    deployment["spec"]["replicas"] = 6  # scaling up: two pods not created yet

    assert counts(synced(*objs, max_unavailable=1)) == (6, 4, 5, 0)
    assert counts(synced(*chain(4), min_available=3)) == (4, 4, 3, 1)  # an integer counts the pods


def test_bare_pods_are_left_out_of_the_expected_count() -> None:
    bare = [b.pod(f"bare-{i}", namespace=NS, labels={"app": "web"}) for i in range(3)]

    assert counts(synced(*bare, max_unavailable=1)) == (0, 3, 0, 0)
    assert counts(synced(*bare, min_available=1)) == (3, 3, 1, 2)


def test_a_missing_controller_fails_safe() -> None:
    orphan = b.pod("web-x", namespace=NS, labels={"app": "web"}, owners=[b.owner("ReplicaSet", "gone")])

    status = synced(orphan, max_unavailable=1)

    assert status["disruptionsAllowed"] == 0
    [condition] = status["conditions"]
    assert (condition["status"], condition["reason"]) == ("False", "SyncFailed")
    assert 'found no controllers for pod "web-x"' in condition["message"]


def test_recent_disruptions_are_not_counted_as_healthy() -> None:
    objs = chain(4)
    names = [o["metadata"]["name"] for o in objs if o["kind"] == "Pod"]
    pdb_status = {"disruptedPods": {names[0]: "2024-05-01T10:39:30Z", names[1]: "2024-05-01T10:30:00Z"}}
    store = Store()
    for obj in objs:
        store.create(obj)
    pdb = b.pdb("web", NS, selector=LABELS, max_unavailable=1)
    pdb["status"].update(pdb_status)
    store.create(pdb)

    stored = store.get("poddisruptionbudgets", "web", NS)
    assert stored is not None

    status = DisruptionController(store, clock=lambda: NOW).sync(stored)["status"]

    # 30 s ago: still expected to go; 10 minutes ago: forgotten (the pod was not deleted after all)
    assert status["disruptedPods"] == {names[0]: "2024-05-01T10:39:30Z"}
    assert counts(status) == (4, 3, 3, 0)


def test_an_empty_selector_covers_every_pod_of_the_namespace() -> None:
    objs = [*chain(2), b.pod("other", namespace=NS, labels={"app": "other"}), b.pod("elsewhere", namespace="x")]

    assert counts(synced(*objs, selector={}, min_available=1)) == (3, 3, 1, 2)


def test_match_expressions_select() -> None:
    objs = [*chain(2), b.pod("canary", namespace=NS, labels={"app": "web", "track": "canary"})]
    selector = {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]},
                                     {"key": "track", "operator": "DoesNotExist"}]}  # fmt: skip

    assert counts(synced(*objs, selector=selector, min_available=1))[0] == 2
