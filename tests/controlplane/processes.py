"""Child processes of the control plane: each with its log file, started in its own process group, stopped
with SIGTERM then SIGKILL, and waited for through a readiness check."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tests.ports import free_port

__all__ = ["free_port"]


class StartFailed(Exception):
    """A process exited or never became ready; the text carries the end of its log."""


class Process:
    def __init__(self, name: str, argv: Sequence[str | Path], log: Path) -> None:
        self.name, self.log = name, log
        self.argv = [str(a) for a in argv]
        self._popen: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self._popen is not None
        return self._popen.pid

    def start(self) -> Process:
        with self.log.open("ab") as out:
            self._popen = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        return self

    def running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def tail(self, lines: int = 25) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def wait_ready(self, ready: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running():
                raise StartFailed(f"{self.name} exited; last log lines:\n{self.tail()}")
            try:
                if ready():
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise StartFailed(f"{self.name} was not ready within {timeout:g}s; last log lines:\n{self.tail()}")

    def stop(self, grace: float = 10.0) -> None:
        popen = self._popen
        if popen is None or popen.poll() is not None:
            return
        try:
            os.killpg(popen.pid, signal.SIGTERM)
            popen.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(popen.pid, signal.SIGKILL)
            popen.wait(grace)
        except ProcessLookupError:
            pass

    def cpu_seconds(self) -> float:
        """User plus system CPU time of the process so far, from /proc (children not included)."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / ticks
