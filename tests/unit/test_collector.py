"""The garbage collector's one home: paused and restored, young objects untracked, pauses timed."""

from __future__ import annotations

import ast
import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from rebalancer.app.collector import CollectorPauses, paused, untrack_young
from tests.fake_clock import FakeClock

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def collector_on() -> Iterator[None]:
    was_on = gc.isenabled()
    gc.enable()
    try:
        yield
    finally:
        gc.enable() if was_on else gc.disable()


@pytest.mark.usefixtures("collector_on")
def test_paused_restores_the_collector_on_error_and_never_turns_it_on() -> None:
    with pytest.raises(RuntimeError), paused():  # noqa: PT012
        assert not gc.isenabled()
        raise RuntimeError("boom")
    assert gc.isenabled()
    gc.disable()
    with paused():
        pass
    assert not gc.isenabled()


@pytest.mark.usefixtures("collector_on")
def test_young_tuples_are_untracked_when_the_collector_is_paused() -> None:
    with paused():
        keys = [(f"ns-{i % 7}", f"pod-{i}") for i in range(2_000)]
        assert all(gc.is_tracked(key) for key in keys)
        untrack_young()
        assert not any(gc.is_tracked(key) for key in keys)


@pytest.mark.usefixtures("collector_on")
def test_a_running_collector_is_left_to_its_own_passes() -> None:
    started: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started.append(info["generation"])

    gc.callbacks.append(count)
    try:
        untrack_young()
    finally:
        gc.callbacks.remove(count)
    assert started == []


def test_collector_pauses_sum_the_collections_while_attached() -> None:
    pauses = CollectorPauses()
    pauses.attach()
    try:
        gc.collect()
        gc.collect()
    finally:
        pauses.detach()
    counted = pauses.seconds
    assert counted > 0
    gc.collect()
    assert pauses.seconds == counted

    clock = FakeClock()
    timed = CollectorPauses(clock)
    timed.callback("start", {"generation": 2})
    clock.advance(0.05)
    timed.callback("stop", {"generation": 2})
    timed.callback("stop", {"generation": 0})  # a stop without its start (attached mid-collection)
    assert timed.seconds == 0.05


def test_no_other_module_touches_the_collector() -> None:
    touching = []
    for path in sorted([*ROOT.joinpath("rebalancer").rglob("*.py"), *ROOT.joinpath("strategies").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module == "gc":
                names = ["gc"]
            if "gc" in names:
                touching.append(str(path.relative_to(ROOT)))
    assert touching == ["rebalancer/app/collector.py"]
