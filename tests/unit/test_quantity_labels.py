from __future__ import annotations

import pytest

from rebalancer.domain.labels import LabelSelector, NodeSelectorTerm, Requirement
from rebalancer.domain.quantity import QuantityError, cpu_millis, format_cores, memory_bytes


@pytest.mark.parametrize(
    ("text", "millis"),
    [
        ("250m", 250),
        ("1", 1000),
        ("1.5", 1500),
        ("0.1", 100),
        ("2k", 2_000_000),
        ("1n", 1),
        ("100u", 1),
        ("1e3", 1_000_000),
        (".5", 500),
        ("1E", 10**21),
    ],
)
def test_cpu(text: str, millis: int) -> None:
    assert cpu_millis(text) == millis


@pytest.mark.parametrize(
    ("text", "value"),
    [("128Mi", 128 * 2**20), ("1Gi", 2**30), ("1G", 10**9), ("500", 500), ("1.5Ki", 1536), ("1e3", 1000), ("100m", 1)],
)
def test_memory(text: str, value: int) -> None:
    assert memory_bytes(text) == value


@pytest.mark.parametrize("bad", ["", "abc", "1.2.3", "12Qi", "NaN", "Infinity"])
def test_bad_quantities(bad: str) -> None:
    with pytest.raises(QuantityError):
        cpu_millis(bad)


def test_format_cores_is_exact_to_the_millicore() -> None:
    assert format_cores(2000) == "2.000"
    assert format_cores(1500) == "1.500"
    assert format_cores(5) == "0.005"


def test_selector_semantics() -> None:
    sel = LabelSelector((("app", "web"),), (Requirement("tier", "NotIn", ("db",)), Requirement("x", "DoesNotExist")))
    assert sel.matches({"app": "web"})
    assert sel.matches({"app": "web", "tier": "front"})
    assert not sel.matches({"app": "web", "tier": "db"})
    assert not sel.matches({"app": "web", "x": ""})
    assert LabelSelector().matches({})


def test_node_selector_terms() -> None:
    assert not NodeSelectorTerm().matches("n1", {"a": "b"})  # an empty term matches nothing
    term = NodeSelectorTerm((Requirement("cores", "Gt", ("8",)),), (Requirement("metadata.name", "In", ("n1",)),))
    assert term.matches("n1", {"cores": "16"})
    assert not term.matches("n2", {"cores": "16"})
    assert not term.matches("n1", {"cores": "4"})
    assert not term.matches("n1", {"cores": "many"})
