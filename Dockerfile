# rebalancer: build with `docker build -t rebalancer:0.1.0 .` from the repository root.
#
# Two stages. `build` installs the package and its runtime dependencies (binary wheels only, so no
# compiler is needed) into the virtual environment /opt/rebalancer, created without pip. The final stage
# is the same slim Python image with nothing added but that environment: no build tools, no pip in the
# environment, no tests or sources (.dockerignore keeps them out of the build context too), and no offline
# tools (rebalancer/offline: simulate, predict, back-test, plots, demo; they need a full install).
#
# Reproducible: the base image is pinned by its digest (the tag beside it is for the reader: Python 3.12.7 on
# Debian 12, the multi-platform index), and every Python package, the build backend included, is installed
# from a lock file pinning each version by the hashes of its files (requirements.lock and
# requirements-build.lock, written by scripts/lock.sh from pyproject.toml).
ARG PYTHON_IMAGE=python:3.12-slim-bookworm@sha256:032c52613401895aa3d418a4c563d2d05f993bc3ecc065c8f4e2280978acd249

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
# The dependencies first, in a layer of their own: --require-hashes refuses any file the lock does not name,
# --only-binary fails the build on a missing wheel instead of pulling in a compiler. The build backend goes
# into the build stage's own Python (it builds the wheel below and stays behind with this stage).
COPY requirements.lock requirements-build.lock ./
RUN python -m venv --without-pip /opt/rebalancer \
    && python -m pip install --no-cache-dir --require-hashes --only-binary=:all: -r requirements-build.lock \
    && python -m pip --python /opt/rebalancer/bin/python install --no-cache-dir --no-compile \
       --require-hashes --only-binary=:all: -r requirements.lock
COPY pyproject.toml README.md ./
COPY rebalancer ./rebalancer
COPY strategies ./strategies
# The package itself, built with the locked backend and installed without dependencies: `pip check` fails
# the build when the lock misses one.
RUN python -m pip wheel --no-cache-dir --no-build-isolation --no-deps --wheel-dir /tmp/dist . \
    && python -m pip --python /opt/rebalancer/bin/python install --no-cache-dir --no-compile --no-deps \
       /tmp/dist/rebalancer-*.whl \
    && python -m pip --python /opt/rebalancer/bin/python check \
    && /opt/rebalancer/bin/python -m compileall -q /opt/rebalancer/lib \
    && /opt/rebalancer/bin/rebalancer --version

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="rebalancer" \
      org.opencontainers.image.description="Rebalances Kubernetes nodes on real CPU usage read from Prometheus, evicting only through the Eviction API." \
      org.opencontainers.image.licenses="Apache-2.0"
# OPENBLAS_NUM_THREADS: the planner's numpy work is elementwise; a BLAS thread pool would only cost memory.
ENV PATH=/opt/rebalancer/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    OPENBLAS_NUM_THREADS=1
COPY --from=build /opt/rebalancer /opt/rebalancer
# A numeric, non-root user (no name to resolve: Kubernetes' runAsNonRoot can check it).
USER 65532:65532
EXPOSE 8080 9102
ENTRYPOINT ["rebalancer"]
CMD ["--help"]
