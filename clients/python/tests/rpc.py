"""Plain HTTP calls for setting a scene: sessions, tool calls, tasks and metrics, without the transport under test.

Why not the transport: a test that checks what the transport raises on a
cursor must make that cursor's session some other way, or the reader it
tests would already be reading.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx2

HANDSHAKE = "2025-11-25"
STATELESS = "2026-07-28"
ACCEPT = "application/json, text/event-stream"


async def new_session(url: str) -> str:
    """``initialize`` and ``notifications/initialized``; the session id."""
    async with httpx2.AsyncClient() as c:
        r = await c.post(
            url,
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {"protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
            },
            headers={"accept": ACCEPT},
        )
        assert r.status_code == 200, r.text
        sid = r.headers["mcp-session-id"]
        r = await c.post(
            url,
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
            headers={"accept": ACCEPT, "mcp-session-id": sid, "mcp-protocol-version": HANDSHAKE},
        )
        assert r.status_code == 202, r.text
        return sid


async def call_tool(url: str, sid: str, name: str, arguments: dict[str, Any]) -> Any:
    """A ``tools/call`` answered as JSON; its result."""
    async with httpx2.AsyncClient() as c:
        r = await c.post(
            url,
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": name, "arguments": arguments}},
            headers={"accept": ACCEPT, "mcp-session-id": sid, "mcp-protocol-version": HANDSHAKE},
        )
        assert r.status_code == 200, r.text
        return r.json()["result"]


async def committed(base: str) -> int:
    """``mcp_resume_events_committed_total`` of the server at ``base`` (``http://ADDR``)."""
    async with httpx2.AsyncClient() as c:
        text = (await c.get(base + "/metrics")).text
    for line in text.splitlines():
        if line.startswith("mcp_resume_events_committed_total"):
            return int(float(line.split()[-1]))
    raise AssertionError(f"no committed metric in {text[:300]}")


async def wait_committed(base: str, at_least: int, timeout: float = 30.0) -> None:
    """Waits until the server committed ``at_least`` events."""
    with anyio.fail_after(timeout):
        while await committed(base) < at_least:
            await anyio.sleep(0.05)


async def start_task(url: str, count: int, interval_ms: int) -> str:
    """``stream_events`` of the conformance example as a task (stateless era); the task id."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "stream_events",
            "arguments": {"count": count, "interval_ms": interval_ms},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": STATELESS,
                "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
                "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
            },
        },
    }
    async with httpx2.AsyncClient() as c:
        r = await c.post(
            url,
            content=json.dumps(body),
            headers={
                "content-type": "application/json",
                "accept": ACCEPT,
                "mcp-protocol-version": STATELESS,
                "mcp-method": "tools/call",
                "mcp-name": "stream_events",
            },
        )
    assert r.status_code == 200, r.text
    task_id = r.json()["result"]["taskId"]
    assert isinstance(task_id, str)
    return task_id
