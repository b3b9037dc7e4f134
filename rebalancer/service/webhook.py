"""The Alertmanager webhook (payload version 4) and the nodes its alerts name.

Input from outside, so pydantic: the fields rebalancer relies on are required and typed, fields the
payload may lack in older version-4 senders get defaults (``truncatedAlerts`` came with Alertmanager
0.23), and unknown fields are ignored at the top level and inside alerts, because Alertmanager
releases add fields without changing the version.

No I/O here: the HTTP edge parses, :func:`node_alerts` resolves nodes, and the runner behind
:class:`AlertSink` decides what to do.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Literal, Protocol

from pydantic import ConfigDict, Field

from rebalancer.domain.settings.shared import Model

AlertStatus = Literal["firing", "resolved"]
DEFAULT_NODE_LABELS: tuple[str, ...] = ("node", "instance")
_NO_MAPPING: Mapping[str, str] = MappingProxyType({})


class WireModel(Model):
    """Base of the webhook models: the policy models' conventions, but unknown fields are ignored
    (Alertmanager versions add fields)."""

    model_config = ConfigDict(extra="ignore")


class Alert(WireModel):
    status: AlertStatus = Field(description="This alert's own status (a firing group can carry resolved alerts).")
    labels: dict[str, str] = Field(description="The alert's labels; one of them names the node.")
    annotations: dict[str, str] = Field(default_factory=dict, description="Free text (summary, description).")
    starts_at: datetime = Field(description="When the alert started firing.")
    ends_at: datetime | None = Field(
        default=None, description="When it resolved; Alertmanager sends 0001-01-01T00:00:00Z while it fires."
    )
    generator_url: str = Field(
        default="",
        validation_alias="generatorURL",
        serialization_alias="generatorURL",
        description="Link to the expression that fired.",
    )
    fingerprint: str = Field(min_length=1, description="Alertmanager's stable identity of the alert (dedup key).")


class WebhookPayload(WireModel):
    """One notification of an Alertmanager webhook receiver (``version: "4"``)."""

    version: Literal["4"] = Field(description="Webhook payload version; only 4 exists.")
    receiver: str = Field(description="Name of the Alertmanager receiver that sent it.")
    status: AlertStatus = Field(description="firing when at least one alert of the group fires.")
    alerts: tuple[Alert, ...] = Field(description="The alerts of the group (at most max_alerts).")
    group_labels: dict[str, str] = Field(default_factory=dict, description="Labels the group is keyed on.")
    common_labels: dict[str, str] = Field(default_factory=dict, description="Labels every alert shares.")
    common_annotations: dict[str, str] = Field(default_factory=dict, description="Annotations every alert shares.")
    external_url: str = Field(
        default="",
        validation_alias="externalURL",
        serialization_alias="externalURL",
        description="Link back to the Alertmanager.",
    )
    group_key: str = Field(description="Identity of the alert group.")
    truncated_alerts: int = Field(default=0, ge=0, description="Alerts left out of this body by max_alerts.")

    def notes(self) -> tuple[str, ...]:
        """What a reader of the outcome should know about the body itself."""
        if self.truncated_alerts:
            return (
                f"truncatedAlerts={self.truncated_alerts}: Alertmanager left that many alerts out of this body "
                "(receiver max_alerts); they were not seen",
            )
        return ()


@dataclass(frozen=True, slots=True)
class NodeAlert:
    """One alert and the node it names. ``node`` None: unusable (``reason_if_unusable`` says why); such
    alerts are recorded and never acted on."""

    node: str | None
    fingerprint: str
    status: AlertStatus
    labels: Mapping[str, str]
    reason_if_unusable: str | None = None

    @property
    def alertname(self) -> str:
        return self.labels.get("alertname", "")


def node_alerts(
    payload: WebhookPayload,
    *,
    known_nodes: Collection[str],
    node_labels: tuple[str, ...] = DEFAULT_NODE_LABELS,
    instance_map: Mapping[str, str] = _NO_MAPPING,
) -> list[NodeAlert]:
    """Each alert with the node it names, in payload order.

    The first of ``node_labels`` that the alert carries (non-empty) names the node; later labels are not
    consulted. Its value is resolved, in order: a known node name as it is; the value itself in
    ``instance_map`` (address -> node name); the value without its port (``10.0.0.5:9100``,
    ``[fd00::5]:9100``) in ``instance_map``, else as a known node name. A mapped name must be a known
    node too. Anything else leaves ``node`` None with the reason.
    """
    out: list[NodeAlert] = []
    for alert in payload.alerts:
        node, reason = _resolve(alert.labels, known_nodes, node_labels, instance_map)
        out.append(NodeAlert(node, alert.fingerprint, alert.status, dict(alert.labels), reason))
    return out


def _resolve(
    labels: Mapping[str, str],
    known_nodes: Collection[str],
    node_labels: tuple[str, ...],
    instance_map: Mapping[str, str],
) -> tuple[str | None, str | None]:
    label = next((name for name in node_labels if labels.get(name)), None)
    if label is None:
        return None, f"the alert has none of the labels {', '.join(node_labels)}"
    value = labels[label]
    if value in known_nodes:
        return value, None
    host = strip_port(value)
    for candidate in dict.fromkeys((value, host)):
        mapped = instance_map.get(candidate)
        if mapped is not None:
            if mapped in known_nodes:
                return mapped, None
            return None, f"{label}={value!r} maps to {mapped!r}, which is not a known node"
    if host in known_nodes:
        return host, None
    return None, f"{label}={value!r} names no known node"


def strip_port(address: str) -> str:
    """``10.0.0.5:9100`` -> ``10.0.0.5``; ``[fd00::5]:9100`` -> ``fd00::5``; a bare name or IPv6 address as is."""
    if address.startswith("["):
        end = address.find("]")
        return address[1:end] if end > 0 else address
    host, sep, port = address.rpartition(":")
    if sep and port.isdigit() and host and ":" not in host:
        return host
    return address


class Ack(Protocol):
    """The runner's answer for one alert, given at once (the work itself runs later).

    ``action`` is one short word (it becomes a metric label): ``queued`` means a targeted rebalance of
    ``node`` was queued; anything else (``already-queued``, ``cooldown``, ``resolved``, ``unknown-node``)
    means no new work, and ``detail`` may say why. ``rebalancer.service.runner.AlertDecision`` has this shape.
    """

    @property
    def node(self) -> str | None: ...

    @property
    def action(self) -> str: ...

    @property
    def detail(self) -> str: ...


QUEUED = "queued"


class AlertSink(Protocol):
    """The runner's entry point for alerts. Must return at once: the work runs off the request thread.

    It receives every alert of the body, resolved and unusable ones included (to record them), and
    answers one :class:`Ack` per alert, in the same order. Only firing alerts with a node may lead to work.
    """

    def __call__(self, alerts: Sequence[NodeAlert], /) -> Sequence[Ack]: ...
