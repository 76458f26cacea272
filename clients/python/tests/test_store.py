"""Cursors kept in a file: written atomically and durably, refusing a file that holds no
cursor, and resuming a session exactly where the previous program stopped."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from mcp.client.session import ClientSession
from mcp_types import LoggingMessageNotificationParams

from conftest import ServeFactory
from mcp_resume_client import CursorStoreError, FileCursorStore, resumable_client
from rpc import HANDSHAKE
from test_discontinuity import drain

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def test_a_file_store_round_trips_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "cursor.json"
    store = FileCursorStore(path)
    assert await store.last_session() is None
    assert await store.load("a") is None
    await store.save("a", 7)
    await store.save("a", 8)
    assert await store.load("a") == 8
    assert await store.load("b") is None
    assert json.loads(path.read_text()) == {"sessionId": "a", "cursor": 8}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cursor.json"]
    await store.remove("b")
    assert path.exists()
    await store.remove("a")
    assert not path.exists()


@pytest.mark.parametrize("text", ["", "{", '{"sessionId": "a", "cursor": -1}', '{"sessionId": "a", "cursor": "7"}', "[]"])
async def test_a_file_without_a_cursor_is_an_error_never_a_fresh_start(tmp_path: Path, text: str) -> None:
    path = tmp_path / "cursor.json"
    path.write_text(text)
    with pytest.raises(CursorStoreError):
        await FileCursorStore(path).load("a")


@pytest.mark.parametrize("websocket", [True, False], ids=["websocket", "sse"])
async def test_a_second_program_resumes_where_the_first_stopped(
    websocket: bool, serve: ServeFactory, tmp_path: Path
) -> None:
    server = serve()
    path = tmp_path / "cursor.json"
    first: list[int] = []
    midway = anyio.Event()

    async def on_log(params: LoggingMessageNotificationParams) -> None:
        assert isinstance(params.data, dict)
        first.append(params.data["i"])
        if len(first) == 100:
            midway.set()

    # The first program: a session, 300 events emitted 2 ms apart; it stops midway, keeping
    # the session (terminate_on_close=False) and its cursor in the file.
    async with resumable_client(
        server.url, websocket=websocket, cursor_store=FileCursorStore(path), terminate_on_close=False
    ) as (read, write, _):
        async with ClientSession(read, write, logging_callback=on_log) as session:
            await session.initialize()
            await session.call_tool("emit", {"count": 300, "interval_ms": 2})
            with anyio.fail_after(20):
                await midway.wait()
    saved = await FileCursorStore(path).last_session()
    assert saved is not None and 100 <= saved.cursor < 300, saved
    # What the SDK received, it received in order; the cursor is saved after handing over,
    # so nothing it was not handed is counted as read.
    assert first == list(range(1, len(first) + 1)) and len(first) <= saved.cursor

    # The second program attaches to the session and reads from the saved cursor.
    second: list[object] = []
    async with resumable_client(
        server.url,
        websocket=websocket,
        cursor_store=FileCursorStore(path),
        session_id=saved.session_id,
        protocol_version=HANDSHAKE,
    ) as (read, _write, _sid):
        async with anyio.create_task_group() as tg:
            tg.start_soon(drain, read, second)
            with anyio.fail_after(20):
                while len(second) < 300 - saved.cursor:
                    await anyio.sleep(0.05)
            await anyio.sleep(0.3)
            tg.cancel_scope.cancel()
    assert second == list(range(saved.cursor + 1, 301)), (saved, second[:5])
    assert await FileCursorStore(path).last_session() is None, "deleted at the end, its cursor forgotten"
