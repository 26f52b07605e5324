# A tunefleet worker that tunes with TVM MetaSchedule (the `tvm` backend).
#
#   docker build -f deploy/docker/worker.Dockerfile -t tunefleet/worker:latest .
#
# Build context: the repository root. The TVM venv lives at /opt/venv in both
# stages: the worker binary carries an rpath to /opt/venv's tvm_ffi/lib.

# ---- build ----
FROM rust:1-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3-venv \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The tvm-ffi crate's build script asks the venv's tvm-ffi-config for its paths.
RUN TUNEFLEET_VENV=/opt/venv scripts/setup-tvm.sh \
 && PATH=/opt/venv/bin:$PATH cargo build --release --locked \
        -p tunefleet-worker --features tvm --bin tunefleet-worker

# ---- run: the same venv (same pins), g++ for TVM's export_library ----
FROM python:3.11-slim-bookworm
RUN apt-get update \
 && apt-get install -y --no-install-recommends g++ tini \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --create-home tunefleet
COPY scripts/setup-tvm.sh /tmp/setup-tvm.sh
RUN TUNEFLEET_VENV=/opt/venv PYTHON=python3.11 /tmp/setup-tvm.sh && rm /tmp/setup-tvm.sh
WORKDIR /opt/tunefleet
COPY --from=build /src/target/release/tunefleet-worker /opt/tunefleet/tunefleet-worker
COPY worker/python/ /opt/tunefleet/worker/python/
USER tunefleet
# SIGTERM: the worker hands its job back (the master requeues it) and exits.
STOPSIGNAL SIGTERM
# TUNEFLEET_SERVER: the master's URL; TUNEFLEET_WORKER_SECRET: the join secret;
# TUNEFLEET_WORKER_NAME: the name shown on the dashboard (the pod's name).
# --target auto detects the node's CPU (LLVM mcpu) and the cores this
# container may use.
ENTRYPOINT ["/usr/bin/tini", "--", "/bin/sh", "-c", \
  "exec /opt/tunefleet/tunefleet-worker --server \"$TUNEFLEET_SERVER\" --name \"${TUNEFLEET_WORKER_NAME:-$(hostname)}\" --python /opt/venv/bin/python \"$@\"", "--"]
