# Shared by start-jaeger.sh and start-phoenix.sh (sourced, not run).
# The caller sets NAME, LOG, PIDFILE and TIMEOUT and defines: log MESSAGE,
# up (the server answers its health check), is_ours PID and report.

# If our server already runs: wait until it answers, report and exit.
# A pid file left by a process that is gone is removed.
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
    log "removing stale pid file ($pid)"
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
