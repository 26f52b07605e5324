# The tunefleet master (`tunefleet serve`) with the web dashboard.
#
#   docker build -f deploy/docker/master.Dockerfile -t tunefleet/master:latest .
#
# Build context: the repository root. Nothing is downloaded at run time.

# ---- build: the master binary and the wasm dashboard ----
FROM rust:1-bookworm AS build
WORKDIR /src
RUN rustup target add wasm32-unknown-unknown
COPY . .
# scripts/build-web.sh installs wasm-bindgen-cli at the exact version in
# Cargo.lock, then builds web/dist (wasm-release profile).
RUN cargo build --release --locked -p tunefleet-server --bin tunefleet \
 && scripts/build-web.sh

# ---- run ----
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates tini \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /var/lib/tunefleet tunefleet \
 && mkdir -p /var/lib/tunefleet /opt/tunefleet \
 && chown tunefleet /var/lib/tunefleet
COPY --from=build /src/target/release/tunefleet /opt/tunefleet/tunefleet
COPY --from=build /src/web/dist /opt/tunefleet/web
USER tunefleet
WORKDIR /var/lib/tunefleet
EXPOSE 18871
# SIGTERM: stop accepting, tell the workers, commit the last batch, exit.
STOPSIGNAL SIGTERM
# The admin token and the join secret come from the environment
# (TUNEFLEET_ADMIN_TOKEN, TUNEFLEET_WORKER_SECRET), never from the command line.
ENTRYPOINT ["/usr/bin/tini", "--", "/opt/tunefleet/tunefleet", "serve", \
            "--bind", "0.0.0.0:18871", \
            "--state", "/var/lib/tunefleet/fleet.db", \
            "--web-dir", "/opt/tunefleet/web"]
