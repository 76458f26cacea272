"""A plain MCP server (the official SDK's own Streamable HTTP server, no mcp-resume) for the fallback test.

    python plain_server.py PORT      # serves http://127.0.0.1:PORT/mcp
"""

from __future__ import annotations

import sys

import anyio
from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("plain")


@server.tool()
async def count(n: int, ctx: Context) -> str:
    """Logs ``n`` messages, then answers."""
    for i in range(1, n + 1):
        await ctx.info(f"step {i} of {n}")
    return f"counted {n}"


if __name__ == "__main__":
    anyio.run(lambda: server.run_streamable_http_async(host="127.0.0.1", port=int(sys.argv[1])))
