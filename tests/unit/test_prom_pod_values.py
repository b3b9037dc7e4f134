"""The per-pod fast decoder (msgspec) says exactly what the field-by-field checks say, or leaves it to them.

Over random answers, well-formed or not: whenever ``fast_pod_values`` returns values, the generic
``parse_vector`` and ``by_pod`` accept the same body and return the same; whenever the body is a
well-formed answer, the fast path takes it (it is the path every scheduled cycle uses)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rebalancer.adapters.prom.client import by_pod, fast_pod_values, parse_vector
from rebalancer.domain.errors import MetricsMalformed

LABEL = st.text(alphabet="abcdefghijklmnop-_/.", min_size=1, max_size=8)
GOOD_VALUE = st.floats(min_value=0.0, max_value=1e6, allow_nan=False).map(repr)
ODD_VALUE = st.sampled_from(["NaN", "+Inf", "-Inf", "-0.5", "many", "", "1e400", " 1", ".5"])
POD_LABELS = st.fixed_dictionaries(
    {"namespace": st.sampled_from(["a", "b"]), "pod": st.sampled_from(["p1", "p2", "p3", "p4"])},
    optional={"container": st.sampled_from(["app", "side"]), "node": LABEL},
)
AT = 1700000000.5  # the evaluation time asked for
POD_SERIES = st.fixed_dictionaries({"metric": POD_LABELS, "value": st.tuples(st.just(AT), GOOD_VALUE)})
ODD_STAMP = st.sampled_from([AT + 61, AT - 3600, 0, "1700000000.5", None])  # another time, or not a time
ODD_SERIES = st.one_of(
    st.fixed_dictionaries({"metric": POD_LABELS, "value": st.tuples(ODD_STAMP, GOOD_VALUE)}),
    st.fixed_dictionaries({"metric": POD_LABELS, "value": st.tuples(st.just(1), ODD_VALUE)}),
    st.fixed_dictionaries({"metric": st.just({"namespace": "a", "pod": 1}), "value": st.just([1, "2"])}),
    st.fixed_dictionaries({"value": st.just([1, "2"])}),
    st.fixed_dictionaries({"metric": POD_LABELS, "histogram": st.just([1, {}])}),
    st.fixed_dictionaries({"metric": POD_LABELS, "values": st.just([[1, "2"]])}),
    st.fixed_dictionaries({"metric": POD_LABELS, "value": st.sampled_from([[1], [1, 2.5]])}),
    st.fixed_dictionaries(
        {
            "metric": st.sampled_from([{"pod": "x"}, {"namespace": "a"}, {"namespace": "", "pod": "y"}]),
            "value": st.just([1, "2"]),
        }
    ),
    st.just([1, "2"]),
)


def body(result: Any, result_type: str = "vector", status: str = "success") -> bytes:
    return json.dumps({"status": status, "data": {"resultType": result_type, "result": result}}).encode()


def checked(raw: bytes) -> dict[tuple[str, str], float]:
    return by_pod("q", parse_vector("q", json.loads(raw)["data"]["result"], AT))


@settings(max_examples=400, deadline=None)
@given(
    good=st.lists(POD_SERIES, max_size=6, unique_by=lambda s: (s["metric"]["namespace"], s["metric"]["pod"])),
    odd=st.lists(st.one_of(ODD_SERIES, POD_SERIES), max_size=2),
    where=st.integers(0, 6),
)
def test_fast_pod_values_agree_with_the_checked_way(good: list[Any], odd: list[Any], where: int) -> None:
    raw = body(good[:where] + odd + good[where:])
    fast = fast_pod_values(raw, AT)
    if fast is None:
        assert odd, "a well-formed answer must take the fast path"
        with pytest.raises(MetricsMalformed):
            checked(raw)
        return
    assert fast == checked(raw)


@pytest.mark.parametrize(
    "raw",
    [
        body([], result_type="matrix"),
        body([1700000000, "3"], result_type="scalar"),
        body([], status="error"),
        b'{"status": "success"}',
        b"<html>login</html>",
        b'{"status": "success", "data": {"resultType": "vector", "result": {"a": 1}}}',
    ],
    ids=["matrix", "scalar", "status-error", "no-data", "not-json", "result-not-list"],
)
def test_anything_but_a_successful_vector_is_left_to_the_checked_way(raw: bytes) -> None:
    assert fast_pod_values(raw, AT) is None
