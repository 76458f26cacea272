#!/usr/bin/env bash
# What one event's commit costs Redis itself: lua/append.lua as the server
# runs it (one server, no replicas: the ring in the script), against the
# layout redis-path.md names as the floor (benches/redis/floor-append.lua),
# each on a Redis of its own state (flushed between runs), rounds
# alternating. Each session has one stream with one follower (a compact
# member); the appends go to the sessions in turn, a 150-byte notification
# each, sent by `redis-cli --pipe` (benches/redis/append-resp.py writes
# them).
#
#   benches/redis/append-cost.sh [SESSIONS] [N] [ROUNDS]
#
# SESSIONS: sessions (default 1); N: appends a round (default 200000);
# ROUNDS: rounds of each (default 2). Prints per round Redis's time per
# append (`usec_per_call` of EVALSHA, the script's own commands included;
# wall time inside Redis, so run it on a quiet machine) and the commands
# per append (INFO commandstats, the script's own counted). Redis runs with
# `stream-node-max-bytes 1024` and `hash-max-ziplist-value 1024`, as the
# scale runs of redis-path.md. Needs redis-server, redis-cli, python3, bc.
set -euo pipefail
cd "$(dirname "$0")/../.."
SESSIONS=${1:-1}
N=${2:-200000}
ROUNDS=${3:-2}
WORK=$(mktemp -d)
PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
cleanup() {
  redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --daemonize yes --dir "$WORK" --logfile "$WORK/redis.log" \
  --stream-node-max-bytes 1024 --hash-max-ziplist-value 1024 >/dev/null
for _ in $(seq 50); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
R=(redis-cli -p "$PORT")
GEN=benches/redis/append-resp.py
for round in $(seq "$ROUNDS"); do
  for layout in append.lua floor-append.lua; do
    "${R[@]}" FLUSHALL >/dev/null
    if [ "$layout" = append.lua ]; then script=crates/log/src/redis/lua/append.lua; else script=benches/redis/floor-append.lua; fi
    SHA=$("${R[@]}" SCRIPT LOAD "$(cat "$script")")
    python3 "$GEN" setup "$SESSIONS" | "${R[@]}" --pipe >/dev/null
    python3 "$GEN" "$layout" "$SESSIONS" "$N" "$SHA" >"$WORK/appends"
    "${R[@]}" CONFIG RESETSTAT >/dev/null
    piped=$("${R[@]}" --pipe <"$WORK/appends" | tail -1)
    case "$piped" in "errors: 0, replies: $N") ;; *) echo "$layout: $piped" >&2; exit 1 ;; esac
    stats=$("${R[@]}" INFO commandstats | tr -d '\r')
    calls=$(echo "$stats" | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p')
    usec=$(echo "$stats" | sed -n 's/^cmdstat_evalsha:.*usec_per_call=\([0-9.]*\),.*/\1/p')
    all=$(echo "$stats" | grep -v '^cmdstat_info:' | sed -n 's/^cmdstat_[a-z|]*:calls=\([0-9]*\),.*/\1/p' | paste -sd+ | bc)
    [ "$calls" = "$N" ] || { echo "$layout: $calls of $N appends counted" >&2; exit 1; }
    # Each append adds its event and a wake-up: a script that appended
    # nothing (no live session) answers without an error.
    xadds=$(echo "$stats" | sed -n 's/^cmdstat_xadd:calls=\([0-9]*\),.*/\1/p')
    [ "${xadds:-0}" = $((2 * N)) ] || { echo "$layout: ${xadds:-0} XADDs for $N appends" >&2; exit 1; }
    printf '%-17s round %s, %s sessions: %s µs of Redis time an append, %s commands an append\n' \
      "$layout" "$round" "$SESSIONS" "$usec" "$(echo "scale=2; $all / $calls" | bc)"
  done
done
