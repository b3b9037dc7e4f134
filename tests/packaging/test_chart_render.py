"""The chart rendered for both kinds and every values file under values/: lint-clean, every manifest valid
for the current Kubernetes release in strict mode, and the pod it makes runs what the code expects (the
command line parses with rebalancer's own parser, the policy loads with its own loader, the probes and
the token file point where `rebalancer serve` listens and reads)."""

from __future__ import annotations

import base64
import posixpath
import re
from typing import Any

import kubernetes_validate
import pytest

from rebalancer.app.cli import _parser
from rebalancer.domain.settings.limits import LimitSettings
from rebalancer.offline.simulate.variants import CHART_LIMITS
from rebalancer.policy import parse_policy
from tests.packaging.chart import (
    MONITORING_GROUP,
    NAMESPACE,
    RELEASE,
    Doc,
    Rendered,
    lint,
    render,
    validate_manifest,
    variants,
)

VARIANTS = list(variants())
IDS = [name for name, _ in VARIANTS]
SECURE_CONTAINER = {
    "runAsNonRoot": True,
    "readOnlyRootFilesystem": True,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


@pytest.fixture(scope="module", params=VARIANTS, ids=IDS)
def variant(request: pytest.FixtureRequest) -> tuple[Doc, Rendered]:
    values: Doc = request.param[1]
    return values, render(values)


def test_helm_lint_strict_reports_no_warning_or_error(variant: tuple[Doc, Rendered]) -> None:
    values, _ = variant
    problems = [m for m in lint(values) if m["severity"] >= 2]
    assert problems == []


def test_every_manifest_is_valid_for_the_current_kubernetes_release(variant: tuple[Doc, Rendered]) -> None:
    _, rendered = variant
    core = [d for d in rendered.documents if not d["apiVersion"].startswith(MONITORING_GROUP)]
    assert core, "nothing rendered"
    for document in core:
        validate_manifest(document)  # raises with the field path
    for document in rendered.documents:
        assert document["metadata"]["name"].startswith(RELEASE)
        if document["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert document["metadata"]["namespace"] in (NAMESPACE, rendered.values["dashboard"]["namespace"])


def test_strict_validation_rejects_an_unknown_field() -> None:
    """kubernetes-validate really checks: a field Kubernetes does not know fails in strict mode."""
    deployment = render().one("Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFileSystem"] = True
    with pytest.raises(kubernetes_validate.ValidationError, match="readOnlyRootFileSystem"):
        validate_manifest(deployment)


def test_the_rendered_policy_loads_with_rebalancers_own_loader(variant: tuple[Doc, Rendered]) -> None:
    _, rendered = variant
    policy = parse_policy(rendered.policy_text, "rendered policy.yaml")
    given = rendered.values["policy"]
    assert [s.kind for s in policy.strategies] == [s["kind"] for s in given["strategies"]]
    assert policy.prometheus.url == given["prometheus"]["url"]
    assert policy.state.namespace in (None, NAMESPACE)


def test_the_container_runs_the_command_of_its_kind(variant: tuple[Doc, Rendered]) -> None:
    _, rendered = variant
    container = rendered.container
    assert "command" not in container  # the image's entrypoint is `rebalancer`
    args = _parser().parse_args(container["args"])
    kind = rendered.values["kind"]
    assert args.command == ("serve" if kind == "Deployment" else "run")
    if kind == "CronJob":
        assert args.once
    assert args.dry_run == rendered.values["dryRun"]
    assert args.log_level == rendered.values["logLevel"]
    policy_mount = mount_of(rendered, "policy")
    assert posixpath.dirname(args.policy) == policy_mount["mountPath"]
    assert "subPath" not in policy_mount  # a ConfigMap update must reach the pod (hot reload)
    namespace_env = next(e for e in container["env"] if e["name"] == "POD_NAMESPACE")
    assert namespace_env["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"


def test_pod_and_container_are_hardened(variant: tuple[Doc, Rendered]) -> None:
    _, rendered = variant
    pod = rendered.pod_spec
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] > 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert rendered.container["securityContext"] == SECURE_CONTAINER
    assert rendered.container["resources"]["requests"]["cpu"]
    assert rendered.container["resources"]["limits"]["memory"]
    assert any(v["name"] == "tmp" and "emptyDir" in v for v in pod["volumes"])  # the root filesystem is read-only
    assert pod["serviceAccountName"] == rendered.one("ServiceAccount")["metadata"]["name"]


def test_serve_listens_where_the_probes_and_the_service_point(variant: tuple[Doc, Rendered]) -> None:
    _, rendered = variant
    if rendered.values["kind"] != "Deployment":
        assert not rendered.of_kind("Service")
        assert "ports" not in rendered.container
        return
    policy = parse_policy(rendered.policy_text)
    ports = {p["name"]: p["containerPort"] for p in rendered.container["ports"]}
    assert ports == {"webhook": policy.service.port, "metrics": policy.service.metrics_port}
    # the probes on the port apart from the webhook's: no webhook client can keep them from answering
    assert rendered.container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert rendered.container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    service = rendered.one("Service")
    assert {p["name"]: p["targetPort"] for p in service["spec"]["ports"]} == {
        "webhook": "webhook",
        "metrics": "metrics",
    }
    assert policy.service.webhook.token_file or policy.service.webhook.allow_unauthenticated  # else serve stops
    pod_labels = rendered.pod_template_metadata["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    for monitor in rendered.of_kind("ServiceMonitor"):
        assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
        assert monitor["spec"]["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]]
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint["port"] == "metrics"
        assert endpoint["path"] == "/metrics"
        assert monitor["metadata"]["labels"].items() >= rendered.values["serviceMonitor"]["labels"].items()


def test_the_network_policy_admits_alertmanager_to_the_webhook_and_prometheus_to_metrics(
    variant: tuple[Doc, Rendered],
) -> None:
    _, rendered = variant
    settings = rendered.values["networkPolicy"]
    if rendered.values["kind"] != "Deployment" or not settings["enabled"]:
        assert not rendered.of_kind("NetworkPolicy")
        return
    policy = rendered.one("NetworkPolicy")
    spec = policy["spec"]
    assert spec["podSelector"]["matchLabels"].items() <= rendered.pod_template_metadata["labels"].items()
    assert spec["policyTypes"] == ["Ingress"]
    container_ports = {p["name"] for p in rendered.container["ports"]}
    admitted = {}
    for rule in spec["ingress"]:
        (peer,) = rule["from"]
        (port,) = rule["ports"]
        assert port["port"] in container_ports
        admitted[port["port"]] = (
            peer["namespaceSelector"]["matchLabels"],
            peer["podSelector"].get("matchLabels", {}),
        )
    assert admitted == {
        "webhook": (
            {"kubernetes.io/metadata.name": settings["alertmanager"]["namespace"]},
            settings["alertmanager"]["podLabels"],
        ),
        "metrics": (
            {"kubernetes.io/metadata.name": settings["prometheus"]["namespace"]},
            settings["prometheus"]["podLabels"],
        ),
    }


def test_the_network_policy_is_on_by_default_and_admits_the_monitoring_namespaces_any_pod() -> None:
    spec = render().one("NetworkPolicy")["spec"]
    assert [rule["from"] for rule in spec["ingress"]] == [
        [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}, "podSelector": {}}]
    ] * 2
    assert spec["policyTypes"] == ["Ingress"]  # the pod's own connections (API server, Prometheus, DNS) stay open
    named = render({"networkPolicy": {"alertmanager": {"namespace": "alerting"}, "prometheus": {"namespace": "obs"}}})
    admitted = {rule["ports"][0]["port"]: rule["from"][0]["namespaceSelector"]["matchLabels"]
                for rule in named.one("NetworkPolicy")["spec"]["ingress"]}  # fmt: skip
    assert admitted == {"webhook": {"kubernetes.io/metadata.name": "alerting"},
                        "metrics": {"kubernetes.io/metadata.name": "obs"}}  # fmt: skip
    assert not render({"networkPolicy": {"enabled": False}}).of_kind("NetworkPolicy")
    assert not render({"kind": "CronJob"}).of_kind("NetworkPolicy")  # a CronJob's pod serves nothing


def test_the_webhook_token_file_is_the_mounted_secret(variant: tuple[Doc, Rendered]) -> None:
    _, rendered = variant
    token = rendered.values["webhook"]["token"]
    policy = parse_policy(rendered.policy_text)
    if rendered.values["kind"] != "Deployment" or not token["enabled"]:
        assert policy.service.webhook.token_file is None
        assert not rendered.of_kind("Secret")
        return
    mount = mount_of(rendered, "webhook-token")
    assert policy.service.webhook.token_file == posixpath.join(mount["mountPath"], token["key"])
    volume = next(v for v in rendered.pod_spec["volumes"] if v["name"] == "webhook-token")
    secret_name = volume["secret"]["secretName"]
    assert volume["secret"]["items"] == [{"key": token["key"], "path": token["key"]}]
    if token["existingSecret"]:
        assert secret_name == token["existingSecret"]
        assert not rendered.of_kind("Secret")
    else:
        secret = rendered.named("Secret", secret_name)
        assert set(secret["data"]) == {token["key"]}


def test_more_than_one_replica_runs_with_leader_election_and_rolls_without_a_gap() -> None:
    rendered = render({"replicas": 3})
    policy = parse_policy(rendered.policy_text)
    assert policy.service.leader_election.enabled
    deployment = rendered.one("Deployment")
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    single = render({"policy": {"service": {"leaderElection": {"enabled": False}}}}).one("Deployment")
    assert single["spec"]["strategy"] == {"type": "Recreate"}  # two pods would both evict during a rollout


def checksum(rendered: Rendered) -> str | None:
    annotations: dict[str, str] = rendered.pod_template_metadata.get("annotations") or {}
    return annotations.get("checksum/policy")


def test_the_simulation_runs_the_limits_a_helm_install_runs() -> None:
    """``simulate``'s chart-5m variant is judged on the chart's default limits, not on a copy gone stale."""
    installed = parse_policy(render().policy_text, "rendered policy.yaml").limits
    simulated = LimitSettings.model_validate(CHART_LIMITS)
    assert installed == simulated
    assert installed.node.max_per_period and installed.cluster.max_per_cycle == 10  # the defaults are limits


def test_a_policy_change_changes_the_pod_template_unless_hot_reload_is_chosen() -> None:
    base = render()
    changed = render({"policy": {"limits": {"node": {"cooldown": "30m"}}}})
    assert checksum(base) and checksum(changed)
    assert checksum(base) != checksum(changed)
    assert checksum(render({"image": {"tag": "0.2.0"}})) == checksum(base)  # only the policy counts
    assert checksum(render({"rollOnPolicyChange": False})) is None  # the running pods reload the file


def test_the_token_value_given_is_the_token_stored() -> None:
    rendered = render({"webhook": {"token": {"value": "s3cret-token"}}})
    secret = rendered.named("Secret", f"{RELEASE}-webhook")
    assert base64.b64decode(secret["data"]["token"]).decode() == "s3cret-token"
    generated = render().named("Secret", f"{RELEASE}-webhook")
    assert len(base64.b64decode(generated["data"]["token"])) == 48


def test_cronjob_settings_reach_the_cronjob() -> None:
    rendered = render({"kind": "CronJob", "schedule": "@hourly", "cronJob": {"timeZone": "Europe/Berlin"}})
    cronjob = rendered.one("CronJob")
    assert cronjob["spec"]["schedule"] == "@hourly"
    assert cronjob["spec"]["timeZone"] == "Europe/Berlin"
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    assert cronjob["spec"]["jobTemplate"]["spec"]["backoffLimit"] == 0
    assert rendered.pod_spec["restartPolicy"] == "Never"
    assert not rendered.of_kind("Deployment")


def test_a_cronjob_of_a_long_name_is_named_within_the_cronjob_limit() -> None:
    """fullnameOverride may be 63 characters (a Service's limit), a CronJob's name at most 52 (the API server
    refuses more: its Jobs add 11); the job NOTES has one start by hand stays within 63."""
    rendered = render({"kind": "CronJob", "fullnameOverride": "r" * 63})
    name = rendered.one("CronJob")["metadata"]["name"]
    assert 0 < len(name) <= 52
    manual = re.search(rf"create job --from=cronjob/{name} (\S+)", rendered.notes)
    assert manual is not None, rendered.notes
    assert len(manual[1]) <= 63 and f"logs job/{manual[1]}" in rendered.notes


def test_notes_warn_of_an_open_webhook_only_when_it_is_open() -> None:
    own_token = {"webhook": {"token": {"enabled": False}}, "policy": {"service": {"webhook": {"tokenFile": "/t/x"}}}}
    assert "WARNING" not in render(own_token).notes and "/t/x" in render(own_token).notes
    open_ = {
        "webhook": {"token": {"enabled": False}},
        "policy": {"service": {"webhook": {"allowUnauthenticated": True}}},
    }
    assert "WARNING" in render(open_).notes


def test_notes_name_the_mode_and_how_to_look_first(variant: tuple[Doc, Rendered]) -> None:
    _, rendered = variant
    notes = rendered.notes
    assert f"as a {rendered.values['kind']}" in notes
    assert ("DRY RUN" in notes) == (rendered.values["dryRun"] != "off")
    if rendered.values["kind"] == "Deployment":
        assert "/webhook/alertmanager" in notes
    else:
        assert "create job --from=cronjob/" in notes


@pytest.mark.parametrize("dry_run", ["off", "client"])
def test_the_notes_name_the_lease_the_role_grants(dry_run: str) -> None:
    """A dry run elects on <leaseName>-dry-run: the command the notes give to see the leader reads that one."""
    rendered = render({"kind": "Deployment", "replicas": 2, "dryRun": dry_run})
    [granted] = [rule["resourceNames"] for role in rendered.of_kind("Role") for rule in role["rules"]
                 if "leases" in rule["resources"] and "resourceNames" in rule]  # fmt: skip
    shown = re.search(r"get lease (\S+) -o jsonpath", rendered.notes)
    assert shown is not None, rendered.notes
    assert [shown[1]] == granted == ["rebalancer" if dry_run == "off" else "rebalancer-dry-run"]


@pytest.mark.parametrize("state", [{}, {"configMap": "a", "backoffConfigMap": "b", "efficiencyConfigMap": "c"}])
def test_the_notes_name_every_configmap_rebalancer_makes(state: dict[str, str]) -> None:
    """The notes say which ConfigMaps an uninstall leaves: every one the Role lets rebalancer update."""
    rendered = render({"policy": {"state": state}})
    [granted] = [rule["resourceNames"] for rule in rendered.one("Role")["rules"]
                 if "configmaps" in rule["resources"] and "resourceNames" in rule]  # fmt: skip
    shown = re.search(r"State: ConfigMaps (\S+), (\S+) and (\S+) ", rendered.notes)
    assert shown is not None, rendered.notes
    assert list(shown.groups()) == granted


def mount_of(rendered: Rendered, volume: str) -> dict[str, Any]:
    mounts = [m for m in rendered.container["volumeMounts"] if m["name"] == volume]
    assert len(mounts) == 1, f"volume {volume} mounted {len(mounts)} times"
    return mounts[0]
