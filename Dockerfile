# The image the k8s/ manifests run (`mailbus <command>`). Built where a Docker engine exists.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY mailbus mailbus
COPY relay relay
COPY consumer consumer
COPY schemas schemas
COPY sandbox sandbox
RUN pip install --no-cache-dir .
# A numeric, non-root user: Kubernetes can check runAsNonRoot against it (k8s/ runs 10001).
USER 10001:10001
ENTRYPOINT ["mailbus"]
