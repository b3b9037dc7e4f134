"""SIGTERM stops ``rebalancer serve`` without touching a lock from the signal handler."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator

import pytest

from rebalancer.app.serve import _StopSignals


@pytest.fixture
def restored_handlers() -> Iterator[None]:
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_the_wait_without_setting_the_event(restored_handlers: None, sig: signal.Signals) -> None:
    stop = threading.Event()
    signals = _StopSignals()
    threading.Timer(0.3, os.kill, (os.getpid(), sig)).start()
    signals.wait(stop, poll=0.05)
    assert signals.received
    assert not stop.is_set()  # the handler never takes the Event's lock: it may be held by the main thread


def test_setting_the_event_ends_the_wait(restored_handlers: None) -> None:
    stop = threading.Event()
    signals = _StopSignals()
    threading.Timer(0.2, stop.set).start()
    signals.wait(stop, poll=0.05)
    assert stop.is_set() and not signals.received
