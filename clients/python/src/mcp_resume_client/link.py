"""What the session-stream reader, the request-stream followers and the task streams share.

The options with their defaults, the statistics, the headers every request
carries, how credentials are found, how a refusal becomes a typed error,
and the wait before a reconnect. Kept apart from the transport so each
reader can be read (and tested) without it.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

import anyio
import httpx2
import websockets.exceptions
from anyio.streams.memory import MemoryObjectSendStream
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCMessage, jsonrpc_message_adapter
from pydantic import ValidationError

from .errors import (
    CursorDiscontinuityError,
    HttpStatusError,
    ProtocolViolationError,
    SessionNotFoundError,
    Transient,
)

logger = logging.getLogger("mcp_resume_client")

SUBPROTOCOL = "mcp.resume.v1"
"""The WebSocket subprotocol of the cursor-safe upgrade (docs/protocol.md 5.1)."""
RESUME_CURSOR = "x-mcp-resume-cursor"
"""The ``101``'s header naming the committed cursor ``C`` (docs/protocol.md 5.2 step 5)."""
MCP_SESSION_ID = "mcp-session-id"
MCP_PROTOCOL_VERSION = "mcp-protocol-version"
LAST_EVENT_ID = "last-event-id"

TokenSource: TypeAlias = str | Callable[[], "str | None | Awaitable[str | None]"]
"""A bearer token, or a function (sync or async) returning one, asked before every request."""
AuthLike: TypeAlias = "TokenSource | httpx2.Auth | None"
"""What ``auth=`` accepts: a token source, or an ``httpx2.Auth`` (e.g. the SDK's OAuth provider)."""

NETWORK_ERRORS: tuple[type[BaseException], ...] = (
    Transient,
    httpx2.TransportError,
    OSError,
    TimeoutError,
    websockets.exceptions.WebSocketException,
)
"""Failures that resuming from the same cursor heals: they are retried, never raised."""


@dataclass(slots=True)
class Options:
    """The transport's tunables, with their defaults (see :func:`resumable_client`)."""

    websocket: bool = True
    """Upgrade the session stream to the cursor-safe WebSocket; False reads SSE only."""
    initial_delay: float | None = None
    """The first wait after a drop, in seconds; default the server's SSE ``retry:`` (1 s from mcp-resume)."""
    max_delay: float = 5.0
    """The longest wait between two reconnects; the waits double up to it, with jitter, without limit."""
    idle_timeout: float = 45.0
    """A connection silent this long (no event, heartbeat or keepalive: the server sends one every 15 s) is resumed."""
    handshake_timeout: float = 10.0
    """The longest WebSocket handshake."""
    request_stream_retries: int | None = None
    """Resumes in a row without an event before a request stream's call ends with an error; None: no limit."""


@dataclass(slots=True)
class Stats:
    """What the transport has done so far; for tests, benchmarks and dashboards."""

    transport: Literal["none", "sse", "websocket"] = "none"
    """The current (or last) connection of the session stream."""
    upgrades: int = 0
    """Upgrades whose echo proved the replay covers everything after the cursor."""
    fallbacks: int = 0
    """Upgrades given up for SSE from the same cursor (426, 503, no echo, a server without the upgrade)."""
    reconnects: int = 0
    """Reconnects of the session stream."""
    gaps: int = 0
    """Gaps or duplicates (or heartbeats ahead) healed by resuming from the cursor."""
    last_committed: int | None = None
    """The committed cursor ``C`` of the last upgrade."""
    request_resumes: int = 0
    """Request streams resumed after a drop (``GET`` with ``Last-Event-ID: R/n``)."""
    reported: list[Exception] = field(default_factory=list)
    """Errors reported to the application without stopping the transport (the last 100)."""


def backoff_delay(base: float, max_delay: float, failures: int) -> float:
    """The wait before reconnect number ``failures`` (1, 2, ...): ``exp/2 + random*exp/2``, ``exp`` doubling to the cap.

    Jitter on the upper half keeps many clients of one restarted server from
    reconnecting in step, and never waits less than half the step.
    """
    exp: float = min(base * 2.0 ** min(max(failures - 1, 0), 16), max_delay)
    return exp / 2 + random.random() * (exp / 2)


def refusal(status: int, body: bytes, what: str, cursor: int, stream: str, session_id: str) -> Exception:
    """The typed error for a refused GET or upgrade.

    409 is the discontinuity of the cursor asked for, 404 the end of the
    session; 5xx, 429 and 408 are transient (the server is restarting or
    busy: retried with backoff, without limit); any other status is a
    policy that a retry cannot change.
    """
    if status == 409:
        return CursorDiscontinuityError.from_body(body, cursor, stream)
    if status == 404:
        return SessionNotFoundError(session_id, f"{what} answered 404")
    if status >= 500 or status in (429, 408):
        return Transient(f"{what} answered {status}: {body[:200].decode('utf-8', 'replace')}")
    return HttpStatusError(what, status, body)


def media_type(response: httpx2.Response) -> str:
    """The ``Content-Type`` without parameters, lower case."""
    return response.headers.get("content-type", "").partition(";")[0].strip().lower()


class Credentials:
    """Finds the ``Authorization`` header for a request the HTTP client does not sign itself.

    Why: a token given as a string or a function is added here to every
    request; an ``httpx2.Auth`` signs the HTTP requests itself, and the
    WebSocket upgrade (which ``websockets`` sends, not httpx2) borrows the
    header from the first step of its flow.
    """

    def __init__(self, auth: AuthLike) -> None:
        self.httpx_auth = auth if isinstance(auth, httpx2.Auth) else None
        self._source: TokenSource | None = None if isinstance(auth, httpx2.Auth) else auth

    async def header(self) -> str | None:
        """``Bearer TOKEN`` from a token source, or None (no credentials, or the HTTP client signs)."""
        source = self._source
        if source is None:
            return None
        token: str | None
        if isinstance(source, str):
            token = source
        else:
            got = source()
            token = await got if inspect.isawaitable(got) else got
        return f"Bearer {token}" if token else None

    async def upgrade_header(self, url: str) -> str | None:
        """The header for a WebSocket upgrade: from the token source, else from the ``httpx2.Auth`` flow."""
        own = await self.header()
        if own is not None or self.httpx_auth is None:
            return own
        request = httpx2.Request("GET", url)
        flow = self.httpx_auth.async_auth_flow(request)
        try:
            signed = await flow.__anext__()
        except StopAsyncIteration:
            return None
        finally:
            await flow.aclose()
        return signed.headers.get("authorization")


def is_network_error(e: BaseException) -> bool:
    """Whether ``e`` is a failure that resuming heals (see :data:`NETWORK_ERRORS`)."""
    return isinstance(e, NETWORK_ERRORS)


def clamp_retry(ms: int) -> float:
    """A server's SSE ``retry:`` as seconds, kept between 10 ms and a minute."""
    return min(max(ms, 10), 60_000) / 1000.0


class IdleWatch:
    """Calls ``on_idle`` once nothing arrived on a connection for ``seconds``.

    Why not a timeout around each read: arming and disarming a timer for
    every frame costs more than the frame. The reader bumps :attr:`ticks`
    (an integer) per frame; a timer that fires every third of the period
    compares it with what it saw last. The server sends a heartbeat or a
    keepalive at least every 15 s, so a silent connection is a dead one.
    """

    def __init__(self, seconds: float, on_idle: Callable[[], None]) -> None:
        self.ticks = 0
        self.busy = False
        """True while the reader hands a message over: an application slow to take it is not a silent peer."""
        self.fired = False
        self._seconds = seconds
        self._on_idle = on_idle
        self._seen = 0
        self._loop = asyncio.get_running_loop()
        self._since = self._loop.time()
        self._handle = self._loop.call_later(seconds / 3, self._check)

    def _check(self) -> None:
        now = self._loop.time()
        if self.ticks != self._seen or self.busy:
            self._seen = self.ticks
            self._since = now
        elif now - self._since >= self._seconds:
            self.fired = True
            self._on_idle()
            return
        self._handle = self._loop.call_later(self._seconds / 3, self._check)

    def stop(self) -> None:
        """Stops watching (the connection ended)."""
        self._handle.cancel()


class ApplicationGone(Exception):
    """Internal: the read stream's receiver closed (the session ended): readers stop quietly."""


class Link:
    """The transport as its readers see it: where to connect, with what, and where messages go.

    Why one object: the session id and negotiated version change while the
    readers run (an ``initialize``), and every reader must send the current
    ones and deliver into the one read stream the SDK reads.
    """

    def __init__(
        self,
        url: str,
        client: httpx2.AsyncClient,
        options: Options,
        stats: Stats,
        credentials: Credentials,
        extra_headers: dict[str, str],
        writer: MemoryObjectSendStream[SessionMessage | Exception],
    ) -> None:
        self.url = url
        self.client = client
        self.options = options
        self.stats = stats
        self.credentials = credentials
        self.extra_headers = extra_headers
        self.writer = writer
        self.session_id: str | None = None
        self.protocol_version: str | None = None

    async def headers(self, extra: dict[str, str], *, with_session: bool = True) -> dict[str, str]:
        """The caller's extra headers, then ``extra``, the session's, and the credentials."""
        h = {**self.extra_headers, **extra}
        if with_session and self.session_id is not None:
            h[MCP_SESSION_ID] = self.session_id
            if self.protocol_version:
                h[MCP_PROTOCOL_VERSION] = self.protocol_version
        auth = await self.credentials.header()
        if auth is not None:
            h["authorization"] = auth
        return h

    async def deliver(self, message: JSONRPCMessage) -> None:
        """Hands a message to the SDK; returns once the read stream's receiver took it."""
        try:
            await self.writer.send(SessionMessage(message))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError) as e:
            raise ApplicationGone() from e

    async def deliver_json(self, data: bytes | str) -> None:
        """Validates one JSON-RPC message as the SDK's transport does, and hands it over.

        A message that does not validate is reported (as the SDK's transport
        does) rather than dropped: its position was consumed, the
        application learns what it was.
        """
        try:
            message = jsonrpc_message_adapter.validate_json(data, by_name=False)
        except ValidationError as e:
            text = data if isinstance(data, str) else data.decode("utf-8", "replace")
            await self.report(ProtocolViolationError(f"an event that is not a JSON-RPC message: {text[:200]!r}: {e}"))
            return
        await self.deliver(message)

    async def report(self, exc: Exception) -> None:
        """Tells the application without stopping: the exception goes to the session's ``message_handler``."""
        reported = self.stats.reported
        reported.append(exc)
        del reported[:-100]
        logger.warning("%s", exc)
        try:
            with anyio.move_on_after(5):
                await self.writer.send(exc)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
