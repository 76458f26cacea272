"""The upgrade falls back to SSE from the same cursor, losing nothing: on 426 (``serve
--no-websocket``), on a ``101`` without the cursor echo (``serve --unsafe-legacy-upgrade``, the
known-unsafe mode) and on a plain MCP server (the SDK's own), where the transport behaves like
the SDK's client."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from mcp.client.session import ClientSession
from mcp_types import LoggingMessageNotificationParams, TextContent

from conftest import ProxyFactory, ServeFactory
from mcp_resume_client import ResumableTransport, resumable_client
from servers import free_port

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

N = 1000


@pytest.mark.parametrize("flag", ["--no-websocket", "--unsafe-legacy-upgrade"])
async def test_falls_back_to_sse_and_loses_nothing(flag: str, serve: ServeFactory, proxy_to: ProxyFactory) -> None:
    server = serve(flag)
    proxy = await proxy_to(server.port)
    got: list[int] = []
    done = anyio.Event()

    async def on_log(params: LoggingMessageNotificationParams) -> None:
        assert isinstance(params.data, dict)
        got.append(params.data["i"])
        if len(got) % 300 == 0:
            proxy.cut_streams()
        if len(got) == N:
            done.set()

    async with resumable_client(proxy.url()) as streams:
        read, write, _ = streams
        async with ClientSession(read, write, logging_callback=on_log) as session:
            await session.initialize()
            await session.call_tool("emit", {"count": N, "interval_ms": 1})
            with anyio.fail_after(40):
                await done.wait()
            await anyio.sleep(0.3)
        stats = streams.transport.stats
    assert got == list(range(1, N + 1))
    assert stats.upgrades == 0 and stats.fallbacks >= 1 and stats.transport == "sse", stats
    # One refusal (426) or a 101 without the echo is enough to stay on SSE.
    assert stats.fallbacks == 1, stats


@pytest.fixture
def plain_server(tmp_path: Path) -> Iterator[str]:
    """The SDK's own server in a process of its own; its URL."""
    port = free_port()
    log = open(tmp_path / "plain.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("plain_server.py")), str(port)], stdout=log, stderr=log
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert proc.poll() is None, (tmp_path / "plain.log").read_text()
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.kill()
        proc.wait(10)
        log.close()


async def test_a_plain_server_is_served_as_the_sdk_would(plain_server: str) -> None:
    logs: list[str] = []

    async def on_log(params: LoggingMessageNotificationParams) -> None:
        logs.append(str(params.data))

    transport = ResumableTransport(plain_server)
    async with transport.connect() as (read, write, session_id):
        async with ClientSession(read, write, logging_callback=on_log) as session:
            await session.initialize()
            result = await session.call_tool("count", {"n": 5})
            assert isinstance(result.content[0], TextContent) and result.content[0].text == "counted 5"
            assert session_id() is not None
            with anyio.fail_after(10):
                while transport.stats.transport == "none":
                    await anyio.sleep(0.05)
    assert logs == [f"step {i} of 5" for i in range(1, 6)]
    # The upgrade path is unknown there (404 without session-not-found): SSE, as the SDK reads it.
    assert transport.stats.upgrades == 0 and transport.stats.fallbacks == 1, transport.stats
    assert transport.stats.transport == "sse"
