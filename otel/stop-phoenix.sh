#!/usr/bin/env bash
# Stop the Phoenix started by otel/start-phoenix.sh (uses its pid file only).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=otel/_lib.sh
. "$HERE/_lib.sh"
# shellcheck source=otel/_phoenix.sh
. "$HERE/_phoenix.sh"

stop_running 15
