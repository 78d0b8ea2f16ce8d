#!/usr/bin/env bash
# Stop the Jaeger started by otel/start-jaeger.sh (uses its pid file only).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
JAEGER_VERSION="${JAEGER_VERSION:-v1.76.0}"
CACHE="${ORCHESTRA_CACHE:-$HOME/.cache/orchestra}"
BIN="$CACHE/jaeger-$JAEGER_VERSION/jaeger"
PIDFILE="$CACHE/jaeger.pid"
NAME=jaeger

# shellcheck source=otel/_lib.sh
. "$HERE/_lib.sh"

log() { printf '[stop-jaeger] %s\n' "$*" >&2; }

# Is PID alive and really our jaeger binary?
is_ours() {
    local pid="$1"
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    [ "$(readlink -f "/proc/$pid/exe" 2>/dev/null)" = "$(readlink -f "$BIN")" ]
}

stop_running 10
