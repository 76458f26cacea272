"""Opens N idle MCP sessions on one server, each on a connection of its own
(raw sockets, HTTP/1.1): `initialize`, `notifications/initialized`, then a
GET stream on the same connection, kept open and unread. Prints `open N`
once every stream is open, holds them HOLD seconds, then exits.

    python3 sessions.py HOST PORT N [HOLD]

Used by `rss.sh` (KiB of server RSS per idle session + GET stream, issue 24
item 4): the smallest client that keeps N streams open, so what is measured
is the server's memory, not a client's.
"""

import asyncio
import json
import sys

HOST, PORT, N = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
HOLD = float(sys.argv[4]) if len(sys.argv) > 4 else 3.0
PATH = "/mcp"


async def request(r, w, method, body=None, sid=None, accept="application/json, text/event-stream", read=True):
    b = json.dumps(body).encode() if body is not None else b""
    head = (
        f"{method} {PATH} HTTP/1.1\r\nhost: {HOST}\r\ncontent-type: application/json\r\n"
        f"accept: {accept}\r\ncontent-length: {len(b)}\r\n"
    )
    if sid:
        head += f"mcp-session-id: {sid}\r\nmcp-protocol-version: 2025-11-25\r\n"
    w.write(head.encode() + b"\r\n" + b)
    await w.drain()
    if not read:
        return None
    status = await r.readline()
    if not status.startswith(b"HTTP/1.1 2"):
        raise SystemExit(f"{method}: {status!r}")
    headers = {}
    while True:
        line = await r.readline()
        if line in (b"\r\n", b""):
            break
        k, v = line.decode().split(":", 1)
        headers[k.strip().lower()] = v.strip()
    n = int(headers.get("content-length", "0"))
    if n:
        await r.readexactly(n)
    return headers


async def main():
    conns = []
    for _ in range(N):
        r, w = await asyncio.open_connection(HOST, PORT)
        h = await request(r, w, "POST", {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "idle", "version": "1"}}})
        sid = h["mcp-session-id"]
        await request(r, w, "POST", {"jsonrpc": "2.0", "method": "notifications/initialized"}, sid)
        await request(r, w, "GET", None, sid, accept="text/event-stream", read=False)
        conns.append((r, w))
    print("open", len(conns), flush=True)
    await asyncio.sleep(HOLD)


asyncio.run(main())
