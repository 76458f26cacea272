"""A stdio MCP server built with the official Python SDK (its MCPServer), for
the gateway tests: a tool, a tool that logs, a slow tool, a tool that kills
its process, a tool that names its process, a resource and a prompt.

    python stdio_server.py      # speaks MCP on stdin/stdout
"""

import os

import anyio
from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("python-stdio")


@server.tool()
def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


@server.tool()
async def count(n: int, ctx: Context) -> str:
    """Logs `n` messages, then answers."""
    for i in range(1, n + 1):
        await ctx.info(f"step {i} of {n}")
    return f"counted {n}"


@server.tool()
async def wait(seconds: float) -> str:
    """Answers after `seconds`."""
    await anyio.sleep(seconds)
    return f"waited {seconds}"


@server.tool()
def pid() -> int:
    """This process's id: which child answers."""
    return os.getpid()


@server.tool()
def crash() -> str:
    """Ends this process at once, without answering."""
    os._exit(3)


@server.resource("note://hello")
def hello() -> str:
    """A fixed note."""
    return "hello from python"


@server.prompt()
def greet(name: str) -> str:
    """Greets someone."""
    return f"Hello, {name}!"


if __name__ == "__main__":
    server.run()
