# The image docker-compose.yml and k8s/ run (`mailbus <command>`). Built where a Docker
# engine exists. .dockerignore keeps the stack, tests and caches out of the context.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY . .
RUN pip install --no-cache-dir ./client . && rm -rf /app
WORKDIR /
# A numeric, non-root user: Kubernetes can check runAsNonRoot against it (k8s/ runs 10001).
USER 10001:10001
ENTRYPOINT ["mailbus"]
