#!/usr/bin/env bash
# Offline validators of the deployment files: no cluster, no Docker engine, no Prometheus
# server. Run by `make validate` (and so by `make test` and CI).
#   - Kubernetes: every overlay under k8s/overlays rendered by kustomize, each manifest
#     checked by kubernetes-validate --strict (stack/check_manifests.py; CRD kinds are
#     listed and skipped) and house rules (labels, pod security, probes, no inline secrets)
#   - Compose: check-jsonschema --builtin-schema vendor.compose-spec docker-compose.yml
#   - Alerts: promtool check rules ops/alerts.yml; promtool test rules ops/alerts_test.yml;
#     promtool check config ops/prometheus.yml; the Grafana dashboards' PromQL parses
# Tools missing on a fresh machine are fetched once into ~/.cache/mailbus: promtool is
# unpacked from Debian's prometheus package (downloaded, never installed, so no server
# starts); kustomize is built from the Go module proxy with the machine's Go (`go install`,
# about a minute once); the Python validators come from the test extra of pyproject.toml.
set -euo pipefail

REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${MAILBUS_CACHE_DIR:-$HOME/.cache/mailbus}"
PYTHON="${PYTHON:-python3}"
KUSTOMIZE_VERSION=v5.7.1  # v5.8 needs Go 1.27; the machines have 1.26

log() { echo "[validate] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# promtool from Debian's prometheus package, unpacked under $CACHE/prometheus-<version>.
promtool_path() {
  local found
  found="$(ls -d "$CACHE"/prometheus-*/usr/bin/promtool 2>/dev/null | sort -V | tail -n1 || true)"
  if [ -z "$found" ]; then
    local tmp; tmp="$(mktemp -d)"
    log "fetching promtool (Debian package prometheus, unpacked only)"
    if ! (cd "$tmp" && apt-get download -q prometheus >&2 2>&1); then
      apt-get update -q >&2
      (cd "$tmp" && apt-get download -q prometheus >&2) || die "apt-get download prometheus failed"
    fi
    local deb version
    deb="$(ls "$tmp"/prometheus_*.deb)"
    version="$(dpkg-deb -f "$deb" Version | tr ':+~' '___')"
    rm -rf "$CACHE/prometheus-$version.tmp"
    mkdir -p "$CACHE/prometheus-$version.tmp"
    dpkg-deb -x "$deb" "$CACHE/prometheus-$version.tmp"
    rm -rf "$CACHE/prometheus-$version"
    mv "$CACHE/prometheus-$version.tmp" "$CACHE/prometheus-$version"
    rm -rf "$tmp"
    found="$CACHE/prometheus-$version/usr/bin/promtool"
  fi
  "$found" --version >/dev/null 2>&1 || die "$found does not run"
  echo "$found"
}

# kustomize, built once into $CACHE/kustomize-<version>.
kustomize_path() {
  local dir="$CACHE/kustomize-$KUSTOMIZE_VERSION"
  if [ ! -x "$dir/kustomize" ]; then
    local go; go="$(command -v go || true)"
    [ -n "$go" ] || [ ! -x /usr/local/go/bin/go ] || go=/usr/local/go/bin/go
    if [ -z "$go" ]; then
      # No Go: kubectl's built-in kustomize (an older v5) where kubectl exists.
      command -v kubectl >/dev/null && { echo "kubectl kustomize"; return; }
      die "kustomize needs Go to build (go install sigs.k8s.io/kustomize/kustomize/v5)"
    fi
    log "building kustomize $KUSTOMIZE_VERSION (go install, once)"
    rm -rf "$dir.tmp"
    GOBIN="$dir.tmp" GOTOOLCHAIN=local \
      "$go" install "sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION" >&2
    rm -rf "$dir"; mv "$dir.tmp" "$dir"
  fi
  echo "$dir/kustomize build"
}

need_python_tool() {
  command -v "$1" >/dev/null || "$PYTHON" -m pip install --quiet --disable-pip-version-check \
    -e "$REPO_DIR[test]" >&2
  command -v "$1" >/dev/null || die "$1 missing after installing the test extra"
}

main() {
  cd "$REPO_DIR"
  mkdir -p "$CACHE"
  need_python_tool kubernetes-validate
  need_python_tool check-jsonschema
  PROMTOOL="$(promtool_path)"
  export PROMTOOL
  local kustomize failed=0 overlay rendered
  kustomize="$(kustomize_path)"
  rendered="$(mktemp -d)"
  trap "rm -rf '$rendered'" EXIT

  for overlay in k8s/overlays/*/; do
    overlay="$(basename "$overlay")"
    log "kubernetes: $kustomize k8s/overlays/$overlay"
    # shellcheck disable=SC2086  # "kubectl kustomize" or "/path/kustomize build"
    if $kustomize "k8s/overlays/$overlay" >"$rendered/$overlay.yaml"; then
      "$PYTHON" stack/check_manifests.py "$overlay" "$rendered/$overlay.yaml" || failed=1
    else
      failed=1
    fi
  done

  log "docker-compose.yml against the compose-spec schema"
  check-jsonschema --builtin-schema vendor.compose-spec docker-compose.yml || failed=1

  log "alert rules ($("$PROMTOOL" --version 2>&1 | head -n1))"
  "$PROMTOOL" check rules ops/alerts.yml || failed=1
  (cd ops && "$PROMTOOL" test rules alerts_test.yml) || failed=1
  "$PROMTOOL" check config ops/prometheus.yml || failed=1

  log "grafana dashboards: every query parses as PromQL"
  for dashboard in ops/grafana/dashboards/*.json; do
    "$PYTHON" stack/check_manifests.py --dashboard-rules "$dashboard" >"$rendered/dashboard.yml" \
      && "$PROMTOOL" check rules "$rendered/dashboard.yml" || failed=1
  done

  [ "$failed" = 0 ] || die "validation failed"
  log "all deployment files valid"
}

# Sourced (tests/unit/test_role_secrets.py asks for kustomize_path), it only defines.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  main "$@"
fi
