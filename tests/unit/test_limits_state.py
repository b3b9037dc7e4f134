"""Limiter state: strict JSON round trip; corrupt, foreign and other-version state raise StateCorrupt."""

from __future__ import annotations

import json

import pytest

from rebalancer.planning.limits import CycleCounts, LimiterState, StateCorrupt, check, reserve
from rebalancer.planning.limits.state import CLOCK_SKEW_SECONDS, SCHEMA, VERSION, Bucket, Reservation
from tests.unit.limits_builders import DAY, HOUR, T0, limits, request

SETTINGS = limits(
    """
    global: {rate: {perMinute: 2, burst: 5}, maxPerPeriod: [{count: 20, period: 1h}],
             pools: {gpu: {rate: {perMinute: 1, burst: 1}}}}
    node: {cooldown: 10m}
    workload: {minInterval: 2h}
    """
)


def busy_state() -> LimiterState:
    state = LimiterState()
    for i, (pool, workload) in enumerate([("general", "web"), ("gpu", None), ("general", "api")]):
        state = reserve(request(f"p{i}", node=f"n{i}", pool=pool, workload=workload), state, SETTINGS, T0 + i)
    return state


def test_round_trip_is_exact_and_deterministic() -> None:
    state = busy_state()
    text = state.to_json()
    again = LimiterState.from_json(text, T0 + 10)
    assert again == state
    assert again.to_json() == text
    doc = json.loads(text)
    assert (doc["schema"], doc["version"]) == (SCHEMA, VERSION)
    assert doc["reservations"][1] == {
        "at": T0 + 1,
        "pool": "gpu",
        "node": "n1",
        "workload": None,
        "namespace": "default",
        "pod": "p1",
    }
    assert doc["buckets"]["global"] == {"level": pytest.approx(2 + 2 / 30), "updatedAt": T0 + 2}  # 3 taken, 2 s refill
    assert doc["workloadLastEviction"] == {"Deployment/default/api": T0 + 2, "Deployment/default/web": T0}
    assert LimiterState.from_json(LimiterState().to_json(), T0) == LimiterState()


def test_decisions_are_the_same_after_a_round_trip() -> None:
    state = busy_state()
    again = LimiterState.from_json(state.to_json(), T0)
    for now in (T0 + 5, T0 + 600, T0 + HOUR):
        for req in (request("x", node="n0"), request("y", pool="gpu", node="n5", workload="z")):
            assert check(req, again, CycleCounts(), SETTINGS, now) == check(req, state, CycleCounts(), SETTINGS, now)


def good() -> dict[str, object]:
    result: dict[str, object] = json.loads(busy_state().to_json())
    return result


def edited(path: list[str | int], value: object) -> str:
    doc = good()
    target: object = doc
    for key in path[:-1]:
        target = target[key]  # type: ignore[index]
    if value is _DELETE:
        del target[path[-1]]  # type: ignore[attr-defined]
    else:
        target[path[-1]] = RAW if isinstance(value, str) and value.startswith("raw:") else value  # type: ignore[index]
    return json.dumps(doc).replace(json.dumps(RAW), value.removeprefix("raw:") if isinstance(value, str) else "")


RAW = "@raw@"


_DELETE = object()

CORRUPT = [
    ("", "not JSON"),
    ("{", "not JSON"),
    ("[1, 2]", "not limiter state"),
    ('{"apiVersion": "v1", "kind": "ConfigMap"}', "not limiter state"),
    ('{"schema": "someone-else/state", "version": 1}', "foreign schema 'someone-else/state'"),
    (edited(["version"], 0), "schema version 0 is not supported (this build reads 1)"),
    (edited(["version"], "1"), "Expected `int`, got `str` - at `$.version`"),
    (edited(["extra"], 1), "unknown field `extra`"),
    (edited(["reservations"], _DELETE), "missing required field `reservations`"),
    (edited(["reservations", 0, "at"], "yesterday"), "Expected `float`, got `str` - at `$.reservations[0].at`"),
    (edited(["reservations", 0, "at"], True), "Expected `float`, got `bool`"),
    (edited(["reservations", 0, "at"], -5), "$.reservations[0].at: -5.0 is not a time"),
    (edited(["reservations", 0, "at"], T0 + 2 * HOUR), "7200 s after now"),
    (edited(["reservations", 0, "node"], ""), "$.reservations[0].node is empty"),
    (edited(["reservations", 0, "workload"], "web"), "is not Kind/namespace/name"),
    (edited(["reservations", 0, "color"], "red"), "unknown field `color`"),
    (edited(["buckets", "node/n1"], {"level": 1, "updatedAt": T0}), "unknown scope"),
    (edited(["buckets", "global", "level"], None), "Expected `float`, got `null`"),
    (edited(["buckets", "global", "level"], -1.5), "$.buckets['global'].level: -1.5 is below -1, which no reservation"),
    (edited(["buckets", "global", "updatedAt"], "raw:1e400"), "Number out of range"),
    (edited(["nodeLastEviction", "n1"], T0 + DAY), "after now"),
    (edited(["workloadLastEviction", "x/y"], T0), "'x/y' is not Kind/namespace/name"),
]


@pytest.mark.parametrize(("text", "problem"), CORRUPT)
def test_corrupt_state_is_refused_with_the_problem_named(text: str, problem: str) -> None:
    with pytest.raises(StateCorrupt) as info:
        LimiterState.from_json(text, T0)
    assert problem in info.value.problem
    assert isinstance(info.value, ValueError)
    assert str(info.value).startswith("limiter state corrupt: ")


def test_a_newer_builds_state_is_told_apart_from_corrupt_state() -> None:
    with pytest.raises(StateCorrupt) as info:
        LimiterState.from_json(edited(["version"], 2), T0)
    assert info.value.newer
    assert str(info.value).startswith(
        "limiter state written by a newer rebalancer: schema version 2, and this build reads version 1"
    )
    with pytest.raises(StateCorrupt) as older:
        LimiterState.from_json(edited(["version"], 0), T0)
    assert not older.value.newer


def test_a_little_clock_skew_is_accepted() -> None:
    state = LimiterState.from_json(edited(["reservations", 0, "at"], T0 + 30 * 60), T0)
    assert state.reservations[0].at == T0 + 30 * 60


def test_replacement_blocks_every_window_then_keeps_the_rate() -> None:
    horizon = SETTINGS.horizon_seconds
    state = LimiterState.replacement(T0, SETTINGS.bucket_scopes(), horizon)
    assert state.buckets == {"global": Bucket(0.0, T0), "pool/gpu": Bucket(0.0, T0)}
    recovering = check(request(), state, CycleCounts(), SETTINGS, T0 + horizon - 1)
    assert recovering.limiter == "state.recovering"
    assert recovering.retry_at == T0 + horizon
    assert LimiterState.from_json(state.to_json(), T0) == state
    assert state.prune(T0 + horizon, horizon).recovering_until == T0 + horizon  # a slower clock still waits
    after = state.prune(T0 + horizon + CLOCK_SKEW_SECONDS, horizon)
    assert after.recovering_until is None
    assert check(request(), after, CycleCounts(), SETTINGS, T0 + horizon).limiter != "state.recovering"


def test_recovery_time_far_in_the_future_is_corrupt() -> None:
    state = LimiterState.replacement(T0, SETTINGS.bucket_scopes(), 40 * 86_400)
    with pytest.raises(StateCorrupt, match="recoveringUntil"):
        LimiterState.from_json(state.to_json(), T0)


def test_prune_drops_only_what_no_window_reaches() -> None:
    horizon = SETTINGS.horizon_seconds
    assert horizon == 2 * HOUR  # workload.minInterval 2h is the longest span configured
    state = busy_state()  # reservations at T0, T0 + 1, T0 + 2
    late = T0 + horizon + CLOCK_SKEW_SECONDS  # what a clock that much behind reads T0 + horizon
    assert state.prune(late - 1, horizon) == state
    pruned = state.prune(late, horizon)  # the one at T0 no longer counts anywhere, on either clock
    assert [r.pod for r in pruned.reservations] == ["p1", "p2"]
    assert set(pruned.node_last_eviction) == {"n1", "n2"}
    assert set(pruned.workload_last_eviction) == {"Deployment/default/api"}
    empty = state.prune(late + 2, horizon)
    assert (empty.reservations, empty.node_last_eviction, empty.workload_last_eviction) == ((), {}, {})
    assert empty.buckets == state.buckets
    for now in (T0 + horizon, T0 + horizon + 60, late):
        for req in (request("x", node="n1"), request("y", workload="web"), request("z", pool="gpu")):
            assert check(req, pruned, CycleCounts(), SETTINGS, now) == check(req, state, CycleCounts(), SETTINGS, now)


def test_a_clock_a_little_behind_still_counts_what_a_faster_one_pruned() -> None:
    settings = limits("node: {cooldown: 30s}")
    state = reserve(request("a", node="n1"), LimiterState(), settings, T0)
    state = reserve(request("b", node="n2"), state.prune(T0 + 31, 30), settings, T0 + 31)  # stored so
    slower = check(request("c", node="n1"), state.prune(T0 + 26, 30), CycleCounts(), settings, T0 + 26)
    assert slower.limiter == "node.cooldown"  # 26 s after a, on a clock 5 s behind


def test_reservation_fields_are_what_the_request_said() -> None:
    state = reserve(
        request("p", node="n7", pool="gpu", namespace="shop", workload="cart"), LimiterState(), SETTINGS, T0
    )
    assert state.reservations == (Reservation(T0, "gpu", "n7", "Deployment/shop/cart", "shop", "p"),)
