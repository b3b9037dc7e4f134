"""explain-scale-down's pure part: which ReplicaSet is ranked, the notes, now and after steering."""

from __future__ import annotations

from dataclasses import replace

from rebalancer.app.explain import explain, explanation_record, explanation_table
from rebalancer.planning.scale_down import RankedPod

NOW = 1_700_000_000.0
POD = RankedPod("p", "u", "n1", "Running", True, NOW - 600, None, 0, NOW - 600)


def pods(*names_nodes: tuple[str, str]) -> tuple[RankedPod, ...]:
    return tuple(
        replace(POD, name=n, uid=f"uid-{n}", node_name=node, created=NOW - 600 - i)
        for i, (n, node) in enumerate(names_nodes)
    )


def test_now_and_after_steering() -> None:
    members = pods(("a", "n1"), ("b", "n2"), ("c", "n3"))
    e = explain("Deployment/ns/web", (("web-1", 3),), {"web-1": members}, 1, NOW, {"c": -10, "a": 5}, {"n3": "payg"})
    record = explanation_record(e)
    assert [r["pod"] for r in record["now"]] == ["a", "b", "c"]  # created seconds apart, one log2 bucket: by UID
    assert record["now"][0]["rule"] == "CREATED_UID" and record["now"][0]["deleted"]
    assert [r["pod"] for r in record["afterSteering"]] == ["c", "b", "a"]
    assert record["afterSteering"][0] == {
        "rank": 1, "deleted": True, "pod": "c", "node": "n3", "pool": "payg", "deletionCost": -10,
        "deletionCostText": "-10", "podsOfWorkloadOnNode": 1, "rule": "DELETION_COST",
        "reason": "before b: pod-deletion-cost -10 < 0 (unset)",
    }  # fmt: skip
    table = explanation_table(e)
    assert "Scale-down of Deployment/ns/web by 1" in table and "   1  delete   c" in table


def test_a_rollout_ranks_the_largest_replica_set_and_counts_every_pod_on_the_node() -> None:
    old = pods(("old-1", "n1"), ("old-2", "n2"))
    new = pods(("new-1", "n1"), ("new-2", "n2"), ("new-3", "n2"))
    e = explain("Deployment/ns/web", (("new", 3), ("old", 2)), {"old": old, "new": new}, 5, NOW, None, {}, "x")
    assert e.replica_set == "new"
    assert e.notes[0].startswith("2 ReplicaSets have pods (a rollout)")
    assert e.notes[1] == "5 is more than the 3 active pods: all of them go"
    assert [r.pod.name for r in e.now][:2] == ["new-2", "new-3"]  # n2 holds 3 pods of the workload, n1 two
    assert e.now[0].pods_on_node == 3 and e.after is None
    assert "after steering: not shown (x)" in explanation_table(e)


def test_no_active_pods() -> None:
    gone = (replace(POD, terminating=True),)
    e = explain("ReplicaSet/ns/web-1", (("web-1", 0),), {"web-1": gone}, 1, NOW, {}, {})
    assert e.now == () and e.notes == ("no active pods",)
