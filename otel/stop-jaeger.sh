#!/usr/bin/env bash
# Stop the Jaeger started by otel/start-jaeger.sh (uses its pid file only).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=otel/_lib.sh
. "$HERE/_lib.sh"
# shellcheck source=otel/_jaeger.sh
. "$HERE/_jaeger.sh"

stop_running 10
