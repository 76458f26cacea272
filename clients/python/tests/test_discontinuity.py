"""A cursor the server cannot honour is raised as ``CursorDiscontinuityError`` with the 409's
fields, over the WebSocket upgrade and over SSE, never skipped: ``ahead`` (a cursor past the
head), ``truncated`` (retention trimmed what the cursor needs) and ``data-lost`` (a disk log
whose journal was cut, as crates/cli/tests/damage.rs cuts it)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream
from mcp.shared.message import SessionMessage

from conftest import ServeFactory
from mcp_resume_client import CursorDiscontinuityError, MemoryCursorStore, resumable_client
from rpc import HANDSHAKE, call_tool, new_session, wait_committed
from servers import free_port

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]
TRANSPORTS = pytest.mark.parametrize("websocket", [True, False], ids=["websocket", "sse"])


async def drain(read: MemoryObjectReceiveStream[SessionMessage | Exception], into: list[object]) -> None:
    """What the SDK's session would receive: messages (as their ``params.data.i`` for emits) and exceptions."""
    async for item in read:
        if isinstance(item, Exception):
            into.append(item)
            continue
        params = getattr(item.message, "params", None) or {}
        data = params.get("data") if isinstance(params, dict) else None
        into.append(data["i"] if isinstance(data, dict) else item.message)


async def attach(url: str, sid: str, cursor: int | None, websocket: bool, seen: list[object], seconds: float) -> None:
    """Reads session ``sid`` from ``cursor`` (None: no stored cursor) for ``seconds``, or until the transport raises."""
    store = MemoryCursorStore()
    if cursor is not None:
        await store.save(sid, cursor)
    async with resumable_client(
        url,
        websocket=websocket,
        cursor_store=store,
        session_id=sid,
        protocol_version=HANDSHAKE,
        terminate_on_close=False,
    ) as (read, _write, _sid):
        async with anyio.create_task_group() as tg:
            tg.start_soon(drain, read, seen)
            await anyio.sleep(seconds)
            tg.cancel_scope.cancel()


@TRANSPORTS
async def test_a_cursor_past_the_head_is_ahead(websocket: bool, serve: ServeFactory) -> None:
    server = serve()
    sid = await new_session(server.url)
    await call_tool(server.url, sid, "emit", {"count": 3})
    await wait_committed(server.base, 3)
    seen: list[object] = []
    with pytest.raises(CursorDiscontinuityError) as info:
        await attach(server.url, sid, 100, websocket, seen, 10)
    e = info.value
    assert (e.reason, e.cursor, e.head, e.resume_cursor, e.stream) == ("ahead", 100, 3, 3, "session")
    assert e.body["error"] == "cursor-discontinuity"
    assert seen == [e], "nothing delivered; the error offered to the session first"


@TRANSPORTS
@pytest.mark.parametrize("cursor", [1, None], ids=["from-1", "no-cursor"])
async def test_a_cursor_below_the_floor_is_truncated(websocket: bool, cursor: int | None, serve: ServeFactory) -> None:
    server = serve("--retention-events", "10")
    sid = await new_session(server.url)
    await call_tool(server.url, sid, "emit", {"count": 100})
    await wait_committed(server.base, 100)
    seen: list[object] = []
    with pytest.raises(CursorDiscontinuityError) as info:
        await attach(server.url, sid, cursor, websocket, seen, 10)
    e = info.value
    # No cursor stored means "everything since the session began" (0), never "from whatever is left".
    assert (e.reason, e.cursor, e.head) == ("truncated", cursor or 0, 100)
    assert e.floor > (cursor or 0) + 1
    assert seen == [e]


@TRANSPORTS
async def test_a_cut_journal_is_data_lost(websocket: bool, serve: ServeFactory, tmp_path: Path) -> None:
    log = tmp_path / "log"
    server = serve("--store", f"disk:{log}", port=free_port())
    sessions = [await new_session(server.url) for _ in range(4)]
    # Emitted side by side, 1 ms apart: the journal interleaves them, so a cut at 80 % leaves
    # each session an intact prefix and a lost tail.
    for sid in sessions:
        await call_tool(server.url, sid, "emit", {"count": 300, "interval_ms": 1})
    await wait_committed(server.base, 1200)
    await anyio.sleep(0.2)  # The committed-heads record is fsync'd within 50 ms.
    server.kill9()
    cut_journal(log)
    server.restart()

    refused = partial = 0
    for sid in sessions:
        seen: list[object] = []
        try:
            await attach(server.url, sid, 0, websocket, seen, 3)
        except CursorDiscontinuityError as e:
            refused += 1
            served = [x for x in seen if isinstance(x, int)]
            partial += bool(served)
            # Every intact event before the loss, in order, then the loss named, never skipped.
            assert served == list(range(1, len(served) + 1))
            assert (e.reason, e.lost_from, e.lost_to) == ("data-lost", len(served) + 1, 300), e
            # 301 when the server also reported the emit's background work,
            # whose end the cut took too, as lost with its instance (work-lost).
            assert e.head in (300, 301), e
            assert e.cursor == len(served) and e.resume_cursor == 300
            assert seen[-1] is e
        else:
            assert seen == list(range(1, 301)), "an intact session is served whole"
    assert refused >= 1, "the cut lost no event?"
    assert partial >= 1, "no session kept an intact prefix: the served-then-refused path was not met"


def cut_journal(log: Path) -> None:
    """Cuts the disk log's journal at 80 % of what was written (as crates/cli/tests/damage.rs)."""
    journals = [p for p in log.rglob("*") if p.is_file() and p.suffix == ".jnl"]
    assert journals, f"no journal in {sorted(str(p) for p in log.rglob('*'))}"
    journal = max(journals, key=lambda p: p.stat().st_size)
    data = journal.read_bytes()
    used = len(data.rstrip(b"\0"))
    with open(journal, "r+b") as f:
        f.truncate(used * 8 // 10)
