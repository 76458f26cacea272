#!/usr/bin/env bash
# What one event's commit costs Redis itself: lua/append.lua as the server
# runs it (one server, no replicas: the ring in the script), against the
# layout redis-path.md names as the floor (benches/redis/floor-append.lua),
# each run alone on a Redis of its own by redis-benchmark, rounds
# alternating. One session, one stream, one follower (a compact member), a
# 150-byte notification an event: what `scale` commits per event.
#
#   benches/redis/append-cost.sh [N] [ROUNDS]
#
# N: appends a round (default 200000); ROUNDS: rounds of each (default 2).
# Prints per round Redis's time per append (`usec_per_call` of EVALSHA,
# which includes the script's own commands) and the commands per append
# (INFO commandstats, the script's own counted). Needs redis-server,
# redis-cli, redis-benchmark, python3, bc.
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-200000}
ROUNDS=${2:-2}
WORK=$(mktemp -d)
PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
cleanup() {
  redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --daemonize yes --dir "$WORK" --logfile "$WORK/redis.log" >/dev/null
for _ in $(seq 50); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
R=(redis-cli -p "$PORT")
MSG='{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"tick 000123 from the emit tool, about a hundred and fifty bytes"}}'
NONCE=123456789012
S='mcpr:{0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef}'
for round in $(seq "$ROUNDS"); do
  for layout in append.lua floor-append.lua; do
    "${R[@]}" FLUSHALL >/dev/null
    # The follower's wake stream, the session (live, unfenced), its stream's
    # state and follower set as create.lua and bounds.lua leave them; the
    # floor's session hash holds the member in `w`.
    "${R[@]}" XADD "mcpr:wake:{$NONCE}" '*' x 1 >/dev/null
    "${R[@]}" HSET "$S" e 0 c 1 r 1 a 1 x 1 w "${NONCE}0" >/dev/null
    "${R[@]}" HSET "$S:st:0" h 0 f 1 c 0 >/dev/null
    "${R[@]}" SADD "$S:f" "${NONCE}0" >/dev/null
    if [ "$layout" = append.lua ]; then
      SHA=$("${R[@]}" SCRIPT LOAD "$(cat crates/log/src/redis/lua/append.lua)")
      "${R[@]}" CONFIG RESETSTAT >/dev/null
      # KEYS: session, stream state, events, pins, once, index, followers;
      # ARGV: stream 0, now, no count limit, no floor, committed at the
      # append (no replicas), no key, no fence, ring, the message.
      redis-benchmark -p "$PORT" -n "$N" -c 4 -q EVALSHA "$SHA" 7 "$S" "$S:st:0" "$S:ev:0" "$S:pin" "$S:once" "$S:rs" "$S:f" \
        0 1700000000000 1000000000 0 1 "" "" 1 "$MSG" >/dev/null
    else
      SHA=$("${R[@]}" SCRIPT LOAD "$(cat benches/redis/floor-append.lua)")
      "${R[@]}" CONFIG RESETSTAT >/dev/null
      redis-benchmark -p "$PORT" -n "$N" -c 4 -q EVALSHA "$SHA" 2 "$S" "$S:ev:0" 1700000000000 "$MSG" >/dev/null
    fi
    stats=$("${R[@]}" INFO commandstats | tr -d '\r')
    calls=$(echo "$stats" | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p')
    usec=$(echo "$stats" | sed -n 's/^cmdstat_evalsha:.*usec_per_call=\([0-9.]*\),.*/\1/p')
    all=$(echo "$stats" | grep -v '^cmdstat_info:' | sed -n 's/^cmdstat_[a-z|]*:calls=\([0-9]*\),.*/\1/p' | paste -sd+ | bc)
    [ "$calls" = "$N" ] || { echo "$layout: $calls of $N appends counted" >&2; exit 1; }
    [ "$("${R[@]}" XLEN "$S:ev:0")" = "$N" ] || { echo "$layout: the stream does not hold $N events" >&2; exit 1; }
    printf '%-17s round %s: %s µs of Redis time an append, %s commands an append\n' \
      "$layout" "$round" "$usec" "$(echo "scale=2; $all / $calls" | bc)"
  done
done
