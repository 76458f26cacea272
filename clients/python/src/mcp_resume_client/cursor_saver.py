"""Saving the session stream's cursor without slowing the reader.

Why a separate task: a durable store (:class:`FileCursorStore`) costs two
fsyncs a save, far more than delivering an event. The reader notes the
cursor after each delivery (a compare and a flag); this saver writes the
newest noted cursor, then waits ``interval`` before the next write, so a
fast stream costs at most one write per interval and the cursor saved is
never more than the interval (plus a write) behind what was delivered. A
reader that stops (a drop, the end) flushes at once.
"""

from __future__ import annotations

import anyio

from .stores import CursorStore


class CursorSaver:
    """Coalesces cursor saves for one session: only the newest waiting cursor is written."""

    def __init__(self, store: CursorStore, session_id: str, saved: int | None, interval: float = 0.05) -> None:
        self._store = store
        self._interval = interval
        self._sid = session_id
        self._want: int | None = saved
        self._saved: int | None = saved
        self._wake = anyio.Event()

    def note(self, cursor: int) -> None:
        """The reader handed everything up to ``cursor`` to the SDK; save it soon."""
        if cursor != self._want:
            self._want = cursor
            self._wake.set()

    async def run(self) -> None:
        """Writes noted cursors until cancelled; a failing store raises (and stops the transport)."""
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            await self.flush()
            await anyio.sleep(self._interval)

    async def flush(self) -> None:
        """Writes the newest noted cursor if it is not written yet."""
        want = self._want
        if want is not None and want != self._saved:
            await self._store.save(self._sid, want)
            self._saved = want
