"""Request streams (the SSE answer to one POST, ids ``R/n``) are followed to their response:
a connection cut before the response is resumed with ``GET`` and ``Last-Event-ID: R/n``,
every progress notification arriving once and in order; a server killed while the call runs
ends it, after the restart, with the server's -32603 ``server-restarted``, never a hang."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp.client.session import ClientSession, IncomingMessage
from mcp.shared.exceptions import MCPError
from mcp_types import TextContent

from conftest import ProxyFactory, ServeFactory
from mcp_resume_client import (
    Options,
    RequestStreamLostError,
    ResumableStreams,
    SessionNotFoundError,
    resumable_client,
)
from servers import free_port

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def test_a_cut_request_stream_is_resumed_by_its_last_event_id(
    serve: ServeFactory, proxy_to: ProxyFactory
) -> None:
    server = serve()
    proxy = await proxy_to(server.port)
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)
        if progress in (10, 20):
            proxy.cut()  # Everything: the POST carrying the stream, and later its resume.

    # A short first wait, so the resume is live again before the next cut.
    async with resumable_client(proxy.url(), options=Options(initial_delay=0.05)) as streams:
        read, write, _ = streams
        async with ClientSession(read, write) as session:
            await session.initialize()
            result = await session.call_tool(
                "progress", {"steps": 30, "interval_ms": 20}, progress_callback=on_progress
            )
        stats = streams.transport.stats
    assert seen == [float(k) for k in range(1, 31)]
    assert isinstance(result.content[0], TextContent) and result.content[0].text == "done after 30 steps"
    assert stats.request_resumes >= 2, stats


async def test_a_server_killed_during_a_call_ends_it_with_server_restarted(
    serve: ServeFactory, tmp_path: Path
) -> None:
    server = serve("--store", f"disk:{tmp_path / 'log'}", port=free_port())
    seen: list[float] = []
    some = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)
        if progress == 5:
            some.set()

    async def kill_and_restart() -> None:
        await some.wait()
        server.kill9()
        await anyio.sleep(1)
        server.restart()

    streams: ResumableStreams
    async with resumable_client(server.url) as streams:
        read, write, _ = streams
        async with ClientSession(read, write) as session, anyio.create_task_group() as tg:
            await session.initialize()
            tg.start_soon(kill_and_restart)
            with pytest.raises(MCPError) as info:
                with anyio.fail_after(30):
                    await session.call_tool("progress", {"steps": 1000, "interval_ms": 20}, progress_callback=on_progress)
    assert info.value.error.code == -32603
    assert "restart" in info.value.error.message, info.value.error
    assert seen == [float(k) for k in range(1, len(seen) + 1)] and len(seen) >= 5
    assert streams.transport.stats.request_resumes >= 1


async def test_a_request_stream_that_cannot_be_resumed_ends_the_call(serve: ServeFactory) -> None:
    server = serve()  # memory: the session and its streams die with the process
    some = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        if progress == 3:
            some.set()

    async def kill_and_restart() -> None:
        await some.wait()
        server.kill9()
        server.restart()

    errors: list[Exception] = []

    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, Exception):
            errors.append(message)

    with pytest.raises(Exception) as outer:
        async with resumable_client(server.url) as (read, write, _):
            async with ClientSession(read, write, message_handler=on_message) as session, anyio.create_task_group() as tg:
                await session.initialize()
                tg.start_soon(kill_and_restart)
                with pytest.raises(MCPError) as info:
                    with anyio.fail_after(30):
                        await session.call_tool("progress", {"steps": 1000, "interval_ms": 20}, progress_callback=on_progress)
                assert info.value.error.code == -32000
                assert isinstance(info.value.error.data, dict)
                assert info.value.error.data["reason"] == "request-stream-lost"
                # Why, with its cause, went to the session's message_handler.
                with anyio.fail_after(2):
                    while not errors:
                        await anyio.sleep(0.01)
                assert isinstance(errors[0], RequestStreamLostError), errors
                assert isinstance(errors[0].cause, SessionNotFoundError), errors[0].cause
                await anyio.sleep(30)  # The session stream meets the same 404 and stops the transport.
    # The restarted server does not know the session: the transport says so, loudly.
    assert isinstance(outer.value, SessionNotFoundError), outer.value
