"""The scripts that write a generated file (docs/policy-reference.md, the chart's values.schema.json) say how
they are used on --help and refuse an argument they do not know, writing nothing either way."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from scripts import chart_schema, policy_reference

SCRIPTS: list[tuple[str, Callable[[list[str]], int], Path]] = [
    ("policy_reference", policy_reference.main, policy_reference.REFERENCE_FILE),
    ("chart_schema", chart_schema.main, chart_schema.SCHEMA_FILE),
]


@pytest.mark.parametrize(("name", "main", "written"), SCRIPTS, ids=[s[0] for s in SCRIPTS])
def test_help_says_how_and_writes_nothing(
    name: str, main: Callable[[list[str]], int], written: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = written.stat().st_mtime_ns
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    shown = capsys.readouterr().out
    assert "--check" in shown and f"python -m scripts.{name}" in shown
    assert written.stat().st_mtime_ns == before


@pytest.mark.parametrize(("name", "main", "written"), SCRIPTS, ids=[s[0] for s in SCRIPTS])
def test_an_unknown_argument_is_refused(
    name: str, main: Callable[[list[str]], int], written: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--chek"])
    assert exited.value.code == 2
    assert "--chek" in capsys.readouterr().err
