"""Drives the official Python MCP SDK client (`mcp.Client`) against a server
behind `mcp-resume gateway` (the tests run @modelcontextprotocol/server-everything
over stdio behind it, a server that speaks only the 2025 session era) in the
era MODE asks for. One line per thing it saw.

    python gateway2026.py URL MODE
      MODE: modern = mode="2026-07-28" (stateless requests, no session),
            auto = mode="auto" (probes server/discover), legacy = mode="legacy"
    stdout: ERA modern|legacy VERSION | TOOLS n names | ECHO text | RESOURCE uri |
            PROMPT n bool | PROGRESS n | DONE
"""

import asyncio
import sys

from mcp import Client, types
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

MODES = {"modern": "2026-07-28", "auto": "auto", "legacy": "legacy"}


def say(line: str) -> None:
    print(line, flush=True)


async def main(url: str, mode: str) -> None:
    info = types.Implementation(name=f"mcp-resume-interop-gateway-{mode}", version="1.0.0")
    async with Client(url, mode=MODES[mode], client_info=info) as client:
        version = client.protocol_version
        say(f"ERA {'modern' if version in MODERN_PROTOCOL_VERSIONS else 'legacy'} {version}")
        names = [t.name for t in (await client.list_tools()).tools]
        say(f"TOOLS {len(names)} {','.join(names)}")
        echoed = await client.call_tool("echo", {"message": f"hello {mode}"})
        say("ECHO " + echoed.content[0].text)
        resources = (await client.list_resources()).resources
        got = await client.read_resource(str(resources[0].uri))
        say(f"RESOURCE {got.contents[0].uri}")
        prompt = await client.get_prompt("args-prompt", {"city": "Paris", "state": "IDF"})
        say(f"PROMPT {len(prompt.messages)} {str('Paris' in prompt.messages[0].content.text).lower()}")
        seen = []

        async def on_progress(progress, total, message):
            seen.append(progress)

        await client.call_tool(
            "trigger-long-running-operation", {"duration": 1, "steps": 3}, progress_callback=on_progress
        )
        say(f"PROGRESS {len(seen)}")
    say("DONE")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[2] not in MODES:
        sys.exit("usage: python gateway2026.py URL modern|auto|legacy")
    asyncio.run(main(sys.argv[1], sys.argv[2]))
