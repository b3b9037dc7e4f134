"""The suite's hypothesis settings: an example's wall time never fails a property test."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

SLOWER_THAN_HYPOTHESIS_DEFAULT_DEADLINE = 0.25  # seconds; hypothesis' default deadline is 200 ms


@settings(max_examples=2)
@given(st.integers(min_value=0, max_value=1))
def test_a_slow_example_is_judged_on_its_result_not_its_time(n: int) -> None:
    time.sleep(SLOWER_THAN_HYPOTHESIS_DEFAULT_DEADLINE)
    assert n in (0, 1)


def test_the_suite_profile_has_no_deadline() -> None:
    assert settings().deadline is None
