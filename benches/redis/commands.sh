#!/usr/bin/env bash
# Redis commands (a script's own commands counted, as INFO commandstats
# counts them) per event and per initialize, one `serve` on a Redis of its
# own, one client at a time: what each path costs Redis, command by command.
#
#   benches/redis/commands.sh [BIN] [N]
#
# BIN: the mcp-resume binary (default target/release/mcp-resume); N: events
# and sessions (default 500). Needs redis-server, redis-cli, curl, python3.
set -euo pipefail
BIN=${1:-target/release/mcp-resume}
N=${2:-500}
WORK=$(mktemp -d)
PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
cleanup() {
  [ -n "${CP:-}" ] && kill "$CP" 2>/dev/null || true
  [ -n "${SP:-}" ] && kill "$SP" 2>/dev/null || true
  wait 2>/dev/null || true
  redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --daemonize yes --dir "$WORK" --logfile "$WORK/redis.log" >/dev/null
for _ in $(seq 50); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
"$BIN" serve --listen 127.0.0.1:0 --store "redis://127.0.0.1:$PORT/0" --data-dir "$WORK/d" >"$WORK/serve.out" 2>"$WORK/serve.err" &
SP=$!
for _ in $(seq 100); do grep -q "^listening on" "$WORK/serve.out" && break; sleep 0.1; done
U=$(sed -n 's/^listening on //p' "$WORK/serve.out")
[ -n "$U" ] || { echo "serve did not start: $(cat "$WORK/serve.err")" >&2; exit 1; }

table() { # $1: what per
  redis-cli -p "$PORT" INFO commandstats | grep cmdstat | grep -v "resetstat\|cmdstat_config" \
    | sed 's/cmdstat_//; s/:calls=/ /; s/,usec=.*//' \
    | awk -v n="$N" -v per="$1" '{printf "| %s | %.2f |\n", $1, $2/n; t+=$2} END {printf "| total | %.2f |\n", t/n}'
}

post() { # URL SID BODY -> nothing; a keep-alive connection per run
  python3 - "$@" <<'PY'
import sys, http.client, json, urllib.parse
u = urllib.parse.urlparse(sys.argv[1]); sid = sys.argv[2]; n = int(sys.argv[3]); what = sys.argv[4]
c = http.client.HTTPConnection(u.hostname, u.port)
for i in range(n):
    if what == "emit":
        body = {"jsonrpc": "2.0", "id": i + 2, "method": "tools/call", "params": {"name": "emit", "arguments": {"count": 1}}}
        h = {"mcp-session-id": sid}
    else:
        body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "p", "version": "1"}}}
        h = {}
    h.update({"content-type": "application/json", "accept": "application/json, text/event-stream"})
    c.request("POST", u.path, json.dumps(body), h)
    r = c.getresponse(); r.read()
PY
}

SID=$(curl -si -X POST "$U" -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' \
  -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"p","version":"1"}}}' \
  | awk 'tolower($1)=="mcp-session-id:"{print $2}' | tr -d '\r')
curl -sN "$U" -H "mcp-session-id: $SID" -H 'accept: text/event-stream' >"$WORK/stream.out" &
CP=$!
sleep 1
echo "### per event: one session with an open GET stream, $N emit calls of one notification each"
echo
echo "| command | per event |"
echo "| --- | ---: |"
redis-cli -p "$PORT" CONFIG RESETSTAT >/dev/null
post "$U" "$SID" "$N" emit
sleep 1
table event
echo
echo "events read by the stream: $(grep -c '^id:' "$WORK/stream.out") (the priming event and $N)"
echo
echo "### per initialize: $N sessions, one after the other"
echo
echo "| command | per initialize |"
echo "| --- | ---: |"
redis-cli -p "$PORT" CONFIG RESETSTAT >/dev/null
post "$U" - "$N" init
table initialize
