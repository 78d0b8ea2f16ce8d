#!/usr/bin/env bash
# Start a local Jaeger v2 all-in-one (in-memory) bound to 127.0.0.1, in the
# background. Builds the binary first if needed (otel/build-jaeger.sh).
# Idempotent: if our Jaeger is already running and healthy, just prints the URL.
#
# Env: ORCHESTRA_CACHE (default ~/.cache/orchestra), JAEGER_VERSION,
#      JAEGER_CONFIG (default otel/jaeger-config.yaml), JAEGER_START_TIMEOUT (60),
#      and the port variables documented in jaeger-config.yaml.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
JAEGER_VERSION="${JAEGER_VERSION:-v1.76.0}"
CACHE="${ORCHESTRA_CACHE:-$HOME/.cache/orchestra}"
BIN="$CACHE/jaeger-$JAEGER_VERSION/jaeger"
CONFIG="${JAEGER_CONFIG:-$HERE/jaeger-config.yaml}"
LOG="$CACHE/jaeger.log"
PIDFILE="$CACHE/jaeger.pid"
TIMEOUT="${JAEGER_START_TIMEOUT:-60}"

HEALTH_URL="http://127.0.0.1:${JAEGER_HEALTH_PORT:-13133}/status"
QUERY_URL="http://127.0.0.1:${JAEGER_QUERY_HTTP_PORT:-16686}"

log() { printf '[start-jaeger] %s\n' "$*" >&2; }

healthy() { curl -fsS --max-time 2 -o /dev/null "$HEALTH_URL" 2>/dev/null; }

# Is PID alive and really our jaeger binary?
is_our_jaeger() {
    local pid="$1"
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    [ "$(readlink -f "/proc/$pid/exe" 2>/dev/null)" = "$(readlink -f "$BIN")" ]
}

report() {
    log "Jaeger is healthy (pid $(cat "$PIDFILE" 2>/dev/null || echo '?'), log $LOG)"
    log "OTLP gRPC: 127.0.0.1:${JAEGER_OTLP_GRPC_PORT:-4317}  OTLP HTTP: http://127.0.0.1:${JAEGER_OTLP_HTTP_PORT:-4318}"
    echo "$QUERY_URL"
}

mkdir -p "$CACHE"

# Already running?
if [ -f "$PIDFILE" ]; then
    pid="$(cat "$PIDFILE" 2>/dev/null || true)"
    if is_our_jaeger "$pid"; then
        log "already running (pid $pid); waiting for health"
        for _ in $(seq 1 "$TIMEOUT"); do
            if healthy; then report; exit 0; fi
            sleep 1
        done
        log "ERROR: running (pid $pid) but not healthy after ${TIMEOUT}s; last log lines:"
        tail -n 40 "$LOG" >&2 || true
        exit 1
    fi
    log "removing stale pid file ($pid)"
    rm -f "$PIDFILE"
fi

if healthy; then
    log "ERROR: something else already answers on $HEALTH_URL (not started by this script)."
    log "Stop it first, or pick other ports (JAEGER_*_PORT, see jaeger-config.yaml)."
    exit 1
fi

if [ ! -x "$BIN" ]; then
    log "binary missing, building it (one-off, takes a while)"
    "$HERE/build-jaeger.sh"
fi
[ -f "$CONFIG" ] || { log "ERROR: config not found: $CONFIG"; exit 1; }

log "starting $BIN --config $CONFIG"
{ echo; echo "=== $(date -Is) start-jaeger: $BIN --config $CONFIG"; } >>"$LOG"
# setsid: own session, so it survives the calling shell / terminal.
setsid "$BIN" --config "$CONFIG" >>"$LOG" 2>&1 </dev/null &
pid=$!
echo "$pid" >"$PIDFILE"

for _ in $(seq 1 "$TIMEOUT"); do
    if ! kill -0 "$pid" 2>/dev/null; then
        log "ERROR: jaeger (pid $pid) exited during startup; last log lines:"
        tail -n 40 "$LOG" >&2 || true
        rm -f "$PIDFILE"
        exit 1
    fi
    if healthy; then report; exit 0; fi
    sleep 1
done

log "ERROR: jaeger (pid $pid) not healthy after ${TIMEOUT}s; stopping it. Last log lines:"
tail -n 40 "$LOG" >&2 || true
kill "$pid" 2>/dev/null || true
rm -f "$PIDFILE"
exit 1
