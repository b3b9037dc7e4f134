"""The ReplicaSet controller's scale-down order, rule by rule, on hand-built pods with Kubernetes' values."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from rebalancer.adapters.kube.workload_pods import decode_pod
from rebalancer.domain.model import parse_deletion_cost
from rebalancer.planning.scale_down import RankedPod, Rule, compare, deletion_order, log_bucket, to_delete
from tests.kubeapi import builders as b

NOW = 1_700_000_000.0
BASE = RankedPod(
    name="base",
    uid="uid-m",
    node_name="node-a",
    phase="Running",
    ready=True,
    ready_since=NOW - 3600,
    deletion_cost_text=None,
    max_restarts=0,
    created=NOW - 7200,
)


def pod(name: str, **changes: object) -> RankedPod:
    return replace(BASE, name=name, **changes)  # type: ignore[arg-type]


def first(*pods: RankedPod, related: list[RankedPod] | None = None, now: float | None = NOW) -> tuple[str, Rule | None]:
    order = deletion_order(list(pods), related, now)
    return order[0].pod.name, order[0].rule


# -- each rule on its own (every other field equal) --------------------------------------------------------


def test_unassigned_goes_before_assigned() -> None:
    assert first(pod("assigned"), pod("unassigned", node_name="")) == ("unassigned", Rule.UNASSIGNED)


@pytest.mark.parametrize(("earlier", "later"), [("Pending", "Unknown"), ("Unknown", "Running"), ("Pending", "Running")])
def test_phase_order_pending_unknown_running(earlier: str, later: str) -> None:
    assert first(pod("late", phase=later), pod("early", phase=earlier)) == ("early", Rule.PHASE)


def test_a_phase_the_controller_does_not_rank_counts_as_pending() -> None:
    """podPhaseToOrdinal has no entry for it: a Go map answers 0, Pending's ordinal."""
    name, rule = first(pod("unknown", phase="Unknown"), pod("odd", phase="Weird"))
    assert (name, rule) == ("odd", Rule.PHASE)
    assert compare(pod("a", phase="Weird"), pod("b", phase="Pending"), {}, NOW)[1] is not Rule.PHASE


def test_not_ready_goes_before_ready() -> None:
    assert first(pod("ready"), pod("not-ready", ready=False, ready_since=None)) == ("not-ready", Rule.NOT_READY)


@pytest.mark.parametrize(("low", "high"), [("-5", None), (None, "10"), ("-2147483648", "2147483647"), ("-007", "-6")])
def test_lower_deletion_cost_goes_first(low: str | None, high: str | None) -> None:
    assert first(pod("high", deletion_cost_text=high), pod("low", deletion_cost_text=low)) == (
        "low",
        Rule.DELETION_COST,
    )


@pytest.mark.parametrize(
    "invalid", ["+5", "007", "1.5", "1_000", " 5", "5 ", "2147483648", "-2147483649", "", "ten", "-"]
)
def test_an_invalid_deletion_cost_counts_as_zero(invalid: str) -> None:
    assert parse_deletion_cost(invalid) == (0, False)
    assert (
        compare(pod("a", deletion_cost_text=invalid), pod("b", deletion_cost_text="0"), {}, NOW)[1]
        is not Rule.DELETION_COST
    )
    assert first(pod("one", deletion_cost_text="1"), pod("bad", deletion_cost_text=invalid)) == (
        "bad",
        Rule.DELETION_COST,
    )
    assert first(pod("minus", deletion_cost_text="-1"), pod("bad", deletion_cost_text=invalid))[0] == "minus"


def test_valid_deletion_cost_values() -> None:
    assert parse_deletion_cost(None) == (0, True)
    assert parse_deletion_cost("0") == (0, True)
    assert parse_deletion_cost("-0") == (0, True)
    assert parse_deletion_cost("2147483647") == (2147483647, True)
    assert parse_deletion_cost("-2147483648") == (-2147483648, True)
    assert parse_deletion_cost("-007") == (-7, True)  # only a leading "+" or "0" is refused, not "-0..."


def test_doubled_up_pods_go_first_counting_every_replica_set_of_the_workload() -> None:
    alone = pod("alone", node_name="node-b")
    crowded = pod("crowded", node_name="node-a")
    # node-b holds one more pod of another ReplicaSet of the workload, node-a one pod that finished
    related = [alone, crowded, pod("old-rs", node_name="node-b"), pod("done", node_name="node-a", phase="Succeeded")]
    order = deletion_order([crowded, alone], related, NOW)
    assert [r.pod.name for r in order] == ["alone", "crowded"]
    assert order[0].rule is Rule.DOUBLED_UP and order[0].pods_on_node == 2
    assert "2 pods of the workload on node-b > 1" in order[0].reason


def test_ready_for_less_time_goes_first_by_log2_bucket() -> None:
    recent, older = pod("recent", ready_since=NOW - 10), pod("older", ready_since=NOW - 100)
    assert first(older, recent) == ("recent", Rule.READY_TIME)


def test_ready_times_in_one_log2_bucket_go_by_uid_not_by_time() -> None:
    # 40 s and 50 s are both 2^35 ns <= d < 2^36 ns: the same bucket
    assert log_bucket(NOW - 40, NOW) == log_bucket(NOW - 50, NOW) == 35
    newer_big_uid = pod("newer", ready_since=NOW - 40, uid="uid-z")
    older_small_uid = pod("older", ready_since=NOW - 50, uid="uid-a")
    assert first(newer_big_uid, older_small_uid) == ("older", Rule.READY_TIME_UID)
    # with LogarithmicScaleDown off (no clock) the plain times decide
    assert first(newer_big_uid, older_small_uid, now=None) == ("newer", Rule.READY_TIME)


def test_a_ready_pod_without_ready_time_goes_first() -> None:
    assert first(pod("timed", ready_since=NOW - 5), pod("zero", ready_since=None)) == ("zero", Rule.READY_TIME)


def test_ready_time_is_skipped_when_not_both_ready() -> None:
    a = pod("a", ready=False, ready_since=None, phase="Running", max_restarts=1)
    b_ = pod("b", ready=False, ready_since=None, phase="Running")
    assert first(b_, a) == ("a", Rule.RESTARTS)


def test_more_restarts_go_first_and_the_count_is_the_largest_container_s() -> None:
    assert first(pod("calm", max_restarts=2), pod("flapping", max_restarts=3)) == ("flapping", Rule.RESTARTS)
    raw = b.pod("p", restarts=[3, 0], containers=[b.container(name="a"), b.container(name="b")])
    other = b.pod("q", restarts=[1, 1, 1], containers=[b.container(name=n) for n in "abc"])
    assert decode_pod(json.dumps(raw).encode()).max_restarts == 3
    assert decode_pod(json.dumps(other).encode()).max_restarts == 1  # a sum would make these equal


def test_equal_restarts_go_by_sidecar_restarts_and_only_restartable_init_containers_count() -> None:
    """compareMaxContainerRestarts (Kubernetes 1.28+): the regular containers' count first, then the sidecars'."""
    assert first(pod("calm", max_sidecar_restarts=1), pod("flapping-sidecar", max_sidecar_restarts=4)) == (
        "flapping-sidecar",
        Rule.SIDECAR_RESTARTS,
    )
    assert first(pod("sidecar", max_sidecar_restarts=9), pod("main", max_restarts=1))[0] == "main"
    inits = [b.container(name="proxy", restart_policy="Always"), b.container(name="migrate")]
    raw = b.pod("p", init_containers=inits, init_restarts=[2, 7], restarts=[1])
    decoded = decode_pod(json.dumps(raw).encode())
    assert (decoded.max_restarts, decoded.max_sidecar_restarts) == (1, 2)  # the one-shot init container's 7 ignored
    assert deletion_order([pod("a", max_sidecar_restarts=3), pod("b", max_sidecar_restarts=1)], None, NOW)[
        0
    ].reason == ("before b: 3 sidecar restarts > 1")


def test_newer_goes_first_by_log2_bucket_then_uid() -> None:
    assert first(pod("old", created=NOW - 10_000), pod("new", created=NOW - 100)) == ("new", Rule.CREATED)
    same_bucket = (pod("new", created=NOW - 40, uid="uid-9"), pod("old", created=NOW - 50, uid="uid-1"))
    assert first(*same_bucket) == ("old", Rule.CREATED_UID)
    assert first(pod("timed", created=NOW - 100), pod("zero", created=None)) == ("zero", Rule.CREATED)


def test_equal_on_every_rule_is_a_tie_kept_by_name() -> None:
    order = deletion_order([pod("b"), pod("a")], None, NOW)
    assert [r.pod.name for r in order] == ["a", "b"]
    assert order[0].rule is Rule.TIE


# -- precedence: an earlier rule wins over every later one ------------------------------------------------


def test_each_rule_outranks_the_next() -> None:
    assert first(pod("unassigned", node_name="", phase="Running"), pod("pending", phase="Pending"))[0] == "unassigned"
    assert first(pod("pending", phase="Pending", ready=True), pod("not-ready", ready=False))[0] == "pending"
    assert (
        first(pod("not-ready", ready=False, deletion_cost_text="100"), pod("cheap", deletion_cost_text="-100"))[0]
        == "not-ready"
    )
    crowded_costly = pod("crowded", node_name="node-a", deletion_cost_text="5")
    alone_cheap = pod("alone", node_name="node-b", deletion_cost_text="1")
    related = [crowded_costly, alone_cheap, pod("sibling", node_name="node-a")]
    assert first(crowded_costly, alone_cheap, related=related) == ("alone", Rule.DELETION_COST)
    crowded_old = pod("crowded", node_name="node-a", ready_since=NOW - 10_000)
    alone_new = pod("alone", node_name="node-b", ready_since=NOW - 10)
    related = [crowded_old, alone_new, pod("sibling", node_name="node-a")]
    assert first(crowded_old, alone_new, related=related) == ("crowded", Rule.DOUBLED_UP)
    assert (
        first(pod("old-ready", ready_since=NOW - 10_000, max_restarts=9), pod("new-ready", ready_since=NOW - 10))[0]
        == "new-ready"
    )
    assert first(pod("young", created=NOW - 10), pod("restarts", max_restarts=1, created=NOW - 10_000))[0] == "restarts"
    assert first(pod("young", created=NOW - 10), pod("sidecar", max_sidecar_restarts=1, created=NOW - 10_000))[0] == (
        "sidecar"
    )


def test_terminating_and_finished_pods_are_not_candidates() -> None:
    order = deletion_order([pod("running"), pod("gone", terminating=True), pod("done", phase="Failed")], None, NOW)
    assert [r.pod.name for r in order] == ["running"]


def test_to_delete_takes_the_first_n_and_every_rank_has_a_reason() -> None:
    pods = [pod("r1", deletion_cost_text="3"), pod("r2", deletion_cost_text="1"), pod("r3", deletion_cost_text="2")]
    assert [p.name for p in to_delete(pods, 2, None, NOW)] == ["r2", "r3"]
    order = deletion_order(pods, None, NOW)
    assert [r.reason for r in order] == [
        "before r3: pod-deletion-cost 1 < 2",
        "before r1: pod-deletion-cost 2 < 3",
        "last",
    ]
