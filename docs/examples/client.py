"""The official Python MCP SDK client over mcp-resume-client: the session
stream arrives exactly once and in order, over the cursor-safe WebSocket
upgrade, across drops and restarts (docs/client-author.md).

    python client.py [URL]      (with `pip install ./clients/python` done)
"""

import sys

import anyio
from mcp import types
from mcp.client.session import ClientSession
from mcp_resume_client import resumable_client


async def main(url: str) -> None:
    events: list[object] = []
    three = anyio.Event()

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        events.append(params.data)
        if len(events) == 3:
            three.set()

    # was: streamable_http_client(url) as (read, write)
    async with resumable_client(url) as (read, write, get_session_id):
        async with ClientSession(read, write, logging_callback=on_log) as session:
            await session.initialize()
            print("session", get_session_id())
            result = await session.call_tool("emit", {"count": 3})
            print(result.content[0].text)  # type: ignore[union-attr]
            with anyio.fail_after(10):
                await three.wait()  # the demo server's emit: 3 notifications
            print("events", events)


anyio.run(main, sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080/mcp")
