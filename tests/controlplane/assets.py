"""Where the real control plane's binaries come from, as envtest finds its assets.

One setting, ``REBALANCER_KUBE_ASSETS``, names a directory holding kube-apiserver, kube-controller-manager,
kube-scheduler, kubemark, etcd (3.6) and descheduler, either unpacked or as ``NAME.xz`` beside a
``SHA256SUMS`` of the unpacked files. It defaults to ``../shared/kube`` beside the repository. Compressed
binaries are unpacked once into a cache directory (``REBALANCER_KUBE_CACHE``, default
``~/.cache/rebalancer/kube``) and checked against their sums. etcd 3.4 is Debian's ``etcd-server``
(``/usr/bin/etcd``; ``REBALANCER_ETCD34`` names another).

Under ``CI=true`` a missing binary fails the test that needs it; elsewhere that test is skipped, and the
skip says which binary is missing and where it was looked for.
"""

from __future__ import annotations

import fcntl
import hashlib
import lzma
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ASSETS_ENV = "REBALANCER_KUBE_ASSETS"
CACHE_ENV = "REBALANCER_KUBE_CACHE"
ETCD34_ENV = "REBALANCER_ETCD34"


class MissingBinary(Exception):
    """A control-plane binary is not where the settings say; the text says what and where."""


def assets_dir() -> Path:
    return Path(os.environ.get(ASSETS_ENV) or ROOT.parent / "shared" / "kube").resolve()


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "rebalancer" / "kube")


def _sums(directory: Path) -> dict[str, str]:
    sums = directory / "SHA256SUMS"
    if not sums.is_file():
        return {}
    pairs = (line.split() for line in sums.read_text().splitlines() if line.strip())
    return {name.lstrip("*"): digest for digest, name in pairs}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def binary(name: str) -> Path:
    """The path of an executable control-plane binary, unpacked into the cache when only ``NAME.xz`` exists."""
    source = assets_dir()
    plain = source / name
    if plain.is_file() and os.access(plain, os.X_OK):
        return plain
    packed = source / f"{name}.xz"
    if not packed.is_file():
        raise MissingBinary(
            f"{name}: neither {plain} nor {packed} exists (set {ASSETS_ENV} to the directory holding it)"
        )
    expected = _sums(source).get(name)
    target_dir = cache_dir() / (expected[:16] if expected else _sha256(packed)[:16])
    target = target_dir / name
    if target.is_file():
        return target
    target_dir.mkdir(parents=True, exist_ok=True)
    with (target_dir / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test process may be unpacking the same binary
        if target.is_file():
            return target
        partial = target_dir / f".{name}.partial"
        with lzma.open(packed) as src, partial.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        if expected and (actual := _sha256(partial)) != expected:
            partial.unlink()
            raise MissingBinary(f"{name}: unpacked {packed} has sha256 {actual}, SHA256SUMS says {expected}")
        partial.chmod(0o755)
        partial.rename(target)
    return target


def etcd34() -> Path:
    """Debian's etcd 3.4 server (package etcd-server)."""
    found = os.environ.get(ETCD34_ENV) or shutil.which("etcd") or "/usr/bin/etcd"
    path = Path(found)
    if not path.is_file():
        raise MissingBinary(
            f"etcd 3.4: {path} does not exist (install the Debian package etcd-server, or set {ETCD34_ENV})"
        )
    out = subprocess.run([str(path), "--version"], capture_output=True, text=True, check=False).stdout
    if "Version: 3.4." not in out:
        raise MissingBinary(f"etcd 3.4: {path} is not etcd 3.4 ({out.splitlines()[0] if out else 'no version'})")
    return path


def require(*names: str) -> dict[str, Path]:
    """The named binaries (``etcd34`` for Debian's etcd); a test failure under CI=true, else a skip naming it."""
    found: dict[str, Path] = {}
    for name in names:
        try:
            found[name] = etcd34() if name == "etcd34" else binary(name)
        except MissingBinary as missing:
            message = f"the real control plane is not available: {missing}"
            if os.environ.get("CI") == "true":
                pytest.fail(message + " (under CI=true a missing binary fails the run)", pytrace=False)
            pytest.skip(message)
    return found
