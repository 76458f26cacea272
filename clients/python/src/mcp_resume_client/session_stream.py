"""The reader of the session stream: SSE or the cursor-safe WebSocket upgrade.

Every seq is checked to be ``last + 1``; any drop (a network error, a
close, a silent connection, the server ending the stream, a server
restart) is resumed from the cursor after an exponential wait with jitter,
without a retry limit while the failure is one that resuming can heal.
Where continuity cannot be proven (a 409, a lost session, a broken
contract) the reader raises, and the transport stops loudly
(docs/protocol.md 4, 5.6). It follows the Rust reader
(``crates/client/src/reader``) and the TypeScript one (``session-stream.ts``).
"""

from __future__ import annotations

import json
import logging
from typing import Literal

import anyio
import httpx2
from mcp_types import jsonrpc_message_adapter
from pydantic import ValidationError
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from .cursor_saver import CursorSaver
from .errors import (
    ProtocolViolationError,
    ResumeError,
    SequenceGapError,
    Transient,
)
from .link import (
    LAST_EVENT_ID,
    IdleWatch,
    Link,
    backoff_delay,
    clamp_retry,
    is_network_error,
    media_type,
    refusal,
)
from .seq import Gap, SeqChecker, parse_seq
from .sse import SseEvent, SseParser
from .upgrade import Refused, ack_frame, close_error, open_upgrade, parse_frame, ws_url

logger = logging.getLogger("mcp_resume_client")

GAPS_IN_A_ROW = 3
"""Gaps healed in a row without any event in between before the reader gives up (a server that keeps skipping)."""
STRIKES = 3
"""Upgrades refused with 503 in a row before the reader stays on SSE."""

_Fallback = Literal["fallback"]


class GapDetected(Transient):
    """Internal: a connection offered an event that is not the next one; resume from the cursor."""

    def __init__(self, gap: Gap) -> None:
        self.gap = gap
        super().__init__(gap.why)


class NoStream(Exception):
    """Internal: the server has no standalone GET stream (405); the reader stops quietly, as the SDK's does."""


class SessionStreamReader:
    """Reads one session's stream from its cursor until cancelled or a fatal error.

    Why a class: the reader keeps state across connections (the cursor, the
    server's ``retry:``, whether the upgrade works on this server) and the
    statistics the application reads.
    """

    def __init__(self, link: Link, session_id: str, cursor: int, saver: CursorSaver) -> None:
        self._link = link
        self._sid = session_id
        self.checker = SeqChecker(cursor)
        self._saver = saver
        self._ws_enabled = link.options.websocket
        self._sse_once = False
        self._strikes = 0
        self._retry: float | None = None
        self._progressed = False
        # Until the server confirmed a numeric cursor, cursor 0 is sent by
        # omission (a plain MCP server may refuse an id it never issued).
        self._confirmed = cursor > 0
        self._opaque_id: str | None = None

    @property
    def cursor(self) -> int:
        """The seq of the last event handed to the SDK."""
        return self.checker.last

    async def run(self) -> None:
        """Reads, resumes, and raises only what resuming cannot heal (a :class:`ResumeError`)."""
        link = self._link
        failures = 0
        gaps_in_a_row = 0
        while True:
            self._progressed = False
            err: BaseException
            gap: Gap | None = None
            try:
                err = await self._once()
            except NoStream:
                return
            except GapDetected as e:
                err, gap = e, e.gap
            except ResumeError:
                raise
            except BaseException as e:
                if not is_network_error(e):
                    raise
                err = e
            if self._progressed:
                failures = 0
                gaps_in_a_row = 0
            if gap is not None:
                link.stats.gaps += 1
                gaps_in_a_row += 1
                if gaps_in_a_row > GAPS_IN_A_ROW:
                    raise SequenceGapError("session", gap.expected, gap.got, gap.why, healed=False) from err
                await link.report(SequenceGapError("session", gap.expected, gap.got, gap.why, healed=True))
            failures += 1
            link.stats.reconnects += 1
            # After a connection that delivered, the first resume is at once (a cut, the
            # server's 4429 or reader-lagged: its flow control); then waits that double.
            base = link.options.initial_delay or self._retry or 1.0
            wait = 0.0 if self._progressed else backoff_delay(base, link.options.max_delay, failures)
            logger.info(
                "session stream: %s; resuming after %s in %.0f ms",
                describe(err),
                self._opaque_id or self.checker.last,
                wait * 1000,
            )
            await anyio.sleep(wait)

    async def _once(self) -> BaseException:
        """One connection: the upgrade when wanted and possible, else SSE. Returns why it ended."""
        want_ws = self._ws_enabled and not self._sse_once and self._opaque_id is None
        self._sse_once = False
        if want_ws:
            ended = await self._websocket()
            if ended != "fallback":
                return ended
        return await self._sse()

    # ------------------------------------------------------------------ SSE

    async def _sse(self) -> BaseException:
        link = self._link
        extra = {"accept": "text/event-stream", "cache-control": "no-store"}
        if self._opaque_id is not None:
            extra[LAST_EVENT_ID] = self._opaque_id
        elif self._confirmed or self.checker.last > 0:
            extra[LAST_EVENT_ID] = str(self.checker.last)
        headers = await link.headers(extra)
        timeout = httpx2.Timeout(link.options.handshake_timeout, read=link.options.idle_timeout)
        async with link.client.stream("GET", link.url, headers=headers, timeout=timeout) as response:
            if response.status_code == 405:
                raise NoStream()
            if response.status_code >= 300:
                body = await response.aread()
                return raise_or_return(
                    refusal(response.status_code, body, "GET (session stream)", self.checker.last, "session", self._sid)
                )
            if media_type(response) != "text/event-stream":
                raise ProtocolViolationError(
                    f"the session stream answered {response.headers.get('content-type')!r}, not text/event-stream"
                )
            link.stats.transport = "sse"
            parser = SseParser()
            async for chunk in response.aiter_bytes():
                for ev in parser.feed(chunk):
                    await self._on_sse_event(ev, sent_cursor=LAST_EVENT_ID in extra)
                self._saver.note(self.checker.last)
            return Transient("the SSE stream ended" + (f": {parser.ending}" if parser.ending else ""))

    async def _on_sse_event(self, ev: SseEvent, *, sent_cursor: bool) -> None:
        link = self._link
        if ev.retry is not None:
            self._retry = clamp_retry(ev.retry)
        if ev.id is None:
            if ev.data:
                # No id: a server that cannot resume this event. Delivered, as the SDK does.
                self._ws_enabled = False
                self._progressed = True
                await link.deliver_json(ev.data)
            return
        seq = parse_seq(ev.id) if self._opaque_id is None else None
        if not ev.data:
            if seq is None:
                self._plain_server(ev.id)
                return
            if seq != self.checker.last:
                if not sent_cursor:
                    # A cursorless read started at the floor, past events this
                    # session had: ask from 0 explicitly for the server's 409.
                    self._confirmed = True
                    raise Transient(f"the session stream starts after {seq}, not at 0; resuming from 0 explicitly")
                raise ProtocolViolationError(
                    f"asked to resume after {self.checker.last}, the server primed {seq}"
                )
            self._confirmed = True
            return
        if seq is None:
            self._plain_server(ev.id)
            self._progressed = True
            await link.deliver_json(ev.data)
            return
        gap = self.checker.on_event(seq)
        if gap is not None:
            raise GapDetected(gap)
        self._confirmed = True
        self._progressed = True
        await link.deliver_json(ev.data)

    def _plain_server(self, event_id: str) -> None:
        # Ids that are not seqs: a plain Streamable HTTP server. No seq check
        # and no upgrade there; resume by Last-Event-ID as the SDK does.
        if self._opaque_id is None:
            logger.warning(
                "the session stream's ids are not seqs (%r): a server without mcp-resume; "
                "gaps cannot be detected on it",
                event_id,
            )
        self._opaque_id = event_id
        self._ws_enabled = False

    # ------------------------------------------------------------ WebSocket

    async def _websocket(self) -> BaseException | _Fallback:
        link = self._link
        prior = self.checker.last
        url = ws_url(link.url, f"session/{self._sid}/events")
        headers = await link.headers({})
        if "authorization" not in headers:
            auth = await link.credentials.upgrade_header(url)
            if auth is not None:
                headers["authorization"] = auth
        hs = await open_upgrade(url, prior, headers, link.options.handshake_timeout)
        if isinstance(hs, Refused):
            return self._refused(hs, prior)
        socket = hs.socket
        try:
            decision = hs.decision
            if decision.committed is None:
                # Not resumable: close at once, read nothing from it (5.6).
                link.stats.fallbacks += 1
                if decision.why == "missing-echo":
                    self._ws_enabled = False
                else:
                    self._sse_once = True
                logger.warning("the upgrade is not resumable (%s); SSE from %d", decision.detail, prior)
                return "fallback"
            self._strikes = 0
            link.stats.upgrades += 1
            link.stats.transport = "websocket"
            link.stats.last_committed = decision.committed
            self.checker.expect_replay_until(decision.committed)
            return await self._read_socket(socket)
        finally:
            await close_quietly(socket, 1000, "closing")

    def _refused(self, hs: Refused, prior: int) -> BaseException | _Fallback:
        status, body = hs.status, hs.body
        text = body.decode("utf-8", "replace")
        # Fatal only when it is mcp-resume's own refusal (its JSON error codes): a
        # server that does not know the upgrade answers anything (404, 403, 405 ...)
        # and is read over SSE, whose answer then decides.
        ours = (
            status == 409
            or (status == 404 and "session-not-found" in text)
            or (status == 400 and any(k in text for k in ("invalid-cursor", "protocol-version", "session-mismatch")))
            or (status in (401, 403) and any(k in text for k in ("unauthorized", "insufficient-scope", "origin-not-allowed")))
        )
        if ours:
            e = refusal(status, body, "the upgrade", prior, "session", self._sid)
            if isinstance(e, ResumeError):
                raise e
        self._link.stats.fallbacks += 1
        logger.info("the upgrade was refused (%s); SSE from %d", hs.detail, prior)
        if status == 503 or status >= 500:
            # Maybe passing (a restart): SSE now, the upgrade again next time.
            self._strikes += 1
            if self._strikes >= STRIKES:
                self._ws_enabled = False
            else:
                self._sse_once = True
        else:
            # 426, or a server that does not know the upgrade: stay on SSE.
            self._ws_enabled = False
        return "fallback"

    async def _read_socket(self, socket: ClientConnection) -> BaseException:
        link = self._link
        checker = self.checker
        idle = link.options.idle_timeout
        watch = IdleWatch(idle, socket.transport.abort)
        try:
            return await self._read_frames(socket, checker, watch)
        finally:
            watch.stop()
            self._saver.note(checker.last)

    async def _read_frames(self, socket: ClientConnection, checker: SeqChecker, watch: IdleWatch) -> BaseException:
        link = self._link
        # prior = C: nothing to replay, the gate opens at once.
        await send_ack(socket, checker)
        while True:
            try:
                text = await socket.recv()
            except ConnectionClosed as e:
                if watch.fired:
                    return Transient(f"no frame for {link.options.idle_timeout:.0f} s")
                return raise_or_return(close_error(e, self._sid))
            watch.ticks += 1
            try:
                frame = parse_frame(text)
            except ProtocolViolationError:
                await close_quietly(socket, 4400, "malformed frame")
                raise
            if frame.kind == "event":
                gap = checker.on_event(frame.number)
                if gap is not None:
                    await close_quietly(socket, 4409, gap.why)
                    raise GapDetected(gap)
                self._progressed = True
                watch.busy = True
                if frame.message_json is not None:
                    await self._deliver_spliced(frame.message_json, frame_text(text))
                else:
                    await link.deliver_json(json.dumps(frame.message))
                watch.busy = False
                self._saver.note(checker.last)
                await send_ack(socket, checker)
            elif frame.kind == "heartbeat":
                gap = checker.on_heartbeat(frame.number)
                if gap is not None:
                    await close_quietly(socket, 4409, gap.why)
                    raise GapDetected(gap)

    async def _deliver_spliced(self, message_json: str, frame_text: str) -> None:
        try:
            message = jsonrpc_message_adapter.validate_json(message_json, by_name=False)
        except ValidationError:
            # Not the server's splice after all: read the frame as JSON.
            frame = parse_frame_slow(frame_text)
            await self._link.deliver_json(frame)
            return
        await self._link.deliver(message)


async def send_ack(socket: ClientConnection, checker: SeqChecker) -> None:
    """Acks ``C`` once the replay reached it; a closed socket is left for the next read to report."""
    due = checker.ack_due()
    if due is None:
        return
    try:
        await socket.send(ack_frame(due))
    except ConnectionClosed:
        pass
    checker.acked()


def frame_text(text: str | bytes) -> str:
    """A text frame's text (binary frames were refused by ``parse_frame``)."""
    return text if isinstance(text, str) else text.decode("utf-8", "replace")


def parse_frame_slow(text: str) -> str:
    """The ``message`` of an event frame as JSON text, by parsing the whole frame."""
    v = json.loads(text)
    return json.dumps(v.get("message"))


def raise_or_return(e: Exception) -> BaseException:
    """Raises a fatal error; returns one that resuming heals (the reader then reconnects)."""
    if isinstance(e, ResumeError):
        raise e
    return e


def describe(e: BaseException) -> str:
    """A one-line reason for a log line."""
    text = str(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


async def close_quietly(socket: ClientConnection, code: int, reason: str) -> None:
    """Closes ``socket`` with ``code``, waiting at most a moment for the server's answer."""
    with anyio.move_on_after(1):
        try:
            await socket.close(code, reason[:120])
        except Exception:  # noqa: BLE001 - already gone
            pass
