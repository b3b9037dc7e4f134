# rebalancer: build with `docker build -t rebalancer:0.1.0 .` from the repository root.
#
# Two stages. `build` installs the package and its runtime dependencies (binary wheels only, so no
# compiler is needed) into the virtual environment /opt/rebalancer, created without pip. The final stage
# is the same slim Python image with nothing added but that environment: no build tools, no pip in the
# environment, no tests or sources (.dockerignore keeps them out of the build context too), and no offline
# tools (rebalancer/offline: simulate, predict, back-test, plots, demo; they need a full pip install).
ARG PYTHON_IMAGE=python:3.12-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
COPY pyproject.toml README.md ./
COPY rebalancer ./rebalancer
COPY strategies ./strategies
# --only-binary for the dependencies: a missing wheel fails the build instead of pulling in a compiler.
RUN python -m venv --without-pip /opt/rebalancer \
    && python -m pip --python /opt/rebalancer/bin/python install --no-cache-dir --no-compile \
       --only-binary=:all: --no-binary=rebalancer . \
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
