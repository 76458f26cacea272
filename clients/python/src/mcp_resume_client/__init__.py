"""mcp-resume-client: a transport for the official Python MCP SDK that never loses a message silently.

Against an mcp-resume server (docs/protocol.md) every message of the
session stream reaches the SDK exactly once and in order, across dropped
connections, server restarts and (with :class:`FileCursorStore`) program
restarts; where that cannot be proven the transport raises
(:class:`CursorDiscontinuityError` and friends) instead of skipping.
Against any other MCP server it behaves like the SDK's
``streamable_http_client``.

    async with resumable_client(url) as (read, write, get_session_id):
        async with ClientSession(read, write) as session:
            ...
"""

from .errors import (
    CursorDiscontinuityError,
    CursorStoreError,
    HttpStatusError,
    ProtocolViolationError,
    RequestStreamLostError,
    ResumeError,
    SequenceGapError,
    SessionNotFoundError,
    TaskStreamError,
)
from .link import Options, Stats
from .stores import CursorStore, FileCursorStore, MemoryCursorStore, SavedCursor
from .tasks import TaskEvent, TaskStream, stream_task
from .transport import ResumableStreams, ResumableTransport, resumable_client

__all__ = [
    "CursorDiscontinuityError",
    "CursorStore",
    "CursorStoreError",
    "FileCursorStore",
    "HttpStatusError",
    "MemoryCursorStore",
    "Options",
    "ProtocolViolationError",
    "RequestStreamLostError",
    "ResumableStreams",
    "ResumableTransport",
    "ResumeError",
    "SavedCursor",
    "SequenceGapError",
    "SessionNotFoundError",
    "Stats",
    "TaskEvent",
    "TaskStream",
    "TaskStreamError",
    "resumable_client",
    "stream_task",
]

__version__ = "0.1.0"
