# Which Phoenix is ours: sourced by start-phoenix.sh and stop-phoenix.sh.
# ORCHESTRA_PHOENIX_STATE: directory for the pid file, log and data (default: the
# cache), so a second Phoenix (on ports of its own) never shares them.
CACHE="${ORCHESTRA_CACHE:-$HOME/.cache/orchestra}"
STATE="${ORCHESTRA_PHOENIX_STATE:-$CACHE}"
LOG="$STATE/phoenix.log"
PIDFILE="$STATE/phoenix.pid"
NAME=phoenix

# Is PID alive (not a zombie) and running our launcher (phoenix_serve.py)?
is_ours() {
    local pid="$1" state
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
    state="$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1)" || return 1
    [ "$state" != Z ] || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "phoenix_serve.py"
}
