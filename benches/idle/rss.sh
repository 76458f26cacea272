#!/usr/bin/env bash
# KiB of RSS per idle session + open GET stream of a server on a disk log,
# N sessions from sessions.py (each on a connection of its own): the RSS
# of the server before and after, divided by N. Run it for two binaries in
# turn (alternating) to compare them:
#
#   benches/idle/rss.sh target/release/mcp-resume 10000
#   benches/idle/rss.sh target/release/examples/rmcp_durable 10000   # hosted rmcp
#
# A binary named `mcp-resume` runs as `serve`; `rmcp_durable` runs with
# `--transport mcp-resume` (an rmcp handler hosted on this transport), or
# the transport in RMCP_TRANSPORT. Further arguments go to the server.
# RSS_WAIT: seconds between the last session opened and the measure (2).
# 10,000 sessions need 10,000 descriptors on each side: check `ulimit -n`.
set -euo pipefail
bin="$1"; n="${2:-10000}"; shift; shift || true
here="$(cd "$(dirname "$0")" && pwd)"
dir="$(mktemp -d)"; trap 'kill "$pid" 2>/dev/null || true; rm -rf "$dir"' EXIT
case "$(basename "$bin")" in
  rmcp_durable*)
    "$bin" --listen 127.0.0.1:0 --transport "${RMCP_TRANSPORT:-mcp-resume}" \
      --store "disk:$dir/log" "$@" > "$dir/out" 2>/dev/null & ;;
  *)
    "$bin" serve --listen 127.0.0.1:0 --data-dir "$dir" "$@" > "$dir/out" 2>/dev/null & ;;
esac
pid=$!
until grep -q '^listening on' "$dir/out" 2>/dev/null; do sleep 0.1; done
port="$(sed -n 's|^listening on http://127.0.0.1:\([0-9]*\)/mcp|\1|p' "$dir/out")"
sleep 0.5
before="$(awk '/VmRSS/{print $2}' "/proc/$pid/status")"
python3 "$here/sessions.py" 127.0.0.1 "$port" "$n" "$(( ${RSS_WAIT:-2} + 4 ))" > "$dir/client" 2>&1 &
client=$!
until grep -q '^open' "$dir/client" 2>/dev/null; do
  kill -0 "$client" 2>/dev/null || { cat "$dir/client" >&2; exit 1; }
  sleep 0.2
done
sleep "${RSS_WAIT:-2}"
after="$(awk '/VmRSS/{print $2}' "/proc/$pid/status")"
awk -v a="$after" -v b="$before" -v n="$n" 'BEGIN { printf "%.2f KiB per idle session + GET stream (%d sessions)\n", (a - b) / n, n }'
kill "$client" 2>/dev/null || true
