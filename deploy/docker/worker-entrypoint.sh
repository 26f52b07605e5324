#!/bin/sh
# Entry point of the worker image: tunefleet-worker with the image's paths,
# the master URL from TUNEFLEET_SERVER, and the pod's name as the worker name.
# The join secret is read by tunefleet-worker itself from TUNEFLEET_WORKER_SECRET
# (never put on a command line). Arguments are appended (e.g. --target JSON,
# --backend sim); do not pass --server or --name there: set TUNEFLEET_SERVER or
# TUNEFLEET_WORKER_NAME instead (the worker refuses a flag given twice).
set -eu

: "${TUNEFLEET_SERVER:?set TUNEFLEET_SERVER to the master URL, e.g. ws://tunefleet-master:18871}"
# POD_NAME comes from the Kubernetes downward API; HOSTNAME is the pod name too.
name=${TUNEFLEET_WORKER_NAME:-${POD_NAME:-${HOSTNAME:-$(cat /proc/sys/kernel/hostname)}}}

exec /usr/local/bin/tunefleet-worker \
    --server "$TUNEFLEET_SERVER" \
    --name "$name" \
    --python /opt/venv/bin/python \
    --work-dir "${TUNEFLEET_WORK_DIR:-/var/tmp/tunefleet}" \
    "$@"
