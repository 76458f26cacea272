"""Notifications per second received by ``ClientSession`` over this transport (WebSocket and SSE)
against the SDK's own ``streamable_http_client``, on one ``mcp-resume serve``, in one run.

Each round opens a session per client, waits until its session stream delivers (one ``emit``
of 1), then times ``emit {count: N}`` from the call until the N-th ``notifications/message``
reached the session's logging callback. Clients alternate within each round, so drift (the
other core's load, the server's caches) reaches all of them alike; the median of the rounds
is reported.

    python bench/notifications.py --count 20000 --rounds 5 --out ../../benches/results/python-client.md

The server is ``MCP_RESUME_BIN`` (default target/release/mcp-resume, else target/debug), run
with ``--store memory --retention-events 1000000`` so that no reader meets retention.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_types import LoggingMessageNotificationParams

from mcp_resume_client import resumable_client

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from servers import Server  # noqa: E402

CLIENTS = ("sdk", "resume-ws", "resume-sse")


def server_binary() -> Path:
    """``MCP_RESUME_BIN``, else the release build, else the debug build."""
    env = os.environ.get("MCP_RESUME_BIN")
    if env:
        return Path(env)
    release = REPO / "target" / "release" / "mcp-resume"
    return release if release.exists() else REPO / "target" / "debug" / "mcp-resume"


@asynccontextmanager
async def streams(kind: str, url: str) -> AsyncIterator[tuple[Any, Any]]:
    """The read and write streams of client ``kind``."""
    cm: AbstractAsyncContextManager[Any]
    if kind == "sdk":
        cm = streamable_http_client(url)
    else:
        cm = resumable_client(url, websocket=kind == "resume-ws")
    async with cm as s:
        yield s[0], s[1]


async def one(kind: str, url: str, count: int) -> float:
    """Notifications/s of one session of client ``kind`` for ``emit {count}``."""
    got = 0
    target = 1
    done = anyio.Event()

    async def on_log(params: LoggingMessageNotificationParams) -> None:
        nonlocal got
        got += 1
        if got == target:
            done.set()

    async with streams(kind, url) as (read, write):
        async with ClientSession(read, write, logging_callback=on_log) as session:
            await session.initialize()
            await session.call_tool("emit", {"count": 1})
            with anyio.fail_after(30):
                await done.wait()  # The session stream is open and delivering.
            got, target, done = 0, count, anyio.Event()
            start = time.perf_counter()
            await session.call_tool("emit", {"count": count})
            with anyio.fail_after(300):
                await done.wait()
            elapsed = time.perf_counter() - start
            await anyio.sleep(0.2)
            if got != count:
                raise AssertionError(f"{kind}: {got} notifications for {count}")
    return count / elapsed


def machine() -> str:
    """CPU model and count, and the OS."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores ({model or platform.processor()}), {platform.system()} {platform.release()}"


def version(package: str) -> str:
    """An installed distribution's version."""
    from importlib.metadata import version as v  # noqa: PLC0415

    return v(package)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=20000, help="notifications per round and client")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, help="write the markdown result here")
    args = ap.parse_args()

    binary = server_binary()
    load_before = os.getloadavg()[0]
    flags = ["--store", "memory", "--retention-events", "1000000"]
    server = Server([str(binary), "serve"], flags).start()
    rates: dict[str, list[float]] = {k: [] for k in CLIENTS}
    try:
        for r in range(args.rounds):
            order = CLIENTS[r % len(CLIENTS) :] + CLIENTS[: r % len(CLIENTS)]
            for kind in order:
                rate = await one(kind, server.url, args.count)
                rates[kind].append(rate)
                print(f"round {r + 1}: {kind:10s} {rate:9.0f} notifications/s", flush=True)
    finally:
        server.stop()

    load_after = os.getloadavg()[0]
    med = {k: statistics.median(v) for k, v in rates.items()}
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    here = Path(__file__).resolve().parents[1]
    python = os.path.relpath(sys.executable, here) if sys.executable.startswith(str(here)) else sys.executable
    command = f"cd clients/python && MCP_RESUME_BIN={binary} {python} " + " ".join([str(Path(sys.argv[0]))] + sys.argv[1:])
    lines = [
        "# Python client: notifications/s, mcp-resume-client against the SDK's own client",
        "",
        f"- commit `{commit}`, {datetime.date.today().isoformat()}",
        f"- machine: {machine()}; the server and the client share it (1-minute load average "
        f"{load_before:.2f} before the run, {load_after:.2f} after: other work on the machine slows all clients alike)",
        f"- Python {platform.python_version()}, mcp {version('mcp')}, websockets {version('websockets')}, "
        f"httpx2 {version('httpx2')}",
        f"- server: `{binary} serve {' '.join(flags)}`",
        f"- command: `{command}`",
        f"- {args.count} `notifications/message` from one `emit` per round and client, timed from the call to the "
        f"last notification at `ClientSession`'s logging callback; {args.rounds} rounds, clients alternating; median",
        "",
        "| client | notifications/s (median) | rounds | vs the SDK |",
        "| --- | ---: | --- | ---: |",
    ]
    names = {
        "sdk": "SDK `streamable_http_client` (SSE)",
        "resume-ws": "`resumable_client`, WebSocket upgrade",
        "resume-sse": "`resumable_client(websocket=False)`, SSE",
    }
    for k in CLIENTS:
        rounds = ", ".join(f"{x:.0f}" for x in rates[k])
        lines.append(f"| {names[k]} | {med[k]:.0f} | {rounds} | {med[k] / med['sdk']:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text)


if __name__ == "__main__":
    anyio.run(main)
