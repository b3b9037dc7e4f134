"""The suite's own settings: an example's wall time never fails a property test, and the ports fixtures
take are never shared."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.adapters import prom_fixture
from tests.controlplane import processes
from tests.ports import free_port

SLOWER_THAN_HYPOTHESIS_DEFAULT_DEADLINE = 0.25  # seconds; hypothesis' default deadline is 200 ms


@settings(max_examples=2)
@given(st.integers(min_value=0, max_value=1))
def test_a_slow_example_is_judged_on_its_result_not_its_time(n: int) -> None:
    time.sleep(SLOWER_THAN_HYPOTHESIS_DEFAULT_DEADLINE)
    assert n in (0, 1)


def test_the_suite_profile_has_no_deadline() -> None:
    assert settings().deadline is None


def test_free_ports_are_never_handed_out_twice() -> None:
    """Servers started one after another (a webhook and a metrics listener, say) never get the same port,
    though the kernel may hand a port just released out again."""
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert free_port is processes.free_port is prom_fixture.free_port  # one source for every fixture
