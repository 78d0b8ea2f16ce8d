#!/usr/bin/env bash
# Stop the Jaeger started by otel/start-jaeger.sh (uses its pid file only).
set -euo pipefail

JAEGER_VERSION="${JAEGER_VERSION:-v1.76.0}"
CACHE="${ORCHESTRA_CACHE:-$HOME/.cache/orchestra}"
BIN="$CACHE/jaeger-$JAEGER_VERSION/jaeger"
PIDFILE="$CACHE/jaeger.pid"

log() { printf '[stop-jaeger] %s\n' "$*" >&2; }

if [ ! -f "$PIDFILE" ]; then
    log "not running (no pid file $PIDFILE)"
    exit 0
fi
pid="$(cat "$PIDFILE" 2>/dev/null || true)"
if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
    log "not running (stale pid file)"
    rm -f "$PIDFILE"
    exit 0
fi
if [ "$(readlink -f "/proc/$pid/exe" 2>/dev/null)" != "$(readlink -f "$BIN")" ]; then
    log "pid $pid is not $BIN; not touching it (removing stale pid file)"
    rm -f "$PIDFILE"
    exit 0
fi

log "stopping jaeger (pid $pid)"
kill -TERM "$pid"
for _ in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$PIDFILE"; log "stopped"; exit 0; }
    sleep 0.1
done
log "still alive after 10s, sending SIGKILL"
kill -KILL "$pid" 2>/dev/null || true
rm -f "$PIDFILE"
log "killed"
