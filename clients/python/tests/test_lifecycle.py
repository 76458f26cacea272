"""The transport's life around the session's: a session that stops reading while events flow
ends nothing loudly; the end deletes the session (as the SDK's client does) unless asked not
to; the session id is there once ``initialize`` was answered; the SDK's unified ``Client``
takes a ``ResumableTransport`` as its transport."""

from __future__ import annotations

import anyio
import pytest
from mcp.client.client import Client
from mcp.client.session import ClientSession
from mcp_types import LoggingMessageNotificationParams, TextContent

from conftest import ServeFactory
from mcp_resume_client import ResumableTransport, SessionNotFoundError, resumable_client
from rpc import HANDSHAKE

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@pytest.mark.parametrize("websocket", [True, False], ids=["websocket", "sse"])
async def test_a_session_that_stops_reading_first_is_quiet(websocket: bool, serve: ServeFactory) -> None:
    server = serve()
    got: list[int] = []

    async def on_log(params: LoggingMessageNotificationParams) -> None:
        assert isinstance(params.data, dict)
        got.append(params.data["i"])

    async with resumable_client(server.url, websocket=websocket) as (read, write, get_session_id):
        assert get_session_id() is None
        async with ClientSession(read, write, logging_callback=on_log) as session:
            await session.initialize()
            sid = get_session_id()
            assert sid is not None and len(sid) == 64
            await session.call_tool("emit", {"count": 2000, "interval_ms": 1})
            with anyio.fail_after(10):
                while len(got) < 100:
                    await anyio.sleep(0.01)
        await anyio.sleep(0.5)  # Events keep coming; nobody reads them; nothing is raised.
    assert got == list(range(1, len(got) + 1))
    # The end deleted the session: attaching to it is refused loudly.
    with pytest.raises(SessionNotFoundError):
        async with resumable_client(server.url, session_id=sid, protocol_version=HANDSHAKE) as (read, _w, _s):
            async with anyio.create_task_group() as tg:
                tg.start_soon(anyio.sleep, 10)
                async for _ in read:
                    pass


async def test_the_sdk_client_takes_the_transport_itself(serve: ServeFactory) -> None:
    """``mcp.client.Client(ResumableTransport(url))``: the SDK's unified client (its "auto" mode
    probes the stateless era first, which this session-only server refuses, then initializes)."""
    server = serve()
    got: list[int] = []

    async def on_log(params: LoggingMessageNotificationParams) -> None:
        assert isinstance(params.data, dict)
        got.append(params.data["i"])

    transport = ResumableTransport(server.url)
    async with Client(transport, logging_callback=on_log) as client:
        result = await client.call_tool("echo", {"text": "hi"})
        assert isinstance(result.content[0], TextContent) and result.content[0].text == "hi"
        await client.call_tool("emit", {"count": 300})
        with anyio.fail_after(10):
            while len(got) < 300:
                await anyio.sleep(0.02)
    assert got == list(range(1, 301))
    assert transport.stats.transport == "websocket" and transport.cursor == 300
