"""The guarantee, end to end: ``ClientSession`` over this transport receives every ``emit``
notification exactly once and in order while the session stream's connection is cut every
500 events (from outside, by a proxy) and the server is killed with SIGKILL and restarted on
the same disk log and port.

The events are emitted 1 ms apart, so every cut lands on a live stream; the kill lands when
the application has 2,250 of the first 2,500 (all committed: a crash loses no committed
event, but it does end the emitting task), and the last 2,500 are emitted by the restarted
server.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp.client.session import ClientSession
from mcp_types import LoggingMessageNotificationParams

from conftest import ProxyFactory, ServeFactory
from mcp_resume_client import FileCursorStore, resumable_client
from rpc import wait_committed
from servers import free_port

pytestmark = pytest.mark.anyio

N = 5000
HALF = 2500
CUT_EVERY = 500
KILL_AT = 2250


@pytest.mark.parametrize("websocket", [True, False], ids=["websocket", "sse"])
@pytest.mark.timeout(150)
async def test_5000_notifications_exactly_once_through_cuts_and_a_kill(
    websocket: bool, serve: ServeFactory, proxy_to: ProxyFactory, tmp_path: Path
) -> None:
    server = serve("--store", f"disk:{tmp_path / 'log'}", port=free_port())
    proxy = await proxy_to(server.port)
    got: list[int] = []
    reached_kill = anyio.Event()
    done = anyio.Event()

    async def on_log(params: LoggingMessageNotificationParams) -> None:
        data = params.data
        assert isinstance(data, dict)
        got.append(data["i"])
        if len(got) % CUT_EVERY == 0:
            proxy.cut_streams()
        if len(got) == KILL_AT:
            reached_kill.set()
        if len(got) >= N:
            done.set()

    store = FileCursorStore(tmp_path / "cursor.json")
    async with resumable_client(proxy.url(), websocket=websocket, cursor_store=store) as streams:
        read, write, _ = streams
        async with ClientSession(read, write, logging_callback=on_log) as session:
            await session.initialize()
            await session.call_tool("emit", {"count": HALF, "interval_ms": 1})
            with anyio.fail_after(60):
                await reached_kill.wait()
            await wait_committed(server.base, HALF)
            server.kill9()
            await anyio.sleep(1.5)  # The reader meets refused connections meanwhile.
            server.restart()
            await session.call_tool("emit", {"count": HALF, "interval_ms": 1})
            with anyio.fail_after(90):
                await done.wait()
            await anyio.sleep(0.5)  # Anything extra (a duplicate) would arrive now.
        transport = streams.transport
        stats = transport.stats
        assert transport.cursor == N
    expected = list(range(1, HALF + 1)) * 2
    assert got == expected, f"{len(got)} received; first wrong at {first_difference(got, expected)}"
    # A cut finds no stream to cut while the reader is still reconnecting
    # from the previous cut or from the kill: on a loaded machine two of the
    # ten can miss (8 of 10 seen once in 2026-12), and 8 cuts still cut the
    # stream under the reader throughout.
    assert proxy.cuts >= N // CUT_EVERY - 2
    assert stats.reconnects >= N // CUT_EVERY
    if websocket:
        assert stats.upgrades >= N // CUT_EVERY and stats.fallbacks == 0, stats
    else:
        assert stats.upgrades == 0 and stats.transport == "sse", stats
    assert stats.gaps == 0 and not stats.reported, stats
    saved = await store.last_session()
    assert saved is None, "the session was deleted at the end, and its cursor forgotten"


def first_difference(got: list[int], expected: list[int]) -> int | None:
    """The index where ``got`` first differs from ``expected``."""
    for k, (a, b) in enumerate(zip(got, expected)):
        if a != b:
            return k
    return None if len(got) == len(expected) else min(len(got), len(expected))

