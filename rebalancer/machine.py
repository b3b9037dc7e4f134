"""What this process may use of the machine (Linux; elsewhere the plain CPU count)."""

from __future__ import annotations

import math
import os
from pathlib import Path


def available_cpus(*, whole: bool = False) -> int:
    """CPUs this process may use: its affinity, capped by a cgroup v2 CPU quota (a container's limit),
    a fraction rounded up (``whole``: down; a 1.5-CPU quota has one whole CPU to run two processes)."""
    count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota == "max":
            return count
        cpus = int(quota) / int(period)
        return max(1, min(count, math.floor(cpus) if whole else math.ceil(cpus)))
    except (OSError, ValueError):
        return count
