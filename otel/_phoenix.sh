# Which Phoenix is ours: sourced by start-phoenix.sh and stop-phoenix.sh.
CACHE="${ORCHESTRA_CACHE:-$HOME/.cache/orchestra}"
LOG="$CACHE/phoenix.log"
PIDFILE="$CACHE/phoenix.pid"
NAME=phoenix

# Is PID alive and running our launcher (phoenix_serve.py)?
is_ours() {
    local pid="$1"
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "phoenix_serve.py"
}
