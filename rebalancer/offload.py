"""Planning work run ahead in a forked copy of this process, on a CPU that would otherwise idle.

After the listing, a CronJob cycle plans on one CPU while the others wait. A strategy that can split
its work (:class:`strategies.base.Offload`) hands the second part to :meth:`ForkOffload.start`: a
``fork()``-ed child computes it from the same memory (copy-on-write: nothing is sent to it) and
sends the result back pickled through a pipe, while this process does the first part. The strategy
decides whether the answer is still valid and otherwise computes the part itself, so a child that
fails, is too slow or is cancelled costs time, never a different plan.

Forking is only safe in a process with one thread (a lock held by another thread at the fork stays
held in the child forever), and only pays with a second CPU: :func:`fork_offload` gives an offload
only then. The child does no I/O but its pipe, resets the termination signals to their defaults, and
leaves with ``os._exit`` (no atexit handlers, no inherited buffers flushed twice).
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import select
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from rebalancer.machine import available_cpus

log = logging.getLogger(__name__)

T = TypeVar("T")

MIN_SPLIT = 64  # items (hot nodes) below which a fork costs more than half the work saves
TIMEOUT_S = 120.0  # a child that has not answered by then is killed; the caller computes its part
_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class AheadReport:
    """One child: how long it ran (fork to answer or end), its private memory (copied-on-write pages
    and its own allocations; None where /proc is missing) and how it ended."""

    seconds: float
    private_mb: float | None
    outcome: str  # "answered", "cancelled", or why it failed


@dataclass(slots=True)
class ForkOffload:
    """Runs a part of a plan in a forked child. ``min_split``: the fewest items worth splitting
    (strategies ask). ``reports``: one per child, in order (benchmarks read the children's memory)."""

    min_split: int = MIN_SPLIT
    timeout_s: float = TIMEOUT_S
    reports: list[AheadReport] = field(default_factory=list)

    def start(self, work: Callable[[], T]) -> Forked[T]:
        """Fork a child that runs ``work()`` on this process's memory as it is now."""
        started = time.perf_counter()
        try:
            read_fd, write_fd = os.pipe()
        except OSError as e:  # out of file descriptors: this process does the work itself
            return self._refused(e, started)
        try:
            pid = os.fork()
        except OSError as e:  # out of memory or processes (a container's pids limit)
            os.close(read_fd)
            os.close(write_fd)
            return self._refused(e, started)
        if pid == 0:  # the child: never returns into the caller's code
            _run_child(work, read_fd, write_fd)
        os.close(write_fd)
        return Forked(pid, read_fd, started, self.timeout_s, self.reports)

    def _refused(self, error: OSError, started: float) -> Forked[T]:
        log.warning("no planning child (%s); this process plans alone", error)
        self.reports.append(AheadReport(time.perf_counter() - started, None, f"not started: {error}"))
        return Forked(None, -1, started, self.timeout_s, self.reports)


def fork_offload() -> ForkOffload | None:
    """An offload when this process can fork safely and has a CPU to spare, else None."""
    why = _why_one_cpu()
    if why is not None:
        log.debug("planning on one CPU: %s", why)
        return None
    return ForkOffload()


def _why_one_cpu() -> str | None:
    if not hasattr(os, "fork"):
        return "no fork() here"
    if threading.active_count() > 1:
        return f"{threading.active_count()} threads"
    if available_cpus() < 2:
        return "one CPU available"
    return None


class Forked(Generic[T]):
    """A child's answer to come: :meth:`result` waits for it (None: no usable answer), :meth:`cancel`
    kills the child. Either reaps it; calling both, or either twice, is harmless."""

    def __init__(
        self, pid: int | None, read_fd: int, started: float, timeout_s: float, reports: list[AheadReport]
    ) -> None:
        self._pid: int | None = pid
        self._fd = read_fd
        self._started = started
        self._deadline = started + timeout_s
        self._reports = reports

    @property
    def pid(self) -> int | None:
        """The child's process id while it is not reaped."""
        return self._pid

    def result(self) -> T | None:
        if self._pid is None:
            return None
        chunks: list[bytes] = []
        why = self._read(chunks)
        code = self._reap(kill=why is not None)
        if why is None and code != 0:
            why = f"exit status {code}"
        answer: tuple[T, float | None] | None = None
        if why is None:
            try:
                answer = pickle.loads(b"".join(chunks))
            except Exception as e:  # a child that died mid-write leaves a truncated pickle
                why = f"unreadable answer ({e})"
        if answer is None:
            self._report(None, why or "no answer")
            log.warning("the planning child gave no usable answer (%s); this process plans its part itself", why)
            return None
        value, private_mb = answer
        self._report(private_mb, "answered")
        return value

    def cancel(self) -> None:
        if self._pid is not None:
            self._reap(kill=True)
            self._report(None, "cancelled")

    def _read(self, chunks: list[bytes]) -> str | None:
        """The child's whole answer into ``chunks``; why not (None: read to the end)."""
        while True:
            left = self._deadline - time.perf_counter()
            if left <= 0:
                return "timed out"
            ready, _, _ = select.select([self._fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._fd, _CHUNK)
            if not chunk:
                return None
            chunks.append(chunk)

    def _reap(self, *, kill: bool) -> int:
        pid, self._pid = self._pid, None
        assert pid is not None
        os.close(self._fd)
        if kill:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status)

    def _report(self, private_mb: float | None, outcome: str) -> None:
        self._reports.append(AheadReport(time.perf_counter() - self._started, private_mb, outcome))


def _run_child(work: Callable[[], object], read_fd: int, write_fd: int) -> None:
    code = 70
    try:
        os.close(read_fd)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        value = work()
        data = memoryview(pickle.dumps((value, _private_mb()), protocol=pickle.HIGHEST_PROTOCOL))
        while data:
            data = data[os.write(write_fd, data) :]
        code = 0
    except BaseException:  # the parent sees the exit status and plans this part itself
        pass
    finally:
        os._exit(code)


def _private_mb() -> float | None:
    """This process's private resident memory (Linux smaps_rollup), in MB."""
    try:
        text = Path("/proc/self/smaps_rollup").read_text()
    except OSError:
        return None
    kb = sum(
        int(line.split()[1]) for line in text.splitlines() if line.startswith(("Private_Clean:", "Private_Dirty:"))
    )
    return kb / 1024
