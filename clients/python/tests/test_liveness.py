"""A connection that goes silent without closing (a dead peer, a cut cable) is resumed once
nothing arrived for ``idle_timeout`` (the server sends a heartbeat or keepalive within it);
credentials reach every request, the upgrade included."""

from __future__ import annotations

import anyio
import pytest
from mcp.client.session import ClientSession
from mcp_types import LoggingMessageNotificationParams

from conftest import ProxyFactory, ServeFactory
from mcp_resume_client import Options, resumable_client

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]
TRANSPORTS = pytest.mark.parametrize("websocket", [True, False], ids=["websocket", "sse"])


@TRANSPORTS
async def test_a_silent_connection_is_resumed(websocket: bool, serve: ServeFactory, proxy_to: ProxyFactory) -> None:
    server = serve("--heartbeat-secs", "1")
    proxy = await proxy_to(server.port)
    got: list[int] = []

    async def on_log(params: LoggingMessageNotificationParams) -> None:
        assert isinstance(params.data, dict)
        got.append(params.data["i"])

    options = Options(idle_timeout=3, initial_delay=0.05)
    async with resumable_client(proxy.url(), websocket=websocket, options=options) as streams:
        read, write, _ = streams
        async with ClientSession(read, write, logging_callback=on_log) as session:
            await session.initialize()
            await session.call_tool("emit", {"count": 50})
            with anyio.fail_after(10):
                while len(got) < 50:
                    await anyio.sleep(0.02)
            # Longer than idle_timeout: the heartbeats (keepalives over SSE) keep the connection,
            # and a heartbeat naming the head the client has is no gap.
            reconnects = streams.transport.stats.reconnects
            await anyio.sleep(4.5)
            assert streams.transport.stats.reconnects == reconnects
            assert streams.transport.stats.gaps == 0
            assert proxy.freeze_streams() == 1
            await session.call_tool("emit", {"count": 50})
            with anyio.fail_after(20):
                while len(got) < 100:
                    await anyio.sleep(0.02)
        stats = streams.transport.stats
    assert got == list(range(1, 51)) * 2
    assert stats.reconnects == reconnects + 1, stats


@TRANSPORTS
@pytest.mark.parametrize("token", ["s3cret", lambda: "s3cret"], ids=["string", "function"])
async def test_a_bearer_token_reaches_every_request(websocket: bool, token: object, serve: ServeFactory) -> None:
    server = serve("--bearer-token", "s3cret")
    got: list[int] = []

    async def on_log(params: LoggingMessageNotificationParams) -> None:
        assert isinstance(params.data, dict)
        got.append(params.data["i"])

    async with resumable_client(server.url, websocket=websocket, auth=token) as streams:  # type: ignore[arg-type]
        read, write, _ = streams
        async with ClientSession(read, write, logging_callback=on_log) as session:
            await session.initialize()
            await session.call_tool("emit", {"count": 100})
            with anyio.fail_after(10):
                while len(got) < 100:
                    await anyio.sleep(0.02)
        stats = streams.transport.stats
    assert got == list(range(1, 101))
    assert stats.transport == ("websocket" if websocket else "sse") and stats.fallbacks == 0, stats
