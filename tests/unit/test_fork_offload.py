"""ForkOffload: work run in a forked child comes back whole, or not at all, and the child is always reaped."""

from __future__ import annotations

import os
import threading
import time

import pytest

from rebalancer import offload as offload_module
from rebalancer.offload import ForkOffload, fork_offload


def reaped(pid: int | None) -> bool:
    """``pid`` is no child of this process any more (waited for, not a zombie)."""
    assert pid is not None
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_an_answer_bigger_than_a_pipe_comes_back_whole() -> None:
    offload = ForkOffload(timeout_s=30)
    big = bytes(range(256)) * 40_000  # 10 MB: the child blocks on the pipe until the parent reads
    answer = offload.start(lambda: [big, {"n": 1}]).result()
    assert answer == [big, {"n": 1}]
    (report,) = offload.reports
    assert report.outcome == "answered"
    assert report.private_mb is not None and report.private_mb > 0


def test_the_child_works_on_the_memory_as_it_was_at_the_fork() -> None:
    state = {"value": 1}
    offload = ForkOffload(timeout_s=30)

    def work() -> int:
        state["value"] += 10  # the child's own copy
        return state["value"]

    ahead = offload.start(work)
    state["value"] = 100  # the parent's change is not the child's
    assert ahead.result() == 11
    assert state["value"] == 100


def test_work_that_raises_gives_no_answer_and_says_why() -> None:
    offload = ForkOffload(timeout_s=30)
    assert offload.start(lambda: 1 // 0).result() is None
    assert [r.outcome for r in offload.reports] == [
        "failed in the child: ZeroDivisionError: integer division or modulo by zero"
    ]


def test_an_answer_that_cannot_be_pickled_gives_no_answer_and_says_why() -> None:
    offload = ForkOffload(timeout_s=30)
    assert offload.start(lambda: lambda: 1).result() is None
    (report,) = offload.reports
    assert report.outcome.startswith("failed in the child: ") and "pickle" in report.outcome


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_no_descriptor_or_child_is_left_behind_whichever_way_it_ends() -> None:
    offload = ForkOffload(timeout_s=30)
    before = open_fds()
    answered, raised, cancelled = (offload.start(w) for w in (lambda: 1, lambda: 1 // 0, lambda: time.sleep(30)))
    pids = [answered.pid, raised.pid, cancelled.pid]
    assert answered.result() == 1 and raised.result() is None
    cancelled.cancel()
    assert open_fds() == before
    assert all(reaped(pid) for pid in pids)


def test_a_slow_child_is_not_waited_for_much_longer_than_the_caller_took(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(offload_module, "GRACE_S", 0.2)
    offload = ForkOffload(timeout_s=60)
    ahead = offload.start(lambda: time.sleep(30))
    started = time.monotonic()
    assert ahead.result() is None
    assert time.monotonic() - started < 20
    assert offload.reports[0].outcome == "timed out"


def test_a_child_that_dies_gives_no_answer() -> None:
    offload = ForkOffload(timeout_s=30)
    assert offload.start(lambda: os.kill(os.getpid(), 9)).result() is None
    assert offload.reports[0].outcome == "exit status -9"


def test_a_slow_child_is_killed_at_the_deadline() -> None:
    offload = ForkOffload(timeout_s=0.3)
    started = time.monotonic()
    ahead = offload.start(lambda: time.sleep(30))
    pid = ahead.pid
    assert ahead.result() is None
    assert time.monotonic() - started < 20
    assert offload.reports[0].outcome == "timed out"
    assert reaped(pid)


def test_cancel_kills_and_reaps_and_later_calls_are_harmless() -> None:
    offload = ForkOffload(timeout_s=30)
    ahead = offload.start(lambda: time.sleep(30))
    pid = ahead.pid
    ahead.cancel()
    assert reaped(pid) and ahead.pid is None
    ahead.cancel()
    assert ahead.result() is None
    assert [r.outcome for r in offload.reports] == ["cancelled"]


def test_no_offload_beside_other_threads_or_on_one_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert fork_offload() is None  # a lock another thread holds would stay held in the child
    finally:
        stop.set()
        other.join()
    monkeypatch.setattr(offload_module, "available_cpus", lambda whole: 1)
    assert fork_offload() is None
    monkeypatch.setattr(offload_module, "available_cpus", lambda whole: 2)
    if threading.active_count() == 1:  # under pytest other fixtures' threads may be running
        assert isinstance(fork_offload(), ForkOffload)


def test_a_refused_fork_gives_no_answer_and_no_child(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse() -> int:
        raise BlockingIOError(11, "Resource temporarily unavailable")  # what fork() raises at a pids limit

    monkeypatch.setattr(os, "fork", refuse)
    offload = ForkOffload(timeout_s=30)
    ahead = offload.start(lambda: 1)
    assert ahead.pid is None and ahead.result() is None
    ahead.cancel()
    assert [r.outcome for r in offload.reports] == ["not started: [Errno 11] Resource temporarily unavailable"]
