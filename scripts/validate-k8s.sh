#!/usr/bin/env bash
# Offline check of the Kubernetes manifests in deploy/kubernetes/ (no cluster,
# no kubectl needed):
#
#   1. Schema: every core manifest (namespace, secret, master, workers, and
#      examples/hpa.yaml) against the OpenAPI schemas of Kubernetes
#      $K8S_VERSION, strictly (an unknown or misspelt field is an error), with
#      kubernetes-validate. A kind/apiVersion it has no schema for is an error
#      here too (the tool itself only warns).
#   2. CRD examples (KEDA ScaledObject, Prometheus Operator PodMonitor): not
#      schema-checked (no CRD schemas offline); parsed and checked for the
#      fields that tie them to the core manifests.
#   3. Consistency: kustomization.yaml lists existing files and every core
#      manifest but the Secret; Services select the master's pod labels; every
#      secretKeyRef names a key of secret.yaml; the workers' TUNEFLEET_SERVER is
#      the master Service and port; probes and scrape annotations use that port.
#
#   scripts/validate-k8s.sh              # all of the above
#   scripts/validate-k8s.sh FILE...      # step 1 only, for these files
#
# Environment: K8S_VERSION (default 1.34.0), TUNEFLEET_TOOLS_VENV (default
# <repo>/.venv-tools: created when missing, kubernetes-validate installed with
# pip once). Exits non-zero on any error.
set -euo pipefail
cd "$(dirname "$0")/.."

K8S_VERSION=${K8S_VERSION:-1.34.0}
VALIDATOR_VERSION=1.37.0
venv=${TUNEFLEET_TOOLS_VENV:-$PWD/.venv-tools}
dir=deploy/kubernetes

die() { echo "validate-k8s: error: $*" >&2; exit 1; }

if [[ ! -x "$venv/bin/python" ]]; then
    echo "validate-k8s: creating $venv" >&2
    "${PYTHON:-python3}" -m venv "$venv" || die "cannot create the venv $venv (set PYTHON=...)"
fi
if ! "$venv/bin/python" - "$VALIDATOR_VERSION" <<'EOF' 2>/dev/null
import sys
from kubernetes_validate.version import __version__
sys.exit(0 if __version__ == sys.argv[1] else 1)
EOF
then
    echo "validate-k8s: installing kubernetes-validate==$VALIDATOR_VERSION into $venv" >&2
    "$venv/bin/python" -m pip install --disable-pip-version-check --quiet \
        "kubernetes-validate==$VALIDATOR_VERSION" \
        || die "pip install kubernetes-validate failed"
fi

# Step 1: strict schema validation.
schema_check() {
    local out rc=0
    out=$("$venv/bin/kubernetes-validate" --strict -k "$K8S_VERSION" "$@" 2>&1) || rc=$?
    printf '%s\n' "$out"
    # "WARN ... Couldn't find schema for kind X": a misspelt kind or apiVersion.
    if grep -q '^WARN' <<<"$out"; then
        echo "validate-k8s: a manifest has a kind/apiVersion with no Kubernetes $K8S_VERSION schema" >&2
        rc=1
    fi
    return "$rc"
}

if [[ $# -gt 0 ]]; then
    for f in "$@"; do [[ -f "$f" ]] || die "no such file: $f"; done
    if schema_check "$@"; then
        echo "validate-k8s: OK (${#} file(s), Kubernetes $K8S_VERSION, strict)"
        exit 0
    fi
    echo "validate-k8s: FAILED" >&2
    exit 1
fi

core=()
for f in "$dir"/*.yaml; do
    [[ "$(basename "$f")" == kustomization.yaml ]] && continue
    core+=("$f")
done
core+=("$dir/examples/hpa.yaml")

status=0
schema_check "${core[@]}" || status=1

# Steps 2 and 3: CRD examples and cross-references.
"$venv/bin/python" - "$dir" <<'EOF' || status=1
import os
import sys
import yaml

d = sys.argv[1]
errors = []


def load(name):
    with open(os.path.join(d, name)) as f:
        return [doc for doc in yaml.safe_load_all(f) if doc]


def one(docs, kind, name=None):
    found = [x for x in docs if x.get("kind") == kind
             and (name is None or x["metadata"]["name"] == name)]
    if len(found) != 1:
        errors.append(f"expected one {kind} {name or ''} but found {len(found)}")
        return {}
    return found[0]


def err(msg):
    errors.append(msg)


kust = load("kustomization.yaml")[0]
if kust.get("kind") != "Kustomization":
    err("kustomization.yaml: kind is not Kustomization")
listed = kust.get("resources", [])
for r in listed:
    if not os.path.isfile(os.path.join(d, r)):
        err(f"kustomization.yaml lists {r}, which does not exist")
for f in sorted(os.listdir(d)):
    if f.endswith(".yaml") and f not in ("kustomization.yaml", "secret.yaml") and f not in listed:
        err(f"kustomization.yaml does not list {f}")
if "secret.yaml" in listed:
    err("kustomization.yaml lists secret.yaml: apply -k would overwrite a created Secret with placeholders")

ns = one(load("namespace.yaml"), "Namespace")
namespace = ns.get("metadata", {}).get("name")
secret = one(load("secret.yaml"), "Secret", "tunefleet-secrets")
secret_keys = set((secret.get("stringData") or {}) | (secret.get("data") or {}))
master_docs = load("master.yaml")
workers_docs = load("workers.yaml")
sts = one(master_docs, "StatefulSet", "tunefleet-master")
svc = one(master_docs, "Service", "tunefleet-master")
headless = one(master_docs, "Service", "tunefleet-master-headless")
deploy = one(workers_docs, "Deployment", "tunefleet-worker")

for doc in master_docs + workers_docs + [secret]:
    got = doc.get("metadata", {}).get("namespace")
    if got != namespace:
        err(f"{doc['kind']}/{doc['metadata']['name']}: namespace {got!r}, not {namespace!r}")

if sts:
    spec = sts["spec"]
    if spec.get("replicas") != 1:
        err("the master StatefulSet must have exactly 1 replica (single SQLite writer)")
    if headless and spec.get("serviceName") != headless["metadata"]["name"]:
        err("StatefulSet serviceName is not the headless Service")
    pod_labels = spec["template"]["metadata"]["labels"]
    for s in (svc, headless):
        sel = (s.get("spec") or {}).get("selector") or {}
        if any(pod_labels.get(k) != v for k, v in sel.items()):
            err(f"Service {s['metadata']['name']} selects {sel}, not the master pods {pod_labels}")
    port = svc["spec"]["ports"][0]["port"] if svc else None
    c = spec["template"]["spec"]["containers"][0]
    if port not in [p["containerPort"] for p in c.get("ports", [])]:
        err(f"the master container does not expose the Service port {port}")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        get = (c.get(probe) or {}).get("httpGet") or {}
        if get.get("path") != "/healthz" or get.get("port") not in (port, "http"):
            err(f"master {probe} is not httpGet /healthz on port {port}")
    ann = spec["template"]["metadata"].get("annotations", {})
    if ann.get("prometheus.io/port") != str(port) or ann.get("prometheus.io/path") != "/metrics":
        err("master prometheus.io/* annotations do not point at /metrics on the Service port")
    args = c.get("args", [])
    if "--bind" not in args or not args[args.index("--bind") + 1].endswith(f":{port}"):
        err("master --bind does not use the Service port")
    claims = [t["metadata"]["name"] for t in spec.get("volumeClaimTemplates", [])]
    mounts = {m["name"]: m["mountPath"] for m in c.get("volumeMounts", [])}
    if not any(mounts.get(cl) == "/var/lib/tunefleet" for cl in claims):
        err("no volumeClaimTemplate is mounted at /var/lib/tunefleet")

if deploy:
    c = deploy["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in c.get("env", [])}
    want = f"ws://{svc['metadata']['name']}:{port}" if svc else None
    if env.get("TUNEFLEET_SERVER", {}).get("value") != want:
        err(f"workers' TUNEFLEET_SERVER is not {want}")
    pod = (env.get("POD_NAME", {}).get("valueFrom") or {}).get("fieldRef", {})
    if pod.get("fieldPath") != "metadata.name":
        err("workers' POD_NAME does not come from metadata.name (downward API)")
    if "TUNEFLEET_WORKER_SECRET" not in env:
        err("workers get no TUNEFLEET_WORKER_SECRET")

for doc in (sts, deploy):
    if not doc:
        continue
    for c in doc["spec"]["template"]["spec"]["containers"]:
        for e in c.get("env", []):
            ref = (e.get("valueFrom") or {}).get("secretKeyRef")
            if ref and (ref["name"] != secret["metadata"]["name"] or ref["key"] not in secret_keys):
                err(f"{doc['metadata']['name']}: env {e['name']} refers to {ref['name']}/{ref['key']}, "
                    f"which secret.yaml does not define")

# CRD examples: no schema offline; check what ties them to the manifests above.
keda = one(load("examples/keda-scaledobject.yaml"), "ScaledObject")
if keda:
    if keda.get("apiVersion") != "keda.sh/v1alpha1":
        err("keda-scaledobject.yaml: apiVersion is not keda.sh/v1alpha1")
    ref = keda["spec"]["scaleTargetRef"]
    if (ref.get("kind", "Deployment"), ref.get("name")) != ("Deployment", deploy["metadata"]["name"]):
        err("keda-scaledobject.yaml does not scale the worker Deployment")
    queries = [t["metadata"].get("query", "") for t in keda["spec"]["triggers"] if t.get("type") == "prometheus"]
    if not any('tunefleet_jobs{state="queued"}' in q for q in queries):
        err("keda-scaledobject.yaml has no prometheus trigger on tunefleet_jobs{state=\"queued\"}")
    if keda["metadata"].get("namespace") != namespace:
        err("keda-scaledobject.yaml is not in the tunefleet namespace")
hpa = one(load("examples/hpa.yaml"), "HorizontalPodAutoscaler")
if hpa and hpa["spec"]["scaleTargetRef"].get("name") != deploy.get("metadata", {}).get("name"):
    err("hpa.yaml does not scale the worker Deployment")
pm = one(load("examples/podmonitor.yaml"), "PodMonitor")
if pm and sts:
    sel = pm["spec"]["selector"]["matchLabels"]
    labels = sts["spec"]["template"]["metadata"]["labels"]
    if any(labels.get(k) != v for k, v in sel.items()):
        err("podmonitor.yaml does not select the master pods")

for e in errors:
    print(f"ERROR consistency: {e}")
if not errors:
    print("INFO cross-references, kustomization and CRD examples are consistent")
sys.exit(1 if errors else 0)
EOF

if [[ $status -ne 0 ]]; then
    echo "validate-k8s: FAILED" >&2
    exit 1
fi
echo "validate-k8s: OK (Kubernetes $K8S_VERSION, strict)"
