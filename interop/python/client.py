"""Drives the official Python MCP SDK client against an MCP server, for the
interop tests: prints what it sees one line at a time, takes commands on stdin.

    python client.py URL
    stdout: SESSION id | TOOLS a,b | ECHO text | EVENT count i | EMITTED | ERROR msg
    stdin:  emit COUNT INTERVAL_MS | quit
"""

import asyncio
import sys

from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def say(line: str) -> None:
    print(line, flush=True)


async def main(url: str) -> None:
    seen_session: list[str] = []

    async def capture_session(response) -> None:
        sid = response.headers.get("mcp-session-id")
        if sid and not seen_session:
            seen_session.append(sid)

    http = create_mcp_http_client()
    http.event_hooks["response"].append(capture_session)

    async def on_log(params) -> None:
        data = params.data
        say(f"EVENT {data['count']} {data['i']}")

    async with streamable_http_client(url, http_client=http, terminate_on_close=False) as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write, logging_callback=on_log) as session:
            await session.initialize()
            say(f"SESSION {seen_session[0] if seen_session else '?'}")
            tools = await session.list_tools()
            say("TOOLS " + ",".join(t.name for t in tools.tools))
            echoed = await session.call_tool("echo", {"text": "hello"})
            say(f"ECHO {echoed.content[0].text}")
            loop = asyncio.get_running_loop()
            while True:
                line = await loop.run_in_executor(None, sys.stdin.readline)
                parts = line.split()
                if not parts or parts[0] == "quit":
                    break
                if parts[0] == "emit":
                    for attempt in range(50):
                        try:
                            await session.call_tool("emit", {"count": int(parts[1]), "interval_ms": int(parts[2])})
                            break
                        except Exception as e:  # the server may be restarting
                            if attempt == 49:
                                raise
                            say(f"ERROR {e!r}")
                            await asyncio.sleep(0.1)
                    say("EMITTED")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
