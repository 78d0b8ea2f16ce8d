#!/usr/bin/env bash
# Stop the Phoenix started by otel/start-phoenix.sh (uses its pid file only).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${ORCHESTRA_CACHE:-$HOME/.cache/orchestra}"
PIDFILE="$CACHE/phoenix.pid"
NAME=phoenix

# shellcheck source=otel/_lib.sh
. "$HERE/_lib.sh"

log() { printf '[stop-phoenix] %s\n' "$*" >&2; }

is_ours() {
    local pid="$1"
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "phoenix_serve.py"
}

stop_running 15
