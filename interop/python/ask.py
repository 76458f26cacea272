"""Drives the official Python MCP SDK client against a server whose tools ask
the client back (the conformance example's `test_sampling` and
`test_elicitation`), answering from the SDK's own callbacks.

    python ask.py URL
    stdout: SAMPLED text | ELICITED text
"""

import asyncio
import sys

from mcp import types
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client


def say(line: str) -> None:
    print(line, flush=True)


async def sample(context, params):
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text="python-sampler-says-42"),
        model="interop-model",
        stopReason="endTurn",
    )


async def elicit(context, params):
    return types.ElicitResult(action="accept", content={"username": "python-user", "email": "py@example.com"})


async def main(url: str) -> None:
    async with streamable_http_client(url) as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write, sampling_callback=sample, elicitation_callback=elicit) as session:
            await session.initialize()
            sampled = await session.call_tool("test_sampling", {"prompt": "what is 6 x 7?"})
            say("SAMPLED " + " ".join(c.text for c in sampled.content if hasattr(c, "text")))
            elicited = await session.call_tool("test_elicitation", {"message": "who are you?"})
            say("ELICITED " + " ".join(c.text for c in elicited.content if hasattr(c, "text")))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
