# Sourced by ab, instr and cpu: how a server under test is started and its
# sessions opened, so the three measure the same thing.

# The arguments that serve BIN (in DIR) on a free port: `bare-server` for
# mcp-resume-load (bare hyper, no MCP), rmcp_durable* hosted on this
# transport (or RMCP_TRANSPORT), else `mcp-resume serve`.
server_args() {
  local bin="$1" dir="$2"
  if [ "$(basename "$bin")" = mcp-resume-load ]; then
    args=(bare-server)
  elif [[ "$(basename "$bin")" == rmcp_durable* ]]; then
    args=(--listen 127.0.0.1:0 --transport "${RMCP_TRANSPORT:-mcp-resume}" --store "disk:$dir/log")
  else
    args=(serve --listen 127.0.0.1:0 --data-dir "$dir")
  fi
}

# Waits (up to a minute) for the server writing OUT to say where it
# listens; sets `url` (empty if it never did).
wait_listening() {
  local out="$1"
  for _ in $(seq 600); do grep -q '^listening on' "$out" 2>/dev/null && break; sleep 0.1; done
  url="$(sed -n 's/^listening on //p' "$out")"
}

# Sets `sids` to SESSIONS (default 1) new sessions of the server at URL.
open_sessions() {
  local url="$1" sid
  sids=()
  for ((i = 0; i < ${SESSIONS:-1}; i++)); do
    sid="$(curl -si -X POST "$url" -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' \
      -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"wrk","version":"1"}}}' \
      | awk 'tolower($1)=="mcp-session-id:"{print $2}' | tr -d '\r')" || true
    sids+=("$sid")
  done
}
