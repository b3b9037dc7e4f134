"""serve raises its soft open-files limit for the listeners' connections, never above the hard limit, and
lowers the connection cap to what the limit holds."""

from __future__ import annotations

import resource
from collections.abc import Iterator

import pytest

from rebalancer.service import connections_allowed, raise_open_files_limit
from rebalancer.service.server import FILES_RESERVED


@pytest.fixture
def limits() -> Iterator[tuple[int, int]]:
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    yield before
    resource.setrlimit(resource.RLIMIT_NOFILE, before)


def test_the_soft_limit_is_raised_towards_what_is_wanted_never_lowered(limits: tuple[int, int]) -> None:
    _, hard = limits
    if hard != resource.RLIM_INFINITY and hard < 2000:
        pytest.skip(f"a hard limit of {hard} open files")
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    assert raise_open_files_limit(100) == 1024  # never lowered
    assert raise_open_files_limit(2000) == 2000 == resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def test_the_connection_cap_fits_in_the_hard_limit(limits: tuple[int, int]) -> None:
    _, hard = limits
    if hard == resource.RLIM_INFINITY:
        pytest.skip("no hard limit on open files here")
    assert connections_allowed(10 * hard) == (hard - FILES_RESERVED) // 2  # both listeners, the rest kept
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == hard  # raised as far as it goes
    assert connections_allowed(16) == 16
