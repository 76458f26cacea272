"""A stdio MCP server built with the official Python SDK (its MCPServer), for
the gateway tests: a tool, a tool that logs, a tool that numbers its
progress, a tool that asks the client (elicitation), a slow tool, a tool that kills
its process, a tool that names its process, a counter kept by the process
(how `mcp-resume chaos --gateway` sees two children serve one session), a
resource and a prompt.

    python stdio_server.py      # speaks MCP on stdin/stdout
"""

import os

import anyio
from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel

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
async def progress(n: int, ctx: Context, interval_ms: int = 0) -> str:
    """Reports progress `1..=n` of `n` to the caller's progress token,
    `interval_ms` apart, then answers `counted n` (what `mcp-resume chaos
    --gateway` numbers)."""
    for i in range(1, n + 1):
        if i > 1 and interval_ms > 0:
            await anyio.sleep(interval_ms / 1000)
        await ctx.report_progress(i, n, f"step {i} of {n}")
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


class Answer(BaseModel):
    answer: str


@server.tool()
async def confirm(token: str, ctx: Context) -> str:
    """Asks the client to confirm `token` (elicitation); answers with what
    the client said, or the action when it did not accept."""
    got = await ctx.elicit(f"confirm {token}", Answer)
    if got.action == "accept" and got.data is not None:
        return got.data.answer
    return got.action


_ticks = 0


@server.tool()
def tick() -> str:
    """`PID N`: this process's id and how many times it was asked, its own
    state (a session served by two processes shows two counters)."""
    global _ticks
    _ticks += 1
    return f"{os.getpid()} {_ticks}"


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
