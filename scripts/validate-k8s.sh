#!/usr/bin/env bash
# Validates the Kubernetes manifests in deploy/kubernetes/ offline, against
# the schemas of a fixed Kubernetes release, in strict mode (an unknown or
# misspelt field is an error). Uses the PyPI package kubernetes-validate in a
# small venv of its own (.venv-tools); no cluster is needed.
#
#   scripts/validate-k8s.sh [FILE...]     # default: every manifest but the CRD examples
set -euo pipefail
cd "$(dirname "$0")/.."

K8S_VERSION=${K8S_VERSION:-1.30.0}
VENV=.venv-tools
if [ ! -x "$VENV/bin/kubernetes-validate" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check kubernetes-validate
fi

files=("$@")
if [ ${#files[@]} -eq 0 ]; then
    # kustomization.yaml is kustomize's, not a Kubernetes object; the CRD
    # examples (KEDA) have no schema in the core set.
    for f in deploy/kubernetes/*.yaml; do
        [ "$(basename "$f")" = kustomization.yaml ] || files+=("$f")
    done
fi
echo "validating ${#files[@]} manifest file(s) against Kubernetes $K8S_VERSION (strict)"
"$VENV/bin/kubernetes-validate" --strict --kubernetes-version "$K8S_VERSION" "${files[@]}"
