# Which Jaeger is ours: sourced by start-jaeger.sh and stop-jaeger.sh.
JAEGER_VERSION="${JAEGER_VERSION:-v1.75.0}"
CACHE="${ORCHESTRA_CACHE:-$HOME/.cache/orchestra}"
BIN="$CACHE/jaeger-$JAEGER_VERSION/jaeger"
LOG="$CACHE/jaeger.log"
PIDFILE="$CACHE/jaeger.pid"
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
