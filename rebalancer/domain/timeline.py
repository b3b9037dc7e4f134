"""Where the time of one cycle goes: named steps and moments, for the log and the benchmarks.

A measurement aid, not a clock for decisions: nothing is decided from it. Durations come from
``time.perf_counter``; the origin is a wall-clock time (epoch seconds) so that another process (a
benchmark, the API server's own record) can line its moments up with the cycle's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class Timeline:
    """``origin``: when the work was asked for (an alert's queueing), epoch seconds; default: now.

    :meth:`step` adds up the time spent in a named step (a step entered twice counts both times);
    :meth:`mark` notes the first time a moment happens, as seconds after the origin."""

    def __init__(
        self,
        origin: float | None = None,
        *,
        clock: Callable[[], float] = time.perf_counter,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._clock = clock
        now_wall, now = wall(), clock()
        self.origin = now_wall if origin is None else origin
        self._zero = now - (now_wall - self.origin)  # the origin on the perf_counter scale
        self._steps: dict[str, float] = {}
        self._marks: dict[str, float] = {"picked": now - self._zero}

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        started = self._clock()
        try:
            yield
        finally:
            self._steps[name] = self._steps.get(name, 0.0) + self._clock() - started

    def add(self, name: str, seconds: float) -> None:
        """Time spent in ``name`` measured elsewhere (the collector's pauses during the cycle, say)."""
        self._steps[name] = self._steps.get(name, 0.0) + seconds

    def mark(self, name: str) -> None:
        """The first time ``name`` happens (later calls keep the first)."""
        self._marks.setdefault(name, self._clock() - self._zero)

    def steps(self) -> dict[str, float]:
        """Seconds spent per step, in the order the steps were first entered."""
        return dict(self._steps)

    def marks(self) -> dict[str, float]:
        """Seconds after the origin per moment (``picked``: when the timeline was made, i.e. the work began)."""
        return dict(self._marks)

    def text(self) -> str:
        """``step=ms ... @moment=+ms ... origin=epoch``: one log line's worth, easy to read and to parse."""
        steps = " ".join(f"{name}={seconds * 1000:.1f}" for name, seconds in self._steps.items())
        marks = " ".join(f"@{name}=+{seconds * 1000:.1f}" for name, seconds in self._marks.items())
        return f"{steps} {marks} origin={self.origin:.6f}".strip()
