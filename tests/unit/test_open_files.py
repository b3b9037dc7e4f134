"""serve raises its soft open-files limit for the listeners' connections, never above the hard limit, and
lowers the connection cap to what the limit holds.

Each test runs in a forked child given limits of its own (a hard limit of at most 4,096, the soft limit a
quarter of it), so it runs the same on every machine and leaves the test process's limits alone."""

from __future__ import annotations

import multiprocessing
import resource
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor

from rebalancer.service import connections_allowed, raise_open_files_limit
from rebalancer.service.server import FILES_RESERVED


def _hard_limit() -> int:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return 4096 if hard == resource.RLIM_INFINITY else min(hard, 4096)


def _limited(check: Callable[[int], None], hard: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard // 4, hard))
    check(hard)


def in_child(check: Callable[[int], None]) -> None:
    """``check(hard)`` in a forked child whose open-files limits are (hard // 4, hard); its failure is ours."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
        pool.submit(_limited, check, _hard_limit()).result()


def _raised_never_lowered(hard: int) -> None:
    soft = hard // 4
    assert raise_open_files_limit(soft // 2) == soft  # never lowered
    assert raise_open_files_limit(hard // 2) == hard // 2 == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert raise_open_files_limit(10 * hard) == hard  # never above the hard limit


def _cap_fits(hard: int) -> None:
    assert connections_allowed(10 * hard) == (hard - FILES_RESERVED) // 2  # both listeners, the rest kept
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == hard  # raised as far as it goes
    assert connections_allowed(16) == 16


def test_the_soft_limit_is_raised_towards_what_is_wanted_never_lowered() -> None:
    in_child(_raised_never_lowered)


def test_the_connection_cap_fits_in_the_hard_limit() -> None:
    in_child(_cap_fits)
