"""The chart rendered offline by Helm's own Go SDK (helm-python-sdk embeds it: no helm binary, no cluster).

``render(values)`` is ``helm template`` with the chart's values.schema.json enforced; values files are
parsed by Helm's own YAML reader (a bare ``off`` is ``false`` there, as in ``helm install -f``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "rebalancer"
VALUES_DIR = Path(__file__).resolve().parent / "values"
VALUES_FILES = sorted(VALUES_DIR.glob("*.yaml"))
RELEASE = "rebalancer"
NAMESPACE = "rebalancer"
KUBE_VERSION = kubernetes_validate.latest_version()
"""The newest Kubernetes release kubernetes-validate knows (its schemas ship with the package)."""
MONITORING_GROUP = "monitoring.coreos.com"

Doc = dict[str, Any]


@functools.cache
def _chart() -> helm.Chart:
    return helm.Chart.load(CHART)


def values_file(path: Path) -> Doc:
    """A values file as ``helm install -f`` reads it."""
    return helm.values_from_yaml(path.read_text(encoding="utf-8"))


@dataclass(frozen=True)
class Rendered:
    documents: list[Doc]
    notes: str
    values: Doc  # what the release would really use (chart defaults coalesced with the given values)

    def of_kind(self, kind: str) -> list[Doc]:
        return [d for d in self.documents if d["kind"] == kind]

    def one(self, kind: str) -> Doc:
        found = self.of_kind(kind)
        assert len(found) == 1, f"one {kind} expected, rendered {len(found)}"
        return found[0]

    def named(self, kind: str, name: str) -> Doc:
        found = [d for d in self.of_kind(kind) if d["metadata"]["name"] == name]
        assert len(found) == 1, f"one {kind} {name} expected, rendered {len(found)}"
        return found[0]

    @property
    def workload(self) -> Doc:
        """The Deployment or the CronJob."""
        found = self.of_kind("Deployment") + self.of_kind("CronJob")
        assert len(found) == 1, f"exactly one Deployment or CronJob expected, got {len(found)}"
        return found[0]

    @property
    def pod_spec(self) -> Doc:
        workload = self.workload
        template = workload["spec"]["template"] if workload["kind"] == "Deployment" else (
            workload["spec"]["jobTemplate"]["spec"]["template"]
        )  # fmt: skip
        spec: Doc = template["spec"]
        return spec

    @property
    def pod_template_metadata(self) -> Doc:
        workload = self.workload
        if workload["kind"] == "Deployment":
            meta: Doc = workload["spec"]["template"]["metadata"]
        else:
            meta = workload["spec"]["jobTemplate"]["spec"]["template"]["metadata"]
        return meta

    @property
    def container(self) -> Doc:
        containers: list[Doc] = self.pod_spec["containers"]
        assert len(containers) == 1
        return containers[0]

    @property
    def policy_text(self) -> str:
        text: str = self.named("ConfigMap", f"{RELEASE}-policy")["data"]["policy.yaml"]
        return text


IMAGE = "registry.example.com/platform/rebalancer"
"""The image repository the tests install (the chart has none by default: no image is published)."""


def with_image(values: Doc | None) -> Doc:
    """``values`` with ``image.repository`` set to IMAGE unless they name one."""
    given = dict(values or {})
    given["image"] = {"repository": IMAGE, **(given.get("image") or {})}
    return given


def render(values: Doc | None = None, *, namespace: str = NAMESPACE, image: bool = True) -> Rendered:
    """``helm template RELEASE charts/rebalancer -n NAMESPACE`` with ``values`` (and IMAGE, unless ``image``
    is False); Helm's errors raise."""
    chart = _chart()
    values = with_image(values) if image else values
    manifests = chart.render(values or {}, name=RELEASE, namespace=namespace, is_install=True)
    documents: list[Doc] = []
    notes = ""
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            notes = text
            continue
        documents.extend(d for d in yaml.safe_load_all(text) if d)
    return Rendered(documents, notes, chart.merge_values(values or {}))


def validate_schema(values: Doc) -> None:
    """values.schema.json against ``values`` (raises helm.HelmValuesError naming the path)."""
    _chart().validate_schema(with_image(values))


def lint(values: Doc | None = None) -> list[Doc]:
    """``helm lint --strict`` messages (severity 1 info, 2 warning, 3 error)."""
    report = helm.lint(CHART, with_image(values), strict=True, namespace=NAMESPACE, kube_version=f"v{KUBE_VERSION}")
    messages: list[Doc] = report["messages"]
    return messages


def validate_manifest(document: Doc) -> None:
    """kubernetes-validate in strict mode (unknown fields are errors) against KUBE_VERSION."""
    kubernetes_validate.validate(document, KUBE_VERSION, strict=True)


def variants() -> Iterator[tuple[str, Doc]]:
    """(id, values): both kinds on defaults, then every values file under values/."""
    yield "defaults-Deployment", {}
    yield "defaults-CronJob", {"kind": "CronJob"}
    for path in VALUES_FILES:
        yield path.stem, values_file(path)
