"""Drives the official Python MCP SDK client against a server behind
`mcp-resume gateway` (the tests run @modelcontextprotocol/server-everything
over stdio behind it): lists and calls tools, reads a resource, gets a
prompt, receives progress, answers sampling and elicitation from the SDK's
own callbacks. One line per thing it saw.

    python gateway.py URL
    stdout: TOOLS n names | ECHO text | RESOURCE uri | PROMPT n bool | PROGRESS n | SAMPLED text | ELICITED text | DONE
"""

import asyncio
import json
import sys

from mcp import types
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client


def say(line: str) -> None:
    print(line, flush=True)


async def sample(context, params):
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text="python-gateway-sampler-says-42"),
        model="interop-model",
        stopReason="endTurn",
    )


async def elicit(context, params):
    # Fill every required field of whatever form was asked for.
    content = {}
    schema = getattr(params, "requested_schema", None) or {}
    for key, s in (schema.get("properties") or {}).items():
        kind = s.get("type")
        if kind == "boolean":
            content[key] = True
        elif kind in ("number", "integer"):
            content[key] = 7
        elif s.get("enum"):
            content[key] = s["enum"][0]
        else:
            content[key] = "python-gateway-user"
    return types.ElicitResult(action="accept", content=content)


def texts(result) -> str:
    return json.dumps([c.text for c in result.content if hasattr(c, "text")])


async def main(url: str) -> None:
    async with streamable_http_client(url) as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write, sampling_callback=sample, elicitation_callback=elicit) as session:
            await session.initialize()
            # The server registers its sampling and elicitation tools once it knows our capabilities.
            names = []
            for _ in range(50):
                names = [t.name for t in (await session.list_tools()).tools]
                if "trigger-sampling-request" in names:
                    break
                await asyncio.sleep(0.1)
            say(f"TOOLS {len(names)} {','.join(names)}")
            echoed = await session.call_tool("echo", {"message": "hello"})
            say("ECHO " + echoed.content[0].text)
            resources = (await session.list_resources()).resources
            got = await session.read_resource(str(resources[0].uri))
            say(f"RESOURCE {got.contents[0].uri}")
            prompt = await session.get_prompt("args-prompt", {"city": "Paris", "state": "IDF"})
            say(f"PROMPT {len(prompt.messages)} {str('Paris' in prompt.messages[0].content.text).lower()}")
            seen = []

            async def on_progress(progress, total, message):
                seen.append(progress)

            await session.call_tool(
                "trigger-long-running-operation", {"duration": 1, "steps": 3}, progress_callback=on_progress
            )
            say(f"PROGRESS {len(seen)}")
            sampled = await session.call_tool(
                "trigger-sampling-request", {"prompt": "what is 6 x 7?", "maxTokens": 10}
            )
            say("SAMPLED " + texts(sampled))
            elicited = await session.call_tool("trigger-elicitation-request", {})
            say("ELICITED " + texts(elicited))
            say("DONE")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
