"""Fixtures: the real server binaries (never mocks), each test's processes killed at its end."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from servers import Proxy, Server, conformance_bin, mcp_resume_bin

ServeFactory = Callable[..., Server]
ProxyFactory = Callable[[int], Awaitable[Proxy]]


@pytest.fixture
def anyio_backend() -> str:
    """The transport runs on asyncio (``websockets``' asyncio client)."""
    return "asyncio"


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[ServeFactory]:
    """``serve(*flags, port=0)``: a started ``mcp-resume serve``; all of them stopped at the end."""
    started: list[Server] = []
    binary = mcp_resume_bin()

    def make(*flags: str, port: int = 0) -> Server:
        if not any(f.startswith("--store") for f in flags):
            flags = (*flags, "--store", "memory")
        s = Server([str(binary), "serve"], list(flags), port=port, log=tmp_path / f"serve-{len(started)}.log")
        started.append(s)
        return s.start()

    yield make
    for s in started:
        s.kill9()


@pytest.fixture
def conformance(tmp_path: Path) -> Iterator[ServeFactory]:
    """``conformance(*flags)``: the rmcp example with durable tasks, started; stopped at the end."""
    started: list[Server] = []
    binary = conformance_bin()

    def make(*flags: str, port: int = 0) -> Server:
        s = Server([str(binary)], list(flags), port=port, log=tmp_path / f"conformance-{len(started)}.log")
        started.append(s)
        return s.start()

    yield make
    for s in started:
        s.kill9()


@pytest.fixture
async def proxy_to() -> AsyncIterator[ProxyFactory]:
    """``await proxy_to(port)``: a cutting TCP proxy in front of a server; closed at the end."""
    proxies: list[Proxy] = []

    async def make(port: int) -> Proxy:
        p = await Proxy(port).start()
        proxies.append(p)
        return p

    yield make
    for p in proxies:
        await p.close()
