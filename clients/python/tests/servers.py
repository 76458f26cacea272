"""The real server binaries, started, killed with SIGKILL and restarted; a TCP proxy that cuts connections.

Why a proxy: a test must cut a live connection from the outside, the way a
network does, without asking the server (which would close it cleanly).
Everything binds 127.0.0.1; every process started here is killed by its
own handle when the test ends.
"""

from __future__ import annotations

import asyncio
import os
import selectors
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def binary(env: str, default: Path) -> Path:
    """The binary named by ``env`` (or ``default``); a missing one fails the test, never skips it."""
    path = Path(os.environ.get(env, str(default)))
    if not path.is_file() or not os.access(path, os.X_OK):
        raise AssertionError(
            f"{path} does not exist or is not executable: build it (cargo build) or point {env} at it"
        )
    return path


def mcp_resume_bin() -> Path:
    """``MCP_RESUME_BIN``, default ``target/debug/mcp-resume`` of this repository."""
    return binary("MCP_RESUME_BIN", REPO / "target" / "debug" / "mcp-resume")


def conformance_bin() -> Path:
    """``MCP_RESUME_CONFORMANCE_BIN``, default ``target/debug/examples/conformance``."""
    return binary("MCP_RESUME_CONFORMANCE_BIN", REPO / "target" / "debug" / "examples" / "conformance")


def free_port() -> int:
    """A port nobody listens on right now (for a server that must come back on the same one)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    """One server process: ``argv`` up to ``--listen``; started on ``port`` (0 picks one, kept for restarts)."""

    argv: list[str]
    extra: list[str] = field(default_factory=list)
    port: int = 0
    log: Path | None = None
    proc: subprocess.Popen[bytes] | None = None
    url: str = ""

    def start(self, timeout: float = 20.0) -> Server:
        """Starts it and waits for ``listening on http://ADDR/mcp`` (retrying while the port is still taken)."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            env = {**os.environ, "RUST_LOG": os.environ.get("MCPR_TEST_LOG", "warn")}
            argv = [*self.argv, "--listen", f"127.0.0.1:{self.port}", *self.extra]
            if self.log is not None:
                with open(self.log, "ab") as err:
                    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, env=env)
            else:
                proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
            line = _read_line(proc, deadline)
            if line is not None and "listening on " in line:
                self.proc = proc
                self.url = line.split("listening on ", 1)[1].strip()
                self.port = int(self.url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
                return self
            last = line or f"exit {proc.poll()}"
            _kill(proc)
            time.sleep(0.2)
        raise AssertionError(f"{self.argv[0]} did not start on port {self.port}: {last}")

    @property
    def base(self) -> str:
        """``http://ADDR`` without the MCP path."""
        return self.url.rsplit("/", 1)[0]

    def kill9(self) -> None:
        """SIGKILL, as a crash: nothing is flushed or closed."""
        if self.proc is not None:
            _kill(self.proc)
            self.proc = None

    def restart(self) -> Server:
        """Starts again on the same port (and the same data)."""
        return self.start()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 5 s."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        _kill(proc)


def _read_line(proc: subprocess.Popen[bytes], deadline: float) -> str | None:
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        buf = b""
        while time.monotonic() < deadline:
            if not sel.select(timeout=max(0.0, min(0.5, deadline - time.monotonic()))):
                if proc.poll() is not None:
                    return None
                continue
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                return buf.decode() or None
            buf += chunk
            if b"\n" in buf:
                return buf.split(b"\n", 1)[0].decode()
        return None
    finally:
        sel.close()


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)
    if proc.stdout is not None:
        proc.stdout.close()


@dataclass(eq=False)
class _Conn:
    first: bytes
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    frozen: bool = False


class Proxy:
    """A TCP proxy on 127.0.0.1 to ``target_port``; :meth:`cut` aborts the connections a predicate picks.

    Each connection remembers the start of the last request the client
    sent on it (HTTP keeps connections alive, so a POST's connection may
    carry the session stream's GET next), so a test cuts only the session
    stream (``GET``) or everything.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self._server: asyncio.Server | None = None
        self._conns: set[_Conn] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.cuts = 0

    async def start(self) -> Proxy:
        """Listens on a free port."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def url(self, path: str = "/mcp") -> str:
        """The proxy's URL for ``path``."""
        return f"http://127.0.0.1:{self.port}{path}"

    def cut(self, pick: Callable[[bytes], bool] = lambda first: True) -> int:
        """Aborts (RST, no FIN) both sides of every connection ``pick`` chooses; how many."""
        n = 0
        for c in list(self._conns):
            if pick(c.first):
                c.client.transport.abort()
                if c.upstream is not None:
                    c.upstream.transport.abort()
                self._conns.discard(c)
                n += 1
        self.cuts += n
        return n

    def freeze_streams(self) -> int:
        """Stops forwarding on every ``GET`` without closing it: a connection gone silent (a dead peer)."""
        n = 0
        for c in self._conns:
            if c.first.startswith(b"GET "):
                c.frozen = True
                n += 1
        return n

    def cut_streams(self) -> int:
        """Cuts every ``GET`` (the session stream, SSE or WebSocket, and request-stream resumes)."""
        return self.cut(lambda first: first.startswith(b"GET "))

    async def close(self) -> None:
        """Stops listening and aborts everything."""
        self.cut()
        if self._server is not None:
            self._server.close()
        # The handlers end by themselves once their connections are aborted.
        for _ in range(50):
            if not self._tasks:
                break
            await asyncio.sleep(0.01)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        conn = _Conn(b"", writer)
        try:
            try:
                first = await reader.read(65536)
            except OSError:
                writer.transport.abort()
                return
            if not first:
                writer.close()
                return
            conn.first = first
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
            except OSError:
                writer.transport.abort()
                return
            conn.upstream = up_writer
            self._conns.add(conn)
            up_writer.write(first)
            await asyncio.gather(_pump(reader, up_writer, conn, True), _pump(up_reader, writer, conn, False))
        finally:
            self._conns.discard(conn)
            self._tasks.discard(task)


METHODS = (b"GET ", b"POST ", b"DELETE ", b"PUT ", b"OPTIONS ", b"HEAD ")


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: _Conn, upward: bool) -> None:
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            if upward and data.startswith(METHODS):
                conn.first = data[:256]
            if conn.frozen:
                continue  # Swallowed: the peer hears nothing, and nothing closes.
            writer.write(data)
            await writer.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()
