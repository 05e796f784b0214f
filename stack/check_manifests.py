"""Validate rendered Kubernetes manifests without a cluster (called by stack/validate.sh).

    python stack/check_manifests.py NAME RENDERED.yaml [...]

Every document of a built-in kind is checked by ``kubernetes-validate --strict`` (the
Kubernetes OpenAPI schemas it ships, unexpected properties rejected) against
``MAILBUS_K8S_VERSION`` (default 1.30.0, the oldest Kubernetes we support). The custom
resources below have no schema there; they are listed as skipped, with the few checks we
can make ourselves: a PrometheusRule's groups go through ``promtool check rules`` (when
``PROMTOOL`` names it), a ScaledObject must name its target and triggers. A document of any
other kind without a shipped schema fails: a typo in ``kind`` must not pass as a CRD.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml
from kubernetes_validate import utils as kv

__all__ = ["CUSTOM_KINDS", "check", "main"]

# (apiVersion, kind) of the custom resources we ship; the CRDs come with KEDA and the
# Prometheus Operator, not with Kubernetes, so kubernetes-validate has no schema for them.
CUSTOM_KINDS = {
    ("keda.sh/v1alpha1", "ScaledObject"),
    ("keda.sh/v1alpha1", "TriggerAuthentication"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
}
K8S_VERSION = os.environ.get("MAILBUS_K8S_VERSION", "1.30.0")


def check(name: str, documents: list[dict[str, Any]]) -> list[str]:
    """Problems found in ``documents`` (empty: all good); runs kubernetes-validate."""
    problems: list[str] = []
    builtin: list[dict[str, Any]] = []
    for doc in documents:
        api_kind = (doc.get("apiVersion", ""), doc.get("kind", ""))
        ident = f"{api_kind[1]}/{doc.get('metadata', {}).get('name', '?')}"
        if api_kind in CUSTOM_KINDS:
            print(f"{name}: skipped {ident} ({api_kind[0]}: a CRD, no schema shipped)")
            problems += _check_custom(name, ident, doc)
            continue
        try:
            kv.validate(doc, K8S_VERSION, strict=True)
        except kv.SchemaNotFoundError:
            problems.append(f"{name}: {ident}: no schema for {api_kind[0]} {api_kind[1]}")
            continue
        except kv.ValidationError:
            pass  # reported in full by the command below
        builtin.append(doc)
    if builtin:
        with tempfile.NamedTemporaryFile("w", suffix=f"-{name}.yaml") as handle:
            yaml.safe_dump_all(builtin, handle, sort_keys=False)
            handle.flush()
            run = subprocess.run(
                ["kubernetes-validate", "--strict", "--quiet", "-k", K8S_VERSION, handle.name],
                check=False,
            )
        if run.returncode != 0:
            problems.append(f"{name}: kubernetes-validate --strict failed (see above)")
        else:
            print(f"{name}: {len(builtin)} built-in resources valid (Kubernetes {K8S_VERSION})")
    return problems


def _check_custom(name: str, ident: str, doc: dict[str, Any]) -> list[str]:
    spec = doc.get("spec") or {}
    target = spec.get("scaleTargetRef", {}).get("name")
    if doc["kind"] == "ScaledObject" and not (target and spec.get("triggers")):
        return [f"{name}: {ident} needs spec.scaleTargetRef.name and spec.triggers"]
    if doc["kind"] == "PrometheusRule" and os.environ.get("PROMTOOL"):
        with tempfile.NamedTemporaryFile("w", suffix=".yml") as handle:
            yaml.safe_dump({"groups": spec.get("groups", [])}, handle, sort_keys=False)
            handle.flush()
            run = subprocess.run(
                [os.environ["PROMTOOL"], "check", "rules", handle.name],
                check=False,
                capture_output=True,
                text=True,
            )
        if run.returncode != 0:
            return [f"{name}: {ident}: promtool check rules: {run.stdout}{run.stderr}"]
    return []


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    name, paths = argv[0], argv[1:]
    documents = [
        doc for path in paths for doc in yaml.safe_load_all(Path(path).read_text()) if doc
    ]
    if not documents:
        print(f"{name}: no manifests in {paths}", file=sys.stderr)
        return 1
    problems = check(name, documents)
    for problem in problems:
        print(f"ERROR {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
