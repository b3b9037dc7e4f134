"""docs/policy-reference.md is generated from the policy model (scripts/policy_reference.py): a test fails
when the committed page and the model disagree, and the page names every field the model accepts."""

from __future__ import annotations

from scripts.policy_reference import REFERENCE_FILE, render

from rebalancer.policy import Policy


def test_the_committed_reference_is_the_models() -> None:
    committed = REFERENCE_FILE.read_text(encoding="utf-8")
    assert committed == render(), "docs/policy-reference.md is out of date: run python -m scripts.policy_reference"


def test_every_top_level_field_is_listed_by_its_yaml_name() -> None:
    text = render()
    for name, info in Policy.model_fields.items():
        alias = info.validation_alias if isinstance(info.validation_alias, str) else name
        assert f"| `{alias}` |" in text, alias
    assert "| `landingGuard` |" in text and "landing_guard" not in text


def test_each_strategy_kind_has_its_own_section() -> None:
    text = render()
    for kind in ("LowNodeUtilization", "HighNodeUtilization", "DeletionCostSteering"):
        assert f"## `strategies[]`: {kind}" in text
        assert f"| `kind` | `{kind}` | required |" in text
