#!/usr/bin/env bash
# device-bg.sh: long stages ON the GPU machine that outlive the command that starts them, so that the
# transfer commands made meanwhile (the GGUF parts of docs/qwen25coder.md) are not idle time, and a
# training run is not bound to one command's 10 minutes. Each job runs detached (its own session), with
# its log and exit status under $BG (default /root/bg), which the machine keeps between commands made
# back to back.
#
#   start NAME CMD...   run CMD from the current folder in the background: $BG/NAME.log, then $BG/NAME.rc
#   wait NAME [SECS]    wait until NAME has ended (at most SECS, default 540), print its log's tail and
#                       exit with its status (124 when it is still running at SECS)
#   status              every job: running, or its exit status, and its log's last line
#   stop NAME           end NAME and every process under it (TERM, then KILL after 5 s); `timeout` and
#                       other tools start their children in process groups of their own, so the job's
#                       group alone is not enough, and a pattern match (pkill -f) would also hit the
#                       command that asks
#   src DIR             copy the working tree (without .dev/, models/, build*/) to DIR, so that a build
#                       there is not disturbed when the next command brings a fresh copy of the tree
set -uo pipefail
BG=${BG:-/root/bg}
mkdir -p "$BG"
case "${1:-}" in
start)
    name=${2:?NAME}
    shift 2
    [ $# -gt 0 ] || { echo "device-bg: start $name: no command" >&2; exit 2; }
    if [ -f "$BG/$name.pid" ] && [ ! -f "$BG/$name.rc" ] && kill -0 "$(cat "$BG/$name.pid")" 2>/dev/null; then
        echo "device-bg: $name is already running (pid $(cat "$BG/$name.pid"))" >&2
        exit 1
    fi
    rm -f "$BG/$name.rc"
    # The status is written by the job itself, so that it survives the command that started it.
    setsid nohup bash -c '"$@"; echo $? >"$0.rc.tmp" && mv "$0.rc.tmp" "$0.rc"' "$BG/$name" "$@" \
        >"$BG/$name.log" 2>&1 </dev/null &
    echo $! >"$BG/$name.pid"
    echo "device-bg: $name started (pid $!), log $BG/$name.log"
    ;;
wait)
    name=${2:?NAME}
    secs=${3:-540}
    [ -f "$BG/$name.pid" ] || { echo "device-bg: no job $name" >&2; exit 1; }
    t0=$(date +%s)
    while [ ! -f "$BG/$name.rc" ]; do
        if ! kill -0 "$(cat "$BG/$name.pid")" 2>/dev/null && [ ! -f "$BG/$name.rc" ]; then
            sleep 1
            [ -f "$BG/$name.rc" ] && break
            echo "device-bg: $name ended without a status (killed?)"; tail -20 "$BG/$name.log"; exit 1
        fi
        if [ $(($(date +%s) - t0)) -ge "$secs" ]; then
            echo "device-bg: $name still running after $secs s"; tail -5 "$BG/$name.log"; exit 124
        fi
        sleep 2
    done
    tail -20 "$BG/$name.log"
    rc=$(cat "$BG/$name.rc")
    echo "device-bg: $name exit $rc"
    [[ $rc =~ ^[0-9]+$ ]] || exit 1  # "stopped"
    exit "$rc"
    ;;
status)
    for p in "$BG"/*.pid; do
        [ -f "$p" ] || continue
        name=$(basename "$p" .pid)
        if [ -f "$BG/$name.rc" ]; then state="ended: $(cat "$BG/$name.rc")"
        elif kill -0 "$(cat "$p")" 2>/dev/null; then state=running
        else state="gone without a status"; fi
        echo "$name: $state: $(tail -1 "$BG/$name.log" 2>/dev/null)"
    done
    ;;
stop)
    name=${2:?NAME}
    [ -f "$BG/$name.pid" ] || { echo "device-bg: no job $name" >&2; exit 1; }
    # The job's process tree, from /proc's parent links, leaves last.
    tree() { local c; for c in $(pgrep -P "$1"); do tree "$c"; done; echo "$1"; }
    pids=$(tree "$(cat "$BG/$name.pid")")
    kill -TERM $pids 2>/dev/null
    for _ in 1 2 3 4 5; do kill -0 $pids 2>/dev/null || break; sleep 1; done
    kill -KILL $pids 2>/dev/null
    [ -f "$BG/$name.rc" ] || echo stopped >"$BG/$name.rc"
    echo "device-bg: $name stopped ($(echo $pids | wc -w) processes)"
    ;;
src)
    dir=${2:?DIR}
    mkdir -p "$dir"
    tar cf - --exclude=./.dev --exclude=./models --exclude='./build*' --exclude=./.git . | tar xf - -C "$dir"
    echo "device-bg: tree copied to $dir ($(du -sh "$dir" | cut -f1))"
    ;;
*)
    echo "usage: scripts/device-bg.sh start NAME CMD... | wait NAME [SECS] | status | stop NAME | src DIR" >&2
    exit 2
    ;;
esac
