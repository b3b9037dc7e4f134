"""The Alertmanager webhook payload (version 4) and the nodes its alerts name."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from pydantic import ValidationError

from rebalancer.policy import validation_problems
from rebalancer.service import NodeAlert, WebhookPayload, node_alerts, strip_port
from tests.shared_data import WEBHOOK_SAMPLE

SAMPLE = WEBHOOK_SAMPLE
NODES = frozenset({"node-hot", "node-a", "node-b", "ip-10-0-0-7"})


def sample() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SAMPLE.read_text())
    return data


def with_alerts(*alerts: dict[str, Any], **top: Any) -> dict[str, Any]:
    """The real sample with its alerts replaced by variations of its first alert."""
    data = sample()
    base = data["alerts"][0]
    data["alerts"] = [{**copy.deepcopy(base), **a} for a in alerts]
    data.update(top)
    return data


def resolve(data: dict[str, Any], **kwargs: Any) -> list[NodeAlert]:
    kwargs.setdefault("known_nodes", NODES)
    return node_alerts(WebhookPayload.model_validate(data), **kwargs)


def problems(data: Any) -> dict[str, str]:
    with pytest.raises(ValidationError) as caught:
        WebhookPayload.model_validate(data)
    return dict(validation_problems(caught.value))


def test_the_real_sample_parses_and_names_its_node():
    payload = WebhookPayload.model_validate(sample())
    assert payload.version == "4"
    assert payload.status == "firing"
    assert payload.receiver == "rebalancer-webhook"
    assert payload.truncated_alerts == 0
    assert payload.external_url == "http://127.0.0.1:9093"
    alert = payload.alerts[0]
    assert alert.fingerprint == "e17ee4e5371c2b59"
    assert alert.generator_url.startswith("http://127.0.0.1:9090/graph")
    assert alert.starts_at.year == 2026
    assert alert.ends_at is not None and alert.ends_at.year == 1  # Alertmanager's "not ended yet"
    assert payload.notes() == ()
    [resolved] = node_alerts(payload, known_nodes=NODES)
    assert resolved == NodeAlert("node-hot", "e17ee4e5371c2b59", "firing", alert.labels, None)
    assert resolved.alertname == "NodeCPUHigh"


def test_unknown_fields_are_tolerated_at_the_top_and_inside_alerts():
    data = with_alerts({"silencedBy": [], "newField": {"x": 1}}, futureTopLevel="yes")
    payload = WebhookPayload.model_validate(data)
    assert payload.alerts[0].fingerprint == "e17ee4e5371c2b59"


def test_fields_older_version_4_senders_omit_get_defaults():
    data = sample()
    for key in ("truncatedAlerts", "groupLabels", "commonLabels", "commonAnnotations", "externalURL"):
        del data[key]
    del data["alerts"][0]["annotations"], data["alerts"][0]["generatorURL"], data["alerts"][0]["endsAt"]
    payload = WebhookPayload.model_validate(data)
    assert payload.truncated_alerts == 0
    assert payload.alerts[0].ends_at is None


def test_required_fields_are_reported_with_their_paths():
    data = sample()
    del data["receiver"], data["groupKey"]
    del data["alerts"][0]["fingerprint"], data["alerts"][0]["labels"], data["alerts"][0]["startsAt"]
    found = problems(data)
    assert set(found) == {"receiver", "groupKey", "alerts.0.fingerprint", "alerts.0.labels", "alerts.0.startsAt"}
    assert found["alerts.0.fingerprint"] == "Field required"


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"version": "3"}, "version"),
        ({"version": 4}, "version"),
        ({"status": "pending"}, "status"),
        ({"truncatedAlerts": -1}, "truncatedAlerts"),
        ({"alerts": {"not": "a list"}}, "alerts"),
    ],
)
def test_wrong_values_are_reported_with_their_paths(change, path):
    data = sample()
    data.update(change)
    assert path in problems(data)


def test_wrong_values_inside_an_alert():
    data = with_alerts({"status": "firing"}, {"status": "maybe", "labels": {"node": 3}, "fingerprint": ""})
    assert set(problems(data)) == {"alerts.1.status", "alerts.1.labels.node", "alerts.1.fingerprint"}


def test_a_body_that_is_not_an_object():
    assert problems([sample()]) == {"": "Input should be a valid dictionary or instance of WebhookPayload"}


def test_truncated_alerts_are_kept_with_a_note():
    payload = WebhookPayload.model_validate(with_alerts({}, truncatedAlerts=7))
    assert payload.truncated_alerts == 7
    [note] = payload.notes()
    assert "truncatedAlerts=7" in note and "not seen" in note
    assert [a.node for a in node_alerts(payload, known_nodes=NODES)] == ["node-hot"]  # the alerts present still count


def test_node_label_wins_over_instance():
    [alert] = resolve(with_alerts({"labels": {"alertname": "X", "node": "node-b", "instance": "10.0.0.5:9100"}}))
    assert alert.node == "node-b"


def test_the_first_label_present_decides_even_when_it_names_no_known_node():
    [alert] = resolve(with_alerts({"labels": {"node": "gone-node", "instance": "node-a"}}))
    assert alert.node is None
    assert alert.reason_if_unusable == "node='gone-node' names no known node"


def test_an_empty_label_counts_as_absent():
    [alert] = resolve(with_alerts({"labels": {"node": "", "instance": "node-a"}}))
    assert alert.node == "node-a"


@pytest.mark.parametrize(
    ("instance", "mapping", "expected"),
    [
        ("10.0.0.5:9100", {"10.0.0.5": "node-a"}, "node-a"),  # port stripped, address mapped
        ("10.0.0.5:9100", {"10.0.0.5:9100": "node-b"}, "node-b"),  # the exact value mapped
        ("10.0.0.5", {"10.0.0.5": "node-a"}, "node-a"),
        ("[fd00::5]:9100", {"fd00::5": "node-a"}, "node-a"),
        ("fd00::5", {"fd00::5": "node-b"}, "node-b"),
        ("node-a:9100", {}, "node-a"),  # a node name with the exporter's port
        ("node-hot", {}, "node-hot"),  # a bare known node name passes through
        ("ip-10-0-0-7", {"ip-10-0-0-7": "node-a"}, "ip-10-0-0-7"),  # a known node name is taken as it is
    ],
)
def test_instance_values_are_mapped_to_nodes(instance, mapping, expected):
    [alert] = resolve(with_alerts({"labels": {"instance": instance}}), instance_map=mapping)
    assert alert.node == expected
    assert alert.reason_if_unusable is None


def test_unknown_instances_are_kept_without_a_node():
    data = with_alerts(
        {"labels": {"instance": "10.9.9.9:9100"}, "fingerprint": "f1"},
        {"labels": {"instance": "10.0.0.5:9100"}, "fingerprint": "f2"},
        {"labels": {"alertname": "Other", "job": "x"}, "fingerprint": "f3"},
    )
    alerts = resolve(data, instance_map={"10.0.0.5": "node-deleted"})
    assert [(a.fingerprint, a.node) for a in alerts] == [("f1", None), ("f2", None), ("f3", None)]
    assert [a.reason_if_unusable for a in alerts] == [
        "instance='10.9.9.9:9100' names no known node",
        "instance='10.0.0.5:9100' maps to 'node-deleted', which is not a known node",
        "the alert has none of the labels node, instance",
    ]


def test_configured_labels_replace_the_defaults():
    data = with_alerts({"labels": {"kubernetes_node": "node-b", "node": "node-a"}})
    [alert] = resolve(data, node_labels=("kubernetes_node",))
    assert alert.node == "node-b"
    [alert] = resolve(with_alerts({"labels": {"node": "node-a"}}), node_labels=("kubernetes_node",))
    assert alert.node is None
    assert alert.reason_if_unusable == "the alert has none of the labels kubernetes_node"


def test_resolved_alerts_keep_their_status_and_node():
    data = with_alerts(
        {"status": "resolved", "endsAt": "2026-11-22T03:10:00Z", "fingerprint": "r1"},
        {"status": "firing", "labels": {"instance": "node-a"}, "fingerprint": "f1"},
        status="firing",
    )
    alerts = resolve(data)
    assert [(a.status, a.node) for a in alerts] == [("resolved", "node-hot"), ("firing", "node-a")]


def test_no_known_nodes_means_no_usable_alert():
    [alert] = resolve(sample(), known_nodes=())
    assert alert.node is None


@pytest.mark.parametrize(
    ("address", "host"),
    [
        ("10.0.0.5:9100", "10.0.0.5"),
        ("node-a:9100", "node-a"),
        ("[fd00::5]:9100", "fd00::5"),
        ("[fd00::5]", "fd00::5"),
        ("fd00::5", "fd00::5"),
        ("node-a", "node-a"),
        ("node-a:", "node-a:"),
        ("node-a:http", "node-a:http"),
    ],
)
def test_strip_port(address, host):
    assert strip_port(address) == host
