"""The cursor-safe WebSocket upgrade (docs/protocol.md 5), client side, with ``websockets``.

Why ``websockets`` and not a WHATWG-like API: the upgrade is decided by
what such APIs hide. The ``101`` carries the committed cursor in
``X-MCP-Resume-Cursor``; a refusal says what to do by its status (426 or
503: stay on SSE; 409: the cursor cannot be honoured; 404: the session is
gone). This module opens the socket and classifies the answer; the readers
(session stream, task stream) check the replay, ack and read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHeader, InvalidStatus, NegotiationError
from websockets.typing import Subprotocol

from .errors import ProtocolViolationError, SessionNotFoundError, Transient
from .link import LAST_EVENT_ID, RESUME_CURSOR, SUBPROTOCOL
from .seq import StartDecision, decide_start, parse_seq

MAX_FRAME = 64 * 2**20
"""The largest frame accepted from the server (a session-stream message can be a large result)."""


@dataclass(slots=True)
class Upgraded:
    """A ``101`` with ``mcp.resume.v1``: the socket and what its echo says."""

    socket: ClientConnection
    decision: StartDecision
    raw_echo: str | None


@dataclass(slots=True)
class Refused:
    """The upgrade was not made: the status (101 for a wrong subprotocol), the body, why."""

    status: int
    body: bytes
    detail: str


def ws_url(http_url: str, path_suffix: str) -> str:
    """``http(s)://host/P`` as ``ws(s)://host/P/<suffix>`` (the query string is kept)."""
    base, q, query = http_url.partition("?")
    if base.startswith("https://"):
        base = "wss://" + base[len("https://") :]
    elif base.startswith("http://"):
        base = "ws://" + base[len("http://") :]
    return base.rstrip("/") + "/" + path_suffix + (q + query if q else "")


async def open_upgrade(
    url: str,
    prior: int | None,
    headers: dict[str, str],
    timeout: float,
) -> Upgraded | Refused:
    """Upgrades ``url`` after ``prior`` (None: no cursor, the server starts at its floor).

    Connection failures (refused, reset, a handshake that times out) raise
    and are retried by the caller; a refusal with a status is returned.
    """
    h = dict(headers)
    if prior is not None:
        h[LAST_EVENT_ID] = str(prior)
    try:
        socket = await connect(
            url,
            subprotocols=[Subprotocol(SUBPROTOCOL)],
            additional_headers=h,
            open_timeout=timeout,
            close_timeout=1,
            ping_interval=None,
            compression=None,
            max_size=MAX_FRAME,
            max_queue=256,
            proxy=None,
        )
    except InvalidStatus as e:
        r = e.response
        return Refused(r.status_code, bytes(r.body or b""), f"the upgrade was answered {r.status_code}")
    except (InvalidHeader, NegotiationError) as e:
        # A 101 this client cannot use (a subprotocol it did not offer, a bad accept
        # key): not a cursor-safe upgrade. Retrying would meet it again; read SSE.
        return Refused(101, b"", f"the server's 101 is not usable: {e}")
    if socket.subprotocol != SUBPROTOCOL:
        await socket.close(1002, "no mcp.resume.v1")
        return Refused(101, b"", f"the server selected subprotocol {socket.subprotocol!r}")
    raw = socket.response.headers.get(RESUME_CURSOR) if socket.response is not None else None
    return Upgraded(socket, decide_start(prior if prior is not None else 0, raw), raw)


EVENT_PREFIX = '{"type":"event","seq":'
MESSAGE_KEY = ',"message":'


@dataclass(slots=True)
class Frame:
    """One server frame: an event (``seq``, the message as JSON text or parsed), a heartbeat, or other."""

    kind: str
    number: int
    message_json: str | None = None
    message: Any = None


def parse_frame(text: str | bytes) -> Frame:
    """Reads one frame (docs/protocol.md 5.3); raises :class:`ProtocolViolationError` for a malformed one.

    The server splices the logged message into a fixed prefix, so the hot
    path slices the message out and leaves its validation to pydantic, one
    pass over its bytes; anything else is parsed as JSON.
    """
    if isinstance(text, bytes):
        raise ProtocolViolationError("a binary frame (the protocol has text frames only)")
    if text.startswith(EVENT_PREFIX) and text.endswith("}"):
        j = text.find(MESSAGE_KEY, len(EVENT_PREFIX))
        if j > 0:
            seq = parse_seq(text[len(EVENT_PREFIX) : j])
            if seq is not None:
                return Frame("event", seq, message_json=text[j + len(MESSAGE_KEY) : -1])
    try:
        v = json.loads(text)
    except ValueError:
        raise ProtocolViolationError(f"a frame that is not JSON: {text[:100]!r}") from None
    if not isinstance(v, dict):
        raise ProtocolViolationError(f"a frame that is not an object: {text[:100]!r}")
    kind = v.get("type")
    if kind == "event":
        seq = v.get("seq")
        msg = v.get("message")
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0 or not isinstance(msg, dict):
            raise ProtocolViolationError(f"a malformed event frame: {text[:100]!r}")
        return Frame("event", seq, message=msg)
    if kind == "heartbeat":
        head = v.get("head")
        if not isinstance(head, int) or isinstance(head, bool):
            raise ProtocolViolationError(f"a malformed heartbeat: {text[:100]!r}")
        return Frame("heartbeat", head)
    if kind == "cursor":
        c = v.get("cursor")
        return Frame("cursor", c if isinstance(c, int) and not isinstance(c, bool) else -1)
    # Anything else carries no event.
    return Frame(str(kind), 0)


def ack_frame(cursor: int) -> str:
    """``{"type":"cursor-ack","cursor":C}``: opens the gate after the replay (docs/protocol.md 5.4)."""
    return f'{{"type":"cursor-ack","cursor":{cursor}}}'


def close_error(e: ConnectionClosed, session_id: str, what: str = "the WebSocket") -> Exception:
    """What a close means for the reader (docs/protocol.md 5.5): fatal, or resume from the cursor.

    A close this client started for a frame over its size limit (1009) is
    fatal too: resuming would meet the same frame again.
    """
    if e.rcvd is None and e.sent is not None and e.sent.code == 1009:
        return ProtocolViolationError(f"{what}: a message over {MAX_FRAME} bytes ({e.sent.reason})")
    frame = e.rcvd
    code = frame.code if frame is not None else 1006
    reason = frame.reason if frame is not None else "the connection broke without a close frame"
    if code == 4404:
        return SessionNotFoundError(session_id, f"{what} closed 4404 {reason}")
    if code in (1003, 1008, 1009, 4400):
        return ProtocolViolationError(f"{what} closed {code}: {reason}")
    return Transient(f"{what} closed {code}{' ' + reason if reason else ''}")


def close_code(e: ConnectionClosed) -> int:
    """The code the server closed with (1006 when the connection broke without one; 1009 for an over-size message)."""
    if e.rcvd is None and e.sent is not None and e.sent.code == 1009:
        return 1009
    return e.rcvd.code if e.rcvd is not None else 1006
