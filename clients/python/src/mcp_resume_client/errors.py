"""The errors this package raises to the application.

They are typed so that an application can branch on them: a discontinuity
means "re-synchronise" (list tools, resources and prompts again), a lost
session means "initialise a new one", anything else is a bug or a policy on
one side. Every one of them is the reason something was *not* delivered:
the transport never skips an event without raising one of these.
"""

from __future__ import annotations

import json
from typing import Any, Literal

DiscontinuityReason = Literal["ahead", "truncated", "data-lost"]
"""Why a cursor cannot be honoured (docs/protocol.md 4, items 2, 3 and 3a)."""


class ResumeError(Exception):
    """Base class: the transport could not prove that nothing was lost, and says so."""


class CursorDiscontinuityError(ResumeError):
    """The server cannot continue from the reader's cursor (a 409, or a task stream's ``events_gone``).

    Raised instead of skipping: the events after ``cursor`` are gone
    (``truncated``, ``data-lost``) or the cursor is ahead of what the server
    committed (``ahead``: a cursor kept from a log that was wiped). The
    application re-synchronises (for MCP: lists tools, resources and prompts
    again) and may resume from ``resume_cursor``, having been told what it
    missed.
    """

    def __init__(
        self,
        *,
        reason: DiscontinuityReason,
        cursor: int,
        head: int,
        floor: int,
        stream: str,
        resume_cursor: int | None = None,
        lost_from: int | None = None,
        lost_to: int | None = None,
        message: str | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        self.reason: DiscontinuityReason = reason
        self.cursor = cursor
        self.head = head
        self.floor = floor
        self.stream = stream
        self.resume_cursor = resume_cursor
        self.lost_from = lost_from
        self.lost_to = lost_to
        self.body: dict[str, Any] = body or {}
        detail = f": {message}" if message else ""
        super().__init__(
            f"cursor discontinuity ({reason}) on the {stream} stream: cursor {cursor}, "
            f"head {head}, floor {floor}"
            + (f", resume from {resume_cursor}" if resume_cursor is not None else "")
            + (f", lost {lost_from}..={lost_to}" if lost_from is not None else "")
            + detail
        )

    @classmethod
    def from_body(cls, body: bytes | str, cursor: int, stream: str) -> CursorDiscontinuityError:
        """Reads a 409 ``cursor-discontinuity`` body; ``cursor`` fills in a field the body lacks.

        A 409 without the documented body still refuses the cursor, so it is
        still this error (reason ``ahead`` when unnamed, as the TypeScript
        client does).
        """
        parsed: Any = None
        try:
            parsed = json.loads(body)
        except ValueError:
            pass
        v: dict[str, Any] = parsed if isinstance(parsed, dict) else {}

        def num(key: str) -> int | None:
            x = v.get(key)
            return x if isinstance(x, int) and not isinstance(x, bool) else None

        raw = v.get("reason")
        reason: DiscontinuityReason = raw if raw in ("truncated", "data-lost") else "ahead"
        msg = v.get("message")
        asked = num("cursor")
        return cls(
            reason=reason,
            cursor=asked if asked is not None else cursor,
            head=num("head") or 0,
            floor=num("floor") or 0,
            stream=stream,
            resume_cursor=num("resume-cursor"),
            lost_from=num("lost-from"),
            lost_to=num("lost-to"),
            message=msg if isinstance(msg, str) else None,
            body=v,
        )


class SessionNotFoundError(ResumeError):
    """The session is gone (404, or close 4404): unknown, expired or deleted. Initialise a new one."""

    def __init__(self, session_id: str, detail: str = "") -> None:
        self.session_id = session_id
        super().__init__(
            f"the session {session_id[:12]}... is gone (unknown, expired or deleted)"
            + (f": {detail}" if detail else "")
        )


class HttpStatusError(ResumeError):
    """The server answered with a status that resuming from the same cursor cannot change (a 4xx)."""

    def __init__(self, what: str, status: int, body: bytes | str) -> None:
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        code: str | None = None
        try:
            v = json.loads(text)
            if isinstance(v, dict) and isinstance(v.get("error"), str):
                code = v["error"]
        except ValueError:
            pass
        self.what = what
        self.status = status
        self.body = text
        self.code = code
        """The ``error`` code of the body (docs/protocol.md 3), when it has one."""
        super().__init__(f"{what} answered {status}" + (f": {text[:300]}" if text else ""))


class ProtocolViolationError(ResumeError):
    """The server broke the wire contract (a malformed frame, a priming event naming another cursor)."""


class SequenceGapError(ResumeError):
    """An event that is not the last seq plus one: a gap or a duplicate on a connection.

    The transport never delivers it out of order. Per docs/protocol.md 5.6 it
    drops that connection and resumes from the last seq, so the server sends
    the missing events again; the error reaches the application as a report
    (``healed=True``, through the read stream to the session's
    ``message_handler``). If resuming does not heal it, it is raised
    (``healed=False``) and the transport stops.
    """

    def __init__(self, stream: str, expected: int, got: int, why: str, *, healed: bool) -> None:
        self.stream = stream
        self.expected = expected
        self.got = got
        self.healed = healed
        suffix = "; resumed from the cursor" if healed else "; resuming did not heal it"
        super().__init__(f"{stream} stream: {why}{suffix}")


class RequestStreamLostError(ResumeError):
    """A request stream (the SSE answer to one POST) could not be followed to its response.

    The call itself ends with a JSON-RPC error -32000 made by the transport
    (``data.reason: "request-stream-lost"``), so the SDK's pending request
    fails at once instead of waiting for its timeout; this error, with its
    cause, reaches the session's ``message_handler``.
    """

    def __init__(self, request_id: str | int, last_event_id: str | None, cause: BaseException | str) -> None:
        self.request_id = request_id
        self.last_event_id = last_event_id
        self.cause = cause
        super().__init__(
            f"the request stream of request {request_id!r} was lost after {last_event_id or 'no event'}: {cause}"
        )


class TaskStreamError(ResumeError):
    """A task event stream ended with a JSON-RPC error that resuming cannot change.

    For example ``-32602`` with ``data.reason: "after-ahead"`` or
    ``"task-expired"``, or an unknown task. ``events_gone`` (-32010) is a
    :class:`CursorDiscontinuityError` instead.
    """

    def __init__(self, task_id: str, code: int, message: str, data: Any = None) -> None:
        self.task_id = task_id
        self.code = code
        self.data = data
        reason = data.get("reason") if isinstance(data, dict) else None
        self.reason: str | None = reason if isinstance(reason, str) else None
        super().__init__(f"the event stream of task {task_id} ended with error {code}: {message}")


class CursorStoreError(ResumeError):
    """A cursor store holds something that is not a cursor, or could not be written.

    Never turned into "start from the beginning" or "start from now": both
    would deliver events twice or lose them.
    """


class Transient(Exception):
    """Internal: a connection failed, dropped or refused for now; resuming from the cursor heals it."""
