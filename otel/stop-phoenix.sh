#!/usr/bin/env bash
# Stop the Phoenix started by otel/start-phoenix.sh (uses its pid file only).
set -euo pipefail

CACHE="${ORCHESTRA_CACHE:-$HOME/.cache/orchestra}"
PIDFILE="$CACHE/phoenix.pid"

log() { printf '[stop-phoenix] %s\n' "$*" >&2; }

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
if ! tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "phoenix_serve.py"; then
    log "pid $pid is not our Phoenix; not touching it (removing stale pid file)"
    rm -f "$PIDFILE"
    exit 0
fi

log "stopping phoenix (pid $pid)"
kill -TERM "$pid"
for _ in $(seq 1 150); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$PIDFILE"; log "stopped"; exit 0; }
    sleep 0.1
done
log "still alive after 15s, sending SIGKILL"
kill -KILL "$pid" 2>/dev/null || true
rm -f "$PIDFILE"
log "killed"
