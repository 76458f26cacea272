"""Following a request stream: the SSE answer to one POSTed request, ids ``R/n``.

A drop before the response is resumed with ``GET`` and
``Last-Event-ID: R/n`` (docs/protocol.md 2, 3.4) until the response
arrives; each ``n`` must be the last plus one. A request stream always ends
with a response, so after a server crash the resume receives the server's
-32603 ``server-restarted`` and the call ends with it. Where the stream
cannot be resumed at all (a 409, a lost session, an answer without ids),
the call ends with a JSON-RPC error made here, so the SDK's pending request
never waits for its timeout.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio
import httpx2
from mcp_types import (
    CONNECTION_CLOSED,
    ErrorData,
    JSONRPCError,
    JSONRPCResponse,
    RequestId,
    jsonrpc_message_adapter,
)
from pydantic import ValidationError

from .errors import (
    CursorDiscontinuityError,
    ProtocolViolationError,
    RequestStreamLostError,
    ResumeError,
    Transient,
)
from .link import (
    LAST_EVENT_ID,
    ApplicationGone,
    Link,
    backoff_delay,
    clamp_retry,
    is_network_error,
    media_type,
    refusal,
)
from .seq import parse_request_id
from .sse import SseParser

logger = logging.getLogger("mcp_resume_client")

REQUEST_STREAM_LOST = CONNECTION_CLOSED
"""The JSON-RPC code of a call whose request stream was lost (-32000, the SDK's "connection closed")."""


class RequestStreamFollower:
    """Follows one call's request stream to its response, across drops and server restarts.

    Why a class: the position (``R`` and ``n``) and the server's ``retry:``
    outlive each connection, and the first connection is the POST's own
    answer while later ones are ``GET`` resumes.
    """

    def __init__(
        self,
        link: Link,
        request_id: RequestId,
        *,
        last_event_id: str | None = None,
        on_token: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self._link = link
        self._request_id = request_id
        self._on_token = on_token
        self._last_id = last_event_id
        self._stream: int | None = None
        self._n: int | None = None
        if last_event_id is not None and (r := parse_request_id(last_event_id)) is not None:
            self._stream, self._n = r
        self._retry: float | None = None
        self._progressed = False
        self._answered = False

    async def read_first(self, response: httpx2.Response) -> BaseException:
        """Reads the POST's own SSE answer; returns why it ended (the POST's connection can then close)."""
        return await self._read_guarded(response)

    async def finish(self, err: BaseException | None = None) -> None:
        """Resumes after ``err`` (None: resume by the id given at construction) until the response.

        Never raises for the call's sake: whatever stops it ends the call
        with a JSON-RPC error made here (and reports why).
        """
        link = self._link
        failures = 0
        if err is None:
            link.stats.request_resumes += 1
            err = await self._resume()
        while not self._answered:
            if isinstance(err, ResumeError):
                return await self._end(err)
            if self._last_id is None:
                return await self._end(Transient(f"{describe(err)}, before any event id: it cannot be resumed"))
            progressed, self._progressed = self._progressed, False
            failures = 0 if progressed else failures
            failures += 1
            limit = link.options.request_stream_retries
            if limit is not None and failures > limit:
                return await self._end(Transient(f"gave up after {limit} resumes: {describe(err)}"))
            # At once after a connection that delivered; then waits that double, with jitter.
            base = link.options.initial_delay or self._retry or 1.0
            wait = 0.0 if progressed else backoff_delay(base, link.options.max_delay, failures)
            logger.info("request stream: %s; resuming after %s in %.0f ms", describe(err), self._last_id, wait * 1000)
            await anyio.sleep(wait)
            link.stats.request_resumes += 1
            err = await self._resume()

    async def _resume(self) -> BaseException:
        link = self._link
        assert self._last_id is not None
        headers = await link.headers({"accept": "text/event-stream", LAST_EVENT_ID: self._last_id})
        timeout = httpx2.Timeout(link.options.handshake_timeout, read=link.options.idle_timeout)
        try:
            async with link.client.stream("GET", link.url, headers=headers, timeout=timeout) as response:
                if response.status_code >= 300:
                    body = await response.aread()
                    return refusal(
                        response.status_code,
                        body,
                        f"GET (request stream {self._last_id})",
                        self._n or 0,
                        f"request {self._stream if self._stream is not None else '?'}",
                        link.session_id or "",
                    )
                return await self._read_guarded(response)
        except BaseException as e:
            if not is_network_error(e):
                raise
            return e

    async def _read_guarded(self, response: httpx2.Response) -> BaseException:
        try:
            return await self._read(response)
        except ApplicationGone:
            raise
        except ResumeError as e:
            return e
        except BaseException as e:
            if not is_network_error(e):
                raise
            return e

    async def _read(self, response: httpx2.Response) -> BaseException:
        if media_type(response) != "text/event-stream":
            raise ProtocolViolationError(
                f"a request stream answered {response.headers.get('content-type')!r}, not text/event-stream"
            )
        parser = SseParser()
        async for chunk in response.aiter_bytes():
            for ev in parser.feed(chunk):
                if ev.retry is not None:
                    self._retry = clamp_retry(ev.retry)
                if ev.id is not None:
                    self._position(ev.id, bool(ev.data))
                    self._last_id = ev.id
                    if self._on_token is not None:
                        await self._on_token(ev.id)
                if not ev.data:
                    continue
                self._progressed = True
                if await self._message(ev.data):
                    self._answered = True
                    return Transient("answered")
        return Transient("the request stream ended before its response" + (f": {parser.ending}" if parser.ending else ""))

    def _position(self, event_id: str, has_data: bool) -> None:
        r = parse_request_id(event_id)
        if r is None:
            # Not mcp-resume's ids: kept as an opaque resumption token, as the SDK does.
            return
        stream, n = r
        if self._stream is None:
            self._stream = stream
        if stream != self._stream:
            raise ProtocolViolationError(f"request stream {self._stream} sent id {event_id}")
        if not has_data:
            if self._n is not None and n != self._n:
                raise ProtocolViolationError(f"asked to resume after {self._stream}/{self._n}, the server primed {event_id}")
            self._n = n
            return
        expected = (self._n if self._n is not None else n - 1) + 1
        if n != expected:
            raise Transient(f"request stream {stream}: expected {stream}/{expected}, got {event_id}")
        self._n = n

    async def _message(self, data: bytes) -> bool:
        """Delivers one message; True when it is the call's response (which ends the stream)."""
        try:
            message = jsonrpc_message_adapter.validate_json(data, by_name=False)
        except ValidationError as e:
            await self._link.deliver(
                JSONRPCError(
                    jsonrpc="2.0",
                    id=self._request_id,
                    error=ErrorData(code=-32700, message=f"Failed to parse SSE message: {e}"),
                )
            )
            return True
        if isinstance(message, JSONRPCResponse | JSONRPCError):
            message.id = self._request_id
            await self._link.deliver(message)
            return True
        await self._link.deliver(message)
        return False

    async def _end(self, cause: BaseException) -> None:
        """Ends the call with an error made here, and reports why."""
        err = RequestStreamLostError(self._request_id, self._last_id, cause)
        await self._link.report(err)
        data: dict[str, object] = {
            "reason": "request-stream-lost",
            "lastEventId": self._last_id,
            "cause": type(cause).__name__,
        }
        if isinstance(cause, CursorDiscontinuityError):
            data["discontinuity"] = cause.body
        error = ErrorData(
            code=REQUEST_STREAM_LOST,
            message=f"the request stream was lost and could not be resumed: {cause}",
            data=data,
        )
        await self._link.deliver(JSONRPCError(jsonrpc="2.0", id=self._request_id, error=error))


def describe(e: BaseException) -> str:
    """A one-line reason for a log line."""
    text = str(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__
