# syntax=docker/dockerfile:1
#
# tunefleet worker with the real TVM backend (`--backend tvm`, the default).
#
# Build from the repository root (the build context must be the root):
#   docker build -f deploy/docker/worker.Dockerfile -t tunefleet/worker:latest .
#
# Run (the master URL and the join secret come from the environment):
#   docker run -e TUNEFLEET_SERVER=ws://MASTER:18871 -e TUNEFLEET_WORKER_SECRET=S tunefleet/worker
# Extra arguments are appended to the worker's command line, e.g.
#   docker run ... tunefleet/worker --target '{"kind":"llvm","num-cores":2}'
#   docker run ... tunefleet/worker --backend sim        # fleet tests, no TVM work
# (see deploy/docker/worker-entrypoint.sh for what is always passed).
#
# The Python environment is made by scripts/setup-tvm.sh itself, so its pins
# (apache-tvm, apache-tvm-ffi, onnx, ...) are the ones the tests use.

ARG RUST_IMAGE=rust:1-bookworm
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---------------------------------------------------------------------------
FROM ${RUST_IMAGE} AS builder
# The `tvm` feature links libtvm_ffi.so, found with `tvm-ffi-config --libdir`
# (pip package apache-tvm-ffi), and embeds that directory as an rpath
# (worker/build.rs). The venv is therefore made at the same path, /opt/venv,
# with the same Python minor version (Debian bookworm's python3 is 3.11, like
# the runtime image), so the rpath is right in the runtime image too.
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/*
COPY scripts/setup-tvm.sh /tmp/setup-tvm.sh
RUN set -eux; \
    FFI_VERSION=$(sed -n 's/^FFI_VERSION="\(.*\)"$/\1/p' /tmp/setup-tvm.sh); \
    test -n "$FFI_VERSION"; \
    python3 -m venv /opt/venv; \
    /opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check "apache-tvm-ffi==$FFI_VERSION"; \
    /opt/venv/bin/tvm-ffi-config --libdir
ENV PATH=/opt/venv/bin:$PATH

WORKDIR /src
COPY . .
RUN cargo build --release --locked -p tunefleet-worker --features tvm --bin tunefleet-worker \
 && install -D -m 0755 target/release/tunefleet-worker /out/bin/tunefleet-worker

# ---------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
# g++: TVM compiles every candidate kernel to a shared library with it
# (export_library). tini: PID 1 that forwards SIGTERM to the worker and reaps
# the orphans of TVM's process pools.
RUN apt-get update \
 && apt-get install -y --no-install-recommends g++ tini \
 && rm -rf /var/lib/apt/lists/*

ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY scripts/setup-tvm.sh /tmp/setup-tvm.sh
RUN TUNEFLEET_VENV=/opt/venv PYTHON=python3 /tmp/setup-tvm.sh && rm /tmp/setup-tvm.sh

RUN groupadd --system --gid 10001 tunefleet \
 && useradd --system --uid 10001 --gid 10001 --create-home --home-dir /home/tunefleet \
      --shell /usr/sbin/nologin tunefleet \
 && install -d -o 10001 -g 10001 -m 0750 /var/tmp/tunefleet

# The tunefleet package, installed as users install it: the worker runs its
# drivers as `python -m tunefleet._driver` with the venv's interpreter.
COPY python /tmp/tunefleet-python
RUN /opt/venv/bin/pip install --no-deps /tmp/tunefleet-python && rm -rf /tmp/tunefleet-python \
 && /opt/venv/bin/python -c "import tunefleet._driver.tune, tunefleet._driver.model"
COPY --from=builder /out/bin/tunefleet-worker /usr/local/bin/tunefleet-worker
COPY deploy/docker/worker-entrypoint.sh /usr/local/bin/tunefleet-worker-entrypoint
# Fail the build, not the first job, when libtvm_ffi.so is not where the
# rpath says (a Python minor version that differs between the stages).
RUN chmod 0755 /usr/local/bin/tunefleet-worker-entrypoint \
 && if ldd /usr/local/bin/tunefleet-worker | grep 'not found'; then exit 1; fi \
 && tunefleet-worker --version

USER 10001:10001
WORKDIR /var/tmp/tunefleet
ENV TUNEFLEET_SERVER=ws://tunefleet-master:18871 \
    TUNEFLEET_WORK_DIR=/var/tmp/tunefleet
STOPSIGNAL SIGTERM
# On SIGTERM the worker stops its job's Python process group, closes its socket
# and exits; the master puts the job back at the front of the queue.
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/tunefleet-worker-entrypoint"]
CMD []
