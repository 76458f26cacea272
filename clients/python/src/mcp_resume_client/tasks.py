"""Resumable task event streams (SEP-2694 draft, docs/protocol.md 3.9).

A durable task's events, read from a cursor and followed live until the
task's terminal event, each checked to be the next ``seq``, resumed after
any drop from the last seq read. Over the cursor-safe WebSocket
(``GET P/tasks/{id}/events`` upgraded, the handshake of section 5) when
asked and offered, else with the ``tasks/stream`` request, whose SSE answer
carries the events (what any SEP-2694 server speaks). A cursor the server
cannot continue from is raised (:class:`CursorDiscontinuityError` for
``events_gone``), never skipped.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import anyio
import httpx2
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from .errors import (
    CursorDiscontinuityError,
    ProtocolViolationError,
    ResumeError,
    SequenceGapError,
    TaskStreamError,
    Transient,
)
from .link import (
    AuthLike,
    Credentials,
    Options,
    backoff_delay,
    clamp_retry,
    is_network_error,
    media_type,
)
from .seq import SeqChecker, parse_seq
from .sse import SseParser
from .upgrade import Refused, ack_frame, close_code, open_upgrade, parse_frame, ws_url

logger = logging.getLogger("mcp_resume_client")

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
"""The extension a ``tasks/stream`` request declares in its client capabilities."""
STATELESS_VERSION = "2026-07-28"
"""``tasks/stream`` is a request of the stateless era."""
EVENTS_GONE = -32010
"""The JSON-RPC code of ``events_gone``: a cursor below what the server retains."""
RESUMABLE_REASONS = frozenset({"server-stopping", "log-unavailable", "log-gap"})
"""Reasons of an error ending a stream that a resume from the last seq heals."""
TERMINAL_TYPES = frozenset(
    {"dev.mcp-resume/task/completed", "dev.mcp-resume/task/failed", "dev.mcp-resume/task/cancelled"}
)
GAPS_IN_A_ROW = 3


@dataclass(frozen=True, slots=True)
class TaskEvent:
    """One event of a task's stream."""

    seq: int
    """Its position: 0, 1, 2, ... with no gap, never reused."""
    type: str
    """``dev.mcp-resume/task/STATUS`` for the transport's status events, vendor-prefixed for a task's own."""
    payload: dict[str, Any]
    """Its payload (for a status event, the task as ``tasks/get`` shows it)."""
    task_id: str
    message: dict[str, Any] = field(repr=False, compare=False)
    """The whole ``notifications/tasks/event`` as sent."""

    @property
    def is_terminal(self) -> bool:
        """Whether it is the task's terminal status event (the last the stream shows)."""
        return self.type in TERMINAL_TYPES


class _Ended(Exception):
    """Internal: the stream ended normally (the task's result, or close 1000)."""


class TaskStream:
    """The events of one task from a cursor: ``async for event in stream``; close with ``aclose``.

    Why an iterator object rather than a generator: its connection (an
    HTTP body or a socket) outlives each event handed out, and must be
    closed whether the caller reads to the end or stops early.
    """

    def __init__(
        self,
        url: str,
        task_id: str,
        after: int | None,
        *,
        websocket: bool,
        headers: dict[str, str],
        credentials: Credentials,
        options: Options,
        http_client: httpx2.AsyncClient | None,
    ) -> None:
        self.url = url
        self.task_id = task_id
        self._checker = SeqChecker(after if after is not None else -1)
        self._websocket = websocket
        self._headers = headers
        self._credentials = credentials
        self._options = options
        self._client = http_client
        self._own_client = http_client is None
        self._ready: deque[TaskEvent] = deque()
        self._done = False
        self._response: httpx2.Response | None = None
        self._chunks: AsyncIterator[bytes] | None = None
        self._parser = SseParser()
        self._socket: ClientConnection | None = None
        self._retry: float | None = None
        self._failures = 0
        self._gaps = 0
        self.transport: str = "none"
        """``websocket`` or ``sse``: how the last connection read the stream."""

    @property
    def last_seq(self) -> int | None:
        """The last seq handed out (the cursor to resume after), None before the first."""
        last = self._checker.last
        return last if last >= 0 else None

    def __aiter__(self) -> TaskStream:
        return self

    async def __anext__(self) -> TaskEvent:
        while True:
            if self._ready:
                event = self._ready.popleft()
                if event.is_terminal:
                    self._done = True
                    self._ready.clear()
                return event
            if self._done:
                await self.aclose()
                raise StopAsyncIteration
            try:
                if self._socket is None and self._chunks is None:
                    await self._connect()
                    continue
                await self._pump()
            except _Ended:
                self._done = True
                await self._disconnect()
            except ResumeError:
                await self.aclose()
                raise
            except BaseException as e:
                if not is_network_error(e):
                    await self.aclose()
                    raise
                await self._disconnect()
                # At once after a connection that delivered (an event resets the count); then
                # waits that double, with jitter.
                self._failures += 1
                base = self._options.initial_delay or self._retry or 1.0
                wait = 0.0 if self._failures == 1 else backoff_delay(base, self._options.max_delay, self._failures - 1)
                logger.info("task %s: %s; resuming after %s in %.0f ms", self.task_id, e, self.last_seq, wait * 1000)
                await anyio.sleep(wait)

    async def __aenter__(self) -> TaskStream:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Closes the connection (and the HTTP client, if this stream made it)."""
        await self._disconnect()
        if self._own_client and self._client is not None:
            await self._client.aclose()
            self._client = None

    # ------------------------------------------------------------- connect

    async def _connect(self) -> None:
        if self._websocket and await self._upgrade():
            return
        await self._post()

    async def _upgrade(self) -> bool:
        """Tries the WebSocket; False to read SSE instead (426, no echo, a server without it)."""
        url = ws_url(self.url, f"tasks/{self.task_id}/events")
        headers = dict(self._headers)
        auth = await self._credentials.upgrade_header(url)
        if auth is not None:
            headers["authorization"] = auth
        prior = self.last_seq
        hs = await open_upgrade(url, prior, headers, self._options.handshake_timeout)
        if isinstance(hs, Refused):
            self._refused_upgrade(hs)
            return False
        decision = hs.decision
        if decision.committed is None:
            await hs.socket.close(1000, "no committed cursor")
            if decision.why == "missing-echo":
                self._websocket = False
            logger.warning("task %s: the upgrade is not resumable (%s); SSE", self.task_id, decision.detail)
            return False
        self._socket = hs.socket
        self.transport = "websocket"
        self._checker.expect_replay_until(decision.committed)
        await self._maybe_ack()
        return True

    def _refused_upgrade(self, hs: Refused) -> None:
        status = hs.status
        if status >= 500 or status == 429:
            raise Transient(hs.detail)
        if status in (401, 403):
            raise TaskStreamError(self.task_id, status, f"the upgrade was refused: {hs.body[:200]!r}")
        error = jsonrpc_error(hs.body)
        if error is not None:
            # The refusals of tasks/stream, as JSON with its status.
            self._raise_rpc_error(error)
        # 426, or a server without the GET route: tasks/stream over SSE.
        self._websocket = False

    async def _post(self) -> None:
        client = self._client_or_new()
        params: dict[str, Any] = {
            "taskId": self.task_id,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": STATELESS_VERSION,
                "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS_EXTENSION: {}}},
                "io.modelcontextprotocol/clientInfo": {"name": "mcp-resume-client", "version": "0.1.0"},
            },
        }
        if self.last_seq is not None:
            params["after"] = self.last_seq
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tasks/stream", "params": params})
        headers = {
            **self._headers,
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": STATELESS_VERSION,
            "mcp-method": "tasks/stream",
            "mcp-name": self.task_id,
        }
        auth = await self._credentials.header()
        if auth is not None:
            headers["authorization"] = auth
        request = client.build_request("POST", self.url, content=body, headers=headers)
        response = await client.send(request, stream=True)
        status = response.status_code
        if media_type(response) != "text/event-stream":
            data = await response.aread()
            await response.aclose()
            if status >= 500 or status == 429:
                raise Transient(f"tasks/stream answered {status}")
            error = jsonrpc_error(data)
            if error is None:
                raise TaskStreamError(self.task_id, status, f"tasks/stream answered {status}: {data[:200]!r}")
            self._raise_rpc_error(error)
            return
        self._response = response
        self._chunks = response.aiter_bytes()
        self._parser = SseParser()
        self.transport = "sse"

    def _client_or_new(self) -> httpx2.AsyncClient:
        if self._client is None:
            self._client = httpx2.AsyncClient(
                timeout=httpx2.Timeout(self._options.handshake_timeout, read=self._options.idle_timeout),
                auth=self._credentials.httpx_auth,
            )
            self._own_client = True
        return self._client

    async def _disconnect(self) -> None:
        socket, self._socket = self._socket, None
        response, self._response = self._response, None
        self._chunks = None
        if socket is not None:
            with anyio.move_on_after(1):
                try:
                    await socket.close(1000, "closing")
                except Exception:  # noqa: BLE001 - already gone
                    pass
        if response is not None:
            await response.aclose()

    # ---------------------------------------------------------------- read

    async def _pump(self) -> None:
        """Reads one chunk (SSE) or frame (WebSocket) into the ready events."""
        if self._socket is not None:
            await self._pump_socket(self._socket)
            return
        assert self._chunks is not None
        try:
            chunk = await self._chunks.__anext__()
        except StopAsyncIteration:
            raise Transient(
                "the task stream ended before its result" + (f": {self._parser.ending}" if self._parser.ending else "")
            ) from None
        for ev in self._parser.feed(chunk):
            if ev.retry is not None:
                self._retry = clamp_retry(ev.retry)
            if not ev.data:
                continue
            try:
                message = json.loads(ev.data)
            except ValueError:
                raise ProtocolViolationError(f"a task stream event that is not JSON: {ev.data[:100]!r}") from None
            if ev.id is not None and parse_seq(ev.id) is None:
                raise ProtocolViolationError(f"a task stream event id that is not a seq: {ev.id!r}")
            self._message(message)

    async def _pump_socket(self, socket: ClientConnection) -> None:
        # No heartbeat on a task's socket (docs/protocol.md 3.9): no idle timeout either.
        try:
            text = await socket.recv()
        except ConnectionClosed as e:
            code = close_code(e)
            reason = e.rcvd.reason if e.rcvd is not None else ""
            if code == 1000:
                raise _Ended() from None
            if code == 4404:
                raise TaskStreamError(self.task_id, -32602, f"the task expired: {reason}", {"reason": "task-expired"}) from None
            if code in (1003, 1008, 1009, 4400):
                raise ProtocolViolationError(f"the task's WebSocket closed {code}: {reason}") from None
            raise Transient(f"the task's WebSocket closed {code} {reason}") from None
        frame = parse_frame(text)
        if frame.kind != "event":
            return
        message = json.loads(frame.message_json) if frame.message_json is not None else frame.message
        if not isinstance(message, dict):
            raise ProtocolViolationError(f"a task event frame without a message: {text[:100]!r}")
        params = message.get("params")
        if not isinstance(params, dict) or params.get("seq") != frame.number:
            raise ProtocolViolationError(f"a frame's seq {frame.number} differs from its event's: {text[:100]!r}")
        self._message(message)
        await self._maybe_ack()

    async def _maybe_ack(self) -> None:
        due = self._checker.ack_due()
        if due is not None and self._socket is not None:
            try:
                await self._socket.send(ack_frame(due))
            except ConnectionClosed:
                pass  # The next read reports how it closed (1000 after the terminal event).
            self._checker.acked()

    def _message(self, message: dict[str, Any]) -> None:
        """Takes one message of the stream: an event, or the response that ends it."""
        if message.get("method") == "notifications/tasks/event":
            self._event(message)
            return
        if "id" in message and "method" not in message:
            error = message.get("error")
            if isinstance(error, dict):
                self._raise_rpc_error(error)
            raise _Ended()

    def _event(self, message: dict[str, Any]) -> None:
        p = message.get("params")
        seq = p.get("seq") if isinstance(p, dict) else None
        if not isinstance(p, dict) or not isinstance(seq, int) or isinstance(seq, bool):
            raise ProtocolViolationError(f"a task event without a seq: {str(message)[:200]}")
        if self._done:
            return
        before = self._checker.last
        gap = self._checker.on_event(seq)
        if gap is not None:
            if before < 0:
                # No cursor: the server started after a gap at the front. Refused, never skipped.
                raise CursorDiscontinuityError(
                    reason="truncated",
                    cursor=-1,
                    head=seq,
                    floor=seq,
                    stream=f"task {self.task_id}",
                    resume_cursor=seq - 1,
                    message=f"the task's first retained event is {seq}, not 0",
                )
            self._gaps += 1
            if self._gaps > GAPS_IN_A_ROW:
                raise SequenceGapError(f"task {self.task_id}", gap.expected, gap.got, gap.why, healed=False)
            raise Transient(gap.why)
        self._gaps = 0
        self._failures = 0
        payload = p.get("payload")
        kind = p.get("type")
        self._ready.append(
            TaskEvent(
                seq=seq,
                type=kind if isinstance(kind, str) else "",
                payload=payload if isinstance(payload, dict) else {},
                task_id=self.task_id,
                message=message,
            )
        )

    def _raise_rpc_error(self, error: dict[str, Any]) -> None:
        code = error.get("code")
        code = code if isinstance(code, int) else 0
        text = error.get("message")
        text = text if isinstance(text, str) else ""
        data = error.get("data")
        reason = data.get("reason") if isinstance(data, dict) else None
        if isinstance(data, dict) and (code == EVENTS_GONE or reason == "events_gone"):
            earliest = data.get("earliestSeq")
            latest = data.get("latestSeq")
            floor = earliest if isinstance(earliest, int) else 0
            raise CursorDiscontinuityError(
                reason="truncated",
                cursor=self._checker.last,
                head=latest if isinstance(latest, int) else floor,
                floor=floor,
                stream=f"task {self.task_id}",
                resume_cursor=floor - 1,
                message=text,
                body=data,
            )
        if reason in RESUMABLE_REASONS:
            raise Transient(f"the task stream ended ({reason}): {text}")
        raise TaskStreamError(self.task_id, code, text, data)


def jsonrpc_error(body: bytes) -> dict[str, Any] | None:
    """The ``error`` object of a JSON-RPC error body, or None."""
    try:
        v = json.loads(body)
    except ValueError:
        return None
    error = v.get("error") if isinstance(v, dict) else None
    return error if isinstance(error, dict) and "code" in error else None


def stream_task(
    url: str,
    task_id: str,
    after: int | None = None,
    *,
    websocket: bool = True,
    headers: dict[str, str] | None = None,
    auth: AuthLike | Credentials = None,
    options: Options | None = None,
    http_client: httpx2.AsyncClient | None = None,
) -> TaskStream:
    """The events of durable task ``task_id`` after seq ``after``, in order, until its terminal event.

    ``after=None`` reads from the task's first event (seq 0); if the server
    no longer retains it, :class:`CursorDiscontinuityError` (``truncated``)
    is raised rather than starting later. A cursor below what the server
    retains is the same error (the server's ``events_gone``, with
    ``floor`` its ``earliestSeq``); other refusals (``after-ahead``, an
    unknown or expired task) are :class:`TaskStreamError`. Drops, server
    restarts and the server's ``server-stopping``/``log-unavailable``
    endings are resumed from the last seq, without a retry limit.

    Use as ``async with stream_task(url, id) as events: async for e in events``
    (or iterate directly: the connection closes after the terminal event).
    """
    return TaskStream(
        url,
        task_id,
        after,
        websocket=websocket,
        headers={k.lower(): v for k, v in (headers or {}).items()},
        credentials=auth if isinstance(auth, Credentials) else Credentials(auth),
        options=options or Options(),
        http_client=http_client,
    )
