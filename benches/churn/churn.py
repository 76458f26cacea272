"""Session churn against one server: ROUNDS rounds of N sessions, each
`initialize` then `DELETE`, on a few keep-alive connections, then a wait
past the tombstone TTL (so maintenance forgets them) and the server's RSS.
A server whose memory is bounded by what is live prints a flat column.

    python3 benches/churn/churn.py BIN [--store disk|memory] [--rounds 10]
        [--sessions 3000] [--conns 8] [--wait 4] [-- EXTRA SERVER ARGS]

BIN is `target/release/mcp-resume`; the server runs `serve` with a
tombstone TTL of 1 s and a session TTL of 2 s (maintenance every second),
its log under a temporary directory. Prints one line per round: the round,
RSS in MiB (and of it, anonymous memory and mapped files), the log
directory's size in KiB and its number of files (disk).
"""

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time


def rss_kib(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def row(i, pid, d):
    anon = rss_kib(pid, "RssAnon") / 1024
    file = rss_kib(pid, "RssFile") / 1024
    return f"{i:5d}  {rss_kib(pid) / 1024:7.1f}  {anon:8.1f}  {file:8.1f}  {du_kib(d):7d}  {files(d):5d}"


def du_kib(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total // 1024


def files(path):
    return sum(len(f) for _, _, f in os.walk(path))


async def request(r, w, host, method, body=None, sid=None):
    b = json.dumps(body).encode() if body is not None else b""
    head = (
        f"{method} /mcp HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
        f"accept: application/json, text/event-stream\r\ncontent-length: {len(b)}\r\n"
    )
    if sid:
        head += f"mcp-session-id: {sid}\r\nmcp-protocol-version: 2025-11-25\r\n"
    w.write(head.encode() + b"\r\n" + b)
    await w.drain()
    status = await r.readline()
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
    elif headers.get("transfer-encoding") == "chunked":
        while True:
            size = int((await r.readline()).strip(), 16)
            await r.readexactly(size + 2)
            if size == 0:
                break
    if not status.startswith(b"HTTP/1.1 2"):
        raise SystemExit(f"{method}: {status!r}")
    return headers


async def churn(host, port, n, conns):
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "churn", "version": "1"}}}
    left = [n]

    async def one_conn():
        r, w = await asyncio.open_connection(host, port)
        while left[0] > 0:
            left[0] -= 1
            h = await request(r, w, host, "POST", init)
            await request(r, w, host, "DELETE", None, h["mcp-session-id"])
        w.close()

    await asyncio.gather(*(one_conn() for _ in range(conns)))


def main():
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser()
    p.add_argument("bin")
    p.add_argument("--store", default="disk", choices=["disk", "memory"])
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--sessions", type=int, default=3000)
    p.add_argument("--conns", type=int, default=8)
    p.add_argument("--wait", type=float, default=4.0)
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        store = ["--store", "memory"] if a.store == "memory" else ["--data-dir", d]
        cmd = [a.bin, "serve", "--listen", "127.0.0.1:0", *store,
               "--tombstone-ttl-secs", "1", "--session-ttl-secs", "2", *extra]
        srv = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            line = srv.stdout.readline()
            while line and not line.startswith("listening on"):
                line = srv.stdout.readline()
            port = int(line.strip().rsplit(":", 1)[1].split("/")[0])
            time.sleep(0.5)
            print(f"# {' '.join(cmd)}")
            print(f"round  rss_mib  anon_mib  file_mib  log_kib  files   ({a.sessions} sessions a round, {a.conns} connections)")
            print(row(0, srv.pid, d), flush=True)
            for i in range(1, a.rounds + 1):
                asyncio.run(churn("127.0.0.1", port, a.sessions, a.conns))
                time.sleep(a.wait)
                print(row(i, srv.pid, d), flush=True)
        finally:
            srv.terminate()
            srv.wait()


if __name__ == "__main__":
    main()
