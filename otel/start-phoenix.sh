#!/usr/bin/env bash
# Start a local Arize Phoenix server bound to 127.0.0.1, in the background.
# Phoenix lives in its own venv outside the repo ($CACHE/phoenix-venv; it pins
# heavy dependencies, keep it away from Orchestra's env); data (SQLite) in
# $STATE/phoenix. Idempotent: if our Phoenix is already up, just prints URLs.
#
# Env: ORCHESTRA_CACHE (default ~/.cache/orchestra)
#      ORCHESTRA_PHOENIX_STATE (default $ORCHESTRA_CACHE: pid file, log and data)
#      PHOENIX_PORT (6006: UI, REST API /v1/..., OTLP/HTTP at /v1/traces)
#      PHOENIX_GRPC_PORT (4319: OTLP/gRPC; Jaeger already uses 4317)
#      PHOENIX_PIP_SPEC (default arize-phoenix==20.26.1, the version verified here)
#      PHOENIX_PYTHON (python >=3.11,<3.15 used to create the venv; default python3)
#      PHOENIX_START_TIMEOUT (120 s; first start runs DB migrations)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=otel/_lib.sh
. "$HERE/_lib.sh"
# shellcheck source=otel/_phoenix.sh
. "$HERE/_phoenix.sh"

VENV="$CACHE/phoenix-venv"
WORKDIR="$STATE/phoenix"
PIP_SPEC="${PHOENIX_PIP_SPEC:-arize-phoenix==20.26.1}"
PY="${PHOENIX_PYTHON:-python3}"
TIMEOUT="${PHOENIX_START_TIMEOUT:-120}"
HOST=127.0.0.1
PORT="${PHOENIX_PORT:-6006}"
GRPC_PORT="${PHOENIX_GRPC_PORT:-4319}"
BASE_URL="http://$HOST:$PORT"

up() { curl -fsS --max-time 2 -o /dev/null "$BASE_URL/healthz" 2>/dev/null; }

report() {
    log "Phoenix is up (pid $(cat "$PIDFILE" 2>/dev/null || echo '?'), log $LOG, data $WORKDIR)"
    echo "UI:        $BASE_URL"
    echo "OTLP gRPC: $HOST:$GRPC_PORT   (OTEL_EXPORTER_OTLP_ENDPOINT=http://$HOST:$GRPC_PORT, protocol grpc)"
    echo "OTLP HTTP: $BASE_URL/v1/traces   (OTEL_EXPORTER_OTLP_ENDPOINT=$BASE_URL, protocol http/protobuf)"
    echo "Spans:     $BASE_URL/v1/projects/default/spans"
}

mkdir -p "$CACHE" "$STATE" "$WORKDIR"

adopt_running

if up; then
    log "ERROR: something else already answers on $BASE_URL (not started by this script)."
    exit 1
fi

# --- isolated venv -----------------------------------------------------------
STAMP="$VENV/.orchestra-pip-spec"
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$STAMP" 2>/dev/null)" != "$PIP_SPEC" ]; then
    "$PY" -c 'import sys; sys.exit(not ((3, 11) <= sys.version_info[:2] < (3, 15)))' || {
        log "ERROR: $PY is $("$PY" -V 2>&1); Phoenix needs Python >=3.11,<3.15 (set PHOENIX_PYTHON)"
        exit 1
    }
    if [ ! -x "$VENV/bin/python" ]; then
        log "creating venv $VENV"
        "$PY" -m venv "$VENV"
    fi
    log "pip install $PIP_SPEC into $VENV (first time: a few minutes, ~1 GB)"
    "$VENV/bin/python" -m pip install --disable-pip-version-check -q "$PIP_SPEC"
    echo "$PIP_SPEC" >"$STAMP"
fi

# --- start ---------------------------------------------------------------------
log "starting Phoenix: http $HOST:$PORT, OTLP gRPC $HOST:$GRPC_PORT, data $WORKDIR"
{ echo; echo "=== $(date -Is) start-phoenix ($PIP_SPEC)"; } >>"$LOG"
(
    cd "$WORKDIR"
    # Don't let an OTLP endpoint meant for Orchestra leak into the server's config.
    unset OTEL_EXPORTER_OTLP_ENDPOINT OTEL_EXPORTER_OTLP_TRACES_ENDPOINT PHOENIX_COLLECTOR_ENDPOINT
    export PHOENIX_HOST="$HOST" PHOENIX_PORT="$PORT" PHOENIX_GRPC_PORT="$GRPC_PORT"
    export PHOENIX_GRPC_HOST="$HOST"           # read by phoenix_serve.py
    export PHOENIX_WORKING_DIR="$WORKDIR"
    export PHOENIX_TELEMETRY_ENABLED=false PHOENIX_ALLOW_EXTERNAL_RESOURCES=false
    export PHOENIX_ENABLE_PROMETHEUS=false
    # No LLM agent assistant (/chat, server-side bash tool): this is a trace sink only.
    export PHOENIX_DISABLE_AGENT_ASSISTANT=true
    exec setsid "$VENV/bin/python" "$HERE/phoenix_serve.py" >>"$LOG" 2>&1 </dev/null
) &
await_started "$!"
