"""The snapshot's private copy of the pod usages: the same entries whatever mapping the usage report holds,
and never the caller's object."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rebalancer.domain.model import PodKey
from rebalancer.planning.snapshot import copied


class _Plain(Mapping[PodKey, int]):
    """A mapping with no copy() of its own."""

    def __init__(self, data: dict[PodKey, int]) -> None:
        self._data = data

    def __getitem__(self, key: PodKey) -> int:
        return self._data[key]

    def __iter__(self) -> Iterator[PodKey]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


WRAPPINGS: dict[str, Callable[[dict[PodKey, int]], Mapping[PodKey, int]]] = {
    "dict": lambda d: d,
    "proxy of a dict": MappingProxyType,
    "proxy of an OrderedDict": lambda d: MappingProxyType(OrderedDict(d)),
    "plain mapping": _Plain,
    "proxy of a plain mapping": lambda d: MappingProxyType(_Plain(d)),
}

usages = st.dictionaries(
    st.tuples(st.sampled_from(["a", "b", "kube-system"]), st.text(min_size=1)), st.integers(0, 10**6)
)


@pytest.mark.parametrize("wrapping", sorted(WRAPPINGS))
@given(data=usages)
def test_the_copy_is_a_private_dict_of_the_same_entries(wrapping: str, data: dict[PodKey, int]) -> None:
    source = dict(data)
    mapping = WRAPPINGS[wrapping](source)

    found = copied(mapping)

    assert type(found) is dict
    assert found == data
    assert found is not source
    source[("late", "pod")] = 1  # the caller changes its own mapping afterwards
    assert ("late", "pod") not in found
