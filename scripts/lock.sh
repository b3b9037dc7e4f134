#!/usr/bin/env bash
# Writes the lock files the image installs from, with uv (`pip install uv`, in the dev extra):
#   requirements.lock        the runtime dependencies of pyproject.toml, with all that they pull in
#   requirements-build.lock  the build backend of pyproject.toml ([build-system] requires)
# Every version is pinned with the sha256 of each of its published files (the Dockerfile installs them with
# --require-hashes), resolved for the Python of the Dockerfile's base image on every platform.
# Run it after changing a dependency in pyproject.toml (tests/packaging/test_dockerfile.py fails until then);
# a version already locked stays unless it no longer fits. `scripts/lock.sh --upgrade` takes the newest
# releases; `--upgrade-package NAME` only those of NAME.
set -euo pipefail
cd "$(dirname "$0")/.."

UV=${UV:-$(command -v uv || echo .venv/bin/uv)}
PYTHON=${PYTHON:-$(command -v python3)}
# ARG PYTHON_IMAGE=python:3.12-slim-bookworm@sha256:... -> 3.12
version=$(sed -n 's/^ARG PYTHON_IMAGE=python:\([0-9]*\.[0-9]*\).*/\1/p' Dockerfile)
[ -n "$version" ] || { echo "lock: no python:X.Y base image in the Dockerfile's ARG PYTHON_IMAGE" >&2; exit 2; }

compile=("$UV" pip compile --quiet --universal --python-version "$version" --generate-hashes
  --custom-compile-command "scripts/lock.sh" "$@")
"${compile[@]}" pyproject.toml --output-file requirements.lock
"$PYTHON" -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"], sep="\n")' \
  | "${compile[@]}" - --output-file requirements-build.lock
echo "lock: requirements.lock and requirements-build.lock for Python $version"
