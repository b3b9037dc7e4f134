"""The protobuf list reader's pieces that the real API server does not exercise: its bounded tables."""

from __future__ import annotations

from typing import Any

from rebalancer.adapters.kube import protobuf_lists, wire


def container(policy: str) -> bytes:
    encoded: bytes = protobuf_lists.classes()["Container"](restartPolicy=policy).SerializeToString()
    return encoded


def test_a_distinct_encoding_is_parsed_once_and_the_table_stays_bounded() -> None:
    built: list[str] = []

    def build(message: Any) -> wire.Container:
        built.append(message.restartPolicy)
        return wire.Container(restart_policy=message.restartPolicy)

    table = protobuf_lists.Parsed("Container", build, limit=3)
    always = container("Always")
    assert table[always] == table[always] == wire.Container(restart_policy="Always")
    assert built == ["Always"]  # parsed once
    for i in range(10):
        table[container(f"p{i}")]
    assert len(table) <= 3  # bounded: pods that share nothing keep no more than the limit
    assert table[always].restart_policy == "Always"
