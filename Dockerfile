# The image docker-compose.yml and k8s/ run (`mailbus <command>`). Built where a Docker
# engine exists. .dockerignore keeps the stack, tests and caches out of the context.
#
# Base pinned by digest: python:3.11.10-slim-bookworm, the multi-arch index digest as
# published for the official image (recorded in nalabelle/build's Renovate-kept
# images/digests.Dockerfile; this repository's machines cannot pull to re-check it). Before
# changing it, read the digest from the registry: `docker buildx imagetools inspect
# python:3.11-slim` (the "Digest:" line), and build with `--build-arg PYTHON_IMAGE=...`.
ARG PYTHON_IMAGE=python:3.11.10-slim-bookworm@sha256:5148c0e4bbb64271bca1d3322360ebf4bfb7564507ae32dd639322e4952a6b16

# Build: a virtual environment with mailbus, the client and the exact versions of
# constraints.txt (kept in step with pyproject.toml by `make test`).
FROM ${PYTHON_IMAGE} AS build
# Optional extras of pyproject.toml, e.g. `--build-arg EXTRAS=tracing` for OpenTelemetry
# export (docs/guides/tracing.md). None by default: the image stays without OTLP/protobuf.
ARG EXTRAS=""
ENV PYTHONDONTWRITEBYTECODE=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY . .
RUN python -m venv /opt/mailbus \
    && /opt/mailbus/bin/pip install --no-cache-dir -c constraints.txt ./client ".${EXTRAS:+[$EXTRAS]}" \
    && /opt/mailbus/bin/pip check

# Runtime: the environment only; no sources, no build tools, no pip cache.
FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PATH=/opt/mailbus/bin:$PATH
COPY --from=build /opt/mailbus /opt/mailbus
# the console's users file in compose (a named volume takes this directory's owner)
RUN mkdir -p /var/lib/mailbus && chown 10001:10001 /var/lib/mailbus
WORKDIR /
# A numeric, non-root user: Kubernetes can check runAsNonRoot against it (k8s/ runs 10001).
USER 10001:10001
ENTRYPOINT ["mailbus"]
