# syntax=docker/dockerfile:1
#
# tunefleet master: `tunefleet serve` plus the web dashboard.
#
# Build from the repository root (the build context must be the root):
#   docker build -f deploy/docker/master.Dockerfile -t tunefleet/master:latest .
# master.Dockerfile.dockerignore (beside this file, BuildKit) keeps target/,
# .venv/ and web/dist/ out of the build context.
#
# Runs as uid 10001; state (SQLite, WAL) lives in the volume /var/lib/tunefleet.
# SIGTERM stops it gracefully: workers are told, in-flight jobs go back to the
# queue without counting an attempt, the last batch is committed.

ARG RUST_IMAGE=rust:1-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

# ---------------------------------------------------------------------------
FROM ${RUST_IMAGE} AS builder
WORKDIR /src

# The dashboard toolchain, as scripts/build-web.sh installs it: the wasm32
# target and wasm-bindgen-cli at exactly the version of the wasm-bindgen crate
# in Cargo.lock. Its own layer: rebuilt only when Cargo.lock changes.
RUN rustup target add wasm32-unknown-unknown
COPY Cargo.lock ./
RUN set -eux; \
    WB_VERSION=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock); \
    test -n "$WB_VERSION"; \
    cargo install wasm-bindgen-cli --version "=$WB_VERSION" --locked \
      || cargo install wasm-bindgen-cli --version "=$WB_VERSION"; \
    wasm-bindgen --version

COPY . .

# The master (the `tunefleet` binary of tunefleet-server: serve and the CLI).
RUN cargo build --release --locked -p tunefleet-server --bin tunefleet \
 && install -D -m 0755 target/release/tunefleet /out/bin/tunefleet

# The dashboard, built by the same script as everywhere else (it only checks
# the toolchain installed above; wasm-opt is optional and absent here).
RUN TUNEFLEET_WEB_NO_INSTALL=1 scripts/build-web.sh \
 && test -f web/dist/index.html \
 && mkdir -p /out/web && cp -r web/dist/. /out/web/

# ---------------------------------------------------------------------------
FROM ${RUNTIME_IMAGE}
# tini: PID 1 that forwards SIGTERM and reaps children (`--local-workers`).
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 tunefleet \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/tunefleet \
      --no-create-home --shell /usr/sbin/nologin tunefleet \
 && install -d -o 10001 -g 10001 -m 0750 /var/lib/tunefleet

COPY --from=builder /out/bin/tunefleet /usr/local/bin/tunefleet
COPY --from=builder /out/web /opt/tunefleet/web
RUN tunefleet --version

USER 10001:10001
WORKDIR /var/lib/tunefleet
VOLUME ["/var/lib/tunefleet"]
EXPOSE 18871
STOPSIGNAL SIGTERM
# Secrets come from the environment, never the command line:
# TUNEFLEET_ADMIN_TOKEN (else a token is generated and printed at start) and
# TUNEFLEET_WORKER_SECRET (workers must present it to register).
ENTRYPOINT ["/usr/bin/tini", "--", "tunefleet"]
CMD ["serve", "--bind", "0.0.0.0:18871", "--state", "/var/lib/tunefleet/fleet.db", "--web-dir", "/opt/tunefleet/web"]
