# The image docker-compose.yml and k8s/ run (`mailbus <command>`). Built where a Docker
# engine exists (docs/releasing.md#the-image). .dockerignore keeps the stack, tests, caches
# and .git out of the context.
#
#   docker build --build-arg RELEASE_VERSION="$(python -m setuptools_scm)" -t mailbus:<v> .
#   docker build --target sandbox -t mailbus-sandbox:<v> .   # tests and the demo only
#
# Base pinned by digest: python:3.11.14-slim-trixie (Debian 13), the multi-arch index digest
# as recorded by a public Dockerfile pinning it; this repository's machines cannot pull to
# re-check it. To refresh it, read the digest from the registry, `docker buildx imagetools
# inspect python:3.11-slim-trixie` (the "Digest:" line), and replace it here, or override it
# with `--build-arg PYTHON_IMAGE=...` (docs/releasing.md#the-image).
ARG PYTHON_IMAGE=python:3.11.14-slim-trixie@sha256:193fdd0bbcb3d2ae612bd6cc3548d2f7c78d65b549fcaa8af75624c47474444d

# Build: a virtual environment with mailbus, the client and the exact versions of
# constraints.txt (kept in step with pyproject.toml by `make test`).
FROM ${PYTHON_IMAGE} AS build
# Extras of pyproject.toml (docs/installation.md#extras): every provider, the intake and the
# console by default; add `tracing` for OpenTelemetry export (docs/guides/tracing.md), or
# name fewer for a smaller image, e.g. `--build-arg EXTRAS=ses`.
ARG EXTRAS="all"
# The release's version: the context has no .git for setuptools-scm to read, so without it
# the image says the fallback, 0.1.dev0 (docs/releasing.md).
ARG RELEASE_VERSION=""
ENV PYTHONDONTWRITEBYTECODE=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY . .
RUN python -m venv /opt/mailbus \
    && env ${RELEASE_VERSION:+SETUPTOOLS_SCM_PRETEND_VERSION=$RELEASE_VERSION} \
        /opt/mailbus/bin/pip install --no-cache-dir -c constraints.txt \
        ./client ".${EXTRAS:+[$EXTRAS]}" \
    && /opt/mailbus/bin/pip check

# The sandbox's environment: the release's, plus the checkout's fake provider and each
# provider folder's imitation of it (providers/sandbox/, providers/<name>/sandbox/), which no
# release ships (docs/installation.md#the-sandbox).
FROM build AS sandbox-build
RUN site="$(/opt/mailbus/bin/python -c 'import mailbus, os; print(os.path.dirname(mailbus.__file__))')" \
    && cp -r sandbox "$site/sandbox" \
    && for kit in providers/sandbox providers/*/sandbox; do cp -r "$kit" "$site/$kit"; done

# Runtime: the environment only; no sources, no build tools, no pip cache.
FROM ${PYTHON_IMAGE} AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PATH=/opt/mailbus/bin:$PATH
COPY --from=build /opt/mailbus /opt/mailbus
# the console's users file in compose (a named volume takes this directory's owner)
RUN mkdir -p /var/lib/mailbus && chown 10001:10001 /var/lib/mailbus
WORKDIR /
# A numeric, non-root user: Kubernetes can check runAsNonRoot against it (k8s/ runs 10001).
USER 10001:10001
ENTRYPOINT ["mailbus"]

# `--target sandbox`: the fault-injectable fake provider of docker-compose.yml and the dev
# overlay, never deployed to production.
FROM runtime AS sandbox
COPY --from=sandbox-build /opt/mailbus /opt/mailbus

# The default target, the production image: the last stage.
FROM runtime AS production
