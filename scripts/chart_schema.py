"""Writes the policy part of charts/rebalancer/values.schema.json from the policy's own model.

The chart's values.schema.json is written by hand except ``properties.policy`` and ``$defs``, which come
from :class:`rebalancer.policy.Policy` (its JSON schema, camelCase field names), so that ``helm install``
rejects a wrong policy with the field's path, as ``rebalancer check-config`` does. Cross-field rules of
the model (for example leader-election timings) are not in a JSON schema: the pods' own start checks
them. tests/packaging/test_chart_schema.py fails when the file and the model disagree.

    python -m scripts.chart_schema           # rewrite the file (from the repository root)
    python -m scripts.chart_schema --check   # exit 1 when it is out of date
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic.json_schema import GenerateJsonSchema
from scripts.generated_file import check_only

from rebalancer.domain.settings.shared import format_duration
from rebalancer.policy import Policy

SCHEMA_FILE = Path(__file__).resolve().parents[1] / "charts" / "rebalancer" / "values.schema.json"


class _PolicySchema(GenerateJsonSchema):
    """Defaults as the policy file writes them: a duration as 5m, not in ISO 8601."""

    def encode_default(self, dft: Any) -> Any:
        return format_duration(dft) if isinstance(dft, timedelta) else super().encode_default(dft)


def policy_schema() -> dict[str, Any]:
    """The policy file's JSON schema (draft 2020-12, as pydantic writes it), camelCase as in YAML."""
    return Policy.model_json_schema(by_alias=True, mode="validation", schema_generator=_PolicySchema)


def with_policy(chart_schema: dict[str, Any]) -> dict[str, Any]:
    """``chart_schema`` with ``properties.policy`` and ``$defs`` taken from the policy model."""
    policy = policy_schema()
    definitions = policy.pop("$defs", {})
    merged = dict(chart_schema)
    merged["properties"] = {**chart_schema["properties"], "policy": policy}
    merged["$defs"] = definitions
    return merged


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    current = SCHEMA_FILE.read_text(encoding="utf-8")
    wanted = render(with_policy(json.loads(current)))
    if check_only(argv, __doc__):
        if current != wanted:
            print(f"{SCHEMA_FILE}: out of date with rebalancer.policy; run python -m scripts.chart_schema")
            return 1
        return 0
    if current != wanted:
        SCHEMA_FILE.write_text(wanted, encoding="utf-8")
        print(f"wrote {SCHEMA_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
