"""The official Python MCP SDK server (MCPServer, Streamable HTTP, stateful)
with an in-memory event store as the SDK's examples show, serving the same
`echo` and `emit` tools as `mcp-resume serve`, for benchmarks side by side.

    python server.py PORT     prints `listening on http://127.0.0.1:PORT/mcp`
"""

import asyncio
import sys
from collections import deque
from uuid import uuid4

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore


class InMemoryEventStore(EventStore):
    """As in the SDK's simple-streamablehttp example: a bounded deque per stream."""

    def __init__(self, max_events_per_stream: int = 100_000) -> None:
        self.max = max_events_per_stream
        self.streams: dict[str, deque] = {}
        self.index: dict[str, tuple[str, object]] = {}

    async def store_event(self, stream_id, message):
        event_id = str(uuid4())
        stream = self.streams.setdefault(stream_id, deque(maxlen=self.max))
        if len(stream) == stream.maxlen:
            old_id, _ = stream[0]
            self.index.pop(old_id, None)
        stream.append((event_id, message))
        self.index[event_id] = (stream_id, message)
        return event_id

    async def replay_events_after(self, last_event_id, send_callback: EventCallback):
        if last_event_id not in self.index:
            return None
        stream_id, _ = self.index[last_event_id]
        found = False
        for event_id, message in list(self.streams.get(stream_id, ())):
            if found and message is not None:
                await send_callback(EventMessage(message, event_id))
            elif event_id == last_event_id:
                found = True
        return stream_id


mcp = MCPServer("peer-python", log_level="WARNING")
background: set = set()


@mcp.tool()
async def echo(text: str) -> str:
    """Returns the text."""
    return text


@mcp.tool()
async def emit(count: int, ctx: Context, interval_ms: int = 0) -> str:
    """Emits notifications/message to the session's GET stream, in the background."""
    session = ctx.session

    async def run() -> None:
        for i in range(1, count + 1):
            await session.send_log_message(level="info", data={"i": i, "count": count}, logger="emit")
            if interval_ms:
                await asyncio.sleep(interval_ms / 1000)

    task = asyncio.create_task(run())
    background.add(task)
    task.add_done_callback(background.discard)
    return f"emitting {count} notifications"


if __name__ == "__main__":
    port = int(sys.argv[1])
    print(f"listening on http://127.0.0.1:{port}/mcp", flush=True)
    mcp.run("streamable-http", host="127.0.0.1", port=port, event_store=InMemoryEventStore())
