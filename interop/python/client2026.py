"""Drives the official Python MCP SDK client (`mcp.Client`) against an MCP
server in its 2026-07-28 mode, for the interop tests: prints what it sees one
line at a time.

    python client2026.py URL MODE
      MODE: pin = mode="2026-07-28", auto = mode="auto" (probes server/discover),
            legacy = mode="legacy" (the 2025 initialize handshake)
    stdout: ERA modern|legacy VERSION | TOOLS n | TEXT text | MRTR text | LISTEN ack |
            CHANGED tools | ELICITED text | DONE

Modern: the conformance example's `test_input_required_result_elicitation`
answers `input_required`; the SDK fulfils it through the elicitation callback
below and retries the call itself (MRTR). Legacy: a 2025 session has no
`input_required` (the server refuses it), so `test_elicitation` asks the same
callback with a server-to-client `elicitation/create` (ELICITED).

Modern only: `listen` opens a `subscriptions/listen` stream for tools changes
(LISTEN once acknowledged), then `test_trigger_tool_change` must make a
`notifications/tools/list_changed` arrive on it (CHANGED).

`mode="2026-07-28"` adopts the version without a `server/discover` round trip,
so its `ERA modern` line says what the SDK chose; the requests after it (each
a stateless 2026-07-28 request) are what prove the server speaks that version.
"""

import asyncio
import sys

import anyio
from mcp import Client, types
from mcp.client.subscriptions import ToolsListChanged
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

MODES = {"pin": "2026-07-28", "auto": "auto", "legacy": "legacy"}


def say(line: str) -> None:
    print(line, flush=True)


def text(result: types.CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def elicit(context, params):
    return types.ElicitResult(action="accept", content={"name": "python-2026"})


async def main(url: str, mode: str) -> None:
    client_info = types.Implementation(name="mcp-resume-interop-python-2026", version="1.0.0")
    async with Client(url, mode=mode, elicitation_callback=elicit, client_info=client_info) as client:
        version = client.protocol_version
        era = "modern" if version in MODERN_PROTOCOL_VERSIONS else "legacy"
        say(f"ERA {era} {version}")
        tools = await client.list_tools()
        say(f"TOOLS {len(tools.tools)}")
        say("TEXT " + text(await client.call_tool("test_simple_text", {})))
        if era == "modern":
            say("MRTR " + text(await client.call_tool("test_input_required_result_elicitation", {})))
            async with client.listen(tools_list_changed=True) as sub:
                say("LISTEN " + ("ack" if sub.honored.tools_list_changed else "refused"))
                await client.call_tool("test_trigger_tool_change", {})
                with anyio.fail_after(10):
                    event = await anext(sub)
                say("CHANGED " + ("tools" if isinstance(event, ToolsListChanged) else repr(event)))
        else:
            asked = await client.call_tool("test_elicitation", {"message": "who are you?"})
            say("ELICITED " + text(asked))
    say("DONE")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[2] not in MODES:
        sys.exit("usage: python client2026.py URL pin|auto")
    asyncio.run(main(sys.argv[1], MODES[sys.argv[2]]))
