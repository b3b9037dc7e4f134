"""The cycle timeline: steps add up, moments count from the origin, and the log line reads back."""

from __future__ import annotations

import re

from rebalancer.domain.timeline import Timeline
from tests.fake_clock import FakeClock


def test_steps_add_up_and_moments_count_from_the_origin() -> None:
    perf, wall = FakeClock(500.0), FakeClock(1_700_000_010.0)
    timeline = Timeline(1_700_000_009.75, clock=perf, wall=wall)  # queued 250 ms before the work began
    with timeline.step("usage"):
        perf.advance(0.040)
    with timeline.step("evict"):
        perf.advance(0.002)
    timeline.mark("eviction-sent")
    perf.advance(0.010)
    timeline.mark("eviction-sent")  # only the first time counts
    with timeline.step("evict"):
        perf.advance(0.003)
    timeline.add("gc", 0.007)

    assert {name: round(seconds, 6) for name, seconds in timeline.steps().items()} == {
        "usage": 0.040,
        "evict": 0.005,
        "gc": 0.007,
    }
    marks = timeline.marks()
    assert round(marks["picked"], 6) == 0.25
    assert round(marks["eviction-sent"], 6) == 0.292


def test_a_step_that_raises_still_counts() -> None:
    perf = FakeClock()
    timeline = Timeline(clock=perf, wall=FakeClock(100.0))
    try:
        with timeline.step("facts"):
            perf.advance(1.5)
            raise RuntimeError("source down")
    except RuntimeError:
        pass
    assert {name: round(seconds, 6) for name, seconds in timeline.steps().items()} == {"facts": 1.5}
    assert timeline.marks() == {"picked": 0.0}


def test_the_text_is_one_line_of_name_value_pairs() -> None:
    perf = FakeClock()
    timeline = Timeline(1_700_000_000.5, clock=perf, wall=FakeClock(1_700_000_000.5))
    with timeline.step("snapshot"):
        perf.advance(0.0123)
    timeline.mark("eviction-sent")

    text = timeline.text()
    assert "\n" not in text
    pairs = dict(re.findall(r"(@?[a-z-]+)=\+?([0-9.]+)", text))
    assert pairs == {"snapshot": "12.3", "@picked": "0.0", "@eviction-sent": "12.3", "origin": "1700000000.500000"}
