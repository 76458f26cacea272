"""Where the session stream's cursor is kept between connections and between runs.

A reader that starts again from a saved cursor receives exactly what it has
not processed yet. The transport saves after it has handed events to the
SDK (the read stream's receiver took them), never before, so a crash of the
program between the two delivers the last batch again at the next start:
exactly once within one program, at least once across its crash.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import anyio

from .errors import CursorStoreError


@runtime_checkable
class CursorStore(Protocol):
    """A place for one cursor per session; implement it to keep cursors elsewhere."""

    async def load(self, session_id: str) -> int | None:
        """The cursor saved for ``session_id``, if any; raises if what is kept is not a cursor."""
        ...

    async def save(self, session_id: str, cursor: int) -> None:
        """Saves ``cursor`` for ``session_id``; returns once it is kept."""
        ...

    async def remove(self, session_id: str) -> None:
        """Forgets ``session_id`` (the session ended)."""
        ...


class MemoryCursorStore:
    """The default: cursors live as long as the process, enough to resume across dropped connections."""

    def __init__(self) -> None:
        self._cursors: dict[str, int] = {}

    async def load(self, session_id: str) -> int | None:
        """The cursor saved for ``session_id``, if any."""
        return self._cursors.get(session_id)

    async def save(self, session_id: str, cursor: int) -> None:
        """Keeps ``cursor`` for ``session_id``."""
        self._cursors[session_id] = cursor

    async def remove(self, session_id: str) -> None:
        """Forgets ``session_id``."""
        self._cursors.pop(session_id, None)


@dataclass(frozen=True, slots=True)
class SavedCursor:
    """What a :class:`FileCursorStore` file holds: one session and its cursor."""

    session_id: str
    cursor: int


class FileCursorStore:
    """One JSON file ``{"sessionId": ..., "cursor": N}``, replaced atomically and durably.

    Why this way: a crash (of the program or of the machine) must leave the
    old cursor or the new one, never half a file and never a file that a
    rename has not made durable. Each save writes a uniquely named file in
    the same directory, fsyncs it, renames it over the old one and fsyncs
    the directory. It keeps the latest session only; :meth:`last_session`
    tells a restarted program which session to attach to again.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    async def last_session(self) -> SavedCursor | None:
        """The session and cursor saved last, or None when the file does not exist."""
        return await anyio.to_thread.run_sync(self._read)

    async def load(self, session_id: str) -> int | None:
        """The cursor saved for ``session_id`` (None when the file holds another session or none)."""
        saved = await self.last_session()
        return saved.cursor if saved is not None and saved.session_id == session_id else None

    async def save(self, session_id: str, cursor: int) -> None:
        """Writes ``cursor`` durably (temp file, fsync, rename, fsync of the directory)."""
        await anyio.to_thread.run_sync(self._write, SavedCursor(session_id, cursor))

    async def remove(self, session_id: str) -> None:
        """Deletes the file if it holds ``session_id``."""

        def rm() -> None:
            saved = self._read()
            if saved is not None and saved.session_id == session_id:
                self.path.unlink(missing_ok=True)
                self._fsync_dir()

        await anyio.to_thread.run_sync(rm)

    def _read(self) -> SavedCursor | None:
        try:
            text = self.path.read_text("utf-8")
        except FileNotFoundError:
            return None
        except OSError as e:
            raise CursorStoreError(f"{self.path} cannot be read: {e}") from e
        try:
            v = json.loads(text)
        except ValueError:
            v = None
        sid = v.get("sessionId") if isinstance(v, dict) else None
        cursor = v.get("cursor") if isinstance(v, dict) else None
        if (
            not isinstance(sid, str)
            or not isinstance(cursor, int)
            or isinstance(cursor, bool)
            or cursor < 0
        ):
            raise CursorStoreError(f"{self.path} does not hold a cursor: {text[:80]!r}")
        return SavedCursor(sid, cursor)

    def _write(self, saved: SavedCursor) -> None:
        directory = self.path.parent
        data = (json.dumps({"sessionId": saved.session_id, "cursor": saved.cursor}) + "\n").encode()
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=directory)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.path)
            except BaseException:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                raise
            self._fsync_dir()
        except OSError as e:
            raise CursorStoreError(f"the cursor could not be saved to {self.path}: {e}") from e

    def _fsync_dir(self) -> None:
        if os.name != "posix":  # pragma: no cover - Windows cannot open a directory
            return
        fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
