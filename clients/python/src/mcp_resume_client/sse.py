"""Server-sent events, parsed here rather than by an ``EventSource``.

Why not httpx2's ``EventSource``: it hides what this transport must see. A
priming event (an ``id`` with an empty ``data:``) sets or confirms the
cursor and carries no message; the server's closing comment
(``: error CODE: why``, docs/protocol.md 4 item 8) says why a stream ended.
The parser follows the WHATWG field rules, keeps ``data`` as bytes (pydantic
validates bytes directly), and hands over every block.
"""

from __future__ import annotations

from .errors import ProtocolViolationError

MAX_EVENT = 64 * 2**20
"""The largest event (or line) accepted, as the WebSocket's largest frame: a server cannot grow the client's memory without bound."""


class SseEvent:
    """One event block as sent: its own ``id`` (never carried over), ``event``, ``data``, ``retry``."""

    __slots__ = ("id", "event", "data", "retry")

    def __init__(self, id: str | None, event: str, data: bytes, retry: int | None) -> None:
        self.id = id
        self.event = event
        self.data = data
        """The ``data`` lines joined with ``\\n``; empty for a priming event."""
        self.retry = retry

    def __repr__(self) -> str:
        return f"SseEvent(id={self.id!r}, event={self.event!r}, data={self.data[:60]!r}, retry={self.retry})"


class SseParser:
    """An incremental parser: feed it bytes, it returns the complete blocks."""

    __slots__ = ("_buf", "_pending", "_pending_size", "_id", "_event", "_data", "_size", "_retry", "_any", "_max", "ending")

    def __init__(self, max_event_size: int = MAX_EVENT) -> None:
        self._max = max_event_size
        self._pending: list[bytes] = []
        self._pending_size = 0
        self._size = 0
        self._buf = b""
        self._id: str | None = None
        self._event = ""
        self._data: list[bytes] = []
        self._retry: int | None = None
        self._any = False
        self.ending: str | None = None
        """The last ``: error ...`` comment seen: why the server ended the stream."""

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """Parses ``chunk`` after what came before; returns the blocks it completed."""
        if b"\n" not in chunk and b"\r" not in chunk:
            # The middle of a long line: kept in pieces, joined once the line ends.
            self._pending.append(chunk)
            self._pending_size += len(chunk)
            if self._pending_size + len(self._buf) > self._max:
                raise ProtocolViolationError(f"an SSE line over {self._max} bytes")
            return []
        if self._pending:
            chunk = b"".join(self._pending) + chunk
            self._pending = []
            self._pending_size = 0
        buf = self._buf + chunk if self._buf else chunk
        if b"\r" in buf:
            # A CR at the very end may be the first half of a CRLF: keep it for later.
            keep = buf.endswith(b"\r")
            body = buf[:-1] if keep else buf
            body = body.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            lines = body.split(b"\n")
            rest = lines.pop()
            self._buf = rest + b"\r" if keep else rest
        else:
            lines = buf.split(b"\n")
            self._buf = lines.pop()
        if len(self._buf) > self._max:
            raise ProtocolViolationError(f"an SSE line over {self._max} bytes")
        out: list[SseEvent] = []
        for line in lines:
            if not line:
                if self._any:
                    out.append(
                        SseEvent(self._id, self._event or "message", b"\n".join(self._data), self._retry)
                    )
                self._id = None
                self._event = ""
                self._data = []
                self._size = 0
                self._retry = None
                self._any = False
                continue
            if line[0] == 0x3A:  # ':' a comment
                comment = line[1:].lstrip()
                if comment.startswith(b"error "):
                    self.ending = comment[6:].decode("utf-8", "replace")
                continue
            field, colon, value = line.partition(b":")
            if colon and value[:1] == b" ":
                value = value[1:]
            if field == b"data":
                self._data.append(value)
                self._size += len(value)
                if self._size > self._max:
                    raise ProtocolViolationError(f"an SSE event over {self._max} bytes")
                self._any = True
            elif field == b"id":
                if b"\0" not in value:
                    self._id = value.decode("utf-8", "replace")
                    self._any = True
            elif field == b"event":
                self._event = value.decode("utf-8", "replace")
                self._any = True
            elif field == b"retry":
                if value.isdigit():
                    self._retry = int(value)
        return out

