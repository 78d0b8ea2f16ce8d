# Shared by the start and stop scripts of otel/ (sourced, not run).
# The caller also sources _jaeger.sh or _phoenix.sh (NAME, PIDFILE, LOG and
# is_ours PID); to start, it sets TIMEOUT and defines up (the server answers
# its health check) and report.

# Messages go to stderr, tagged with the script's name.
log() { printf '[%s] %s\n' "$(basename "$0" .sh)" "$*" >&2; }

# If our server already runs: wait until it answers, report and exit.
# A pid file left by a process that is gone is removed; one naming a live
# process that is not ours is left alone (exit 1): it may belong to someone else.
adopt_running() {
    [ -f "$PIDFILE" ] || return 0
    local pid
    pid="$(cat "$PIDFILE" 2>/dev/null || true)"
    if is_ours "$pid"; then
        log "already running (pid $pid); waiting until it answers"
        for _ in $(seq 1 "$TIMEOUT"); do
            if up; then report; exit 0; fi
            sleep 1
        done
        log "ERROR: running (pid $pid) but not answering after ${TIMEOUT}s; last log lines:"
        tail -n 40 "$LOG" >&2 || true
        exit 1
    fi
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
        log "ERROR: pid $pid (from $PIDFILE) is alive but is not a $NAME of ours;" \
            "leaving it and its pid file. Stop it, or give this $NAME a state directory" \
            "of its own (ORCHESTRA_$(echo "$NAME" | tr '[:lower:]' '[:upper:]')_STATE)."
        exit 1
    fi
    log "removing stale pid file (${pid:-empty}: no such process)"
    rm -f "$PIDFILE"
}

# Record PID (just started) and wait for it to answer: report and exit 0, or
# stop it, show the end of its log and exit 1.
await_started() {
    local pid="$1"
    echo "$pid" >"$PIDFILE"
    for _ in $(seq 1 "$TIMEOUT"); do
        if ! kill -0 "$pid" 2>/dev/null; then
            log "ERROR: $NAME (pid $pid) exited during startup; last log lines:"
            tail -n 40 "$LOG" >&2 || true
            rm -f "$PIDFILE"
            exit 1
        fi
        if up; then report; exit 0; fi
        sleep 1
    done
    log "ERROR: $NAME (pid $pid) not answering after ${TIMEOUT}s; stopping it. Last log lines:"
    tail -n 40 "$LOG" >&2 || true
    kill "$pid" 2>/dev/null || true
    rm -f "$PIDFILE"
    exit 1
}

# Stop the server in the pid file (SIGTERM, then SIGKILL after SECONDS), if it
# is ours. A pid file naming a process that is gone is removed; one naming a
# live process that is not ours is left alone with that process (return 1).
stop_running() {
    local seconds="$1" pid
    if [ ! -f "$PIDFILE" ]; then
        log "not running (no pid file $PIDFILE)"
        return 0
    fi
    pid="$(cat "$PIDFILE" 2>/dev/null || true)"
    if ! is_ours "$pid"; then
        if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
            log "pid $pid (from $PIDFILE) is alive but is not a $NAME of ours; leaving it and its pid file"
            return 1
        fi
        log "not running (stale pid file${pid:+: pid $pid is gone}); removing it"
        rm -f "$PIDFILE"
        return 0
    fi
    log "stopping $NAME (pid $pid)"
    kill -TERM "$pid"
    for _ in $(seq 1 $((seconds * 10))); do
        kill -0 "$pid" 2>/dev/null || { rm -f "$PIDFILE"; log "stopped"; return 0; }
        sleep 0.1
    done
    log "still alive after ${seconds}s, sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$PIDFILE"
    log "killed"
}
