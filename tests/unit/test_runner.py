"""The service's scheduling core: cron semantics, single flight, alerts, hot reload, graceful stop."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from rebalancer.actions.evictor import EvictorReport
from rebalancer.domain.errors import MetricsUnavailable
from rebalancer.domain.settings.cron import cron_trigger
from rebalancer.planning.plan import EvictionPlan, NodeClass, NodeDecision, StrategyResult, Unrelieved
from rebalancer.policy import Policy
from rebalancer.service.runner import CycleResult, Service, Trigger

UTC = ZoneInfo("UTC")
GOOD = "strategies:\n- {kind: LowNodeUtilization, thresholds: {cpu: 20}, targetThresholds: {cpu: 70}, schedule: {interval: 1h}}\n"
SERVABLE = GOOD + "service: {webhook: {allowUnauthenticated: true}}\n"  # serve starts with it (and takes it on reload)


class RecordingMetrics:
    def __init__(self) -> None:
        self.cycles: list[str] = []
        self.partial: list[bool] = []  # an alert's cycle keeps the other nodes' classes
        self.failures: list[str] = []
        self.reloads: list[str] = []
        self.restart_required: list[bool] = []

    def observe_cycle(
        self, trigger: str, seconds: float, plan: EvictionPlan, report: EvictorReport | None, *, partial: bool = False
    ) -> None:
        self.cycles.append(trigger)
        self.partial.append(partial)

    def cycle_failed(self, reason: str) -> None:
        self.failures.append(reason)

    def policy_reload(self, result: str, *, restart_required: bool = False) -> None:
        self.reloads.append(result)
        self.restart_required.append(restart_required)


class Cycles:
    """The injected cycle: records triggers; can be held to keep a cycle in flight."""

    def __init__(self) -> None:
        self.triggers: list[Trigger] = []
        self.release = threading.Event()
        self.release.set()
        self.entered = threading.Event()

    def __call__(self, policy: Policy, trigger: Trigger) -> CycleResult:
        self.triggers.append(trigger)
        self.entered.set()
        assert self.release.wait(10)
        return CycleResult(EvictionPlan(0.0, ()), EvictorReport())


def next_fire(expression: str, after: datetime) -> datetime:
    fire = cron_trigger(expression, UTC).get_next_fire_time(None, after)
    assert fire is not None
    return fire


@pytest.mark.parametrize(
    ("expression", "weekday"),
    [("0 9 * * 1", 0), ("0 9 * * 0", 6), ("0 9 * * 7", 6), ("0 9 * * 5", 4), ("0 9 * * sat", 5)],
)
def test_cron_day_of_week_counts_from_sunday_like_crontab(expression: str, weekday: int) -> None:
    assert next_fire(expression, datetime(2026, 11, 18, 12, tzinfo=UTC)).weekday() == weekday


def test_cron_ranges_keep_crontab_meaning() -> None:
    fires = {next_fire("30 2 * * 1-5", datetime(2026, 11, d, 3, tzinfo=UTC)).weekday() for d in range(16, 23)}
    assert fires == {0, 1, 2, 3, 4}


def service(tmp_path: Path, leader: bool = True) -> tuple[Service, Cycles, RecordingMetrics, Path]:
    path = tmp_path / "policy.yaml"
    path.write_text(GOOD)
    cycles, metrics = Cycles(), RecordingMetrics()
    return Service(path, cycles, metrics, lambda: leader), cycles, metrics, path


def test_follower_runs_no_cycle(tmp_path: Path) -> None:
    svc, cycles, _, _ = service(tmp_path, leader=False)
    assert svc.run(Trigger("schedule", (0,))) is None
    assert cycles.triggers == []
    assert not svc.ready()


def test_a_cycle_marks_the_service_ready(tmp_path: Path) -> None:
    svc, _, metrics, _ = service(tmp_path)
    assert svc.run(Trigger("schedule", (0,))) is not None
    assert metrics.cycles == ["schedule"]
    assert svc.ready()


def test_invalid_policy_on_reload_keeps_the_last_good_one(tmp_path: Path) -> None:
    svc, _, metrics, path = service(tmp_path)
    path.write_text(SERVABLE.replace("cpu: 20", "cpu: 90"))  # thresholds above targetThresholds
    assert svc.reload() is False
    assert metrics.reloads == ["invalid"]
    assert svc.policy.strategies[0].thresholds.cpu == 20
    path.write_text(SERVABLE.replace("cpu: 20", "cpu: 25"))
    assert svc.reload() is True
    assert metrics.reloads == ["invalid", "applied"]
    assert svc.policy.strategies[0].thresholds.cpu == 25
    assert svc.reload() is False  # unchanged file: nothing to do


def test_a_follower_applies_a_reloaded_policy_at_once(tmp_path: Path) -> None:
    """The watch cache a reloaded policy asks for is built on followers too: a replica that leads later has
    the cluster at hand, as at start. A policy the reload refuses is never applied."""
    path = tmp_path / "policy.yaml"
    path.write_text(SERVABLE)
    applied: list[Policy] = []
    svc = Service(path, Cycles(), RecordingMetrics(), lambda: False, reloaded=applied.append)
    path.write_text(SERVABLE.replace("cpu: 20", "cpu: 90"))  # invalid: thresholds above targetThresholds
    assert svc.reload() is False
    assert applied == []
    path.write_text(SERVABLE.replace("cpu: 20", "cpu: 25"))
    assert svc.reload() is True
    assert applied == [svc.policy]
    assert applied[0].strategies[0].thresholds.cpu == 25


def test_alerts_are_coalesced_per_node_then_cooled_down(tmp_path: Path) -> None:
    svc, cycles, metrics, _ = service(tmp_path)
    cycles.release.clear()
    svc.start()
    try:
        before = time.time()
        first = svc.submit_alerts([("n1", "firing", ""), ("n2", "firing", ""), (None, "firing", "unknown node x")])
        after = time.time()
        assert [d.action for d in first] == ["queued", "queued", "unknown-node"]
        assert cycles.entered.wait(5)
        again = svc.submit_alerts([("n1", "firing", ""), ("n3", "resolved", "")])
        assert [d.action for d in again] == ["already-queued", "resolved"]
        cycles.release.set()
        deadline = threading.Event()
        for _ in range(100):
            if svc.submit_alerts([("n1", "firing", "")])[0].action == "cooldown":
                break
            deadline.wait(0.05)
        assert svc.submit_alerts([("n2", "firing", "")])[0].action == "cooldown"
    finally:
        svc.stop()
    alert_cycles = [t for t in cycles.triggers if t.kind == "alert"]
    assert alert_cycles[0].nodes == frozenset({"n1", "n2"})
    queued_at = alert_cycles[0].queued_at  # when the alert was queued, for the cycle's timeline
    assert queued_at is not None and before <= queued_at <= after
    assert dict(zip(metrics.cycles, metrics.partial, strict=True)) == {"schedule": False, "alert": True}


def _decided(node: str, node_class: NodeClass) -> NodeDecision:
    known = node_class is not NodeClass.UNKNOWN
    reason = "usage known" if known else "no usage data for this node"
    return NodeDecision(
        "LowNodeUtilization", node, "general", node_class, reason, 3500 if known else None, 4000,
        87.5 if known else None, 20, 70,
    )  # fmt: skip


UNKNOWN_N1 = EvictionPlan(
    0.0,
    (StrategyResult("LowNodeUtilization", (), (_decided("n1", NodeClass.UNKNOWN), _decided("n2", NodeClass.HOT)), ()),),
)


@pytest.mark.parametrize(
    ("outcome", "cooled"),
    [
        (UNKNOWN_N1, {"n2"}),  # Prometheus answered nothing for n1: only n2 was judged
        (replace(UNKNOWN_N1, blocked="usage source failed, no evictions this cycle: x"), set()),
        (MetricsUnavailable("cannot reach Prometheus"), set()),  # the cycle failed
    ],
    ids=["no-usage-for-one-node", "usage-read-failed", "cycle-failed"],
)
def test_only_nodes_the_alert_cycle_judged_start_the_cooldown(
    tmp_path: Path, outcome: EvictionPlan | MetricsUnavailable, cooled: set[str]
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(GOOD + "service: {runOnStart: false}\n")
    alert_cycles: list[Trigger] = []

    def cycle(policy: Policy, trigger: Trigger) -> CycleResult:
        alert_cycles.append(trigger)
        if isinstance(outcome, MetricsUnavailable):
            raise outcome
        return CycleResult(outcome, EvictorReport())

    svc = Service(path, cycle, RecordingMetrics(), lambda: True)
    svc.start()
    try:
        assert [d.action for d in svc.submit_alerts([("n1", "firing", ""), ("n2", "firing", "")])] == ["queued"] * 2
        again: dict[str | None, str] = {}

        def settled() -> bool:  # the worker settles both nodes at once, after the cycle
            again.update((d.node, d.action) for d in svc.submit_alerts([("n1", "firing", ""), ("n2", "firing", "")]))
            return "already-queued" not in again.values()

        wait_until(settled)
    finally:
        svc.stop()
    assert alert_cycles[0].nodes == frozenset({"n1", "n2"})
    assert again == {node: "cooldown" if node in cooled else "queued" for node in ("n1", "n2")}


def test_start_runs_each_strategy_once_and_stop_waits_for_the_cycle_in_flight(tmp_path: Path) -> None:
    svc, cycles, metrics, _ = service(tmp_path)
    cycles.release.clear()
    svc.start()
    assert cycles.entered.wait(5)  # the first scheduled run starts at once, not an interval later
    assert cycles.triggers[0] == Trigger("schedule", (0,))
    stopper = threading.Thread(target=svc.stop)
    stopper.start()
    stopper.join(0.3)
    assert stopper.is_alive()  # still waiting for the eviction in flight
    cycles.release.set()
    stopper.join(10)
    assert not stopper.is_alive()
    assert metrics.cycles == ["schedule"]


def test_housekeeping_runs_at_start_only_while_leading_and_a_failure_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from rebalancer.domain.errors import KubeUnavailable

    path = tmp_path / "policy.yaml"
    path.write_text(GOOD.replace("interval: 1h", "interval: 1d"))
    leading = {"now": False}
    swept: list[Policy] = []
    started = threading.Event()

    def sweep(policy: Policy) -> None:
        swept.append(policy)
        started.set()
        raise KubeUnavailable("the API server did not answer")

    svc = Service(path, Cycles(), RecordingMetrics(), lambda: leading["now"], housekeeping=sweep)
    svc.housekeep()
    assert swept == []  # a follower keeps no house
    leading["now"] = True
    svc.start()
    try:
        assert started.wait(5), "the housekeeping runs once at start"
    finally:
        svc.stop()
    assert swept[0] is svc.policy
    assert "housekeeping failed: KubeUnavailable: the API server did not answer" in caplog.text
    svc.housekeep()
    assert len(swept) == 1  # stopped: no more


def test_a_follower_runs_the_run_on_start_cycle_when_it_first_leads(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="rebalancer.service.runner")
    path = tmp_path / "policy.yaml"
    path.write_text(GOOD)  # every hour: a cycle within the test is the run-on-start one
    leading = {"now": False}
    cycles = Cycles()
    svc = Service(path, cycles, RecordingMetrics(), lambda: leading["now"])
    svc.start()
    try:
        wait_until(lambda: "not the leader yet" in caplog.text)  # the first run came while following
        assert cycles.triggers == []
        leading["now"] = True
        svc.leadership_changed(True)
        assert cycles.entered.wait(5), "the run-on-start cycle runs once leading, not an hour later"
        assert cycles.triggers == [Trigger("schedule", (0,))]
        leading["now"] = False
        svc.leadership_changed(False)
        leading["now"] = True
        svc.leadership_changed(True)  # leading again: the schedule goes on, no second start-up cycle
        time.sleep(0.5)
        assert cycles.triggers == [Trigger("schedule", (0,))]
    finally:
        svc.stop()


def test_a_replica_leading_at_start_runs_the_run_on_start_cycle_once(tmp_path: Path) -> None:
    svc, cycles, _, _ = service(tmp_path)
    svc.start()
    try:
        assert cycles.entered.wait(5)
        svc.leadership_changed(True)  # the election reports leadership after the first run
        time.sleep(0.5)
        assert cycles.triggers == [Trigger("schedule", (0,))]
    finally:
        svc.stop()


def test_without_run_on_start_leading_runs_nothing_before_the_schedule(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(GOOD + "service: {runOnStart: false}\n")
    cycles = Cycles()
    svc = Service(path, cycles, RecordingMetrics(), lambda: True)
    svc.start()
    try:
        svc.leadership_changed(True)
        time.sleep(0.5)
        assert cycles.triggers == []
    finally:
        svc.stop()


def test_a_follower_says_once_that_it_skips_cycles(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="rebalancer.service.runner")
    svc, _, _, _ = service(tmp_path, leader=False)
    for _ in range(3):
        assert svc.run(Trigger("schedule", (0,))) is None
    said = [(r.levelno, r.getMessage()) for r in caplog.records if "not the leader" in r.getMessage()]
    assert said[0] == (logging.INFO, "not the leader: schedule cycles are skipped while another replica leads")
    assert [level for level, _ in said[1:]] == [logging.DEBUG, logging.DEBUG]  # no line per tick at INFO


def test_each_cycle_logs_one_info_line_saying_why_nothing_was_done(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="rebalancer.service.runner")
    path = tmp_path / "policy.yaml"
    path.write_text(GOOD)
    decision = NodeDecision("LowNodeUtilization", "n1", "general", NodeClass.HOT, "hot", 3500, 4000, 87.5, 20, 70)
    plan = EvictionPlan(
        0.0, (StrategyResult("LowNodeUtilization", (), (decision,), (), (), {"n1": Unrelieved.NO_ROOM}),)
    )

    def cycle(policy: Policy, trigger: Trigger) -> CycleResult:
        return CycleResult(plan, EvictorReport())

    svc = Service(path, cycle, RecordingMetrics(), lambda: True)
    assert svc.run(Trigger("alert", (0,), frozenset({"n1"}))) is not None
    [line] = [r for r in caplog.records if r.getMessage().startswith("alert cycle")]
    assert line.levelno == logging.INFO
    assert line.getMessage().startswith(
        "alert cycle for n1: 1 hot node(s), 0 planned, nothing done: not relieved: no-room (n1); "
    )


def wait_until(condition: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.02)
