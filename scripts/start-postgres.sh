#!/usr/bin/env bash
# Install (if needed), initialise and start a throwaway PostgreSQL server on
# 127.0.0.1, for the tests that keep the master's state in PostgreSQL
# (`tunefleet serve --state postgres://...`). Run as root on a Debian box where
# PID 1 is not systemd: the server runs as the `postgres` user, trust
# authentication on loopback only, data in $TUNEFLEET_PG_DIR.
#
#   scripts/start-postgres.sh           # start; exits at once if already up
#   scripts/start-postgres.sh --url     # ...and print only the base URL
#
# Idempotent. Port $TUNEFLEET_PG_PORT (default 55432); data directory
# $TUNEFLEET_PG_DIR (default /tmp/tunefleet-pg); log in that directory.
# The URL to give the tests: postgres://postgres@127.0.0.1:PORT/postgres
set -euo pipefail

PORT=${TUNEFLEET_PG_PORT:-55432}
DIR=${TUNEFLEET_PG_DIR:-/tmp/tunefleet-pg}
URL_ONLY=0
for arg in "$@"; do
  case "$arg" in
    --url) URL_ONLY=1 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "start-postgres: unknown argument: $arg" >&2; exit 2 ;;
  esac
done
log() { [ "$URL_ONLY" -eq 1 ] || echo "start-postgres: $*"; }
die() { echo "start-postgres: ERROR: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root (the server runs as the postgres user)"

BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
if [ -z "$BIN" ] || [ ! -x "$BIN/pg_ctl" ]; then
  log "installing Debian's postgresql"
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
fi
as_pg() { su postgres -s /bin/sh -c "$*"; }

mkdir -p "$DIR"
chown postgres:postgres "$DIR"
chmod 700 "$DIR"
if [ ! -f "$DIR/PG_VERSION" ]; then
  log "initialising $DIR"
  as_pg "'$BIN/initdb' -D '$DIR' -A trust -U postgres --no-sync" >/dev/null
fi
if as_pg "'$BIN/pg_ctl' -D '$DIR' status" >/dev/null 2>&1; then
  log "already running on port $PORT"
else
  # A stale pid file from a killed server would stop pg_ctl.
  rm -f "$DIR/postmaster.pid"
  as_pg "'$BIN/pg_ctl' -D '$DIR' -l '$DIR/server.log' -w -t 30 \
    -o \"-p $PORT -k '$DIR' -c listen_addresses=127.0.0.1 -c max_connections=200\" start" >/dev/null \
    || { tail -20 "$DIR/server.log" >&2; die "the server did not start"; }
  log "started on port $PORT (log: $DIR/server.log)"
fi
echo "postgres://postgres@127.0.0.1:$PORT/postgres"
