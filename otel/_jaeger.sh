# Which Jaeger is ours: sourced by start-jaeger.sh and stop-jaeger.sh.
# ORCHESTRA_JAEGER_STATE: directory for the pid file and log (default: the
# cache), so a second Jaeger (CI's, on ports of its own) never shares them.
JAEGER_VERSION="${JAEGER_VERSION:-v1.75.0}"
CACHE="${ORCHESTRA_CACHE:-$HOME/.cache/orchestra}"
STATE="${ORCHESTRA_JAEGER_STATE:-$CACHE}"
BIN="$CACHE/jaeger-$JAEGER_VERSION/jaeger"
LOG="$STATE/jaeger.log"
PIDFILE="$STATE/jaeger.pid"
NAME=jaeger

# Is PID alive and really a jaeger binary built by our scripts (any version)?
is_ours() {
    local pid="$1" exe
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    exe="$(readlink -f "/proc/$pid/exe" 2>/dev/null)" || return 1
    case "$exe" in
        "$(readlink -f "$CACHE")"/jaeger-*/jaeger) return 0 ;;
        *) return 1 ;;
    esac
}
