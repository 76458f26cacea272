"""Task event streams (SEP-2694, docs/protocol.md 3.9) on the conformance example's durable
tasks: every event once and in order, over the cursor-safe WebSocket and over ``tasks/stream``
(SSE), through cuts; ``after`` resumes exactly after it; ``events_gone`` (events lost to a
damaged disk log) is raised as ``CursorDiscontinuityError``, ``after-ahead`` as
``TaskStreamError``."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from conftest import ProxyFactory, ServeFactory
from mcp_resume_client import (
    CursorDiscontinuityError,
    Options,
    TaskEvent,
    TaskStreamError,
    stream_task,
)
from rpc import start_task
from servers import free_port
from test_discontinuity import cut_journal

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]
TRANSPORTS = pytest.mark.parametrize("websocket", [True, False], ids=["websocket", "sse"])
FAST = Options(initial_delay=0.05)


@TRANSPORTS
async def test_every_event_once_in_order_through_cuts(
    websocket: bool, conformance: ServeFactory, proxy_to: ProxyFactory
) -> None:
    server = conformance()
    proxy = await proxy_to(server.port)
    task = await start_task(server.url, 300, 2)
    events: list[TaskEvent] = []
    async with stream_task(proxy.url(), task, websocket=websocket, options=FAST) as stream:
        async for event in stream:
            events.append(event)
            if event.seq in (50, 150, 250):
                proxy.cut()
        assert stream.transport == ("websocket" if websocket else "sse")
    assert [e.seq for e in events] == list(range(302)), "the start, 300 events, the end"
    assert events[0].type == "dev.mcp-resume/task/working"
    assert [e.payload["n"] for e in events[1:301]] == list(range(1, 301))
    assert events[-1].type == "dev.mcp-resume/task/completed" and events[-1].is_terminal
    assert proxy.cuts >= 3


@TRANSPORTS
async def test_after_resumes_exactly_after_it(websocket: bool, conformance: ServeFactory) -> None:
    server = conformance()
    task = await start_task(server.url, 20, 0)
    seqs = [e.seq async for e in stream_task(server.url, task, 10, websocket=websocket)]
    assert seqs == list(range(11, 22))


@TRANSPORTS
async def test_events_lost_to_damaged_storage_are_refused(
    websocket: bool, conformance: ServeFactory, tmp_path: Path
) -> None:
    # Count retention never trims a live task's events (they are pinned for its TTL, 30 min
    # here), so `events_gone` is met the other way the server gives it: a disk log whose
    # journal was cut after a SIGKILL (as crates/cli/tests/damage.rs cuts it).
    log = tmp_path / "log"
    server = conformance("--store", f"disk:{log}", port=free_port())
    task = await start_task(server.url, 300, 1)
    assert len([e async for e in stream_task(server.url, task, websocket=websocket)]) == 302
    await anyio.sleep(0.2)
    server.kill9()
    cut_journal(log)
    server.restart()
    seqs: list[int] = []
    with pytest.raises(CursorDiscontinuityError) as info:
        async for event in stream_task(server.url, task, websocket=websocket, options=FAST):
            seqs.append(event.seq)
    e = info.value
    # The intact events, in order, then the loss named, never skipped.
    assert seqs == list(range(len(seqs))) and len(seqs) < 302
    assert (e.reason, e.cursor, e.stream) == ("truncated", len(seqs) - 1, f"task {task}"), e
    assert e.body["reason"] == "events_gone"


@TRANSPORTS
async def test_a_cursor_past_the_latest_event_is_refused(websocket: bool, conformance: ServeFactory) -> None:
    server = conformance()
    task = await start_task(server.url, 3, 0)
    with pytest.raises(TaskStreamError) as info:
        async for _ in stream_task(server.url, task, 1000, websocket=websocket):
            pass
    assert info.value.code == -32602 and info.value.reason == "after-ahead", info.value
