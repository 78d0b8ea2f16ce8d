#!/usr/bin/env bash
# Start a local Jaeger v2 all-in-one (in-memory) bound to 127.0.0.1, in the
# background. Builds the binary first if needed (otel/build-jaeger.sh).
# Idempotent: if our Jaeger is already running and healthy, just prints the URL.
#
# Env: ORCHESTRA_CACHE (default ~/.cache/orchestra), JAEGER_VERSION,
#      ORCHESTRA_JAEGER_STATE (default $ORCHESTRA_CACHE: pid file and log),
#      JAEGER_CONFIG (default otel/jaeger-config.yaml), JAEGER_START_TIMEOUT (60),
#      and the port variables documented in jaeger-config.yaml.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=otel/_lib.sh
. "$HERE/_lib.sh"
# shellcheck source=otel/_jaeger.sh
. "$HERE/_jaeger.sh"

CONFIG="${JAEGER_CONFIG:-$HERE/jaeger-config.yaml}"
TIMEOUT="${JAEGER_START_TIMEOUT:-60}"
HEALTH_URL="http://127.0.0.1:${JAEGER_HEALTH_PORT:-13133}/status"
QUERY_URL="http://127.0.0.1:${JAEGER_QUERY_HTTP_PORT:-16686}"

up() { curl -fsS --max-time 2 -o /dev/null "$HEALTH_URL" 2>/dev/null; }

report() {
    log "Jaeger is healthy (pid $(cat "$PIDFILE" 2>/dev/null || echo '?'), log $LOG)"
    log "OTLP gRPC: 127.0.0.1:${JAEGER_OTLP_GRPC_PORT:-4317}  OTLP HTTP: http://127.0.0.1:${JAEGER_OTLP_HTTP_PORT:-4318}"
    echo "$QUERY_URL"
}

mkdir -p "$CACHE" "$STATE"

adopt_running

if up; then
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
await_started "$!"
