# Which Jaeger is ours: sourced by start-jaeger.sh and stop-jaeger.sh.
JAEGER_VERSION="${JAEGER_VERSION:-v1.76.0}"
CACHE="${ORCHESTRA_CACHE:-$HOME/.cache/orchestra}"
BIN="$CACHE/jaeger-$JAEGER_VERSION/jaeger"
LOG="$CACHE/jaeger.log"
PIDFILE="$CACHE/jaeger.pid"
NAME=jaeger

# Is PID alive and really our jaeger binary?
is_ours() {
    local pid="$1"
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    [ "$(readlink -f "/proc/$pid/exe" 2>/dev/null)" = "$(readlink -f "$BIN")" ]
}
