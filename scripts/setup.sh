#!/usr/bin/env bash
# Sets up what rebalancer needs on a fresh Debian machine: a virtualenv in .venv with the package
# (and, with --dev, the test tools), plus the Debian packages prometheus, prometheus-alertmanager,
# etcd-server (etcd 3.4) and openssl when --dev is given and they are missing. The real Kubernetes control
# plane's binaries come from REBALANCER_KUBE_ASSETS (default ../shared/kube; see docs/testing.md).
# Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

dev=0
[ "${1:-}" = "--dev" ] && dev=1
PYTHON=${PYTHON:-python3}

if [ "$dev" = 1 ]; then
  missing=()
  command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
  command -v prometheus-alertmanager >/dev/null 2>&1 || missing+=(prometheus-alertmanager)
  # etcd 3.4, for the read paths against an API server whose storage refuses the streaming watch-list
  [ -x /usr/bin/etcd ] || missing+=(etcd-server)
  command -v openssl >/dev/null 2>&1 || missing+=(openssl)
  if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing Debian packages: ${missing[*]}"
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PYTHON" -m venv .venv
fi
digest=$(sha256sum pyproject.toml | cut -c1-16)
stamp=.venv/.installed-$dev-$digest
# an install with the test tools serves the demo too
if [ ! -f "$stamp" ] && ! { [ "$dev" = 0 ] && [ -f ".venv/.installed-1-$digest" ]; }; then
  echo "setup: installing Python packages"
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  if [ "$dev" = 1 ]; then
    .venv/bin/python -m pip install -q -e '.[dev]'
  else
    .venv/bin/python -m pip install -q -e .
  fi
  rm -f .venv/.installed-*
  touch "$stamp"
fi
