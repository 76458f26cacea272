"""``resumable_client``: the SDK's Streamable HTTP client, with mcp-resume's guarantee on the client side.

Messages are POSTed as the SDK's own ``streamable_http_client`` POSTs them
(the same headers, JSON or SSE answers, the session id from ``initialize``,
the negotiated version from the session's per-message headers, ``DELETE``
at close). What differs is reading: the session stream is read by a
:class:`SessionStreamReader` (every seq checked, resumed from a stored
cursor without a retry limit, over SSE or the cursor-safe WebSocket
upgrade) and request streams are followed to their response across drops
and restarts. Against a plain MCP server it behaves like the SDK's client.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Any

import anyio
import anyio.abc
import httpx2
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import ClientMessageMetadata, SessionMessage
from mcp_types import (
    CONNECTION_CLOSED,
    INTERNAL_ERROR,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCMessage,
    JSONRPCNotification,
    JSONRPCRequest,
    RequestId,
    jsonrpc_message_adapter,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from .cursor_saver import CursorSaver
from .errors import HttpStatusError, ResumeError, SessionNotFoundError
from .link import (
    MCP_PROTOCOL_VERSION,
    MCP_SESSION_ID,
    ApplicationGone,
    AuthLike,
    Credentials,
    Link,
    Options,
    Stats,
    is_network_error,
    media_type,
)
from .request_stream import RequestStreamFollower
from .session_stream import SessionStreamReader
from .stores import CursorStore, MemoryCursorStore
from .tasks import TaskEvent, stream_task

logger = logging.getLogger("mcp_resume_client")

ReadStream = MemoryObjectReceiveStream[SessionMessage | Exception]
WriteStream = MemoryObjectSendStream[SessionMessage]


class ResumableStreams(tuple[ReadStream, WriteStream, Callable[[], "str | None"]]):
    """What :func:`resumable_client` yields: ``(read_stream, write_stream, get_session_id)``.

    A tuple, so ``async with resumable_client(url) as (read, write, _)`` is
    the one-line change from the SDK's client; ``.transport`` reaches the
    cursor, the statistics and :meth:`ResumableTransport.stream_task`.
    """

    transport: ResumableTransport

    def __new__(
        cls, read: ReadStream, write: WriteStream, get_session_id: Callable[[], str | None], transport: ResumableTransport
    ) -> ResumableStreams:
        obj = super().__new__(cls, (read, write, get_session_id))
        obj.transport = transport
        return obj


@dataclass(slots=True)
class _InFlight:
    """A request POST in flight: its abort scope and whether it was sent in the stateless era (as the SDK keeps)."""

    scope: anyio.CancelScope
    modern: bool


class ResumableTransport:
    """One connection to an MCP endpoint; :meth:`connect` yields the SDK's streams.

    Why a class besides :func:`resumable_client`: the application may want
    the cursor, the statistics, the session id or a task's event stream
    while the session runs.
    """

    def __init__(
        self,
        url: str,
        *,
        websocket: bool = True,
        cursor_store: CursorStore | None = None,
        headers: dict[str, str] | None = None,
        auth: AuthLike = None,
        session_id: str | None = None,
        protocol_version: str | None = None,
        terminate_on_close: bool = True,
        http_client: httpx2.AsyncClient | None = None,
        options: Options | None = None,
    ) -> None:
        self.url = url
        self.options = replace(options or Options(), websocket=websocket)
        self.stats = Stats()
        self._store: CursorStore = cursor_store if cursor_store is not None else MemoryCursorStore()
        self._extra_headers = {k.lower(): v for k, v in (headers or {}).items()}
        self._credentials = Credentials(auth)
        self._attach = session_id
        self._attach_version = protocol_version
        self._terminate_on_close = terminate_on_close
        self._http_client = http_client
        self._link: Link | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._reader: SessionStreamReader | None = None
        self._reader_scope: anyio.CancelScope | None = None
        self._in_flight: dict[RequestId, _InFlight] = {}
        self._fatal: ResumeError | None = None
        self._cm: AbstractAsyncContextManager[ResumableStreams] | None = None

    # ------------------------------------------------------------ reading

    @property
    def session_id(self) -> str | None:
        """The session id, once ``initialize`` was answered (or as given to attach)."""
        if self._link is not None:
            return self._link.session_id
        return self._attach

    def get_session_id(self) -> str | None:
        """The session id (the third item :func:`resumable_client` yields, as the SDK's 1.x client did)."""
        return self.session_id

    @property
    def protocol_version(self) -> str | None:
        """The negotiated revision sent as ``MCP-Protocol-Version``."""
        return self._link.protocol_version if self._link is not None else self._attach_version

    @property
    def cursor(self) -> int | None:
        """The seq of the last session-stream event handed to the SDK (None before the stream opened)."""
        return self._reader.cursor if self._reader is not None else None

    @property
    def fatal_error(self) -> ResumeError | None:
        """The error that stopped the transport, if one did."""
        return self._fatal

    # ------------------------------------------------------------- running

    async def __aenter__(self) -> tuple[ReadStream, WriteStream]:
        """Connects; ``(read_stream, write_stream)``, so the SDK's ``Client(ResumableTransport(url))`` takes it.

        Why besides :meth:`connect`: the SDK's unified ``Client`` accepts any
        ``Transport`` (an async context manager yielding the two streams).
        """
        cm = self.connect()
        streams = await cm.__aenter__()
        self._cm = cm
        return streams[0], streams[1]

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        """Disconnects (``DELETE`` if ``terminate_on_close``); raises what stopped the transport, if anything did."""
        cm, self._cm = self._cm, None
        if cm is None:
            return None
        return await cm.__aexit__(exc_type, exc, tb)

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[ResumableStreams]:
        """Runs the transport; yields the streams ``ClientSession`` takes. Raises what stopped it, if anything did."""
        if self._link is not None:
            raise RuntimeError("a ResumableTransport connects once")
        try:
            async with AsyncExitStack() as stack:
                client = self._http_client
                if client is None:
                    client = httpx2.AsyncClient(
                        timeout=httpx2.Timeout(30.0, read=300.0), auth=self._credentials.httpx_auth
                    )
                    await stack.enter_async_context(client)
                read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
                write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
                link = Link(
                    self.url, client, self.options, self.stats, self._credentials, self._extra_headers, read_writer
                )
                link.session_id = self._attach
                link.protocol_version = self._attach_version
                self._link = link
                async with read_writer, read_stream, write_stream, write_reader, anyio.create_task_group() as tg:
                    self._tg = tg
                    tg.start_soon(self._post_writer, write_reader)
                    if link.session_id is not None:
                        # An attached session gets no `notifications/initialized` from here: read it now.
                        self._open_session_stream()
                    try:
                        yield ResumableStreams(read_stream, write_stream, self.get_session_id, self)
                    finally:
                        if self._fatal is None and link.session_id is not None and self._terminate_on_close:
                            with anyio.CancelScope(shield=True), anyio.move_on_after(2):
                                await self.terminate_session()
                        tg.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            fatal = self._fatal
            if fatal is not None:
                cancelled = anyio.get_cancelled_exc_class()
                _, rest = group.split(lambda e: e is fatal or isinstance(e, cancelled))
                if rest is None:
                    raise fatal from None
            raise

    async def terminate_session(self) -> None:
        """Ends the session on the server (``DELETE``) and forgets its cursor; logs a failure, as the SDK does.

        The session stream's reader stops first, so the server's end of the
        stream (close 4404, a resume's 404) is not mistaken for a lost session.
        """
        link = self._link
        if link is None or link.session_id is None:
            return
        sid = link.session_id
        self._stop_reader()
        try:
            response = await link.client.request("DELETE", link.url, headers=await link.headers({}))
        except Exception as e:  # noqa: BLE001 - the SDK logs and goes on
            logger.warning("session termination failed: %s", e)
            self._open_session_stream()
            return
        if response.status_code == 405:
            logger.debug("the server does not allow session termination")
        elif response.status_code not in (200, 204, 404):
            logger.warning("session termination failed: %d", response.status_code)
            self._open_session_stream()
            return
        await self._store.remove(sid)
        link.session_id = None

    def stream_task(self, task_id: str, after: int | None = None) -> AsyncIterator[TaskEvent]:
        """The events of durable task ``task_id`` after seq ``after`` (see :func:`stream_task`), with this transport's URL, headers and credentials."""
        return stream_task(
            self.url,
            task_id,
            after,
            websocket=self.options.websocket,
            headers=self._extra_headers,
            auth=self._credentials,
            options=self.options,
            http_client=self._link.client if self._link is not None else self._http_client,
        )

    # ------------------------------------------------------ session stream

    def _open_session_stream(self) -> None:
        link, tg = self._link, self._tg
        if self._reader_scope is not None or link is None or tg is None or link.session_id is None:
            return
        scope = anyio.CancelScope()
        self._reader_scope = scope
        tg.start_soon(self._run_session_stream, link.session_id, scope)

    def _stop_reader(self) -> None:
        if self._reader_scope is not None:
            self._reader_scope.cancel()
        self._reader_scope = None

    async def _run_session_stream(self, session_id: str, scope: anyio.CancelScope) -> None:
        link = self._link
        assert link is not None
        with scope:
            try:
                cursor = await self._store.load(session_id)
                start = cursor if cursor is not None else 0
                saver = CursorSaver(self._store, session_id, cursor)
                reader = SessionStreamReader(link, session_id, start, saver)
                self._reader = reader
                try:
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(saver.run)
                        try:
                            await reader.run()
                        except ApplicationGone:
                            pass  # The session stopped reading: nothing to deliver to.
                        tg.cancel_scope.cancel()
                finally:
                    with anyio.CancelScope(shield=True):
                        await saver.flush()
            except BaseExceptionGroup as group:
                errors = group.subgroup(ResumeError)
                if errors is None:
                    raise
                await self._fail(first_leaf(errors))
            except ResumeError as e:
                await self._fail(e)

    async def _fail(self, e: ResumeError) -> None:
        """Stops the transport loudly: the error goes to ``message_handler`` and out of ``resumable_client``."""
        self._fatal = e
        link = self._link
        logger.error("mcp-resume transport stopped: %s", e)
        if link is not None:
            with anyio.move_on_after(1):
                try:
                    await link.writer.send(e)
                    # Let the session start its message_handler before the cancellation.
                    for _ in range(3):
                        await anyio.lowlevel.checkpoint()
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    pass
        raise e

    # ------------------------------------------------------------- sending

    async def _post_writer(self, reader: MemoryObjectReceiveStream[SessionMessage]) -> None:
        async with reader:
            async for session_message in reader:
                await self._dispatch(session_message)

    async def _dispatch(self, session_message: SessionMessage) -> None:
        link = self._link
        tg = self._tg
        assert link is not None and tg is not None
        message = session_message.message
        if self._consume_modern_cancellation(message):
            return
        metadata = session_message.metadata if isinstance(session_message.metadata, ClientMessageMetadata) else None
        if isinstance(message, JSONRPCRequest) and message.method == "initialize":
            # `initialize` is the negotiation: no probe-stamped version leaks onto it.
            link.protocol_version = None
        elif metadata is not None and metadata.headers is not None:
            stamped = lower_keys(metadata.headers).get(MCP_PROTOCOL_VERSION)
            if stamped is not None:
                link.protocol_version = stamped
        if isinstance(message, JSONRPCRequest):
            post = _InFlight(anyio.CancelScope(), link.protocol_version in MODERN_PROTOCOL_VERSIONS)
            superseded = self._in_flight.get(message.id)
            if superseded is not None:
                # A reused id: the waiter belongs to this attempt now.
                superseded.scope.cancel()
            self._in_flight[message.id] = post
            tg.start_soon(self._run_request, session_message, metadata, post)
        else:
            await self._post_guarded(session_message, metadata)

    async def _run_request(
        self, session_message: SessionMessage, metadata: ClientMessageMetadata | None, post: _InFlight
    ) -> None:
        message = session_message.message
        assert isinstance(message, JSONRPCRequest)
        try:
            with post.scope:
                await self._post_guarded(session_message, metadata)
        finally:
            if self._in_flight.get(message.id) is post:
                del self._in_flight[message.id]

    def _consume_modern_cancellation(self, message: JSONRPCMessage) -> bool:
        """At 2026-07-28 closing a request's POST is its cancellation: abort it, POST nothing (as the SDK does)."""
        if not (isinstance(message, JSONRPCNotification) and message.method == "notifications/cancelled"):
            return False
        raw = (message.params or {}).get("requestId")
        request_id = raw if isinstance(raw, str | int) and not isinstance(raw, bool) else None
        post = self._in_flight.get(request_id) if request_id is not None else None
        if post is not None:
            if not post.modern:
                return False
            post.scope.cancel()
            return True
        link = self._link
        return link is not None and link.protocol_version in MODERN_PROTOCOL_VERSIONS

    async def _post_guarded(self, session_message: SessionMessage, metadata: ClientMessageMetadata | None) -> None:
        link = self._link
        assert link is not None
        message = session_message.message
        try:
            await self._post(message, metadata)
        except ApplicationGone:
            return
        except Exception as e:
            if not is_network_error(e):
                raise
            try:
                if isinstance(message, JSONRPCRequest):
                    # Not retried: a tools/call may have run. The call fails; the application decides.
                    await self._error(message.id, CONNECTION_CLOSED, f"the POST failed before an answer: {e}")
                else:
                    await link.report(e)
            except ApplicationGone:
                return

    async def _post(self, message: JSONRPCMessage, metadata: ClientMessageMetadata | None) -> None:
        link = self._link
        assert link is not None
        is_request = isinstance(message, JSONRPCRequest)
        if is_request and metadata is not None and metadata.resumption_token:
            assert isinstance(message, JSONRPCRequest)
            resumed = RequestStreamFollower(
                link,
                message.id,
                last_event_id=metadata.resumption_token,
                on_token=metadata.on_resumption_token_update,
            )
            await resumed.finish()
            return
        is_init = isinstance(message, JSONRPCRequest) and message.method == "initialize"
        extra = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
        if metadata is not None and metadata.headers is not None:
            extra.update(lower_keys(metadata.headers))
        headers = await link.headers(extra, with_session=not is_init)
        body = message.model_dump_json(by_alias=True, exclude_unset=True).encode()
        follower: RequestStreamFollower | None = None
        first: BaseException | None = None
        async with link.client.stream("POST", link.url, content=body, headers=headers) as response:
            if response.status_code == 202:
                await response.aclose()
                if isinstance(message, JSONRPCRequest):
                    await self._error(message.id, INVALID_REQUEST, "server answered a request with 202 Accepted")
                elif isinstance(message, JSONRPCNotification) and message.method == "notifications/initialized":
                    self._open_session_stream()
                return
            if response.status_code >= 300:
                await self._refused_post(message, response)
                return
            if is_init:
                self._take_session_id(response)
            if not isinstance(message, JSONRPCRequest):
                await response.aclose()
                return
            kind = media_type(response)
            if kind == "application/json":
                await self._json_answer(message.id, await response.aread())
                return
            if kind != "text/event-stream":
                await self._error(message.id, INVALID_REQUEST, f"Unexpected content type: {kind}")
                return
            follower = RequestStreamFollower(
                link,
                message.id,
                on_token=metadata.on_resumption_token_update if metadata is not None else None,
            )
            first = await follower.read_first(response)
        # The POST's connection is released; resumes (if needed) are GETs.
        await follower.finish(first)

    async def _refused_post(self, message: JSONRPCMessage, response: httpx2.Response) -> None:
        link = self._link
        assert link is not None
        body = await response.aread()
        status = response.status_code
        if isinstance(message, JSONRPCRequest):
            # A JSON-RPC error in the body (400 with -32602, say) is the answer itself.
            if media_type(response) == "application/json":
                try:
                    parsed = jsonrpc_message_adapter.validate_json(body, by_name=False)
                except ValidationError:
                    parsed = None
                if isinstance(parsed, JSONRPCError):
                    await link.deliver(JSONRPCError(jsonrpc="2.0", id=message.id, error=parsed.error))
                    return
            if status == 404:
                if link.session_id is None:
                    await self._error(message.id, METHOD_NOT_FOUND, "Not Found")
                else:
                    await self._error(message.id, INVALID_REQUEST, "Session terminated")
            else:
                text = body[:300].decode("utf-8", "replace")
                await self._error(message.id, INTERNAL_ERROR, f"Server returned an error response: {status} {text}")
            return
        what = f"POST {getattr(message, 'method', 'response')}"
        if status == 404 and link.session_id is not None:
            await link.report(SessionNotFoundError(link.session_id, f"{what} answered 404"))
        else:
            await link.report(HttpStatusError(what, status, body))

    def _take_session_id(self, response: httpx2.Response) -> None:
        link = self._link
        assert link is not None
        sid = response.headers.get(MCP_SESSION_ID)
        if sid and sid != link.session_id:
            # A new session: the old one's reader (if any) stops; the new
            # one's stream opens after its `notifications/initialized`.
            self._stop_reader()
            self._reader = None
            link.session_id = sid
            logger.info("session %s...", sid[:12])

    async def _json_answer(self, request_id: RequestId, body: bytes) -> None:
        link = self._link
        assert link is not None
        try:
            message = jsonrpc_message_adapter.validate_json(body, by_name=False)
        except ValidationError as e:
            await self._error(request_id, PARSE_ERROR, f"Failed to parse JSON response: {e}")
            return
        await link.deliver(message)

    async def _error(self, request_id: RequestId, code: int, text: str) -> None:
        link = self._link
        assert link is not None
        await link.deliver(JSONRPCError(jsonrpc="2.0", id=request_id, error=ErrorData(code=code, message=text)))


@asynccontextmanager
async def resumable_client(
    url: str,
    *,
    websocket: bool = True,
    cursor_store: CursorStore | None = None,
    headers: dict[str, str] | None = None,
    auth: AuthLike = None,
    session_id: str | None = None,
    protocol_version: str | None = None,
    terminate_on_close: bool = True,
    http_client: httpx2.AsyncClient | None = None,
    options: Options | None = None,
) -> AsyncIterator[ResumableStreams]:
    """The SDK's ``streamable_http_client``, resumable: yields ``(read_stream, write_stream, get_session_id)``.

    Replace ``streamable_http_client(url)`` with ``resumable_client(url)``
    and nothing else changes, except that no server-to-client message is
    lost silently: the session stream is read from a cursor (kept in
    ``cursor_store``, memory by default, :class:`FileCursorStore` to survive
    the program) over the cursor-safe WebSocket (``websocket=True``) or SSE,
    every seq checked, resumed after any drop or server restart, and
    request streams are resumed with ``Last-Event-ID: R/n``.

    What cannot be healed is raised: a :class:`CursorDiscontinuityError`
    (409 ``ahead``, ``truncated``, ``data-lost``), a lost session
    (:class:`SessionNotFoundError`), a broken contract. It is first sent
    into the read stream (the session's ``message_handler`` sees it), then
    the transport stops, the body of this ``async with`` is cancelled and
    the error is raised from it. The session is then not deleted, so the
    application can attach again (``session_id=``) after re-synchronising.

    ``auth`` is a bearer token, a function returning one, or an
    ``httpx2.Auth``; ``headers`` go on every request, the upgrade included.
    ``session_id`` (with ``protocol_version``) attaches to a session that
    exists, reading its stream from the store's cursor (0 if none).
    ``terminate_on_close`` sends ``DELETE`` at the end, as the SDK does.
    """
    transport = ResumableTransport(
        url,
        websocket=websocket,
        cursor_store=cursor_store,
        headers=headers,
        auth=auth,
        session_id=session_id,
        protocol_version=protocol_version,
        terminate_on_close=terminate_on_close,
        http_client=http_client,
        options=options,
    )
    async with transport.connect() as streams:
        yield streams


def lower_keys(headers: dict[str, str]) -> dict[str, str]:
    """Header names in lower case, so one set here never doubles one set by the SDK."""
    return {k.lower(): v for k, v in headers.items()}


def first_leaf(group: BaseExceptionGroup[Any]) -> Any:
    """The first exception of a (nested) group that is not itself a group."""
    e: BaseException = group
    while isinstance(e, BaseExceptionGroup):
        e = e.exceptions[0]
    return e
